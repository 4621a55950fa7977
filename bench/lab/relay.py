"""`sudo .venv/bin/python -m bench relay`: a relayed pair's throughput against a direct path's, in the same lab run
(issue 24 item 5's target: relayed >= 0.8x direct). Writes docs/bench/relay.json; `bench doc` renders it as section 14
of docs/benchmarks.md.

The stack is examples/edge/Pulumi.edge.yaml (two offices on dynamic addresses, aws-use1 relaying between them) in
`delivery: user-data`. The paths are the lab's dynamic check's (wg_mesh.lab.checks.relaycheck.relay_paths): from the
office's host, *relayed* to home's host (office -> aws-use1 -> home: two tunnels, the relay's gateway decrypts and
encrypts every packet again) and *direct* to aws-use1's host (one tunnel, the same office's line). iperf3 TCP with the
machine's CPU (bench.lab.labkit.iperf: /proc/stat, the wireguard-go daemons' own, the relay gateway's apart), `rounds`
rounds, the two paths back to back in each, their order alternating from round to round so that a drift of the
machine's load falls on both; the medians, their ratio and the target. Two modes in the same lab, one after the other:

* cpu   unshaped: every tunnel of both paths is wireguard-go on the machine's shared cores, which are the limit; the
        ratio is what a relayed packet's second pair of tunnels costs in CPU
* line  both offices on consumer lines of `line_mbit` Mbit/s, up and down (wg_mesh.lab.fabric.line: tbf on both ends of
        each office's uplink, as the lab's check 7 shapes them): the line should be the limit, as it is for offices on
        real lines; each path's share of the line's TCP ceiling says whether it was (relaycheck.line_verdict), the
        shapers' counters over each run say the traffic went through them

The machine's load averages before and after each mode are recorded: the lab shares its cores with whatever else runs.
"""

from __future__ import annotations

import copy
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
STACK = REPO / "examples" / "edge" / "Pulumi.edge.yaml"
PATHS = ("direct", "relayed")
MODES = ("line", "cpu")


def edge_raw() -> dict[str, Any]:
    from wg_mesh.tools.stackfile import read_raw

    raw: dict[str, Any] = copy.deepcopy(read_raw(STACK))
    raw["delivery"] = "user-data"  # the benchmarks' lab session builds user-data meshes (labkit.lab_session)
    return raw


