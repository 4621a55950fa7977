"""Announced key rotation (wg_mesh/gateway/rotation.py, issue 20 item 5): documents' key_at, the hold of a running key
until it, the switch at it (own key, peer key), the re-arm of swapped peers without a handshake; with a fake clock and
the pretend gateway (tests/agent_fake.py), through the real Agent."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.agent_fake import SCOPE, SITE, TRUST, FakeHost, Keys, base_plan, next_serial, sign
from tests.test_agent import Store
from wg_mesh.gateway import document, rotation
from wg_mesh.gateway.agent import Agent, Config
from wg_mesh.gateway.apply import KEY_REASON, ApplyError, Paths, Result
from wg_mesh.gateway.document import INVALID, PARSE, Document, DocumentError, encode_body
from wg_mesh.gateway.pmtu_heal import overlay_address
from wg_mesh.gateway.rotation import OWN, RotatingApplier, Switch, hold, running_peers
from wg_mesh.gateway.wgconf import InterfacePlan, wg_quick_conf


def encode(plan: InterfacePlan, public_key: str, key_at: int | None = None) -> str:
    """The signed document the program stores (the next serial): tests/agent_fake's key, TRUST's scope."""
    return sign(encode_body(plan, public_key, scope=SCOPE, serial=next_serial(), key_at=key_at))


def decode(text: str, site: str) -> Document:
    assert site == TRUST.site
    return document.decode(text, TRUST)


T = 2_000_000_000  # the announced key_at
PEER = "gcp-euw3"


@dataclass
class RotHost(FakeHost):
    """FakeHost plus `wg set wg0 private-key /dev/stdin`, `wg set wg0 peer K allowed-ips ...` (WireGuard moves the
    AllowedIPs to the new peer) and each peer's latest handshake in the dump."""

    handshakes: dict[str, int] = field(default_factory=dict)

    def __call__(self, argv: Sequence[str], stdin: str | None) -> Result:
        argv = list(argv)
        if argv == ["wg", "set", "wg0", "private-key", "/dev/stdin"]:
            self.calls.append((argv, stdin))
            assert stdin is not None
            self.private_key = stdin.strip()
            return Result(0, "", "")
        if argv[:4] == ["wg", "set", "wg0", "peer"] and argv[5:6] == ["allowed-ips"]:
            self.calls.append((argv, stdin))
            allowed = argv[6].split(",")
            for key, (ips, keepalive, endpoint) in list(self.peers.items()):
                self.peers[key] = ([a for a in ips if a not in allowed], keepalive, endpoint)
            options = dict(zip(argv[7::2], argv[8::2], strict=True))
            keepalive = int(options.get("persistent-keepalive", 0))
            self.peers[argv[4]] = (allowed, keepalive, options.get("endpoint", "(none)"))
            return Result(0, "", "")
        return super().__call__(argv, stdin)

    def dump(self) -> str:
        lines = super().dump().splitlines()
        out = [lines[0]]
        for line in lines[1:]:
            fields = line.split("\t")
            fields[4] = str(self.handshakes.get(fields[0], 0))
            out.append("\t".join(fields))
        return "\n".join(out) + "\n"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def rotated_peer(plan: InterfacePlan, name: str, key: str, key_at: int | None) -> InterfacePlan:
    peers = tuple(dataclasses.replace(p, public_key=key, key_at=key_at) if p.name == name else p for p in plan.peers)
    return dataclasses.replace(plan, peers=peers)


@dataclass
class Gateway:
    host: RotHost
    store: Store
    agent: Agent
    clock: Clock
    logs: list[str]
    paths: Paths
    pinged: list[list[str]]  # each switch's pings (RotatingApplier.initiate), in order

    @property
    def applier(self) -> RotatingApplier:
        assert isinstance(self.agent.applier, RotatingApplier)
        return self.agent.applier

    def conf(self) -> str:
        return Path(self.paths.wg_conf).read_text()

    def peer_key(self, name: str) -> str:
        return running_peers(self.conf())[name]


