"""The HA drill's step after "back to one gateway", "back to two gateways" (issue 32 item 2; docs/ha.md 9.2):
`gateways: 1` -> 2 in the order `pulumi up` runs it, with the site's traffic flowing. The site is then a single gateway
in one place (hadowngrade.py left it there, the pair's places free). The order is the engine's on the ha stack
(wg_mesh.plan.engine.steps on the program's runs for a copy of Pulumi.ha.yaml with `gateways: 1` and for
Pulumi.ha.yaml; `wg-mesh plan --stack ha --before` that copy):

1. the stores: every document published with the config after the change (the site's loses `gateways: 1`; the new
   instances' first boot depends on the stores); AWS: the lease table created (with the VPC endpoints, the ENI tags
   and the HA policies, which the lab's moto does not enforce); GCP: no instance group yet (the load balancer and its
   groups went with the pair at the end of the downgrade's `up`);
2. gateway a's replacement (create-before-delete: its user data gains the `ha` object) starts in place a (or, when
   the single gateway runs there after the replacement steps, in another free place: `places_for`); its agent
   claims at its start (AWS: the lease, then the EIP and every route, from the old single gateway; GCP: the address
   from the old VM once Google reports that VM in no group of the site, wg_mesh.gateway.ha_gcp.other_health);
   its readiness gate (the lab's ready mark: its agent applied the published document and its health check passes;
   GCP: the gate's own `python -m wg_mesh.readygate gcp --wait-only` against the Compute model);
3. GCP: a's instance group (with the new VM: a VM joins its group only after its gate, issue 21);
4. gateway b created after a's gate (its `depends_on`), its gate the same way; GCP: b's group, the backend service and
   the forwarding rule (the lab's getHealth answers for a group without them: a claim that waits for the backend
   service in a cloud can come that much earlier here), then the routes re-created with the load balancer as next
   hop (delete before create: no route between the two);
5. at the end of `up`: AWS, the single gateway's EipAssociation deleted (DisassociateAddress by the id Pulumi's state
   has, the downgrade's association; terraform-provider-aws returns success on InvalidAssociationID.NotFound, so once
   the agent re-associated the address the delete changes nothing: awsctl.py); the old single gateway's instance
   deleted (systemd stops its agent, SIGTERM, then killed; GCP: its VM deleted);
6. the pair steady (one active holding the address and every route, one healthy standby), SETTLE_S, the traffic.

Violations (the step fails with any): once the address reached the pair, any holder outside it (the old single
gateway taking it back, or nobody: GCP's own move passes through nobody before that moment); once every route points
into the pair, a route anywhere else; two holders of the address at once; at the end, the address or a route
anywhere but the pair's active; more than one move of the address or of any route (the design: the new a's claim
moves the address once, from the single gateway to a, and, AWS, its reconcile each route once; GCP, the routes'
re-creation moves each once, single gateway -> nothing -> the load balancer's next hop, which is a; b is a standby
from its start and moves nothing); GCP: a 200 from a backend without the address, two HEALTHY backends at once; the
pair not steady or the traffic not back by the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wg_mesh.config import MeshConfig
from wg_mesh.lab.drills.drill import agent_metrics, metric
from wg_mesh.lab.drills.hadowngrade import STOP_S, Publish
from wg_mesh.lab.drills.hamoves import count_moves, gcp_serving
from wg_mesh.lab.drills.hawatch import ha_view
from wg_mesh.lab.fabric.netns import LabError

if TYPE_CHECKING:
    from wg_mesh.lab.drills.hadrill import HaDrill

STEP = "back to two gateways (gateways: 1 -> 2)"
PAIR = ("a", "b")
READY_TIMEOUT_S = 60.0
STEADY_TIMEOUT_S = 30.0
SETTLE_S = 1.0
TICK_S = 0.1


class UpgradeStep:
    def __init__(self, drill: HaDrill, publish: Publish, cfg: MeshConfig) -> None:
        """`cfg`: the config after the change (the stack's, with the site's `gateways: 2`)."""
        self.drill, self.publish, self.cfg = drill, publish, cfg
        self.start = 0.0
        self.active_s: dict[str, float] = {}  # place -> seconds into the step its agent first reported active
        self.standby_s: dict[str, float] = {}  # ... a healthy standby

    def run(self, single: str) -> dict[str, Any]:
        """`single`: the place of the site's single gateway (hadowngrade's new one)."""
        d = self.drill
        site, cloud, ha = d.site, d.cloud, d.ha
        idle = [g.letter for g in ha.gateways if g.letter != single and (g.letter in d.down or g.letter in d.free)]
        places = places_for(PAIR, idle)
        if places is None:
            raise LabError(f"{site}: the step {STEP!r} needs two free places beside the single gateway, not {idle}")
        pair = tuple(places.values())
        ids = cloud.ids[site]
        self.start = start = time.time()
        generation = self.publish(self.cfg)[site].generation
        if ha.cloud == "aws":
            cloud.aws(site, "create-table", ids["lease_table"])
        else:
            for letter in PAIR:
                cloud.command(site, op="group", group=letter, members=[])
        ready_s, started_s = {}, {}
        for letter, place in places.items():  # b after a's gate
            started_s[letter] = round(time.time() - start, 2)
            cloud.place(site, place, letter).start()
            d.down.discard(place)
            if place in d.free:
                d.free.remove(place)
            d.letters[place] = letter
            ready_s[letter] = self._gate(place, letter, generation, pair)
            if ha.cloud == "gcp":
                cloud.command(site, op="group", group=letter, members=[place])  # its group, after its gate
        if ha.cloud == "gcp":  # the routes re-created with the load balancer as next hop, delete before create
            cloud.command(site, op="route", place="")
            cloud.command(site, op="route", place=None)
        gone = None
        if ha.cloud == "aws":  # the end of `up`: the single gateway's EipAssociation, then its instance
            gone = bool(cloud.aws(site, "disassociate-address", cloud.associations[site])["gone"])
        d.planned(single)
        time.sleep(STOP_S)
        d.kill(single)
        cloud.retire(site, single)
        d.free.append(single)
        steady = self._until(lambda: d.steady_now() is not None, STEADY_TIMEOUT_S, pair)
        time.sleep(SETTLE_S)
        flowing = d.flowing(stream_too=False)
        end = time.time()
        events = [e for e in cloud.events if e.get("site") == site and "holder" in e and start <= e["t"] <= end]
        moves = count_moves(list(cloud.events), site, start, end)
        t_move, t_routes = moved_at(events, pair)
        violations = violations_of(events, single, pair, moves)
        extra: dict[str, Any] = {}
        if ha.cloud == "gcp":
            extra["stale_200"], extra["two_healthy"] = gcp_serving(list(cloud.events), site, start, end)
            violations += [f"GCP: {n} {what}" for n, what in ((extra["stale_200"], "200s from a backend without the "
                           "address"), (extra["two_healthy"], "episodes of two HEALTHY backends")) if n]  # fmt: skip
        else:
            extra["association_gone"] = gone
            if not gone:  # the agent's association is a new one: the old id must be gone, else the delete took it
                violations.append("the single gateway's EipAssociation still existed at its delete")
        if not steady:
            violations.append(f"the pair not steady {STEADY_TIMEOUT_S:.0f} s after the single gateway's delete")
        return {
            "step": STEP, "fault_on": single, "active_before": single, "active_after": d.active(), "start": start,
            "end": end, "duration_s": round(end - start, 1), "eip_holder_after": cloud.holder(site),
            "eip_moved_s": _since(t_move, start), "routes_moved_s": _since(t_routes, start), "expect_failover": False,
            "address_moves": moves[0], "route_moves": moves[1], "places": places, "started_s": started_s,
            "ready_s": ready_s, "active_s": self.active_s, "standby_s": self.standby_s, "flowing_at_end": flowing,
            "stream_at_end": flowing and d.flowing(), "violations": violations, **extra,
        }  # fmt: skip

    def _gate(self, place: str, letter: str, generation: int, pair: tuple[str, ...]) -> float:
        """The gateway's readiness gate, as `pulumi up` runs it: seconds into the step it passed."""
        d = self.drill
        node = d.machine(place).node

        def ready() -> bool:  # the lab's ready mark: the document applied, the agent's checks pass
            applied = metric(agent_metrics(node), "wgmesh_agent_applied_generation") == generation
            return applied and ha_view(node)["healthy"] == 1

        if not self._until(ready, READY_TIMEOUT_S, pair):
            raise LabError(f"{d.site}: the new gateway in place {place} was not ready within {READY_TIMEOUT_S:.0f} s")
        if d.ha.cloud == "gcp":
            d.cloud.command(d.site, op="ready", place=place)
            d.cloud.gcp_gate(d.site, place, letter, wait_only=True)
        return round(time.time() - self.start, 2)

    def _until(self, done: Callable[[], bool], timeout: float, pair: tuple[str, ...]) -> bool:
        """Until `done`, noting when each of the pair's places first reported each role."""
        deadline = time.monotonic() + timeout
        while True:
            now = round(time.time() - self.start, 2)
            for place, node in self.drill.nodes().items():
                view = ha_view(node) if node is not None and place in pair else {"role": None, "healthy": None}
                if view["role"] == 1:
                    self.active_s.setdefault(place, now)
                elif view["role"] == 0 and view["healthy"] == 1:
                    self.standby_s.setdefault(place, now)
            if done():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(TICK_S)


