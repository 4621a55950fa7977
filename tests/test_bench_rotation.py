"""bench rotation (bench/lab/rotation.py): the announced rotation's figures from live drill reports, and section 8.1."""

from __future__ import annotations

from typing import Any

from bench.lab.rotation import combine
from bench.report.rotation import section


def report(lost: int, stall: float, spread: float | None, ok: bool = True) -> dict[str, Any]:
    step = {
        "step": "rotate aws-use1's key", "ok": ok, "pings_lost": lost, "longest_ping_gap_ms": 30.0 + lost * 10,
        "longest_stall_ms": stall, "switch_spread_ms": spread, "goal": {"pings_lost": 1, "longest_stall_ms": 1000.0},
        "goal_met": lost <= 1 and stall <= 1000, "switch_after_key_at_ms": {"aws-use1": {"own key": 3.4}},
    }  # fmt: skip
    return {"ok": ok, "error": None, "steps": [{"step": "add vps-fra", "ok": True}, step]}


def test_every_run_counts_and_the_goal_is_met_only_when_every_run_meets_it() -> None:
    data = combine([report(0, 0.0, 3.75), report(1, 137.0, 12.9), report(0, 0.0, None)])
    s = data["summary"]
    assert (s["runs"], s["completed"], s["goal_met"], s["max_pings_lost"], s["max_stall_ms"]) == (3, 3, 3, 1, 137.0)
    assert s["median_spread_ms"] == (3.75 + 12.9) / 2 and s["max_spread_ms"] == 12.9
    text = section(data)
    assert "| 2 | 1 | 40 ms | 137 ms | 12.9 ms | aws-use1 own key +3.4 ms | – |" in text
    assert "547 pings lost, 13.3 s stall" in text and "**met**" in text
    assert "the **worst** of 3 completed runs (of 3): 1 ping(s) lost, a 40 ms silence, a 137 ms stall" in text
    kicked = combine([{**report(0, 0.0, 1.0), "steps": [{**report(0, 0.0, 1.0)["steps"][1],
                                                          "rearmed": {"aws-use1": 1, "gcp-euw3": 0}}]}])  # fmt: skip
    assert "| aws-use1 |" in section(kicked)  # which side had to re-arm (its first handshake lost)

    missed = combine([report(0, 0.0, 3.0), report(2, 1500.0, 4.0), {"ok": False, "error": "boom", "steps": []}])
    assert missed["summary"]["goal_met"] == 1 and missed["summary"]["completed"] == 2
    text = section(missed)
    assert "**not met**" in text and "did not reach the step: boom" in text
