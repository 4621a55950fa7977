"""docs/benchmarks.md's "mesh change" section, from docs/bench/meshchange.json: the JSON report of
`python -m wg_mesh lab --drill live --stack prod --json docs/bench/meshchange.json` (wg_mesh/lab/drills/drill.py), and
from docs/bench/meshchange-boot.json, the same drill on booted gateways (`... --boot --json ...`)."""

from __future__ import annotations

from typing import Any


def _v(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _rows(data: dict[str, Any]) -> list[str]:
    a, b = data["sites"]["A"], data["sites"]["B"]
    out = [
        f"| change | pings lost {a['name']} → {b['name']} | longest ping silence | longest stream stall "
        "| convergence per site | |",
        "|---|---|---|---|---|---|",
    ]
    for step in data["steps"]:
        converged = ", ".join(f"{site} {_v(s, ' s', 1)}" for site, s in step["convergence_s"].items())
        verdict = "ok" if step["ok"] else "**FAIL**"
        if "goal" in step:  # an announced rotation (wg_mesh.gateway.rotation): its figures against issue 20's goal
            met = "met" if step["goal_met"] else "**missed**"
            goal = step["goal"]
            verdict += (
                f" (announced: switch spread {_v(step.get('switch_spread_ms'), ' ms', 1)}; goal ≤ "
                f"{goal['pings_lost']} ping, ≤ {goal['longest_stall_ms']:.0f} ms stall {met})"
            )
        if "outage_goal_ms" in step:  # an older report: the rotation before it was announced
            met = "met" if step["outage_goal_met"] else "**missed**"
            verdict += f" (unannounced rotation: outage goal ≤ {step['outage_goal_ms']:.0f} ms {met})"
        if "refused" in step:
            kept = "kept" if step["applied_generation_kept"] else "**changed**"
            verdict += f" (refused: {_v(step['parse_failures'])} parse failure(s) counted, applied generation {kept})"
        out.append(
            f"| {step['step']} | {_v(step['pings_lost'])} | {_v(step['longest_ping_gap_ms'], ' ms')} "
            f"| {_v(step['longest_stall_ms'], ' ms')} | {converged or '-'} | {verdict} |"
        )
    return out


def _summary(data: dict[str, Any]) -> str:
    stream = data["stream"]
    pids = data["wireguard_go_pids"]
    kept = all(p["before"] == p["after"] for p in pids.values())
    verified = "match" if stream.get("verified") else "MISMATCH"
    return (
        f"Stream: {stream.get('bytes', 0) / 2**20:.0f} MiB, SHA-256 {verified}; wireguard-go of "
        f"{', '.join(pids)} {'kept its pid' if kept else 'RESTARTED'} through every change. "
        f"Drill: {data['duration_s']:.0f} s, {'passed' if data['ok'] else 'FAILED'}."
    )


def booted_section(data: dict[str, Any]) -> str:
    """The same drill on booted gateways (`--boot`): docs/bench/meshchange-boot.json."""
    c = data["sites"]["C"]["name"]
    add = data["steps"][0] if data["steps"] else {}
    boots = ", ".join(f"{site} {_v(b['cloud_init_done_s'], ' s', 1)}" for site, b in data.get("boot", {}).items())
    intro = (
        f"### On booted gateways (`--drill live --boot`)\n\n`python -m wg_mesh lab --boot --drill live --stack "
        f"{data['stack']}`: each gateway a systemd-nspawn container booted from the lab's Debian image (section 7) "
        "whose cloud-init runs the live user data: the agent's `--once` (AWS: after installing the agent from its "
        "bundle in moto), `wg-quick@wg0`, then `wg-mesh-agent.service` as systemd runs it (the hardened unit, its "
        "EnvironmentFile). The lab writes only that EnvironmentFile (the endpoints) and a static site's document and "
        "key into each root before it boots, and serves GCP's metadata in the container's own network namespace. "
        "Boot to cloud-init done: "
        f"{boots or '-'}; {c} boots during its own step, so its convergence there is its boot "
        f"(start to cloud-init done: {_v(add.get('started_s'), ' s', 1)}).\n"
    )
    return "\n".join([intro, *_rows(data), "", _summary(data) + "\n"])


def section(data: dict[str, Any], booted: dict[str, Any] | None = None) -> str:
    sites = data["sites"]
    a, b = sites["A"], sites["B"]
    names = {s["name"]: f"{s['name']} ({s['cloud']}, {s['store']})" for s in sites.values()}
    intro = (
        f"`python -m wg_mesh lab --drill live --stack {data['stack']}`: the gateways' agents take their peers and keys "
        "from the clouds' stores (AWS: moto in server mode; GCP: the lab's Secret Manager, with the token from its GCE "
        "metadata server; static: files), and the drill changes the mesh through those stores "
        f"only, while a ping every 10 ms and a SHA-256-verified TCP stream run from {a['name']}'s host to "
        f"{b['name']}'s. Convergence: from the publish to the agent's metrics showing the document applied, per site "
        f"({', '.join(names.values())}); agents poll every {_v(data['poll_seconds'], ' s')} where they cannot watch.\n"
    )
    out = ["## 8. Mesh change without a restart (`delivery: live`)\n", intro, *_rows(data)]
    announced = any("goal" in s for s in data["steps"])
    out.append(
        f"\n{_summary(data)} "
        + (
            "A rotated key is announced: both documents name it from key_at, each agent keeps the running key until "
            "then and both switch at key_at (section 8.1).\n"
            if announced
            else "A rotated key costs the pair one agent's poll at most: the peer that watches applies the new public "
            "key at once, the one that polls still holds the old private key until its next poll. The stream stalls "
            "longer than the pings are lost: TCP's retransmission timer backs off while the path is down, and the "
            "stream resumes at its next retry.\n"
        )
    )
    if booted is not None:
        out.append(booted_section(booted))
    return "\n".join(out)
