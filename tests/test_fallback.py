"""The private path's fallback to the internet (wg_mesh.gateway.fallback, docs/underlay.md section 7): the verdicts,
the commands, and the agent's path thread switching a peer's endpoint against a model of the two paths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tests.test_underlay import KEY, directory, prod_raw
from wg_mesh.gateway import fallback
from wg_mesh.gateway.fallback import PRIVATE, PUBLIC, Route
from wg_mesh.gateway.pmtu import PathWatch
from wg_mesh.gateway.wgconf import InterfacePlan
from wg_mesh.plan import topology
from wg_mesh.plan.validate import load_mesh

ROUTE = Route("gcp-euw3", KEY, "10.100.0.10:51820", "203.0.113.2:51820")


def plan() -> InterfacePlan:
    cfg = load_mesh(prod_raw())
    return topology.interface_plan(cfg, "aws-use1", directory(cfg))


def test_only_path_peers_get_a_route_and_keep_their_state_while_their_endpoints_stay() -> None:
    p = plan()
    routes = fallback.routes(p)
    assert list(routes) == ["gcp-euw3"]
    assert (routes["gcp-euw3"].private, routes["gcp-euw3"].public) == ("10.100.0.10:51820", "203.0.113.2:51820")
    on_public = {"gcp-euw3": replace(routes["gcp-euw3"], on=PUBLIC, switches=1)}
    assert fallback.routes(p, on_public) == on_public
    moved = replace(p, peers=tuple(replace(x, fallback_endpoint="203.0.113.99:51820") for x in p.peers))
    assert fallback.routes(moved, on_public)["gcp-euw3"].on == PRIVATE  # another public address: starts over


def test_three_ticks_with_both_probes_failing_move_to_public_and_three_private_passes_move_back() -> None:
    r = ROUTE
    for _ in range(2):
        r = fallback.step(r, tunnel_ok=False, private_ok=False, fail_after=3, pass_after=3)
        assert r.on == PRIVATE
    assert fallback.step(r, True, False, 3, 3).count == 0  # the tunnel still works: nothing moves
    assert fallback.step(r, None, False, 3, 3) == r  # not probed: nothing counts
    r = fallback.step(r, False, False, 3, 3)
    assert (r.on, r.count, r.switches) == (PUBLIC, 0, 1)
    assert fallback.commands(ROUTE, r, {}) == [["wg", "set", "wg0", "peer", KEY, "endpoint", "203.0.113.2:51820"]]
    r = fallback.step(fallback.step(r, True, True, 3, 3), True, False, 3, 3)
    assert (r.on, r.count) == (PUBLIC, 0)  # a private pass must repeat pass_after times in a row
    for _ in range(3):
        before, r = r, fallback.step(r, True, True, 3, 3)
    assert r.on == PRIVATE and fallback.commands(before, r, {}) == [
        ["wg", "set", "wg0", "peer", KEY, "endpoint", "10.100.0.10:51820"]
    ]


def test_a_public_choice_undone_by_a_sync_is_set_again_and_a_roamed_peer_is_left_alone() -> None:
    public = replace(ROUTE, on=PUBLIC)
    assert fallback.commands(public, public, {KEY: "10.100.0.10:51820"}) == [
        ["wg", "set", "wg0", "peer", KEY, "endpoint", "203.0.113.2:51820"]
    ]
    assert fallback.commands(public, public, {KEY: "203.0.113.2:51820"}) == []
    # on the private path, WireGuard following the peer to another source (it fell back first) is not undone
    assert fallback.commands(ROUTE, ROUTE, {KEY: "203.0.113.2:51820"}) == []


def test_endpoints_and_metrics_text() -> None:
    text = f"{KEY}\t10.100.0.10:51820\n{'B' * 43}=\t(none)\n"
    assert fallback.parse_endpoints(text) == {KEY: "10.100.0.10:51820"}
    lines = fallback.metric_lines({"site": "aws-use1"}, {"gcp-euw3": replace(ROUTE, on=PUBLIC, switches=2)})
    assert 'wgmesh_underlay_path{site="aws-use1",peer_site="gcp-euw3",path="private"} 0' in lines
    assert 'wgmesh_underlay_path{site="aws-use1",peer_site="gcp-euw3",path="public"} 1' in lines
    assert 'wgmesh_underlay_fallbacks_total{site="aws-use1",peer_site="gcp-euw3"} 2' in lines
    assert fallback.metric_lines({"site": "vps-fra"}, {}) == []


class Paths:
    """The gateway's view of the world: the private path up or down, the internet always up; `wg set` recorded."""

    def __init__(self, gateway_plan: InterfacePlan) -> None:
        self.path_up = True
        self.endpoint = "10.100.0.10:51820"  # of gcp-euw3, as wg0 has it
        self.sets: list[str] = []
        self.overlay = {f"{a.split('/')[0]}": p for p in gateway_plan.peers for a in p.allowed_ips if a.endswith("/32")}

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        if argv[0] == "ping":
            target = argv[-1]
            if target == "10.100.0.10":  # the direct probe over the path
                return (0 if self.path_up else 1), ""
            peer = self.overlay.get(target)
            through_path = peer is not None and peer.name == "gcp-euw3" and self.endpoint.startswith("10.100.")
            return (1 if through_path and not self.path_up else 0), ""
        if argv[:4] == ["wg", "show", "wg0", "endpoints"]:
            return 0, f"{KEY}\t{self.endpoint}\n"
        if argv[:2] == ["wg", "set"]:
            self.endpoint = argv[-1]
            self.sets.append(argv[-1])
            return 0, ""
        if argv[:3] == ["ip", "-4", "-o"]:  # the heal's route listing: the VPS's route at its own MTU, as wg0.conf says
            return 0, "10.100.0.0/16 scope link\n192.168.50.0/24 scope link mtu 1440\n"
        raise AssertionError(argv)


def test_the_agent_s_path_thread_falls_back_and_returns_with_metrics_and_logs() -> None:
    p = plan()
    p = replace(p, peers=tuple(replace(x, public_key=KEY) if x.name == "gcp-euw3" else x for x in p.peers))
    world, logs, texts = Paths(p), [], []
    watch = PathWatch(lambda: p, texts.append, logs.append, 15, runner=world)
    for t in range(2):
        watch.tick(float(t))
    assert world.sets == [] and 'path="private"} 1' in texts[-1]
    world.path_up = False
    for t in range(3):
        watch.tick(10.0 + t)
    assert world.sets == ["203.0.113.2:51820"]
    assert any("gcp-euw3 unreachable over the private path (10.100.0.10) for 3 probes" in line for line in logs)
    assert 'wgmesh_underlay_path{site="aws-use1",peer_site="gcp-euw3",path="public"} 1' in texts[-1]
    assert 'wgmesh_underlay_fallbacks_total{site="aws-use1",peer_site="gcp-euw3"} 1' in texts[-1]
    # a new document's `wg syncconf` wrote the private endpoint back while the path is still down: set again
    world.endpoint = "10.100.0.10:51820"
    watch.tick(20.0)
    assert world.sets == ["203.0.113.2:51820", "203.0.113.2:51820"]
    world.path_up = True
    for t in range(3):
        watch.tick(30.0 + t)
    assert world.sets[-1] == "10.100.0.10:51820" and world.endpoint == "10.100.0.10:51820"
    assert any("private path to gcp-euw3 back: endpoint 10.100.0.10:51820" in line for line in logs)
