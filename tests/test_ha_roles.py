"""wg0 roles of an HA gateway (docs/ha.md section 3): the standby renders no Endpoint and no PersistentKeepalive,
promotion syncs the endpoints back, demotion removes the peers that still have one (wg syncconf cannot unset an
endpoint) and re-adds them without; the same role again runs no mutating command (level-triggered)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agent_fake import FakeHost, Keys, base_plan
from tests.test_agent import applied
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.wgconf import parse_wg_quick_conf, wg_quick_conf


def test_standby_conf_has_peers_without_endpoint_or_keepalive() -> None:
    plan, key = base_plan(), Keys().private
    active, standby = wg_quick_conf(plan, key), wg_quick_conf(plan, key, "standby")
    assert active == wg_quick_conf(plan, key, "active")
    peers = [body for name, body in parse_wg_quick_conf(standby) if name == "Peer"]
    assert len(peers) == len(plan.peers) > 0
    assert all(set(body) == {"PublicKey", "AllowedIPs"} for body in peers)
    assert [b for n, b in parse_wg_quick_conf(active) if n == "Interface"] == [
        b for n, b in parse_wg_quick_conf(standby) if n == "Interface"
    ]
    with pytest.raises(ValueError, match="role"):
        wg_quick_conf(plan, key, "passive")


def test_demotion_and_promotion_are_level_triggered_syncs(tmp_path: Path) -> None:
    keys, host, logs = Keys(), FakeHost(), []
    paths = Paths.under(str(tmp_path))
    _, agent = applied(keys, paths, host, logs)
    assert all(endpoint != "(none)" and keepalive for _, keepalive, endpoint in host.peers.values())

    agent.applier.role = "standby"
    assert agent.cycle()
    removals = [argv for argv in host.mutating() if argv[:2] == ["wg", "set"]]
    assert len(removals) == len(base_plan().peers)
    assert ["wg", "syncconf", "wg0", "/dev/stdin"] in host.mutating()
    assert all(endpoint == "(none)" and keepalive == 0 for _, keepalive, endpoint in host.peers.values())
    assert len(host.peers) == len(base_plan().peers)
    assert Path(paths.wg_conf).read_text() == wg_quick_conf(base_plan(), keys.private, "standby")
    host.calls.clear()
    assert agent.cycle()
    assert host.mutating() == []  # standby again: nothing to do

    agent.applier.role = "active"
    assert agent.cycle()
    assert host.mutating() == [["wg", "syncconf", "wg0", "/dev/stdin"]]
    assert all(endpoint != "(none)" and keepalive for _, keepalive, endpoint in host.peers.values())
    host.calls.clear()
    assert agent.cycle()
    assert host.mutating() == []


def test_rearm_removes_and_re_adds_only_the_named_peers_of_the_active(tmp_path: Path) -> None:
    """The kick's re-arm (wg_mesh.gateway.ha_kick): the named peers removed, then the ordinary sync re-adds them with
    their endpoint (a new wireguard-go peer initiates on its next packet); the others are untouched."""
    keys, host, logs = Keys(), FakeHost(), []
    paths = Paths.under(str(tmp_path))
    _, agent = applied(keys, paths, host, logs)
    before = dict(host.peers)
    first = sorted(before)[0]
    agent.rearm([first])
    assert host.mutating() == [
        ["wg", "set", "wg0", "peer", first, "remove"],
        ["wg", "syncconf", "wg0", "/dev/stdin"],
    ]
    assert host.peers == before and agent.applier.rearm == frozenset()
    assert any("active: 1 peers re-armed" in line for line in logs)
    host.calls.clear()
    assert agent.cycle()
    assert host.mutating() == []  # nothing left over: the next cycle is level again

    agent.set_role("standby")
    host.calls.clear()
    agent.rearm([first])  # a standby's peers have no endpoint to initiate to: nothing
    assert host.mutating() == []
