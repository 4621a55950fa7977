"""The HA drill's steps "standby replaced beside the old" and "active replaced beside the old" (issue 21 item 1;
docs/ha.md 9 and 11), on both clouds: what `pulumi up` does when a gateway's user data (or type) changes. A new
instance with the replaced gateway's user data starts in a free place (the site's spare place c, or a terminated
one's) and runs beside the old one (three agents) until it is a healthy standby; then

* GCP: its readiness gate has passed, so `pulumi up` updates the gateway's instance group to hold the new VM instead
  of the old one (one update, wg_mesh.gcp; docs/ha.md 6.4: the cloud model's `group` command). The old VM is then in
  no group: if it held the address, gateway a claims from it at once (b after ORPHAN_WAIT_S);
* AWS: nothing in the cloud changes (the lease holder is the instance: the new one stays standby);

both run side by side BESIDE_S more; then the old one is stopped (systemd stops its agent at termination: SIGTERM,
`HaDrill.planned`) and, after the step's failover or its observation, terminated (killed by pid; GCP deletes its VM
and access config): its place is free.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from wg_mesh.lab.netns import LabError

if TYPE_CHECKING:
    from wg_mesh.lab.hadrill import HaDrill

# old and new run side by side this long once the new one is a healthy standby (and, on GCP, in its group): a
# letter-holder replacement adopts the lease at its first read, the old one is fenced within 1 s and claims back
# after its 2 s backoff (issue 21's fight: a move there and one back within 4 s; with 2 s the red run saw one move)
BESIDE_S = 4.0
READY_TIMEOUT_S = 60.0


class BesideStep:
    def __init__(self, drill: HaDrill) -> None:
        self.drill = drill

    def beside(self, old: str) -> None:
        """The new instance in a free place beside `old`, ready, (GCP) in `old`'s group, BESIDE_S; `old` stopped."""
        from wg_mesh.lab.hadrill import ha_view

        d = self.drill
        place = d.free.pop(0)
        letter = d.letters.get(old, old)  # the letter of the user data the old instance runs
        d.cloud.place(d.site, place, letter).start()
        d.down.discard(place)
        d.letters[place] = letter
        deadline = time.monotonic() + READY_TIMEOUT_S
        while ha_view(d.machine(place).node) != {"role": 0.0, "healthy": 1.0}:
            if time.monotonic() > deadline:
                raise LabError(f"{d.site}: the replacement in place {place} never became a healthy standby")
            time.sleep(0.1)
        d.cloud.join(d.site, place, letter)
        time.sleep(BESIDE_S)
        d.planned(old)

    def terminate(self, place: str) -> None:
        d = self.drill
        d.kill(place)
        d.cloud.retire(d.site, place)
        d.free.append(place)
        if d.steady() is None:
            raise LabError(f"{d.site}: not steady after {place} was terminated: {d.roles()}")
