"""`sudo .venv/bin/python -m bench roam`: the roam drill (wg_mesh/lab/drills/roamdrill.py, issue 24 item 5) on the
dev topology with an office on a dynamic address and a branch known by a DNS name, once per delivery (user-data,
live), at the mesh's default persistent_keepalive (25 s) and a re-resolve interval of 10 s (below the keepalive, so
that the dns change measures the re-resolver, not the branch's next keepalive). Writes docs/bench/roam.json; `bench
doc` renders it as section 13 of docs/benchmarks.md.
Each run records the machine's load averages before and after (the lab shares its cores with whatever else runs)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
KEEPALIVE = 25  # the mesh's default (wg_mesh/config/model.py)
RERESOLVE = 10  # reresolve_seconds: below KEEPALIVE (the branch's keepalive would otherwise teach its peers first)
OFFICE = {"name": "office", "cloud": "static", "endpoint": "dynamic", "overlay_ip": "10.200.0.3",
          "cidrs": ["192.168.50.0/24"]}  # fmt: skip
# the lab's resolver serves its names (wg_mesh/lab/fabric/resolver.py)
BRANCH = {
    "name": "branch",
    "cloud": "static",
    "endpoint": "branch.wg-mesh-lab.test",
    "overlay_ip": "10.200.0.4",
    "cidrs": ["192.168.60.0/24"],
}


def edge_raw(delivery: str, keepalive: int = KEEPALIVE) -> dict[str, Any]:
    """The dev stack (one AWS, one GCP gateway) and an office on a dynamic address, as a raw stack mapping."""
    from wg_mesh.tools.stackfile import read_raw

    raw: dict[str, Any] = copy.deepcopy(read_raw(REPO / "Pulumi.dev.yaml"))
    raw["persistent_keepalive"], raw["delivery"] = keepalive, delivery
    raw["sites"].append(dict(OFFICE))
    return raw


def edge_with_branch_raw(delivery: str, keepalive: int = KEEPALIVE, reresolve: int = RERESOLVE) -> dict[str, Any]:
    """edge_raw and a branch known by a DNS name (the drill's `dns` change re-points it), re-resolved every
    `reresolve` seconds."""
    raw = edge_raw(delivery, keepalive)
    raw["sites"].append(dict(BRANCH))
    raw["reresolve_seconds"] = reresolve
    return raw


def run_roam_bench(log: Callable[[str], None], deliveries: Sequence[str] = ("user-data", "live"),
                   keepalive: int = KEEPALIVE, reresolve: int = RERESOLVE) -> dict[str, Any]:  # fmt: skip
    from wg_mesh.config import parse_mesh
    from wg_mesh.lab.drills.roamdrill import run_roam_drill

    runs = []
    for delivery in deliveries:
        load_before = [round(x, 2) for x in os.getloadavg()]
        cfg = parse_mesh(edge_with_branch_raw(delivery, keepalive, reresolve))
        report = run_roam_drill(cfg, f"dev + dynamic office + DNS-named branch ({delivery})")
        load_after = [round(x, 2) for x in os.getloadavg()]
        log(f"roam drill, {delivery}: {'passed' if report.ok else 'FAILED'} {report.error or ''}")
        runs.append({"delivery": delivery, "load_before": load_before, "load_after": load_after,
                     "report": report.to_json()})  # fmt: skip
    return {"keepalive_s": keepalive, "reresolve_s": reresolve, "nproc": os.cpu_count(), "runs": runs}
