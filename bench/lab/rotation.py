"""`sudo .venv/bin/python -m bench rotation [--runs N]`: the announced key rotation (issue 20 item 5,
wg_mesh/gateway/rotation.py), measured over N runs of the live drill (wg_mesh/lab/drills/drill.py, its step 4: A's key
rotated with key_at = publish + a poll interval + 5 s, a ping every 10 ms and a SHA-256-verified stream A -> B).
`--from RUN.json ...` combines the JSON reports of `python -m wg_mesh lab --drill live --json RUN.json` instead.
Writes docs/bench/rotation.json; `bench doc` renders it as section 8.1 of docs/benchmarks.md, against the figure of
the unannounced rotation before it (docs/bench/meshchange.json of commit 0275c11: 547 pings lost, 13.3 s stall).

The switch instants are the agents' own log lines (`key switch ... done at <unix time>`, after the last command of the
switch): in the lab every gateway shares the host's clock, so their spread is the agents' timer and command latency,
not clock skew; the skew between clouds comes on top (the tolerance the agent relies on: CLOCK_TOLERANCE_S).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wg_mesh.gateway.rotation import CLOCK_TOLERANCE_S, PEER_SWITCH_LAG_S, SWITCH_KICK_S
from wg_mesh.lab.drills.drill import ROTATION_GOAL

BEFORE = {"pings_lost": 547, "longest_stall_ms": 13333.0, "source": "docs/bench/meshchange.json at commit 0275c11"}
# The announced rotation before issue 32 item 10 (peers swapping at key_at too, no ping after the switch): the worst of
# 22 runs of the live drill at commit 58f58f7 on this 2-core machine shared with other sessions, 2026-12-07 (load 1 to
# 12): 4 runs missed the goal (3, 3 and 33 pings lost; a 1267 ms stall); the two worst logged the kick's re-arm (their
# first handshake after the switch was lost), 8 earlier runs predate that diagnostic
BEFORE_ANNOUNCED = {
    "runs": 22, "goal_missed": 4, "max_pings_lost": 33, "max_gap_ms": 553.4, "max_stall_ms": 1267.0,
    "source": "the live drill at commit 58f58f7, 22 runs, 2026-12-07",
}  # fmt: skip
KEYS = ("pings_lost", "longest_ping_gap_ms", "longest_stall_ms", "switch_spread_ms", "switch_after_key_at_ms",
        "rearmed")  # fmt: skip


def rotation_step(report: dict[str, Any]) -> dict[str, Any] | None:
    """The announced rotation's step of a live drill report (None: the run did not get there)."""
    return next((s for s in report.get("steps", []) if "goal" in s), None)


def combine(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    runs = []
    for report in reports:
        step = rotation_step(report)
        if step is None:
            runs.append({"completed": False, "error": report.get("error")})
            continue
        runs.append({
            "completed": True, "ok": step["ok"], "goal_met": step["goal_met"], "drill_ok": report.get("ok"),
            **{k: step.get(k) for k in KEYS},
        })  # fmt: skip
    done = [r for r in runs if r["completed"]]
    spreads = [r["switch_spread_ms"] for r in done if r["switch_spread_ms"] is not None]
    return {
        "runs": runs,
        "goal": dict(ROTATION_GOAL),
        "before": BEFORE,
        "before_announced": BEFORE_ANNOUNCED,
        "clock_tolerance_ms": CLOCK_TOLERANCE_S * 1000,
        "kick_after_ms": SWITCH_KICK_S * 1000,
        "peer_lag_ms": PEER_SWITCH_LAG_S * 1000,
        "summary": {
            "runs": len(runs),
            "completed": len(done),
            "goal_met": sum(1 for r in done if r["goal_met"]),
            "max_pings_lost": max((r["pings_lost"] for r in done), default=None),
            "max_stall_ms": max((r["longest_stall_ms"] for r in done), default=None),
            "max_gap_ms": max((r["longest_ping_gap_ms"] for r in done), default=None),
            "median_spread_ms": statistics.median(spreads) if spreads else None,
            "max_spread_ms": max(spreads, default=None),
        },
    }


def run_rotation_bench(runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    from wg_mesh.lab.drills.drillrun import run_drill
    from wg_mesh.tools.stackfile import load

    prod = load(Path(__file__).resolve().parent.parent.parent / "Pulumi.prod.yaml")
    reports = []
    for i in range(runs):
        report = run_drill(prod, "prod")
        log(f"rotation run {i + 1}/{runs}: drill {'passed' if report.ok else 'FAILED'} {report.error or ''}")
        reports.append(report.to_json())
    return combine(reports)


def from_files(paths: Sequence[Path]) -> dict[str, Any]:
    return combine([json.loads(p.read_text()) for p in paths])