def gateway(tmp_path: Path, keys: Keys, now: float = T - 60, up: bool = True) -> Gateway:
    """A gateway running the base document (the agent's first run, then wg-quick up), its clock at `now`."""
    host, logs, clock = RotHost(), [], Clock(now)
    store = Store(encode(base_plan(), keys.public), keys.private)
    paths = Paths.under(str(tmp_path))
    agent = Agent(
        Config(site=SITE, source={"kind": "test"}, trust=TRUST, pmtu_seconds=0), store, host, paths, logs.append, clock
    )
    assert isinstance(agent.applier, RotatingApplier)
    agent.applier.timer, agent.applier.sleep = False, clock.sleep  # the test drives tick() with its clock
    gw = Gateway(host, store, agent, clock, logs, paths, [])
    agent.applier.initiate = gw.pinged.append
    if up:
        assert agent.cycle()
        host.up_from(Path(paths.wg_conf))
        host.calls.clear()
    return gw


# --- the document's key_at --------------------------------------------------------------------------------------


def test_key_at_round_trips_and_a_document_without_it_keeps_its_bytes() -> None:
    keys, plan = Keys(), base_plan()
    assert "key_at" not in encode(plan, keys.public)
    new = Keys().public
    text = encode(rotated_peer(plan, PEER, new, T), keys.public, key_at=T + 5)
    doc = decode(text, SITE)
    assert doc.key_at == T + 5
    assert {p.name: p.key_at for p in doc.plan.peers}[PEER] == T
    assert all(p.key_at is None for p in doc.plan.peers if p.name != PEER)


# A far future (2**41) is a valid moment to the decoder: rotation.py ignores one more than 25 hours ahead (its test).
@pytest.mark.parametrize(
    ("value", "reason"), [("1", INVALID), (-1, INVALID), (True, INVALID), (1.5, PARSE), ([1], INVALID)]
)
def test_a_bad_key_at_is_refused(value: object, reason: str) -> None:
    keys = Keys()
    for text in (
        encode(base_plan(), keys.public, key_at=value),  # type: ignore[arg-type]
        encode(rotated_peer(base_plan(), PEER, Keys().public, value), keys.public),  # type: ignore[arg-type]
    ):
        with pytest.raises(DocumentError) as caught:
            decode(text, SITE)
        assert caught.value.reason == reason and (reason == PARSE or "key_at" in str(caught.value))


# --- the pure decisions ---------------------------------------------------------------------------------------------


def test_running_peers_reads_the_names_wg0_conf_carries() -> None:
    keys, plan = Keys(), base_plan()
    conf = wg_quick_conf(plan, keys.private)
    assert running_peers(conf) == {p.name: p.public_key for p in plan.peers}
    assert running_peers(None) == {} and running_peers("[Peer]\nPublicKey = x\n") == {}


def test_hold_keeps_a_running_key_until_key_at_then_lets_the_new_one_in() -> None:
    """A peer's key PEER_SWITCH_LAG_S after its key_at: the rotating site switches its own first (issue 32 item 10)."""
    keys, plan, new = Keys(), base_plan(), Keys().public
    running = {p.name: p.public_key for p in plan.peers}
    doc = decode(encode(rotated_peer(plan, PEER, new, T), keys.public), SITE)
    lag = rotation.PEER_SWITCH_LAG_S
    before = hold(doc, keys.public, running, T + lag - 0.001)
    assert {p.name: p.public_key for p in before.doc.plan.peers} == running
    assert before.switches == (Switch(T, PEER, running[PEER], new),) and before.switches[0].due == T + lag
    after = hold(doc, keys.public, running, T + lag)
    assert after.doc == doc and after.switches == ()
    # a key_at further ahead than MAX_HOLD_S is not honoured: no document keeps a revoked key running for long
    assert hold(doc, keys.public, running, T - rotation.MAX_HOLD_S - 1).doc == doc
    assert hold(doc, keys.public, running, T - rotation.MAX_HOLD_S).switches == before.switches
    # a fresh agent (nothing runs) and a peer that runs no key for that name take the new key at once
    assert hold(doc, None, {}, T - 60).doc == doc
    assert hold(doc, keys.public, {n: k for n, k in running.items() if n != PEER}, T - 60).doc == doc


