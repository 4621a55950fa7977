"""A rehearsal's report: per step of `pulumi up` the resource, the action, what the lab did, the traffic it cost per
pair, who holds each address, where each route points, the documents applied, and the violations; the JSON
(`--json`) that `python -m bench changes` and docs/benchmarks.md read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

VIOLATION_KINDS = (
    "address on nothing",
    "address on a deleted gateway",
    "route on nothing",
    "route on a deleted gateway",
    "two gateways hold one address",
    "document refused",
    "public address replaced",
    "traffic not back",
    "operator step failed",
)


@dataclass
class RehearsalReport:
    label: str
    before: str
    prefix: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)  # per step; "start"/"end" epoch kept out of the JSON
    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    pairs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    end: dict[str, Any] = field(default_factory=dict)  # traffic back after up: seconds, pairs not back
    error: str | None = None
    ok: bool = False
    duration_s: float = 0.0

    @property
    def violations(self) -> list[str]:
        return [v for s in self.steps for v in s["violations"]] + list(self.end.get("violations", []))

    @property
    def pings_lost_total(self) -> int:
        return sum(int(s.get("pings_lost") or 0) for s in self.steps)

    def finish(self, teardown_problems: list[str], started: float) -> RehearsalReport:
        if teardown_problems:
            self.error = (self.error + "; " if self.error else "") + "teardown: " + "; ".join(teardown_problems)
        streams_ok = all(s.get("verified") for s in self.streams.values())
        self.ok = self.error is None and not self.violations and streams_ok
        self.duration_s = time.monotonic() - started
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "stack": self.label,
            "before": self.before,
            "error": self.error,
            "duration_s": round(self.duration_s, 1),
            "pairs": self.pairs,
            "steps": [{k: v for k, v in s.items() if k not in ("start", "end")} for s in self.steps],
            "end": self.end,
            "streams": self.streams,
            "notes": self.notes,
            "pings_lost_total": self.pings_lost_total,
            "violations_total": len(self.violations),
        }


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def print_report(report: RehearsalReport, console: Console) -> None:
    """One line per step the lab models (or that broke something): its number, action, resource, what the lab did,
    the traffic it cost, then its violations indented."""
    console.print(
        f"[bold]pulumi up rehearsed: {report.before} -> {report.label}[/bold] (pairs: {', '.join(report.pairs)})"
    )
    quiet = 0
    for i, s in enumerate(report.steps, 1):
        if s["lab"] is None and not s["violations"]:
            quiet += 1  # a step the lab does not model and that broke nothing: in the JSON only
            continue
        cost = f"lost {_cell(s.get('pings_lost'))}, stall {_cell(s.get('stall_ms'))} ms"
        console.print(f"{i:3} {s['action']:<19} {s['resource']}: {s['lab'] or '-'} ({cost})", highlight=False)
        for violation in s["violations"]:
            console.print(f"      [red]violation: {violation}[/red]", highlight=False)
    if quiet:
        console.print(f"{quiet} more step(s) with no effect the lab models (security groups, IAM, ...): in --json")
    for note in report.notes:
        console.print(f"note: {note}")
    if report.end:
        console.print(f"after up: every pair flowing {_cell(report.end.get('back_s'))} s after the last step; "
                      f"{', '.join(report.end.get('violations', [])) or 'no violation'}")  # fmt: skip
    for pair, stream in report.streams.items():
        verdict = "verified" if stream.get("verified") else "NOT VERIFIED"
        console.print(f"stream {pair}: {stream.get('bytes', 0) / 2**20:.1f} MiB, sha256 {verdict}")
    console.print(f"pings lost in all: {report.pings_lost_total}; violations: {len(report.violations)}")
    if report.error:
        console.print(f"[red]error: {report.error}[/red]")
    console.print("[green]rehearsal passed[/green]" if report.ok else "[red]rehearsal FAILED[/red]")
