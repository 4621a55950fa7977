"""`sudo .venv/bin/python -m bench changes [--stacks dev,prod,...]`: every row of "What a change does"
(docs/concepts/replacements.md; the catalogue: wg_mesh/lab/rehearse/catalogue.py) rehearsed as `pulumi up` runs it
(`wg-mesh lab --before`, wg_mesh/lab/rehearse) on each stack: per change the pings lost and the longest stall over
every pair of sites, the violations, and how long after the last step every pair flows again. Writes
docs/bench/changes.json; `bench doc` renders it as a section of docs/benchmarks.md.

A change the rehearsal cannot lay out (an HA site: layout.py, run.py) is recorded as not rehearsed, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
STACKS = {
    "dev": REPO / "Pulumi.dev.yaml",
    "prod": REPO / "Pulumi.prod.yaml",
    "edge": REPO / "examples/edge/Pulumi.edge.yaml",
    "underlay": REPO / "examples/underlay/Pulumi.underlay.yaml",
}


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """One row: what the change cost in the lab."""
    steps = report.get("steps", [])
    pairs: dict[str, int] = {}
    for s in steps:
        for pair, seen in (s.get("pairs") or {}).items():
            pairs[pair] = pairs.get(pair, 0) + int(seen.get("pings_lost") or 0)
    return {
        "ok": report.get("ok"),
        "error": report.get("error"),
        "pings_lost_total": report.get("pings_lost_total"),
        "worst_pair_pings_lost": max(pairs.values(), default=0),
        "longest_stall_ms": max((s.get("stall_ms") or 0.0 for s in steps), default=0.0),
        "violations": [v for s in steps for v in s.get("violations", [])]
        + list(report.get("end", {}).get("violations", [])),
        "back_s": report.get("end", {}).get("back_s"),
        "steps": len(steps),
        "steps_in_lab": sum(1 for s in steps if s.get("lab")),
        "duration_s": report.get("duration_s"),
    }


def run_changes_bench(stacks: Sequence[str], log: Callable[[str], None]) -> dict[str, Any]:
    from wg_mesh.lab.fabric.plan import LabPlanError
    from wg_mesh.lab.rehearse.catalogue import changes
    from wg_mesh.lab.rehearse.run import rehearse_raw
    from wg_mesh.tools.stackfile import read_raw

    rows = []
    started = time.monotonic()
    for stack in stacks:
        raw = read_raw(STACKS[stack])
        for change in changes(raw):
            row: dict[str, Any] = {"stack": stack, "delivery": raw.get("delivery", "user-data"), "change": change.name,
                                   "site": change.site}  # fmt: skip
            try:
                report = rehearse_raw(change.before, change.after, f"{stack}: {change.name}", stack, stack=stack)
                row |= {"rehearsed": True, **summary(report.to_json())}
            except LabPlanError as exc:
                row |= {"rehearsed": False, "reason": str(exc)}
            said = f"{row.get('pings_lost_total')} pings lost, {len(row.get('violations', []))} violation(s)"
            log(f"{stack}: {change.name}: " + (said if row["rehearsed"] else f"not rehearsed ({row['reason']})"))
            rows.append(row)
    return {"rows": rows, "duration_s": round(time.monotonic() - started, 1)}
