"""The HA drill's steps "standby replaced beside the old" and "active replaced beside the old" (issue 21 item 1;
docs/ha.md 9 and 11), on both clouds: what `pulumi up` does when a gateway's user data (or type) changes. A new
instance with the replaced gateway's user data starts in a free place (the site's spare place c, or a terminated
one's) and runs beside the old one (three agents) until it is a healthy standby; then

* GCP: its readiness gate has passed (polled as the gate does: GATE_INTERVAL_S), so `pulumi up` updates the
  gateway's instance group to hold the new VM instead of the old one (one update, wg_mesh.gcp; docs/ha.md 6.4: the
  cloud model's `group` command). The old VM is then in no group: if it held the address, gateway a claims from it
  at once (b after ORPHAN_WAIT_S);
* AWS: nothing in the cloud changes (the lease holder is the instance: the new one stays standby);

both run side by side BESIDE_S more (GCP: + ha_gcp.SETTLE_S: an old ex-active demotes after two reads of the new
holder and, as a standby, judges a holder only once it has seen it SETTLE_S; a claim back comes ~4 s after the move,
measured with the pre-issue-21 judgement of the other group: the address moved 3 times, step failed); then the old
one is stopped (systemd stops its agent at termination: SIGTERM, `HaDrill.planned`) and, after the step's failover
or its observation, terminated (killed by pid; GCP deletes its VM and access config): its place is free.

GCP: the old VM, in no group, counts as down for the sampler from the group update on. An ex-active's role metric
lags its reads of the new holder by ~0.2 s (the sampler saw two actives in 2 samples), while its /healthz answers
503 from the address's move on and nothing sends it traffic; the step checks GCP's health view instead
(hamoves.gcp_serving), as the stale step does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from wg_mesh.gateway.ha_gcp import SETTLE_S
from wg_mesh.lab.drills.hawatch import ha_view
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.tools.gatepoll import poll

if TYPE_CHECKING:
    from wg_mesh.lab.drills.hadrill import HaDrill

# old and new run side by side this long once the new one is a healthy standby (and, on GCP, in its group): a
# letter-holder replacement adopts the lease at its first read, the old one is fenced within 1 s and claims back
# after its 2 s backoff (issue 21's fight: a move there and one back within 4 s; with 2 s the red run saw one move)
BESIDE_S = 4.0
READY_TIMEOUT_S = 60.0
# GCP: `pulumi up`'s readiness gate polls the new VM's ready mark this often (wg_mesh.tools.gcpgate.wait_ready's
# default), from the VM's creation on; the instance group is updated once it passed (docs/ha.md 6.4). On a real VM the
# gate passes after boot and cloud-init, seconds to a minute after the agent's first holder read; in the lab the agent
# is a healthy standby ~1.5 s after its start, and a group update that early lands inside the new agent's SETTLE_S (3 s)
# of judging a holder it has just seen: it claims only after that, the load balancer meanwhile has no healthy
# backend (measured: 5.4 s outage with the update at once, docs/ha.md 9).
GATE_INTERVAL_S = 5.0


class BesideStep:
    def __init__(self, drill: HaDrill) -> None:
        self.drill = drill

    def beside(self, old: str) -> None:
        """The new instance in a free place beside `old`, ready, (GCP) in `old`'s group, BESIDE_S; `old` stopped."""

        d = self.drill
        place = d.free.pop(0)
        letter = d.letters.get(old, old)  # the letter of the user data the old instance runs
        d.cloud.place(d.site, place, letter).start()
        d.down.discard(place)
        d.letters[place] = letter

        def ready() -> bool:  # the lab's ready mark: the new agent is a healthy standby
            return ha_view(d.machine(place).node) == {"role": 0.0, "healthy": 1.0}

        def never(timeout: float) -> str:
            return f"{d.site}: the replacement in place {place} was no healthy standby within {timeout:.0f} s"

        # GCP: the readiness gate's own loop and interval from the VM's creation on (its group follows the gate)
        interval = GATE_INTERVAL_S if d.ha.cloud == "gcp" else 0.1
        try:
            poll(ready, READY_TIMEOUT_S, interval, time.sleep, never)
        except TimeoutError as exc:
            raise LabError(str(exc)) from None
        d.cloud.join(d.site, place, letter)
        if d.ha.cloud == "gcp":  # the old VM is no backend now: the sampler no longer reads its role (below)
            d.down.add(old)
        time.sleep(BESIDE_S + (SETTLE_S if d.ha.cloud == "gcp" else 0.0))
        d.planned(old)

    def terminate(self, place: str) -> None:
        d = self.drill
        d.kill(place)
        d.cloud.retire(d.site, place)
        d.free.append(place)
        if d.steady() is None:
            raise LabError(f"{d.site}: not steady after {place} was terminated: {d.roles()}")
