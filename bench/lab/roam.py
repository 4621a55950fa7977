"""`sudo .venv/bin/python -m bench roam`: the roam drill (wg_mesh/lab/drills/roamdrill.py, issue 24 item 5) on the
dev topology with an office on a dynamic address, once per delivery (user-data, live), at the mesh's default
persistent_keepalive (25 s). Writes docs/bench/roam.json; `bench doc` renders it as section 13 of docs/benchmarks.md.
Each run records the machine's load averages before and after (the lab shares its cores with whatever else runs)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
KEEPALIVE = 25  # the mesh's default (wg_mesh/config/model.py)
OFFICE = {"name": "office", "cloud": "static", "endpoint": "dynamic", "overlay_ip": "10.200.0.3",
          "cidrs": ["192.168.50.0/24"]}  # fmt: skip


def edge_raw(delivery: str, keepalive: int = KEEPALIVE) -> dict[str, Any]:
    """The dev stack (one AWS, one GCP gateway) and an office on a dynamic address, as a raw stack mapping."""
    from wg_mesh.tools.stackfile import read_raw

    raw: dict[str, Any] = copy.deepcopy(read_raw(REPO / "Pulumi.dev.yaml"))
    raw["persistent_keepalive"], raw["delivery"] = keepalive, delivery
    raw["sites"].append(dict(OFFICE))
    return raw


def run_roam_bench(log: Callable[[str], None], deliveries: Sequence[str] = ("user-data", "live"),
                   keepalive: int = KEEPALIVE) -> dict[str, Any]:  # fmt: skip
    from wg_mesh.config import parse_mesh
    from wg_mesh.lab.drills.roamdrill import run_roam_drill

    runs = []
    for delivery in deliveries:
        load_before = [round(x, 2) for x in os.getloadavg()]
        report = run_roam_drill(parse_mesh(edge_raw(delivery, keepalive)), f"dev + dynamic office ({delivery})")
        load_after = [round(x, 2) for x in os.getloadavg()]
        log(f"roam drill, {delivery}: {'passed' if report.ok else 'FAILED'} {report.error or ''}")
        runs.append({"delivery": delivery, "load_before": load_before, "load_after": load_after,
                     "report": report.to_json()})  # fmt: skip
    return {"keepalive_s": keepalive, "nproc": os.cpu_count(), "runs": runs}