def order(round_index: int) -> tuple[str, ...]:
    """The paths of one round: direct first in even rounds, relayed first in odd ones."""
    return PATHS if round_index % 2 == 0 else PATHS[::-1]


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per path: the median Mbit/s, the machine's busy cores, the wireguard-go daemons' cores and the relay gateway's
    (medians over the rounds), what a Gbit costs them; the ratio relayed/direct of the medians against the target."""
    from wg_mesh.lab.checks.relaycheck import relay_verdict

    out: dict[str, Any] = {}
    for path in PATHS:
        mine = [r for r in runs if r["path"] == path]
        out[path] = {
            "mbps": round(statistics.median(r["mbps"] for r in mine), 1),
            "mbps_runs": [r["mbps"] for r in mine],
            "machine_busy_cores": round(statistics.median(r["cpu"]["busy"] for r in mine), 2),
            "wireguard_go_cores": round(statistics.median(r["cpu"].get("wireguard-go", 0.0) for r in mine), 2),
            "relay_wireguard_go_cores": round(statistics.median(r["cpu"].get(RELAY_GROUP, 0.0) for r in mine), 2),
            "retransmits": [r["retransmits"] for r in mine],
        }
        # what moving the bytes costs the tunnels (every wireguard-go of the lab, and the relay's gateway alone):
        # relayed, the relay's gateway decrypts and encrypts each packet again
        gbit = out[path]["mbps"] / 1000
        for cores, per in (("wireguard_go_cores", "wireguard_go_core_s_per_gbit"),
                           ("relay_wireguard_go_cores", "relay_core_s_per_gbit")):  # fmt: skip
            out[path][per] = round(out[path][cores] / gbit, 2) if gbit else None
    # each round's pair, back to back, as a second view of the same runs (a drift of the machine's load between
    # rounds cancels out of it)
    by_round = {(r["round"], r["path"]): r["mbps"] for r in runs}
    rounds = sorted({r["round"] for r in runs})
    ratios = [round(by_round[i, "relayed"] / by_round[i, "direct"], 2) for i in rounds if by_round.get((i, "direct"))]
    out["round_ratios"] = ratios
    out["round_ratio_median"] = round(statistics.median(ratios), 2) if ratios else None
    return {**out, **relay_verdict(out["direct"]["mbps"], out["relayed"]["mbps"])}


RELAY_GROUP = "relay wireguard-go"  # the relay gateway's daemon, as a CPU group of its own


def run_relay_bench(log: Callable[[str], None], rounds: int = 5, seconds: float = 5, omit: float = 1,
                    line_mbit: float = 50.0) -> dict[str, Any]:  # fmt: skip
    from bench.lab.labkit import Endpoint, iperf, lab_session
    from wg_mesh.config import parse_mesh
    from wg_mesh.lab.checks.relaycheck import line_verdict, relay_paths
    from wg_mesh.lab.fabric import line
    from wg_mesh.lab.fabric.netns import LabError

    modes: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    with lab_session(parse_mesh(edge_raw()), log) as session:
        paths = relay_paths(session.lab)
        if paths is None:
            raise LabError(f"{STACK.name} has no relayed pair")
        source, partner, relay = paths
        internet, offices = session.lab.internet, [source, partner]
        ends = [end for site in offices for end in line.line_ends(site)]
        groups = {RELAY_GROUP: session.daemon_pids(("wireguard-go",), [relay])["wireguard-go"]}

        def measure(mode: str, shaped: list[line.LineEnd]) -> list[dict[str, Any]]:
            mine = []
            for i in range(rounds):
                for path in order(i):
                    dst = {"direct": relay, "relayed": partner}[path]
                    before = {end: line.counters(internet, end) for end in shaped}
                    result = iperf(session, Endpoint(session.host(source), source.host_ns),
                                   Endpoint(session.host(dst), dst.host_ns), str(dst.host_ip.ip), streams=1,
                                   seconds=seconds, omit=omit, groups=groups)  # fmt: skip
                    lines = {end.name: line.delta(before[end], line.counters(internet, end)) for end in shaped}
                    mine.append({"mode": mode, "round": i + 1, "path": path, "to": dst.name, **result,
                                 **({"lines": lines} if shaped else {})})  # fmt: skip
                    log(f"relay bench {mode} round {i + 1}/{rounds}: {path} {source.name} -> {dst.name}: "
                        f"{result['mbps']} Mbit/s, machine busy {result['cpu']['busy']} cores")  # fmt: skip
            return mine

        for mode in MODES:
            load_before = [round(x, 2) for x in os.getloadavg()]
            with line.shaped_lines(internet, offices if mode == "line" else [], line_mbit):
                mine = measure(mode, ends if mode == "line" else [])
            summary = summarise(mine)
            entry: dict[str, Any] = {"line_mbit": None, "load_before": load_before}
            if mode == "line":
                mtu = session.plan.peer_mtu(source.name, relay.name)
                mbps = {path: summary[path]["mbps"] for path in PATHS}
                entry.update({"tunnel_mtu": mtu, **line_verdict(line_mbit, mtu, mbps)})  # line_mbit among them
            modes[mode] = {**entry, "load_after": [round(x, 2) for x in os.getloadavg()], "summary": summary}
            runs += mine
        names = {"from": source.name, "relayed_to": partner.name, "direct_to": relay.name, "relay": relay.name}
    return {"stack": str(STACK.relative_to(REPO)), **names, "rounds": rounds, "seconds": seconds, "omit": omit,
            "streams": 1, "nproc": os.cpu_count(), "modes": modes, "runs": runs}  # fmt: skip