def test_hold_keeps_the_own_running_key_and_never_a_key_the_document_gives_another() -> None:
    keys, plan, new = Keys(), base_plan(), Keys()
    doc = decode(encode(plan, new.public, key_at=T), SITE)
    held = hold(doc, keys.public, {}, T - 1)
    assert held.doc.public_key == keys.public and held.switches == (Switch(T, OWN, keys.public, new.public),)
    # the running key of a name is another peer's key in this document: not kept (no key twice on wg0)
    other = plan.peers[1].public_key
    doc2 = decode(encode(rotated_peer(plan, PEER, new.public, T), keys.public), SITE)
    assert hold(doc2, keys.public, {PEER: other}, T - 1).switches == ()
    assert hold(doc, other, {}, T - 1).switches == ()


# --- the agent: a peer's key -----------------------------------------------------------------------------------------


def test_a_peer_key_switches_at_key_at_new_peer_first_then_the_old_one_removed(tmp_path: Path) -> None:
    keys, new = Keys(), Keys().public
    gw = gateway(tmp_path, keys)
    old = gw.peer_key(PEER)
    gw.store.text = encode(rotated_peer(base_plan(), PEER, new, T), keys.public)
    assert gw.agent.cycle()
    assert gw.host.mutating() == [] and gw.peer_key(PEER) == old and old in gw.host.peers  # held
    assert gw.applier.pending == (Switch(T, PEER, old, new),)
    gw.clock.now = T + rotation.PEER_SWITCH_LAG_S - 0.01  # the rotating site switches first, at T
    assert gw.applier.tick(gw.clock.now) == [] and gw.host.mutating() == []
    gw.clock.now = T + rotation.PEER_SWITCH_LAG_S + 0.001
    allowed = gw.host.peers[old][0]
    changes = gw.applier.tick(gw.clock.now)
    assert f"key switch {PEER}" in changes
    add, remove = gw.host.mutating()[:2]
    assert add[:7] == ["wg", "set", "wg0", "peer", new, "allowed-ips", ",".join(allowed)]
    assert remove == ["wg", "set", "wg0", "peer", old, "remove"]
    assert new in gw.host.peers and old not in gw.host.peers and gw.host.peers[new][0] == allowed
    assert gw.peer_key(PEER) == new and gw.applier.pending == ()  # wg0.conf follows
    assert any(f"key switch {PEER} at {T}: done at" in line for line in gw.logs)
    # one ping to that peer's overlay address, right after: this side initiates at once even when it has nothing to
    # send (issue 32 item 10: a flow in one direction, the other side switched first, its initiation dropped)
    assert gw.pinged == [[overlay_address(base_plan(), PEER)]]
    gw.host.calls.clear()
    assert gw.agent.cycle() and gw.host.mutating() == []  # the next cycle: nothing left to do


def test_a_fresh_agent_uses_the_announced_key_at_once(tmp_path: Path) -> None:
    keys, new = Keys(), Keys().public
    gw = gateway(tmp_path, keys, up=False)
    gw.store.text = encode(rotated_peer(base_plan(), PEER, new, T), keys.public)
    assert gw.agent.cycle()
    assert gw.peer_key(PEER) == new and gw.applier.pending == ()


def test_an_apply_just_before_the_switch_performs_it_on_time(tmp_path: Path) -> None:
    keys, new = Keys(), Keys().public
    gw = gateway(tmp_path, keys)
    gw.store.text = encode(rotated_peer(base_plan(), PEER, new, T), keys.public)
    assert gw.agent.cycle()
    due = T + rotation.PEER_SWITCH_LAG_S
    gw.clock.now = due - rotation.APPLY_GUARD_S / 2  # a document cycle starts under the lock half a second before
    assert gw.agent.cycle()
    assert gw.clock.now == due and new in gw.host.peers and gw.peer_key(PEER) == new


# --- the agent: its own key ------------------------------------------------------------------------------------------


