"""What a rehearsal counts as a violation, judged between two steps of `pulumi up` (the state the engine leaves the
clouds in while it goes on with the next step), and for the documents it writes.

* **An address or a route on nothing or on a deleted gateway**: a site both configs have (or one the change adds, once
  its address was first set) must have its public address on a running gateway, and every remote range both configs
  route through it (or AFTER adds, once its route exists) must be routed through a running gateway, between any two
  steps. A range only BEFORE routes may go: its route's deletion is the change.
* **A document refused**: every running gateway reading a store `pulumi up` wrote applies that document (its
  agent's `wgmesh_agent_applied_generation`) within its poll interval and APPLY_MARGIN_S, unless a newer one was
  written meanwhile or the machine is deleted before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from wg_mesh.lab.drills.drill import agent_metrics, metric
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.rehearse.world import Occupant, World, Written
from wg_mesh.plan import topology

APPLY_MARGIN_S = 5.0


@dataclass
class Expectation:
    written: Written
    place: str
    occupant: Occupant
    due: float  # epoch
    step: int  # the step that wrote it (its index in the report)


def state_violations(
    site: str,
    holder: str | None,
    routes: dict[str, str | None],
    running: set[str],
    address_expected: bool,
    expected_ranges: set[str],
) -> list[str]:
    """One site's violations: `holder` the place holding its public address, `routes` each range's place (None: no
    route), `running` the places with a machine; none while no machine of the site runs (before it exists, after it
    is gone)."""
    if not running:
        return []
    found = []
    if address_expected and holder is None:
        found.append(f"address on nothing: {site}'s public address is on no gateway")
    elif holder is not None and holder not in running:
        found.append(f"address on a deleted gateway: {site}'s public address is on place {holder}")
    for cidr in sorted(expected_ranges):
        place = routes.get(cidr)
        if place is None:
            found.append(f"route on nothing: {site}'s route to {cidr} goes nowhere")
        elif place not in running:
            found.append(f"route on a deleted gateway: {site}'s route to {cidr} is through place {place}")
    return found


class Judge:
    def __init__(self, world: World) -> None:
        self.world = world
        self.expected_ranges = {name: self._kept_ranges(name) for name in world.ha}
        self.after_ranges = {name: self._after_ranges(name) for name in world.ha}
        self.address_expected = {name: self._kept(name) for name in world.ha}
        self.pending: dict[tuple[str, str], Expectation] = {}

    def _kept(self, site: str) -> bool:
        return self.world.name_in("before", site) is not None and self.world.name_in("after", site) is not None

    def _after_ranges(self, site: str) -> set[str]:
        """The remote ranges AFTER routes through the site's gateway (none: AFTER does not have the site)."""
        name = self.world.name_in("after", site)
        return set() if name is None else {str(r) for r in topology.remote_ranges(self.world.cfgs["after"], name)}

    def _kept_ranges(self, site: str) -> set[str]:
        """The remote ranges both configs route through the site's gateway."""
        w = self.world
        old, new = w.name_in("before", site), w.name_in("after", site)
        if old is None or new is None:
            return set()
        before = {str(r) for r in topology.remote_ranges(w.cfgs["before"], old)}
        return before & {str(r) for r in topology.remote_ranges(w.cfgs["after"], new)}

    def boundary(self) -> list[str]:
        """The violations of the clouds' state now (between two steps)."""
        w, found = self.world, []
        for site in w.ha:
            if w.holder[site] is not None:
                self.address_expected[site] = True  # an added site's address, once it was set
            for cidr, place in w.routes[site].items():
                if place is not None and cidr in self.after_ranges[site]:
                    self.expected_ranges[site].add(cidr)  # a route AFTER adds, once it exists
            found += state_violations(site, w.holder[site], w.routes[site], set(w.places[site]),
                                      self.address_expected[site], self.expected_ranges[site])  # fmt: skip
        return found

    def expect(self, written: Written, step: int) -> None:
        """Every running machine that reads the store `written` went to must apply it."""
        w = self.world
        for place in written.places:
            occupant = w.occupant(written.site, place)
            if occupant is None or written.generation is None:
                continue
            name = w.name_in(occupant.which, written.site) or written.site
            poll = float(w.configs[occupant.which].get(name, {}).get("poll_seconds") or 10)
            due = written.at + poll + APPLY_MARGIN_S
            self.pending[(written.site, place)] = Expectation(written, place, occupant, due, step)

    def documents(self, final: bool = False) -> list[tuple[int, str]]:
        """(step index, violation) of every expectation now due (all of them when `final`: waited for first)."""
        if final and self.pending:
            deadline = max(e.due for e in self.pending.values())
            while time.time() < deadline and any(not self._applied(e) for e in self.pending.values()):
                time.sleep(0.2)
        found = []
        for key, e in list(self.pending.items()):
            if self.world.occupant(e.written.site, e.place) is not e.occupant:
                del self.pending[key]  # deleted (or replaced in its place) before it was due
                continue
            if self._applied(e):
                del self.pending[key]
                continue
            if final or time.time() >= e.due:
                del self.pending[key]
                seconds = e.due - e.written.at
                found.append((e.step, f"document refused: {e.written.site} in place {e.place} did not apply serial "
                                      f"{e.written.serial} within {seconds:.0f} s{self._why(e)}"))  # fmt: skip
        return found

    def _applied(self, e: Expectation) -> bool:
        try:
            samples = agent_metrics(e.occupant.machine.node)
        except LabError:
            return False
        applied = metric(samples, "wgmesh_agent_applied_generation")
        return applied is not None and int(applied) == e.written.generation

    def _why(self, e: Expectation) -> str:
        try:
            samples = agent_metrics(e.occupant.machine.node)
        except LabError:
            return " (not running)"
        reasons = [k.partition("reason=")[2].strip('"}') for k, v in samples.items()
                   if k.startswith("wgmesh_agent_apply_failures_total") and v]  # fmt: skip
        return f" (its agent refuses: {', '.join(reasons)})" if reasons else ""
