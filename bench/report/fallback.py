"""docs/benchmarks.md section 11.1, the private path's fallback to the public endpoints and back, from
docs/bench/underlay-fallback.json (bench/lab/fallback.py)."""

from __future__ import annotations

from typing import Any


def _s(value: float | None) -> str:
    return "**never**" if value is None else f"{value:.1f} s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def detection_window(ticks: int, seconds: int) -> tuple[int, int]:
    """When the agent acts after a fault, in seconds, its probes' own time aside: the first failing tick falls
    anywhere in the tick after the fault, the switch on the `ticks`-th failing one."""
    return (ticks - 1) * seconds, ticks * seconds


def section(data: dict[str, Any]) -> str:
    sites, t, ticks = data["sites"], data["pmtu_seconds"], data["ticks"]
    a, b = sites["A"], sites["B"]
    cut, back, stream = data["cut"], data["restore"], data["stream"]
    lab_lo, lab_hi = detection_window(ticks, t)
    def_lo, def_hi = detection_window(ticks, data["default_pmtu_seconds"])
    steady = data["steady"]
    out = [
        "### 11.1 The private path down: fallback to the public endpoints and back\n",
        f"`sudo .venv/bin/python -m bench underlay --fallback` on the same stack, with one change **for this run "
        f"only: the agents' `pmtu_seconds` is {t}** (the shipped default is {data['default_pmtu_seconds']}; the "
        "bench rewrites it in the rendered user data's /etc/wg-mesh/agent.json). A ping every 10 ms and a "
        f"SHA-256-verified TCP stream (1 MB/s) run from {a}'s host to {b}'s host for the whole drill; a sampler reads "
        "both gateways' `wgmesh_underlay_path` metric and `wg show wg0 endpoints` every 0.2 s. The fault: "
        f"`{data['fault']}` (the link stays up, nothing crosses it), then the two rules deleted.\n",
        *([f"**{data['workaround']}**\n"] if data.get("workaround") else []),
        f"Steady state: endpoints {', '.join(f'{k}: {v}' for k, v in steady['endpoints'].items())}; "
        f"{steady['pings']['lost']} pings lost.\n",
        "| phase | first agent switched (metric) | both `wg show` endpoints | pings flow again | longest ping gap "
        "| pings lost | stream's longest stall |",
        "|---|---|---|---|---|---|---|",
    ]
    for title, p, stall in (
        (f"private link cut → public (after {ticks} failing ticks)", cut, stream["longest_stall_cut_ms"]),
        (f"link restored → private (after {ticks} passing ticks)", back, stream["longest_stall_restore_ms"]),
    ):
        pings = p["pings"]
        resumed = _s(pings["resumed_s"]) if pings["lost"] else "no loss"
        out.append(
            f"| {title} | {_s(p['first_agent_switched_s'])} | {_s(p['both_endpoints_s'])} | {resumed} "
            f"| {_ms(pings['longest_gap_ms'])} | {pings['lost']} | {_ms(stall)} |"
        )
    per_site = "; ".join(
        f"{name}: "
        + ", ".join(f"{s} metric {_s(v['metric_s'])} / endpoint {_s(v['endpoint_s'])}" for s, v in p["sites"].items())
        for name, p in (("cut", cut), ("restore", back))
    )
    out.append(
        f"\nPer gateway (seconds after the fault / the repair; a metric that never moved means that side roamed to "
        f"the other's new source address instead of switching itself): {per_site}. The stream: "
        f"{'verified' if stream['verified'] else '**not verified**'} ({(stream['bytes'] or 0) / 2**20:.0f} MiB). "
        f"Bench {data['duration_s']:.0f} s, {'passed' if data['ok'] else '**FAILED**'}.\n\n"
        f"What the lab figure is made of: {ticks} consecutive failing ticks of {t} s. The first failing tick falls "
        f"anywhere in the {t} s after the cut, so the switch comes about {lab_lo} to {lab_hi} s after it, plus the "
        "probes' own timeouts on each failing tick (a failing ping waits for its deadline); the times above are "
        "sampled every 0.2 s. iputils ping sends less often while no reply comes, so the pings lost are fewer than "
        "the gap over 10 ms; the stream's stall is longer than the ping gap: TCP's retransmission backoff. The "
        "switch itself is one `wg set ... endpoint`: the session's keys stay valid, so packets go to the new "
        "endpoint at once (a handshake, one round trip, only when the session is due for a rekey), and the far "
        "gateway roams on the "
        "first authenticated packet from the new address. The switch back needs the direct private ping to pass "
        f"{ticks} ticks; both paths carry traffic meanwhile, so its ping gap should be about nothing.\n\n"
        f"With the shipped `pmtu_seconds: {data['default_pmtu_seconds']}` the outage is **computed, not measured**: "
        f"{def_lo} to {def_hi} s until the switch, plus the same probe timeouts; the switch back about {def_lo} to "
        f"{def_hi} s after the link returns (no outage then). A shorter `pmtu_seconds` (5..300) shortens both and "
        "probes more often.\n\n"
        "Not modelled: how real interconnects fail. Here the link is a veth whose packets are dropped, all of them, "
        "both ways, at once. A BGP session going down withdraws the route (the direct ping then fails fast or takes "
        "another route), an LACP member or a single attachment of a redundant pair going away loses capacity, not the "
        "path (the agent must not switch while probes pass: not exercised here), and brownouts (partial loss, "
        f"flaps shorter than {ticks} ticks) reset the agent's count with one passing probe, so they are ridden "
        "out on the private "
        "path. The lab's gateways are wireguard-go on two shared cores; the timings above are the agent's ticks, "
        "not the CPU.\n"
    )
    return "\n".join(out)
