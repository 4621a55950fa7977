"""What the HA drill (hadrill.py) watches and how it judges: each gateway's role and health as its agent last wrote
them (`ha_view`), a sampler (every SAMPLE_S) of the roles and the cloud model's address holders that records every
sample with two actives, and the verdict of each step and of the drill (`judge`)."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wg_mesh.lab.drills.drill import metric, parse_metrics
from wg_mesh.lab.drills.traffic import Pinger, Stream
from wg_mesh.lab.fabric.netns import LabError, Node

HA_METRICS = "/var/lib/prometheus/node-exporter/wg_mesh_ha.prom"
SAMPLE_S = 0.1
OUTAGE_TARGET_MS = 5000.0
# Relayed traffic (harun.traffic_path): the relay's new active has no endpoint for a dynamic site, so the offices make
# their sessions again themselves, the sending one when WireGuard's new-handshake timer fires 15 s after its data got
# no answer (KeepaliveTimeout + RekeyTimeout); a replacement step's bound on the outage gets that on top of the target
RELAYED_EXTRA_MS = 15000.0


def ha_view(node: Node) -> dict[str, float | None]:
    """What a gateway's agent last wrote (role 1 active / 0 standby, healthy); None when it has no such file (a
    killed gateway has no mount namespace left)."""
    try:
        samples = parse_metrics(node.path(HA_METRICS).read_text())
    except (OSError, ValueError):
        return {"role": None, "healthy": None}
    return {"role": metric(samples, "wgmesh_ha_role"), "healthy": metric(samples, "wgmesh_ha_healthy")}


@dataclass
class Sampler:
    """Every SAMPLE_S: each gateway's role and the cloud's EIP holder; `violations` the samples with two actives."""

    nodes: Callable[[], dict[str, Node | None]]
    holders: Callable[[], list[str]]  # the gateways holding the site's public address in the cloud model
    handshake: Callable[[], int | None] = lambda: None  # the peer gateway's latest handshake with the site (epoch)
    handshakes: list[int] = field(default_factory=list)  # each new value seen
    # relayed traffic (harun.traffic_path): the receiving site's gateway's latest handshake with the relay, likewise
    partner_handshake: Callable[[], int | None] = lambda: None
    partner_handshakes: list[int] = field(default_factory=list)
    samples: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> dict[str, Any]:
        roles = {}
        for letter, node in self.nodes().items():
            roles[letter] = ha_view(node)["role"] if node is not None else None
        return {"t": time.time(), "roles": roles, "eip_holders": self.holders()}

    def run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            s = self.sample()
            self.samples += 1
            for latest, seen_so_far in ((self.handshake, self.handshakes),
                                        (self.partner_handshake, self.partner_handshakes)):  # fmt: skip
                with contextlib.suppress(LabError):
                    seen = latest()
                    if seen and (not seen_so_far or seen > seen_so_far[-1]):
                        seen_so_far.append(seen)
            if sum(1 for r in s["roles"].values() if r == 1) > 1 or len(s["eip_holders"]) > 1:
                self.violations.append(s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)


def judge(steps: list[dict[str, Any]], pinger: Pinger, stream: Stream, sampler: Sampler, relayed: bool = False
          ) -> dict[str, Any]:  # fmt: skip
    """Traffic numbers per step and the verdicts: a failover step ends on the other gateway, a no-failover step
    on the same with no ping lost; every step ends with pings answered; the stream verifies; no sample had two
    actives. The outage target (median of
    the failover steps <= 5 s) is reported, met or not; a replacement beside the old must keep within it (relayed:
    plus RELAYED_EXTRA_MS)."""
    ok = bool(steps) and bool(stream.result.get("verified")) and not sampler.violations
    bound = OUTAGE_TARGET_MS + (RELAYED_EXTRA_MS if relayed else 0.0)
    outages = []
    for s in steps:
        window = pinger.window(s["start"], s["end"])
        s["pings_lost"], s["outage_ms"] = window["lost"], window["longest_gap_ms"]
        s["longest_stall_ms"] = stream.longest_stall_ms(s["start"], s["end"])
        s["two_active_samples"] = sum(1 for v in sampler.violations if s["start"] <= v["t"] <= s["end"])
        other = s.get("partner") or {"a": "b", "b": "a"}.get(s["active_before"])  # after a replacement: a, b or c
        if "successors" in s:  # a replacement beside the old: the partner or the new instance, within the target
            other = s["active_after"] if s["active_after"] in s["successors"] else "-"
            if (s["outage_ms"] or 0) > bound:
                other = "-"
        # no flapping: a failover moves the address and each route once, a step without one moves nothing
        most = 1 if s["expect_failover"] else 0
        steady = s.get("address_moves", 0) <= most and s.get("route_moves", 0) <= most
        if "violations" in s:  # back to one gateway (hadowngrade.py): judged on its own violations
            s["ok"] = not s["violations"] and s.get("flowing_at_end", False)
            ok = ok and s["ok"]
            continue
        if s["expect_failover"]:
            s["ok"] = s["active_after"] == other and s["eip_holder_after"] == other and steady
            if s["outage_ms"] is not None:
                outages.append(s["outage_ms"])
        else:
            s["ok"] = s["active_after"] == s["active_before"] and s["pings_lost"] == 0 and steady
        s["ok"] = s["ok"] and not s.get("stale_healthy") and not s.get("stale_routes")  # hastale.py
        s["ok"] = s["ok"] and not s.get("stale_200") and not s.get("two_healthy")  # GCP: one backend serves
        s["ok"] = s["ok"] and s.get("flowing_at_end", True)  # pings (relayed or not) answered again within the step
        ok = ok and s["ok"]
    median = statistics.median(outages) if outages else None
    return {
        "ok": ok,
        "outage_median_ms": median,
        "outage_target_ms": OUTAGE_TARGET_MS,
        "outage_target_met": median is not None and median <= OUTAGE_TARGET_MS,
        "samples": sampler.samples,
        "two_active_samples": len(sampler.violations),
        "violations": sampler.violations[:5],
    }
