"""docs/benchmarks.md section 14, a relayed pair's throughput against a direct path's, on consumer lines and unshaped,
from docs/bench/relay.json (bench/lab/relay.py)."""

from __future__ import annotations

from typing import Any

LABELS = {"direct": "direct (one tunnel)", "relayed": "relayed (two tunnels, through the relay's gateway)"}


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "–" if value is None else format(value, fmt)


def _row(path: str, data: dict[str, Any], mode: dict[str, Any]) -> str:
    p = mode["summary"][path]
    to = data["direct_to"] if path == "direct" else data["relayed_to"]
    runs = ", ".join(f"{m:.0f}" for m in p["mbps_runs"])
    share = "" if mode["line_mbit"] is None else f" {_num(mode['line_share'][path], '.2f')} |"
    return (f"| {LABELS[path]} | host {data['from']} → host {to} | **{p['mbps']:.0f} Mbit/s** | {runs} |{share} "
            f"{p['machine_busy_cores']:.2f} | {p['wireguard_go_cores']:.2f} | "
            f"{_num(p['wireguard_go_core_s_per_gbit'])} | {p['relay_wireguard_go_cores']:.2f} | "
            f"{_num(p['relay_core_s_per_gbit'])} |")  # fmt: skip


def _table(data: dict[str, Any], mode: dict[str, Any]) -> list[str]:
    share = "" if mode["line_mbit"] is None else " share of the line's TCP ceiling |"
    return [
        f"| path | from → to | median | runs (Mbit/s) |{share} machine busy cores | wireguard-go cores (all) | "
        "core-s per Gbit (all) | the relay gateway's wireguard-go cores | core-s per Gbit (the relay's) |",
        "|---|---|---|---|" + ("---|" if share else "") + "---|---|---|---|---|",
        _row("direct", data, mode),
        _row("relayed", data, mode),
    ]


def _ratio(mode: dict[str, Any], where: str) -> str:
    s = mode["summary"]
    verdict = "met" if s["met"] else "**not met**"
    rounds = ", ".join(f"{r:.2f}" for r in s["round_ratios"])
    return (f"**Relayed / direct = {_num(s['ratio'], '.2f')}** {where} (the medians; target ≥ {s['target']:g}: "
            f"{verdict}). Round by round (each round's two runs back to back): {rounds}; median "
            f"{s['round_ratio_median']}. Load average (1 min) {mode['load_before'][0]:.2f} before, "
            f"{mode['load_after'][0]:.2f} after.")  # fmt: skip


def _line_reading(data: dict[str, Any], line: dict[str, Any]) -> str:
    s, mbit, ceiling = line["summary"], line["line_mbit"], line["ceiling_mbps"]
    busy = max(s[p]["machine_busy_cores"] for p in ("direct", "relayed"))
    load = f"load average {line['load_before'][0]:.1f} to {line['load_after'][0]:.1f}"
    if line["line_limited"]:
        limit = (
            f"Both paths filled the line (at least 0.9 of its TCP ceiling): the line was the limit. The machine's "
            f"cores were busy ({busy:.2f} of {data['nproc']}, other engineers' work included: {load}), and the "
            "relayed stream still kept the line full: its three tunnels needed far less CPU than they got. "
        )
    else:
        short = [p for p in ("direct", "relayed") if not line["line_full"][p]]
        limit = (
            f"Not both paths filled the line ({' and '.join(short)} below 0.9 of its TCP ceiling, the machine "
            f"{busy:.2f} of {data['nproc']} cores busy, {load}): something besides the line, most likely the shared "
            "CPU, limited them, and the ratio is not the line's alone. "
        )
    met = "meets" if s["met"] else "does **not** meet"
    return (
        f"Each office's line is {mbit:g} Mbit/s up and {mbit:g} down: a token bucket each way at the internet's end "
        "of its uplink, where a provider's access network queues and drops (wg_mesh/lab/fabric/line.py; the "
        f"gateways are untouched). A full line carries at most {ceiling:g} Mbit/s of TCP payload through the tunnel "
        f"(tunnel MTU {line['tunnel_mtu']}: each segment's frame on the line also carries its TCP/IP headers, "
        "WireGuard's and the outer UDP/IP and Ethernet headers). The direct run crosses the office's line once "
        "(up); the relayed run crosses it too and the partner's line (down), and the relay's own internet link "
        f"twice (in, out). {limit}For offices on lines, the relayed pair {met} issue 24's target: the relay "
        "costs the pair no throughput while the relay's CPU and internet link keep up with the lines it joins.\n"
    )