def test_the_own_key_is_prefetched_and_set_at_key_at_through_stdin_only(tmp_path: Path) -> None:
    keys, new = Keys(), Keys()
    gw = gateway(tmp_path, keys)
    gw.store.text, gw.store.key = encode(base_plan(), new.public, key_at=T), new.private
    gw.store.key_fetches = 0
    assert gw.agent.cycle()
    assert gw.host.private_key == keys.private and keys.private in gw.conf()  # the running key stays
    assert gw.host.mutating() == [] and gw.store.key_fetches == 1 and gw.applier.next_private == new.private
    assert gw.agent.cycle() and gw.store.key_fetches == 1  # prefetched once
    gw.clock.now = T
    gw.applier.tick(T)
    set_key = [(argv, stdin) for argv, stdin in gw.host.calls if argv[:4] == ["wg", "set", "wg0", "private-key"]]
    assert set_key == [(["wg", "set", "wg0", "private-key", "/dev/stdin"], new.private + "\n")]
    assert gw.host.private_key == new.private and new.private in gw.conf() and keys.private not in gw.conf()
    assert gw.store.key_fetches == 1 and gw.applier.next_private is None
    assert gw.pinged == [[overlay_address(base_plan(), p.name) for p in base_plan().peers]]  # every session expired
    assert not any(k in " ".join(argv) for argv in gw.host.commands for k in (keys.private, new.private))
    assert not any(k in line for line in gw.logs for k in (keys.private, new.private))


def test_a_store_behind_the_announcement_keeps_the_old_key_and_says_so(tmp_path: Path) -> None:
    keys, new = Keys(), Keys()
    gw = gateway(tmp_path, keys)
    gw.store.text = encode(base_plan(), new.public, key_at=T)  # the store still holds the old key
    assert gw.agent.cycle() and gw.host.private_key == keys.private and gw.applier.next_private is None
    assert any("does not match the announced public key yet" in line for line in gw.logs)
    gw.clock.now = T
    with pytest.raises(ApplyError) as caught:
        gw.applier.tick(T)
    assert caught.value.reason == KEY_REASON and gw.host.private_key == keys.private
    assert gw.applier.pending == () and gw.applier.next_due() is None  # dropped: no retry loop in the timer
    gw.host.calls.clear()
    assert not gw.agent.cycle() and gw.host.mutating() == []  # the cycle refuses it (reason key): nothing changes


# --- the re-arm after the switch -----------------------------------------------------------------------------------


def test_swapped_peers_without_a_handshake_since_the_switch_are_re_armed(tmp_path: Path) -> None:
    keys, new = Keys(), Keys()
    gw = gateway(tmp_path, keys)
    gw.store.text, gw.store.key = encode(base_plan(), new.public, key_at=T), new.private
    assert gw.agent.cycle()
    gw.clock.now = T
    gw.applier.tick(T)
    gw.host.calls.clear()
    peers = [p.public_key for p in base_plan().peers]
    gw.host.handshakes = {peers[0]: T, **{k: T - 3 for k in peers[1:]}}  # one handshook since, the others not
    assert gw.applier.tick(T + rotation.SWITCH_KICK_S - 0.01) == []
    gw.clock.now = T + rotation.SWITCH_KICK_S
    gw.applier.tick(gw.clock.now)
    removed = sorted(argv[4] for argv in gw.host.mutating() if argv[-1] == "remove")
    assert removed == sorted(peers[1:]) and set(peers) <= set(gw.host.peers)  # removed, then re-added by the sync
    gw.host.handshakes = dict.fromkeys(peers, T + 1)
    gw.host.calls.clear()
    gw.clock.now += rotation.SWITCH_KICK_S
    gw.applier.tick(gw.clock.now)
    assert gw.host.mutating() == [] and gw.applier.kicks == []  # every peer handshook: the kick is over


def test_the_kick_ends_after_rekey_timeout(tmp_path: Path) -> None:
    keys, new = Keys(), Keys().public
    gw = gateway(tmp_path, keys)
    gw.store.text = encode(rotated_peer(base_plan(), PEER, new, T), keys.public)
    assert gw.agent.cycle()
    gw.clock.now = T + rotation.PEER_SWITCH_LAG_S
    gw.applier.tick(gw.clock.now)
    rearmed = 0
    while gw.applier.kicks:
        gw.clock.now = gw.applier.kicks[0][0]
        gw.host.calls.clear()
        gw.applier.tick(gw.clock.now)
        rearmed += [argv[-1] for argv in gw.host.mutating()].count("remove")
    assert rearmed == int(rotation.SWITCH_KICK_FOR_S / rotation.SWITCH_KICK_S) and gw.clock.now <= T + 5.0
