"""Freshness on a real host (root; issue 33 items 1 and 2): the shipped agent, run by Debian's python3 in a network
and mount namespace with wireguard-go (the harness of tests/test_agent_netns.py), whose store replays a superseded
genuine document after its state directory was damaged, and a fresh gateway offered a week-old document.

Each refusal leaves the host byte-identical (tests/test_agent_netns_hostile.host_snapshot). On 58f58f7 the damaged
floor fell back to 0 and the replay ran (the removed peer came back); agent.json pinned no floor.
"""

from __future__ import annotations

import json

import pytest

from tests.agent_fake import TRUST_JSON, Keys, base_plan, sign, without_peer
from tests.test_agent_netns import Gateway, gateway, install
from tests.test_agent_netns_hostile import booted, changes, host_snapshot
from wg_mesh.gateway import ship
from wg_mesh.gateway.document import encode_body
from wg_mesh.gateway.wgconf import InterfacePlan

pytestmark = [pytest.mark.integration]
__all__ = ["gateway"]  # the fixture, re-used

STATE = "/var/lib/wg-mesh/agent-state.json"
SERIAL = 41
# Each damage as a shell command inside the namespace's mount (the state file as the agent left it).
DAMAGE = {
    "deleted": f"rm {STATE}",
    "truncated": f"truncate -s 9 {STATE}",
    "true": f"echo true > {STATE}",
    "-5": f"echo -5 > {STATE}",
    "a directory": f"rm {STATE} && mkdir {STATE}",
    "a symlink": f"mv {STATE} {STATE}.kept && ln -s {STATE}.kept {STATE}",
}


def document(plan: InterfacePlan, keys: Keys, serial: int) -> str:
    text: str = sign(encode_body(plan, keys.public, scope=TRUST_JSON["scope"], serial=serial))
    return text


def test_a_damaged_state_refuses_a_replay_and_leaves_the_host_as_it_was(gateway: Gateway) -> None:
    """Boot with the site's document (gcp-euw3 a peer), apply the next one (gcp-euw3 removed); then, for each damage
    of the state file, the store replays the first: refused (state), the host unchanged, the alert's metric set;
    `--reset-floor` brings back the floor, and the replay is then refused as a replay."""
    gw, keys = gateway, Keys()
    with_peer, removed = base_plan(), without_peer(base_plan(), "gcp-euw3")
    booted(gw, document(with_peer, keys, SERIAL), keys.private, TRUST_JSON, masquerade=False)
    gw.write(ship.DOCUMENT_PATH, document(removed, keys, SERIAL + 1))
    assert gw.agent().returncode == 0
    state = gw.path(STATE).read_text()
    assert json.loads(state)["applied_serial"] == SERIAL + 1
    gw.write(ship.DOCUMENT_PATH, document(with_peer, keys, SERIAL))  # the replay
    for name, damage in DAMAGE.items():
        gw.run("sh", "-c", damage)
        before = host_snapshot(gw)  # the damage included: the agent must change nothing of it
        done = gw.agent("--timeout", "0")
        assert done.returncode == 1 and "refused (state)" in done.stderr, (name, done.stderr[-600:])
        assert "Traceback" not in done.stderr and keys.private not in done.stderr, name
        assert not changes(before, host_snapshot(gw)), (name, changes(before, host_snapshot(gw)))
        prom = gw.path("/var/lib/prometheus/node-exporter/wg_mesh_agent.prom").read_text()
        assert 'wgmesh_agent_state_lost{site="aws-use1"} 1' in prom, name
        gw.run("sh", "-c", f"rm -rf {STATE} {STATE}.kept")
        argv = ["--config", ship.CONFIG_PATH, "--reset-floor", str(SERIAL + 1)]  # the operator's command
        back = gw.run(f"PYTHONPATH={ship.LIB_DIR}", "/usr/bin/python3", "-m", f"{ship.PACKAGE}.agent", *argv)
        assert "replay floor reset to 42" in back.stderr, back.stderr
        done = gw.agent("--timeout", "0")
        assert done.returncode == 1 and "refused (replay)" in done.stderr, (name, done.stderr[-600:])
        gw.write(STATE, state)  # as before the damage, for the next one
    assert "gcp-euw3" not in gw.run("cat", "/etc/wg-mesh/peers.json").stdout


def test_a_fresh_gateway_refuses_a_week_old_document(gateway: Gateway) -> None:
    """agent.json pins the floor the program made it with (the serial current then); no state, no wg0.conf. The
    store offers the document superseded a week before: refused, nothing written; then the current one: applied."""
    gw, keys = gateway, Keys()
    with_peer, removed = base_plan(), without_peer(base_plan(), "gcp-euw3")
    install(gw, document(with_peer, keys, SERIAL), keys.private, TRUST_JSON | {"floor": SERIAL + 5})
    done = gw.agent("--timeout", "0")
    assert done.returncode == 1 and "refused (replay)" in done.stderr and "agent.json's" in done.stderr, done.stderr
    listing = gw.run("sh", "-c", "ls /etc/wireguard /var/lib/wg-mesh 2>/dev/null || true").stdout
    assert "wg0.conf" not in listing and "agent-state.json" not in listing, listing
    gw.write(ship.DOCUMENT_PATH, document(removed, keys, SERIAL + 5))
    done = gw.agent()
    assert done.returncode == 0, done.stderr
    assert json.loads(gw.path(STATE).read_text())["applied_serial"] == SERIAL + 5
    assert "gcp-euw3" not in gw.path("/etc/wg-mesh/peers.json").read_text()
