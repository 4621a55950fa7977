"""docs/benchmarks.md's "path-MTU black hole" section, from docs/bench/pathmtu.json: the JSON report of
`python -m wg_mesh lab --drill pmtu --stack prod --json docs/bench/pathmtu.json` (wg_mesh/lab/drills/pmtudrill.py)."""

from __future__ import annotations

from typing import Any


def _v(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _detail(step: dict[str, Any]) -> str:
    if "restored_s" in step:
        return f"original routes back after {_v(step['restored_s'], ' s', 1)}"
    healed = (
        "not healed"
        if step["healed_s"] is None
        else (
            f"healed after {_v(step['healed_s'], ' s', 1)} (route MTU {_v(step['healed_route_mtu'])}; "
            f"peer side {'too' if step['peer_side_healed'] else '**not**'})"
        )
    )
    alert = step["alert_fires_s"]
    within = "within 2 min" if step["alert_within_2m"] else "**not within 2 min**"
    return (
        f"first failing probe {_v(step['first_failing_probe_s'], ' s', 1)}, black hole declared "
        f"{_v(step['black_hole_declared_s'], ' s', 1)}, {healed}; alert "
        + (
            "none (the failures did not last its 1m)"
            if alert is None
            else f"at {_v(alert, ' s', 1)} (+ ≤ 30 s scrape/eval: {within})"
        )
    )


def section(data: dict[str, Any]) -> str:
    sites = data["sites"]
    a, b, c = sites["A"], sites["B"], sites["C"]
    intro = (
        f"`python -m wg_mesh lab --drill pmtu --stack {data['stack']}`: the three gateways run their agents as shipped "
        "(path-MTU probes every 15 s, healing on). The internet's path between "
        f"{a['name']} and {b['name']} only (policy routes with `mtu lock` in the lab's internet router) drops to "
        "the tunnel's MTU, so WireGuard's full-size packets no longer fit, mid-transfer, first with the router's "
        'ICMP "fragmentation needed" dropped (the black hole), then with it allowed; each time the path grows back. '
        f"A ping every 10 ms and a SHA-256-verified TCP stream run from {a['name']}'s host to {b['name']}'s. Times "
        f"are seconds after the change, as {a['name']}'s agent exported them; the alert time is when "
        "`WgMeshPathMtuBlackHole`'s condition (small passing, full failing) had held in those metrics for its whole "
        "`for: 1m` (computed from the exported metrics, not a Prometheus run). Untouched: the paths "
        f"{a['name']}/{b['name']} ↔ {c['name']} keep the full size and no healed route.\n"
    )
    out = [
        "## 9. Path-MTU black hole (`delivery: live`)\n",
        intro,
        f"| change | pings lost {a['name']} → {b['name']} | longest stream stall | what the agent did | "
        "other paths untouched | |",
        "|---|---|---|---|---|---|",
    ]
    for step in data["steps"]:
        others = "yes" if all(step["other_paths_untouched"].values()) else "**no**"
        verdict = "ok" if step["ok"] else "**FAIL**"
        out.append(
            f"| {step['step']} | {_v(step['pings_lost'])} | {_v(step['longest_stall_ms'], ' ms')} "
            f"| {_detail(step)} | {others} | {verdict} |"
        )
    stream = data["stream"]
    verified = "match" if stream.get("verified") else "MISMATCH"
    out.append(
        f"\nStream: {stream.get('bytes', 0) / 2**20:.0f} MiB, SHA-256 {verified}. "
        f"Drill: {data['duration_s']:.0f} s, {'passed' if data['ok'] else 'FAILED'}. Without the heal the stream "
        "would not resume while ICMP is filtered (tests/test_pmtu_netns.py shows the stall on real kernels): the "
        "gateway's lowered route MTU makes it answer the host's full-size segments with ICMP \"fragmentation "
        "needed\", so the host's TCP shrinks its segments and the transfer goes on; the stall is the heal's time "
        "(3 failing probes 15 s apart, then the search) plus TCP's retransmission backoff. With ICMP allowed the "
        "gateway's own kernel learns the path MTU from the router and fragments WireGuard's packets: one full-size "
        "probe fails, the next passes, nothing is healed and no alert fires (fragmented tunnel packets cost "
        "throughput, which the dataplane benchmark's MTU section measures).\n"
    )
    return "\n".join(out)
