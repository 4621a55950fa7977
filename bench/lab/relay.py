"""`sudo .venv/bin/python -m bench relay`: a relayed pair's throughput against a direct path's, in the same lab run
(issue 24 item 5's target: relayed >= 0.8x direct). Writes docs/bench/relay.json; `bench doc` renders it as section 14
of docs/benchmarks.md.

The stack is examples/edge/Pulumi.edge.yaml (two offices on dynamic addresses, aws-use1 relaying between them) in
`delivery: user-data`. The paths are the lab's dynamic check's (wg_mesh.lab.checks.dynamiccheck.relay_paths): from the
office's host, *relayed* to home's host (office -> aws-use1 -> home: two tunnels, the relay's gateway decrypts and
encrypts every packet again) and *direct* to aws-use1's host (one tunnel). iperf3 TCP with the machine's CPU
(bench.lab.labkit.iperf: /proc/stat, the wireguard-go daemons' own), `rounds` rounds, the two paths back to back in
each, their order alternating from round to round so that a drift of the machine's load falls on both; the medians,
their ratio and the target. The machine's load averages before and after the run are recorded: the lab shares its
cores with whatever else runs, and every tunnel of both paths is wireguard-go on those same cores.
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


def edge_raw() -> dict[str, Any]:
    from wg_mesh.tools.stackfile import read_raw

    raw: dict[str, Any] = copy.deepcopy(read_raw(STACK))
    raw["delivery"] = "user-data"  # the benchmarks' lab session builds user-data meshes (labkit.lab_session)
    return raw


def order(round_index: int) -> tuple[str, ...]:
    """The paths of one round: direct first in even rounds, relayed first in odd ones."""
    return PATHS if round_index % 2 == 0 else PATHS[::-1]


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per path: the median Mbit/s, the machine's busy cores and the wireguard-go daemons' cores (medians over the
    rounds); the ratio relayed/direct of the medians against the target."""
    from wg_mesh.lab.checks.dynamiccheck import relay_verdict

    out: dict[str, Any] = {}
    for path in PATHS:
        mine = [r for r in runs if r["path"] == path]
        out[path] = {
            "mbps": round(statistics.median(r["mbps"] for r in mine), 1),
            "mbps_runs": [r["mbps"] for r in mine],
            "machine_busy_cores": round(statistics.median(r["cpu"]["busy"] for r in mine), 2),
            "wireguard_go_cores": round(statistics.median(r["cpu"].get("wireguard-go", 0.0) for r in mine), 2),
            "retransmits": [r["retransmits"] for r in mine],
        }
        # what moving the bytes costs the tunnels (every wireguard-go of the lab): relayed, the relay's gateway
        # decrypts and encrypts each packet again
        gbit = out[path]["mbps"] / 1000
        out[path]["wireguard_go_core_s_per_gbit"] = round(out[path]["wireguard_go_cores"] / gbit, 2) if gbit else None
    # each round's pair, back to back, as a second view of the same runs (a drift of the machine's load between
    # rounds cancels out of it)
    by_round = {(r["round"], r["path"]): r["mbps"] for r in runs}
    rounds = sorted({r["round"] for r in runs})
    ratios = [round(by_round[i, "relayed"] / by_round[i, "direct"], 2) for i in rounds if by_round.get((i, "direct"))]
    out["round_ratios"] = ratios
    out["round_ratio_median"] = round(statistics.median(ratios), 2) if ratios else None
    return {**out, **relay_verdict(out["direct"]["mbps"], out["relayed"]["mbps"])}


def run_relay_bench(log: Callable[[str], None], rounds: int = 5, seconds: float = 5, omit: float = 1) -> dict[str, Any]:
    from bench.lab.labkit import Endpoint, iperf, lab_session
    from wg_mesh.config import parse_mesh
    from wg_mesh.lab.checks.dynamiccheck import relay_paths
    from wg_mesh.lab.fabric.netns import LabError

    load_before = [round(x, 2) for x in os.getloadavg()]
    runs: list[dict[str, Any]] = []
    with lab_session(parse_mesh(edge_raw()), log) as session:
        paths = relay_paths(session.lab)
        if paths is None:
            raise LabError(f"{STACK.name} has no relayed pair")
        source, partner, relay = paths
        client = Endpoint(session.host(source), source.host_ns)
        targets = {"direct": relay, "relayed": partner}
        for i in range(rounds):
            for path in order(i):
                dst = targets[path]
                result = iperf(session, client, Endpoint(session.host(dst), dst.host_ns), str(dst.host_ip.ip),
                               streams=1, seconds=seconds, omit=omit)  # fmt: skip
                runs.append({"round": i + 1, "path": path, "to": dst.name, **result})
                log(f"relay bench round {i + 1}/{rounds}: {path} {source.name} -> {dst.name}: {result['mbps']} Mbit/s, "
                    f"machine busy {result['cpu']['busy']} cores")  # fmt: skip
        names = {"from": source.name, "relayed_to": partner.name, "direct_to": relay.name, "relay": relay.name}
    load_after = [round(x, 2) for x in os.getloadavg()]
    return {"stack": str(STACK.relative_to(REPO)), **names, "rounds": rounds, "seconds": seconds, "omit": omit,
            "streams": 1, "nproc": os.cpu_count(), "load_before": load_before,
            "load_after": load_after, "summary": summarise(runs), "runs": runs}  # fmt: skip
