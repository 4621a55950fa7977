"""A signed document that gives a peer one of the gateway's own keys, during its own key rotation and outside it
(issue 33 item 3), on the pretend gateway through the real Agent: refused (reason `unsafe`) and the host unchanged.

On main (58f58f7) a document announcing the gateway's new key K2 (key_at ahead) and giving a peer the running key K1
passed every check: the hold found K1 "taken" and so kept nothing, the new private key was set at once (600 s early),
and wg0 accepted K1, the rotated-away key, as that peer. Only the gateway knows its running key (wg0.conf, `wg show`)
and the key it announced (a pending own switch): wg_mesh.gateway.apply.refuse_own_key_as_peer checks them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agent_fake import Keys, base_plan
from tests.test_rotation import PEER, Gateway, T, encode, gateway, rotated_peer
from wg_mesh.gateway.document import UNSAFE
from wg_mesh.gateway.rotation import OWN
from wg_mesh.gateway.wgconf import InterfacePlan


def peer_with(plan: InterfacePlan, key: str) -> InterfacePlan:
    """`plan` with PEER's public key replaced by `key` (valid now)."""
    return rotated_peer(plan, PEER, key, None)


def files_of(gw: Gateway) -> dict[str, bytes]:
    """The agent's files but its metrics (which count the refusal)."""
    keep = (gw.paths.wg_conf, gw.paths.mapping, gw.paths.applied, gw.paths.state)
    return {p: Path(p).read_bytes() for p in keep if Path(p).exists()}


def refused(gw: Gateway, text: str) -> None:
    """The cycle on `text` is refused for `unsafe`, and nothing on the host changed."""
    before, key, peers = files_of(gw), gw.host.private_key, dict(gw.host.peers)
    pending, failures = gw.applier.pending, gw.agent.status.failures[UNSAFE]
    gw.host.calls.clear()
    gw.store.text = text
    assert not gw.agent.cycle()
    assert gw.agent.status.failures[UNSAFE] == failures + 1
    assert any("own public key" in line for line in gw.logs), gw.logs[-3:]
    assert gw.host.mutating() == [] and gw.host.private_key == key and gw.host.peers == peers
    assert files_of(gw) == before and gw.applier.pending == pending


Case = Callable[[Keys, Keys], str]  # (running keys, new keys) -> the hostile document
CASES: dict[str, Case] = {
    # the attack: K2 announced for T, the rotated-away K1 given to a peer
    "a peer gets the running key while the new one is announced": lambda k1, k2: encode(
        peer_with(base_plan(), k1.public), k2.public, key_at=T
    ),
    "a peer gets the running key in an unannounced rotation": lambda k1, k2: encode(
        peer_with(base_plan(), k1.public), k2.public
    ),
    "a peer switches to the rotated-away key after our switch": lambda k1, k2: encode(
        rotated_peer(base_plan(), PEER, k1.public, T + 5), k2.public, key_at=T
    ),
    "a peer gets the running key, announced with the own key": lambda k1, k2: encode(
        rotated_peer(base_plan(), PEER, k1.public, T), k2.public, key_at=T
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_a_document_giving_a_peer_the_running_key_is_refused(name: str, tmp_path: Path) -> None:
    running, new = Keys(), Keys()
    gw = gateway(tmp_path, running)
    gw.store.key = new.private  # the store already holds the new key: nothing else would stop it
    refused(gw, CASES[name](running, new))
    gw.clock.now = T + 1  # and nothing is due: the timer has nothing to switch
    assert gw.applier.tick(T + 1) == [] and gw.host.private_key == running.private


def test_a_peer_never_gets_the_announced_key_of_a_pending_own_switch(tmp_path: Path) -> None:
    """K2 announced (prefetched, the switch pending); then a document that keeps K1 and gives a peer K2 (the store's
    private key: whoever can read the store would be that peer). The announcement still runs, on time."""
    running, new = Keys(), Keys()
    gw = gateway(tmp_path, running)
    gw.store.text, gw.store.key = encode(base_plan(), new.public, key_at=T), new.private
    assert gw.agent.cycle() and gw.applier.next_public == new.public
    assert [s.name for s in gw.applier.pending] == [OWN]
    refused(gw, encode(peer_with(base_plan(), new.public), running.public))
    gw.clock.now = T
    gw.applier.tick(T)
    assert gw.host.private_key == new.private and new.public not in gw.host.peers


def test_a_peer_never_gets_the_key_wg0_runs_whatever_wg0_conf_says(tmp_path: Path) -> None:
    """wg0 runs another key than wg0.conf's (set by hand, or a switch not yet written): that one is ours too."""
    running, other = Keys(), Keys()
    gw = gateway(tmp_path, running)
    gw.host.private_key = other.private
    refused(gw, encode(peer_with(base_plan(), other.public), running.public))


def test_the_same_documents_without_our_keys_apply(tmp_path: Path) -> None:
    """The check itself refuses our keys only: the announcement and a peer's own rotation go through."""
    running, new, peer = Keys(), Keys(), Keys()
    gw = gateway(tmp_path, running)
    gw.store.key = new.private
    gw.store.text = encode(rotated_peer(base_plan(), PEER, peer.public, T), new.public, key_at=T)
    assert gw.agent.cycle()
    assert {s.name for s in gw.applier.pending} == {OWN, PEER}
    assert dataclasses.asdict(gw.agent.status)["failures"][UNSAFE] == 0
