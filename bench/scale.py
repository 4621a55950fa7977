"""Program scale: the Pulumi program under mocks for generated full meshes of N sites.

Each measurement is a fresh `python -m bench.scale_worker N` process; its peak RSS comes from wait4(2).
Sizes are interleaved across repeats so that drift on a shared machine hits every N alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import meshgen
from bench.stats import median
from wg_mesh.plan import userdata

REPO = Path(__file__).resolve().parent.parent
FULL_SIZES = (2, 8, 16, 32, 64)
QUOTA_CURVE_MAX_N = 300

Log = Callable[[str], None]


def run_worker(n: int, timeout: float = 900.0) -> dict[str, Any]:
    """One worker process, reaped with wait4(2) so that its own peak RSS is known."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.scale_worker", str(n)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    deadline = started + timeout
    chunks: list[str] = []
    errors: list[str] = []
    readers = [
        threading.Thread(target=lambda: chunks.append(proc.stdout.read() if proc.stdout else ""), daemon=True),
        threading.Thread(target=lambda: errors.append(proc.stderr.read() if proc.stderr else ""), daemon=True),
    ]
    for reader in readers:
        reader.start()
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            raise RuntimeError(f"scale worker N={n} did not finish within {timeout:.0f} s")
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    for reader in readers:
        reader.join(5)
    out, err = "".join(chunks), "".join(errors)
    if proc.returncode != 0:
        raise RuntimeError(f"scale worker N={n} failed ({proc.returncode}): {err.strip()[-500:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if "error" in result:
        raise RuntimeError(f"scale worker N={n}: the program failed: {result['error'][-500:]}")
    result["process_wall_s"] = round(wall, 3)
    result["peak_rss_kb"] = rusage.ru_maxrss  # KiB on Linux
    return result


def summarise(n: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    program = [r["program_s"] for r in runs]
    return {
        "n": n,
        "repeats": len(runs),
        "resources": first["resources"],
        "by_type": first["by_type"],
        "routes_declared": first["routes_declared"],
        "mesh_routes": first["mesh_routes"],
        "aws_routes_per_table": first["aws_routes_per_table"],
        "gcp_routes_per_network": first["gcp_routes_per_network"],
        "aws_sg_inbound_entries": first["aws_sg_inbound_entries"],
        "program_s_runs": program,
        "program_s": round(median(program), 4),
        "ms_per_resource": round(median(program) * 1000 / first["resources"], 3),
        "peak_rss_mb": round(median([r["peak_rss_kb"] for r in runs]) / 1024, 1),
        "rss_before_run_mb": round(median([r["rss_before_run_kb"] for r in runs]) / 1024, 1),
        "process_wall_s": round(median([r["process_wall_s"] for r in runs]), 3),
    }


def run_scale(sizes: Sequence[int], repeats: int, log: Log, curve_max_n: int = QUOTA_CURVE_MAX_N) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    started = time.perf_counter()
    for r in range(repeats):
        for n in sizes:
            result = run_worker(n)
            runs[n].append(result)
            log(
                f"scale: N={n} run {r + 1}/{repeats}: {result['resources']} resources in {result['program_s']:.2f} s, "
                f"peak RSS {result['peak_rss_kb'] / 1024:.0f} MiB"
            )
    points = [summarise(n, runs[n]) for n in sizes]

    curve = meshgen.quota_curve(curve_max_n)
    by_n = {row["n"]: row for row in curve}
    keys = ("aws_routes_per_table", "gcp_routes_per_network", "aws_sg_inbound_entries", "mesh_routes_total")
    checks = []
    for p in points:
        predicted = by_n.get(p["n"]) or meshgen.usage_for(p["n"])
        measured = {**{k: p[k] for k in keys[:3]}, "mesh_routes_total": p["mesh_routes"]}
        checks.append({"n": p["n"], "agrees": all(predicted[k] == measured[k] for k in keys), "measured": measured})
    quotas = {
        "aws_routes_per_table": meshgen.AWS_ROUTES_PER_TABLE,
        "gcp_routes_per_network": meshgen.GCP_ROUTES_PER_NETWORK,
        "aws_sg_inbound_entries": meshgen.AWS_SG_INBOUND_RULES,
    }
    # User data: a size limit per gateway, not a count; a coarser curve and an exact crossing by bisection.
    user_data_limits = {meshgen.USER_DATA_KEYS[cloud]: limit for cloud, limit in userdata.LIMITS.items()}
    crossings = {key: meshgen.first_crossing(curve, key, quota) for key, quota in quotas.items()}
    crossings |= {key: meshgen.user_data_crossing(curve_max_n, key, limit) for key, limit in user_data_limits.items()}
    return {
        "sizes": list(sizes),
        "repeats": repeats,
        "points": points,
        "runs": {str(n): runs[n] for n in sizes},
        "quota_curve": curve,
        "user_data_curve": meshgen.user_data_curve(curve_max_n),
        "quotas": quotas | user_data_limits,
        "crossings": crossings,
        "curve_matches_program": checks,
        "seconds": round(time.perf_counter() - started, 1),
    }
