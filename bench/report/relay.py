"""docs/benchmarks.md section 14, a relayed pair's throughput against a direct path's, from docs/bench/relay.json
(bench/lab/relay.py)."""

from __future__ import annotations

from typing import Any

LABELS = {"direct": "direct (one tunnel)", "relayed": "relayed (two tunnels, through the relay's gateway)"}


def _row(path: str, to: str, data: dict[str, Any], source: str) -> str:
    p = data["summary"][path]
    runs = ", ".join(f"{m:.0f}" for m in p["mbps_runs"])
    per_gbit = "–" if p["wireguard_go_core_s_per_gbit"] is None else f"{p['wireguard_go_core_s_per_gbit']:.1f}"
    return (f"| {LABELS[path]} | host {source} → host {to} | **{p['mbps']:.0f} Mbit/s** | {runs} | "
            f"{p['machine_busy_cores']:.2f} | {p['wireguard_go_cores']:.2f} | {per_gbit} |")  # fmt: skip


def section(data: dict[str, Any]) -> str:
    s = data["summary"]
    direct, relayed = s["direct"], s["relayed"]
    verdict = "met" if s["met"] else "**not met**"
    intro = (
        "## 14. A relayed pair's throughput against a direct path's (`relay: SITE`)\n\n"
        f"`sudo .venv/bin/python -m bench relay` (bench/lab/relay.py) builds `{data['stack']}` in the lab (two offices "
        f"on dynamic addresses, {data['relay']} relaying between them; `delivery: user-data`) and measures from "
        f"{data['from']}'s host, in the same run: *relayed* to {data['relayed_to']}'s host ({data['from']} → "
        f"{data['relay']} → {data['relayed_to']}: the relay's gateway decrypts every packet and encrypts it again "
        f"for the partner) and *direct* to {data['direct_to']}'s host, the relay site's own (one tunnel). iperf3 TCP, "
        f"{data['streams']} stream, {data['seconds']:g} s per run ({data['omit']:g} s omitted), {data['rounds']} "
        "rounds with the two paths back to back, their order alternating from round to round; medians. Target "
        f"(issue 24): relayed ≥ {s['target']:g} × direct.\n"
    )
    rows = [
        "| path | from → to | median | runs (Mbit/s) | machine busy cores | wireguard-go cores | wireguard-go "
        "core-s per Gbit |",
        "|---|---|---|---|---|---|---|",
        _row("direct", data["direct_to"], data, data["from"]),
        _row("relayed", data["relayed_to"], data, data["from"]),
    ]
    ratio = "–" if s["ratio"] is None else f"{s['ratio']:.2f}"
    rounds = ", ".join(f"{r:.2f}" for r in s.get("round_ratios", []))
    result = (
        f"**Relayed / direct = {ratio}** (the medians; target ≥ {s['target']:g}: {verdict}). Round by round (each "
        f"round's two runs back to back): {rounds}; median {s.get('round_ratio_median')}.\n"
    )
    before, after = data["load_before"], data["load_after"]
    per = (direct.get("wireguard_go_core_s_per_gbit"), relayed.get("wireguard_go_core_s_per_gbit"))
    cost = ""
    if all(per):
        cost = (
            f"The relayed bytes cost the tunnels {per[1] / per[0]:.1f}× the CPU per Gbit of the direct ones "
            f"({per[1]:.1f} against {per[0]:.1f} wireguard-go core-seconds per Gbit): a relayed packet is encrypted "
            "and decrypted twice (office → relay, relay → home). When the CPU is the limit, as here, throughput "
            f"follows that cost: at equal CPU the relayed path gets about {per[0] / per[1]:.2f} of the direct one's. "
        )
    tail = (
        f"Why, on this machine: every gateway of the lab is wireguard-go (userspace) on the same {data['nproc']} "
        "shared cores, and the machine was busy for the whole run (the machine's busy cores above: all of them, "
        f"with other engineers' lab runs; load average (1 min) {before[0]:.2f} before, {after[0]:.2f} after). "
        f"{cost}On separate machines each gateway's crypto runs on its own CPU: the relay's gateway does twice an "
        "end gateway's work per relayed packet (it decrypts and encrypts), so a relay with the same CPU as the "
        "offices' gateways can still cap the pair, and one sized above them (or kernel WireGuard) leaves the pair "
        "limited by the offices' gateways and by the relay's internet bandwidth, which it spends twice (in and "
        "out). This lab cannot show that figure: the ratio above is that of a CPU-bound lab, not a prediction for "
        "cloud gateways. The lab's check 7 takes the same two measurements once per run "
        "(`tests/test_lab_dynamic.py`, its live run; a figure, never a pass/fail).\n"
    )
    return "\n".join([intro, *rows, "", result, tail])
