"""One program-scale measurement, in its own process (so that its peak RSS is its own):

    python -m bench.scale_worker N

runs the real `__main__.py` under the test suite's Pulumi mocks (tests/conftest.py `run_program`: a fresh
thread, event loop and contextvars context) for a generated mesh of N sites, and prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

RUN_TIMEOUT_S = 900.0  # conftest's 60 s turns a deadlock into a test failure; 64 sites legitimately take longer


def vm_hwm_kb() -> int:
    """This process's peak resident set so far (VmHWM), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def measure(n: int, preview: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.meshgen import generate_mesh
    from tests import conftest

    conftest.RUN_TIMEOUT_S = RUN_TIMEOUT_S
    raw = generate_mesh(n, raised_quotas=True)  # an account past AWS's default quotas (validate refuses it otherwise)
    imported = time.perf_counter()
    hwm_before = vm_hwm_kb()
    t0 = time.perf_counter()
    run = conftest.run_program(raw, preview=preview, stack=f"bench{n}")
    program_s = time.perf_counter() - t0
    if run.error is not None:
        return {"n": n, "error": str(run.error)}

    by_type = Counter(r.type for r in run.resources)
    aws_tables: dict[str, int] = defaultdict(int)
    mesh_routes = 0
    for r in run.of_type("aws:ec2/route:Route"):
        aws_tables[str(r.inputs.get("routeTableId"))] += 1
        mesh_routes += r.inputs.get("destinationCidrBlock") != "0.0.0.0/0"
    gcp_networks: dict[str, int] = defaultdict(int)
    for r in run.of_type("gcp:compute/route:Route"):
        gcp_networks[str(r.inputs.get("network"))] += 1
        mesh_routes += 1
    sg_inbound = [
        sum(len(rule.get("cidrBlocks") or []) for rule in r.inputs.get("ingress") or [])
        for r in run.of_type("aws:ec2/securityGroup:SecurityGroup")
    ]
    resources = len(run.resources)
    return {
        "n": n,
        "preview": preview,
        "resources": resources,
        "by_type": dict(sorted(by_type.items())),
        "routes_declared": by_type["aws:ec2/route:Route"] + by_type["gcp:compute/route:Route"],
        "mesh_routes": mesh_routes,
        "aws_routes_per_table": max(aws_tables.values(), default=0),
        "gcp_routes_per_network": max(gcp_networks.values(), default=0),
        "aws_sg_inbound_entries": max(sg_inbound, default=0),
        "program_s": round(program_s, 4),
        "ms_per_resource": round(program_s * 1000 / resources, 3),
        "import_s": round(imported - started, 3),
        "rss_before_run_kb": hwm_before,
        "rss_after_run_kb": vm_hwm_kb(),
    }


def main(argv: list[str]) -> int:
    n = int(argv[0])
    print(json.dumps(measure(n, preview="--preview" in argv[1:])), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
