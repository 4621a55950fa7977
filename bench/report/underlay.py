"""docs/benchmarks.md section 11, a jumbo private path next to the internet, from docs/bench/underlay.json
(bench/lab/underlay.py)."""

from __future__ import annotations

from typing import Any


def _frags(fragments: dict[str, dict[str, int]]) -> str:
    """The counters that moved during a path's transfers, or "0" and the counters read (bench/lab/underlay.py)."""
    moved = {f"{node}: {c} +{v}" for node, counters in fragments.items() for c, v in counters.items() if v}
    read = dict.fromkeys(c for counters in fragments.values() for c in counters)
    return "0 (" + ", ".join(read) + ")" if not moved else "**" + "; ".join(sorted(moved)) + "**"


def section(data: dict[str, Any]) -> str:
    sites, link = data["sites"], data["private_path"]
    a, b, c = sites["A"], sites["B"], sites["C"]
    out = [
        "## 11. Private underlay: a jumbo private path next to the internet (`private_paths`)\n",
        f"`sudo .venv/bin/python -m bench underlay` on the `{data['stack']}` stack "
        "(examples/underlay/Pulumi.underlay.yaml, `delivery: live`, the lab's clouds "
        f"and agents): {a} and {b} are joined by the private path `{link['path']}` ({link['kind']}: in the lab a link "
        f"between their VPC routers at MTU {link['mtu']}, routing only the far gateway's /32), {c} is reached over "
        "the internet. From the AWS workload host (9001-byte NIC), a SHA-256-verified bulk TCP transfer "
        f"(wg_mesh/lab/checks/bulk.py, {data['bytes'] / 2**20:.0f} MiB) to {b}'s host and to {c}'s host, alternating, "
        f"{data['rounds']} times each in the same run; fragmentation counters (`nstat -az`) on the three sites' "
        "gateways and hosts around each transfer; DF pings at the largest payload each tunnel carries and one byte "
        "more.\n",
        "| path | endpoint (A's `wg show`) | tunnel MTU | MSS | bulk TCP Mbit/s: median (runs) | fragments during the "
        "transfers | packets on the private link | DF ping: max payload / +1 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    probes = {p["to"]: p for p in data["df_pings"]}
    for name in ("private", "internet"):
        p = data["paths"][name]
        probe = probes[p["to"]]
        df = (
            ("passes" if probe["passed"] else "**fails**")
            + " / "
            + (f"refused ({probe['over_message']})" if probe["over_refused_cleanly"] else "**not refused cleanly**")
        )
        runs = ", ".join(f"{v:.0f}" for v in p["mbps"])
        median = "-" if p["mbps_median"] is None else f"{p['mbps_median']:.0f}"
        carried = p["link"]
        title = f"{name}: {a} → {p['to']}"
        out.append(
            f"| {title} | {p.get('endpoint')} | {p['tunnel_mtu']} | {', '.join(map(str, p['mss']))} "
            f"| {median} ({runs}) "
            f"| {_frags(p['fragments'])} | {carried['wireguard']} WireGuard, {carried['all'] - carried['wireguard']} "
            f"other | {probe['payload']}: {df} |"
        )
    ratio = data["ratio_private_to_internet"]
    fewer = data["paths"]["private"]["tunnel_mtu"] / data["paths"]["internet"]["tunnel_mtu"]
    out.append(
        f"\nRatio private / internet (medians): **{'-' if ratio is None else f'{ratio:.2f}'}**. "
        f"Bench {data['duration_s']:.0f} s, {'passed' if data['ok'] else '**FAILED**'} (every transfer verified, no "
        "fragment on either path, the private link carried WireGuard only and the internet transfers did not use it, "
        "every DF probe as expected; the internet transfers' packets on the private link are the private pair's own "
        "keepalives and handshakes). TCP_MAXSEG is the sender's: the clamped MSS less TCP timestamps (12 bytes).\n\n"
        "What the ratio says, and what it does not: the lab's gateways run wireguard-go (userspace) on the same two "
        "shared cores as every host, router and process of the run, so both paths are CPU-bound, not link-bound (the "
        "veths carry far more). A larger tunnel MTU means fewer packets for the same bytes: fewer encryptions, "
        "syscalls and TUN reads per byte, and that is what the ratio measures here. On real gateways the private path "
        "is limited by the link's bandwidth and the instance's, and kernel WireGuard's per-packet cost differs; this "
        "number is no prediction for an interconnect. The two destinations differ too (the private pair ends at GCP's "
        "gateway behind its VPC router, the internet pair at the VPS's gateway through the lab's internet namespace "
        f"and its NAT), and single runs spread widely on this machine (see the runs). {fewer:.1f} times fewer "
        f"packets did not give {fewer:.1f} times the throughput: the hosts' TCP, the copies and the SHA-256 on both "
        "ends share the same cores. Read the ratio as what this lab shows, not as a figure to plan with. What does "
        "carry over: the private pair "
        f"runs at its own tunnel MTU ({data['paths']['private']['tunnel_mtu']}) while the internet pairs keep theirs "
        f"({data['paths']['internet']['tunnel_mtu']}) on the same wg0 (per-route MTU and MSS clamping, "
        "docs/underlay.md section 5), with no fragmentation on either and a clean ICMP error one byte above each.\n"
    )
    return "\n".join(out)
