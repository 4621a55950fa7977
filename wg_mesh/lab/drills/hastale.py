"""The HA drill's "stale ex-active comes back" step (issue 21 item 3; docs/ha.md 6.3), run on GCP pairs: the active's
agent is frozen (SIGSTOP to its process: a stalled VM, a long pause), so its /healthz stops answering; Google's
probers mark it UNHEALTHY and the standby takes the address; then the agent resumes (SIGCONT) still believing it is
active. Until it reads the new holder twice it keeps its role, but its /healthz must answer 503 from the first probe
on (wg_mesh.gateway.ha_gcp.Witness): the step records every HEALTHY verdict the probers gave it after the resume,
and every applied state whose routes or address went back to it. Either is a failure (hawatch.judge).

While frozen, the gateway's metrics file is what it wrote before the freeze (role 1): it is no report, so the
gateway counts as down for the sampler until its resumed agent has written role 0 (bounded by DEMOTE_TIMEOUT_S; the
role metric of a resumed ex-active lags its first reads, which is what `WgMeshHaTwoActive`'s docs say; what carries
traffic is the health verdict, which the step checks).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any, Protocol

from wg_mesh.lab.clouds.hacloud import HaCloud
from wg_mesh.lab.drills.hawatch import ha_view
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.machines.machine import NamespaceGateway

STEP = "stale ex-active comes back"
WATCH_S = 3.0  # after the resume: three probes (check_interval_sec 1, healthy_threshold 1: one 200 would show)
DEMOTE_TIMEOUT_S = 10.0


class Drill(Protocol):
    """What the step needs of the HA drill (hadrill.HaDrill): the site's gateways, the ones it counts as down, and
    the cloud model's change lines."""

    site: str
    down: set[str]
    cloud: HaCloud

    def machine(self, letter: str) -> NamespaceGateway: ...


class StaleStep:
    def __init__(self, drill: Drill) -> None:
        self.drill = drill
        self.letter = ""
        self.pids: list[int] = []

    def freeze(self, letter: str) -> None:
        daemons = [p for p in self.drill.machine(letter).daemons if p.poll() is None]
        if not daemons:
            raise LabError(f"{self.drill.site}-{letter}: no running agent to freeze")
        self.letter, self.pids = letter, [p.pid for p in daemons]
        self.drill.down.add(letter)
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> dict[str, Any]:
        """SIGCONT, then watch: what the step record gets (stale_healthy, stale_routes, stale_demoted_s)."""
        drill, letter = self.drill, self.letter
        resumed = time.time()
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        node = drill.machine(letter).node
        demoted = None
        deadline = time.monotonic() + DEMOTE_TIMEOUT_S
        while time.monotonic() < deadline:
            if ha_view(node)["role"] == 0:
                demoted = round(time.time() - resumed, 2)
                break
            time.sleep(0.05)
        drill.down.discard(letter)
        time.sleep(max(0.0, resumed + WATCH_S - time.time()))
        mine = [e for e in drill.cloud.events if e.get("site") == drill.site and e.get("t", 0) >= resumed]
        healthy = [e for e in mine if e.get("gateway") == letter and e.get("health") == "HEALTHY"]
        back = [e for e in mine if e.get("holder") == letter or letter in (e.get("routes") or {}).values()]
        return {"stale_healthy": len(healthy), "stale_routes": len(back), "stale_demoted_s": demoted}
