"""A drill's report, whatever the drill (`live`, `pmtu`, `ha`): its sites, its steps, the stream and the summary, and
the JSON (`--json`) that docs/benchmarks.md's tables are rendered from. drillrun.py and harun.py fill it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DrillReport:
    label: str
    kind: str = "live"
    prefix: str = ""  # the lab's name prefix (its namespaces, state file, containers): for teardown checks
    sites: dict[str, dict[str, str]] = field(default_factory=dict)  # A/B/C -> name, cloud, store
    steps: list[dict[str, Any]] = field(default_factory=list)
    stream: dict[str, Any] = field(default_factory=dict)
    wireguard_go_pids: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # site -> before/after
    poll_seconds: float | None = None
    mode: str = "namespace"  # or "boot": every gateway a booted container, its agent the unit cloud-init starts
    boot: dict[str, dict[str, Any]] = field(default_factory=dict)  # --boot: site -> cloud-init's time and exit
    summary: dict[str, Any] = field(default_factory=dict)  # ha: the outage median, the sampler's counts
    traffic: dict[str, Any] = field(default_factory=dict)  # ha: from, to, via, relayed, partners (harun.traffic_path)
    error: str | None = None
    ok: bool = False
    duration_s: float = 0.0

    def finish(self, teardown_problems: list[str], started: float) -> DrillReport:
        """The drill's end: a teardown that left something behind fails it (after any error it had), and its length
        since `started` (time.monotonic())."""
        if teardown_problems:
            self.error = (self.error + "; " if self.error else "") + "teardown: " + "; ".join(teardown_problems)
            self.ok = False
        self.duration_s = time.monotonic() - started
        return self

    def to_json(self) -> dict[str, Any]:
        steps = [{k: v for k, v in s.items() if k not in ("start", "end")} for s in self.steps]
        return {
            "ok": self.ok,
            "drill": self.kind,
            "mode": self.mode,
            "stack": self.label,
            "error": self.error,
            "duration_s": round(self.duration_s, 1),
            "sites": self.sites,
            "poll_seconds": self.poll_seconds,
            "steps": steps,
            "stream": {k: v for k, v in self.stream.items() if k != "stalls"},
            "wireguard_go_pids": self.wireguard_go_pids,
            **({"traffic": self.traffic} if self.traffic else {}),
            **({"boot": self.boot} if self.mode == "boot" else {}),
            **({"summary": {k: v for k, v in self.summary.items() if k != "logs"}} if self.summary else {}),
        }