def places_for(letters: tuple[str, ...], idle: list[str]) -> dict[str, str] | None:
    """Where each gateway's new instance runs: its own place if free, else another free one (after the replacement
    steps the single gateway may sit in a or b); None when there are too few. Pure."""
    own = {letter: letter for letter in letters if letter in idle}
    rest = iter(p for p in idle if p not in own.values())
    found = {letter: own.get(letter) or next(rest, None) for letter in letters}
    return {k: v for k, v in found.items() if v is not None} if None not in found.values() else None


def _since(t: float | None, start: float) -> float | None:
    return None if t is None else round(t - start, 2)


def moved_at(events: list[dict[str, Any]], pair: tuple[str, ...]) -> tuple[float | None, float | None]:
    """(when the address first reached the pair, when every route first pointed into it), from the cloud model's
    lines; None: never. Pure."""
    t_move = next((float(e["t"]) for e in events if e.get("holder") in pair), None)
    t_routes = next((float(e["t"]) for e in events if (e.get("routes") or {})
                     and set(e["routes"].values()) <= set(pair)), None)  # fmt: skip
    return t_move, t_routes


def violations_of(
    events: list[dict[str, Any]], single: str, pair: tuple[str, ...], moves: tuple[int, int]
) -> list[str]:
    """What went wrong in the step, from the cloud model's lines within it (see the module docstring); `single`: the
    old single gateway's place, `pair`: the new pair's. Pure."""
    found = []
    t_move, t_routes = moved_at(events, pair)
    for e in events:
        holders = e.get("holders") or ([e["holder"]] if e.get("holder") else [])
        at = f"{e['t'] - t_move:+.2f} s from the move" if t_move is not None else "(the address never reached the pair)"
        if len(holders) > 1:
            found.append(f"two holders of the address ({', '.join(sorted(holders))}) {at}")
        if t_move is not None and e["t"] > t_move and e.get("holder") not in pair:
            found.append(f"the address on {e.get('holder') or 'nothing'} {at}")
        wrong = {g for g in (e.get("routes") or {}).values() if g not in pair}
        if t_routes is not None and e["t"] > t_routes and wrong:
            found.append(f"routes on {sorted(g or 'nothing' for g in wrong)} {at}")
    last = events[-1] if events else {}
    holder, routes = last.get("holder"), set((last.get("routes") or {}).values())
    if holder not in pair or routes != {holder}:
        where = "the deleted single gateway" if single in (holder, *routes) else "not the pair's active"
        found.append(f"at the end ({where}): the address on {holder}, routes on {last.get('routes')}")
    if moves[0] > 1 or moves[1] > 1:
        found.append(f"the address moved {moves[0]} times, a route {moves[1]} times (the design: once each, from "
                     f"{single} to the pair's first active)")  # fmt: skip
    return found


__all__ = ["STEP", "UpgradeStep", "moved_at", "places_for", "violations_of"]