def _cpu_reading(data: dict[str, Any], cpu: dict[str, Any]) -> str:
    s = cpu["summary"]
    per = (s["direct"]["wireguard_go_core_s_per_gbit"], s["relayed"]["wireguard_go_core_s_per_gbit"])
    cost = ""
    if all(per):
        cost = (
            f"The relayed bytes cost the tunnels {per[1] / per[0]:.1f}× the CPU per Gbit of the direct ones "
            f"({per[1]:.1f} against {per[0]:.1f} wireguard-go core-seconds per Gbit): a relayed packet is encrypted "
            "and decrypted twice (office → relay, relay → home). When the CPU is the limit, as here, throughput "
            f"follows that cost: at equal CPU the relayed path gets about {per[0] / per[1]:.2f} of the direct one's. "
        )
    return (
        f"Unshaped, every gateway of the lab is wireguard-go (userspace) on the same {data['nproc']} shared cores, "
        f"and they are the limit (the machine's busy cores above: all of them, with other engineers' work). {cost}"
        "This is what the relay's CPU costs, not a prediction for cloud gateways: on separate machines each "
        "gateway's crypto runs on its own CPU.\n"
    )


def _sizing(data: dict[str, Any], line: dict[str, Any], cpu: dict[str, Any]) -> str:
    relayed = [_num(m["summary"]["relayed"]["relay_core_s_per_gbit"]) for m in (line, cpu)]
    direct = [_num(m["summary"]["direct"]["relay_core_s_per_gbit"]) for m in (line, cpu)]
    return (
        "**Sizing the relay.** Its internet bandwidth is spent twice: every relayed Mbit/s arrives from one office "
        "and leaves to the other, so a relay joining offices on lines of L Mbit/s needs 2 × L of its link per pair "
        "moving at full rate (billed once, as the relay's internet egress: [static sites](how-to/static-sites.md)). "
        f"Its CPU: the relay gateway's wireguard-go spent {relayed[1]} core-seconds per relayed Gbit unshaped (it "
        f"decrypts, then encrypts again), against {direct[1]} per Gbit of direct traffic it only decrypts; on the "
        f"lines, {relayed[0]} and {direct[0]}. A Gbit costs more at a line's rate than at full speed (most likely "
        "because wireguard-go moves packets in batches and a slow stream makes small ones: the fixed cost of each "
        "wake-up is shared by fewer packets), so for sizing, the unshaped figure is the one for a busy relay and the "
        f"line figure an upper bound for a quiet one: here about {relayed[1]} cores of this machine per relayed "
        "Gbit/s in userspace WireGuard, contended (and each relayed Gbit/s is 2 Gbit/s on the relay's link). A relay "
        "with that CPU for the sum of its relayed pairs' lines, besides its own traffic, leaves each line the pair's "
        "limit. The lab's check 7 takes the line measurement once per run (`tests/test_lab_dynamic.py`, its live "
        f"run, {line['line_mbit']:g} Mbit/s lines, 1 s per path: a figure, never a pass/fail; it fails only when a "
        "path is faster than the line or a line's shaper is gone or did not count the run, i.e. the shaping was not "
        "in place).\n"
    )


def section(data: dict[str, Any]) -> str:
    line, cpu = data["modes"]["line"], data["modes"]["cpu"]
    intro = (
        "## 14. A relayed pair's throughput against a direct path's (`relay: SITE`)\n\n"
        f"`sudo .venv/bin/python -m bench relay` (bench/lab/relay.py) builds `{data['stack']}` in the lab (two offices "
        f"on dynamic addresses, {data['relay']} relaying between them; `delivery: user-data`) and measures from "
        f"{data['from']}'s host, in the same run: *relayed* to {data['relayed_to']}'s host ({data['from']} → "
        f"{data['relay']} → {data['relayed_to']}: the relay's gateway decrypts every packet and encrypts it again "
        f"for the partner) and *direct* to {data['direct_to']}'s host, the relay site's own (one tunnel, from the "
        f"same office's line). iperf3 TCP, {data['streams']} stream, {data['seconds']:g} s per run ({data['omit']:g} "
        f"s omitted), {data['rounds']} rounds with the two paths back to back, their order alternating from round to "
        "round; medians. Twice in the same lab: with both offices on consumer lines "
        f"(`--line-mbit`, {line['line_mbit']:g} Mbit/s here), as offices live, then unshaped, where the lab's CPU "
        f"is the limit. Target (issue 24): relayed ≥ {line['summary']['target']:g} × direct.\n"
    )
    return "\n".join([
        intro,
        f"### On {line['line_mbit']:g} Mbit/s lines\n",
        *_table(data, line),
        "",
        _ratio(line, f"on {line['line_mbit']:g} Mbit/s lines") + "\n",
        _line_reading(data, line),
        "### Unshaped: the lab's CPU the limit\n",
        *_table(data, cpu),
        "",
        _ratio(cpu, "unshaped") + "\n",
        _cpu_reading(data, cpu),
        _sizing(data, line, cpu),
    ])  # fmt: skip
