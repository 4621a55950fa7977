"""The HA drill's last step, "back to one gateway" (issue 32 item 2; docs/ha.md 9): `gateways: 2` -> 1 in the order
`pulumi up` runs it (`wg-mesh plan --stack ha --before Pulumi.ha.yaml` with `gateways: 1`: gateway a's instance
replaced create-before-delete, AWS's EipAssociation created and routes updated in place after its gate, GCP's routes
re-created delete-before-create after it, every resource of the pair deleted last), with the site's traffic flowing:

1. the stores: every document published with the config after the change, the site's now saying `gateways: 1`
   (written before the new instance, whose first boot depends on the stores);
2. the new single gateway (a's replacement; its user data has no `ha` object, so no HA agent) starts in a free place
   (the site's spare place c, or a terminated one's after an earlier step); the readiness gate waits for it (the
   lab's ready mark: its agent applied the published document). A real gateway boots longer than the agents'
   document poll (the lab's own booted gateways: 20 s and 27 s from boot to cloud-init done, docs/benchmarks.md 8;
   a real cloud adds the instance's launch and the packages; the poll is `poll_seconds`, 10 s), so the gate passes
   no earlier than a poll after the documents (`poll_s` + POLL_MARGIN_S), or earlier once both agents of the pair
   report they read it (wgmesh_ha_stood_down);
3. AWS: the EipAssociation (AssociateAddress with its instance id) and the routes' update (ReplaceRoute of every remote
   range to its ENI); GCP: the gate itself moves the static address (`python -m wg_mesh.readygate gcp`: the gate's own
   code against the Compute model), then the routes are deleted and created again with it as next hop;
4. OBSERVE_S (the agents of before took the address back within 1 s on AWS, ~3-4 s on GCP), then the deletes
   at the end of `up`, b first (b depends on a's gate), then a: systemd stops the agent (SIGTERM), the instance is
   terminated (killed; GCP: its VM deleted); AWS: the lease table deleted after them;
5. SETTLE_S, and the traffic must flow through the new gateway.

Violations (the step fails with any): once Pulumi moved the address to the new gateway, any other holder (the pair
taking it back, or nobody: GCP's own move passes through nobody for its operations, before that moment); once the
routes moved, a route to anything else; at the end, the address or a route anywhere else; more than one move of the
address or of any route in the step; the traffic not back by the end. Before the document said `gateways: 1`
(58f58f7), the AWS pair's active took the address and routes back within a second and the GCP pair's a claimed the
address from the new VM, in no instance group, seconds after the gate: both ended on a deleted instance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wg_mesh.config import MeshConfig
from wg_mesh.lab.drills.drill import agent_metrics, metric, parse_metrics
from wg_mesh.lab.drills.hamoves import count_moves
from wg_mesh.lab.drills.hawatch import HA_METRICS
from wg_mesh.lab.fabric.netns import LabError, Node

if TYPE_CHECKING:
    from wg_mesh.lab.drills.hadrill import HaDrill

STEP = "back to one gateway (gateways: 2 -> 1)"
POLL_MARGIN_S = 1.0
READY_TIMEOUT_S = 60.0
OBSERVE_S = {"aws": 2.0, "gcp": 5.0}  # > a reconcile's 1 s (AWS); > ha_gcp.SETTLE_S + two holder reads (GCP)
SETTLE_S = 1.0
STOP_S = 0.5  # between systemd's SIGTERM to the agent (its shutdown: a few calls) and the instance gone
MOVED_TIMEOUT_S = 10.0

Publish = Callable[[MeshConfig], dict[str, Any]]  # the stores written with a config: site -> its Published


def one_gateway(cfg: MeshConfig, site: str) -> MeshConfig:
    """The config after the change: `site` with `gateways: 1` (its standby zone or subnet stays as written)."""
    changed = [s.model_copy(update={"gateways": 1}) if s.name == site else s for s in cfg.sites]
    return cfg.model_copy(update={"sites": type(cfg.sites)(changed)})


def stood_down(node: Node) -> bool:
    try:
        return metric(parse_metrics(node.path(HA_METRICS).read_text()), "wgmesh_ha_stood_down") == 1
    except (OSError, ValueError):
        return False


class DowngradeStep:
    def __init__(self, drill: HaDrill, publish: Publish, cfg: MeshConfig, poll_s: float) -> None:
        self.drill, self.publish, self.cfg, self.poll_s = drill, publish, cfg, poll_s
        self.new = ""  # the new single gateway's place

    def run(self, active: str) -> dict[str, Any]:
        d = self.drill
        site, cloud, ha = d.site, d.cloud, d.ha
        if not d.free:
            raise LabError(f"{site}: no free place for the new gateway of the step {STEP!r}")
        pair = [k for k, n in d.nodes().items() if n is not None]
        start = time.time()
        published = self.publish(one_gateway(self.cfg, site))[site]
        self.new = new = d.free.pop(0)
        cloud.place_single(site, new).start()
        ready_s, stood = self._gate(start, published.generation, pair)
        t_move, t_routes = self._move(site, cloud.ids[site])
        time.sleep(OBSERVE_S[ha.cloud])
        for place in sorted(pair, reverse=True):  # b before a: b depends on a's gate
            d.planned(place)
            time.sleep(STOP_S)
            d.kill(place)
            cloud.retire(site, place)
        if ha.cloud == "aws":
            cloud.aws(site, "delete-table", cloud.ids[site]["lease_table"])
        time.sleep(SETTLE_S)
        flowing = d.flowing(stream_too=False)
        end = time.time()
        events = [e for e in cloud.events if e.get("site") == site and "holder" in e and start <= e["t"] <= end]
        moves = count_moves(list(cloud.events), site, start, end)
        violations = violations_of(events, new, t_move, t_routes, moves)
        return {
            "step": STEP, "fault_on": "pair", "active_before": active, "active_after": new, "start": start,
            "end": end, "eip_holder_after": cloud.holder(site), "eip_moved_s": round(t_move - start, 2),
            "routes_moved_s": round(t_routes - start, 2), "expect_failover": False, "address_moves": moves[0],
            "route_moves": moves[1], "ready_s": ready_s, "stood_down_s": stood, "flowing_at_end": flowing,
            "stream_at_end": flowing and d.flowing(), "violations": violations,
        }  # fmt: skip

    def _gate(self, start: float, generation: int, pair: list[str]) -> tuple[float, dict[str, float | None]]:
        """Until the new gateway is ready and a poll has passed (or the pair stood down): (seconds to ready, each of
        the pair's seconds until it reported it stood down, None if not by then)."""
        d = self.drill
        ready_s: float | None = None
        stood: dict[str, float | None] = dict.fromkeys(pair)
        floor = start + self.poll_s + POLL_MARGIN_S
        while time.time() < start + READY_TIMEOUT_S:
            now = time.time()
            if ready_s is None and metric(agent_metrics(d.machine(self.new).node), "wgmesh_agent_applied_generation") \
                    == generation:  # fmt: skip
                ready_s = round(now - start, 2)
            for place in (p for p, t in stood.items() if t is None):
                if stood_down(d.machine(place).node):
                    stood[place] = round(now - start, 2)
            if ready_s is not None and (now >= floor or all(t is not None for t in stood.values())):
                return ready_s, stood
            time.sleep(0.1)
        raise LabError(f"{d.site}: the new single gateway in place {self.new} applied no document within "
                       f"{READY_TIMEOUT_S:.0f} s")  # fmt: skip

    def _move(self, site: str, ids: dict[str, Any]) -> tuple[float, float]:
        """What `pulumi up` does once the gate passed: the address, then the routes, to the new gateway. (When the
        model applied each: its first line with it since the call.)"""
        cloud, sent, new = self.drill.cloud, time.time(), self.new
        if self.drill.ha.cloud == "aws":
            instance = ids["instances"][new]
            cloud.aws(site, "associate-address", ids["allocation_id"], instance["instance_id"])
            for table in ids["route_table_ids"]:
                for cidr in self.drill.ha.remote_ranges:
                    cloud.aws(site, "replace-route", table, f"{cidr} {instance['interface_id']}")
        else:
            cloud.command(site, op="ready", place=new)
            cloud.gcp_gate(site, new)
            cloud.command(site, op="route", place="")  # delete_before_replace: the old routes go first
            cloud.command(site, op="route", place=new)
        t_move = self._applied(sent, lambda e: e.get("holder") == new)
        return t_move, self._applied(sent, lambda e: set((e.get("routes") or {}).values()) == {new})

    def _applied(self, since: float, seen: Callable[[dict[str, Any]], bool]) -> float:
        """When the cloud model first applied, at or after `since`, a state `seen` accepts."""
        deadline, site = time.monotonic() + MOVED_TIMEOUT_S, self.drill.site
        while time.monotonic() < deadline:
            found = [e for e in list(self.drill.cloud.events) if e.get("site") == site and e.get("t", 0) >= since
                     and "holder" in e and seen(e)]  # fmt: skip
            if found:
                return float(found[0]["t"])
            time.sleep(0.05)
        raise LabError(f"{site}: the cloud model did not apply `pulumi up`'s move within {MOVED_TIMEOUT_S:.0f} s")


def violations_of(
    events: list[dict[str, Any]], new: str, t_move: float, t_routes: float, moves: tuple[int, int]
) -> list[str]:
    """What went wrong in the step, from the cloud model's lines (see the module docstring); `new`: the new single
    gateway's place. Pure."""
    found = []
    for e in events:
        at = f"{e['t'] - t_move:+.2f} s after the move"
        if e["t"] > t_move and e.get("holder") != new:
            found.append(f"the address on {e.get('holder') or 'nothing'} {at}")
        wrong = {c: g for c, g in (e.get("routes") or {}).items() if g != new}
        if e["t"] > t_routes and wrong:
            found.append(f"routes on {sorted({g or 'nothing' for g in wrong.values()})} {at}")
    last = events[-1] if events else {}
    if last.get("holder") != new or set((last.get("routes") or {}).values()) != {new}:
        found.append(f"at the end: the address on {last.get('holder')}, routes on {last.get('routes')}")
    if moves[0] > 1 or moves[1] > 1:
        found.append(f"the address moved {moves[0]} times, a route {moves[1]} times (once is Pulumi's move)")
    return found


__all__ = ["STEP", "DowngradeStep", "one_gateway", "violations_of"]
