"""`delivery: live` with a dynamic peer (issue 24, `endpoint: dynamic`): the agent adds it without an endpoint and never
sets, resets or removes the endpoint WireGuard learnt from its packets (a document change, a `wg syncconf`, a
re-apply, a restart, a reboot, an HA re-arm, a key rotation); hostile documents about it change nothing.

On the pretend gateway (tests/agent_fake.py): its `wg syncconf` keeps a field the file does not name, as wg(8) does,
so a learnt endpoint that any command of ours touched would show in its state and in the recorded commands."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from tests.agent_fake import TRUST, FakeHost, Keys, base_plan, body_of, doc_text, next_serial, resign, signed
from tests.test_agent import Store, make
from tests.test_render import fake_public_key
from wg_mesh.gateway import document, peerset, rotation, txn
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.wgconf import InterfacePlan, Peer, parse_wg_quick_conf

OFFICE = fake_public_key("office")
LEARNT = "203.0.113.99:40001"  # where the office's packets came from: its NAT's public address and port
ROAMED = "203.0.113.150:51999"
OTHER_SEED = hashlib.sha256(b"wg-mesh dynamic tests: another signing key").digest()
Gateway = tuple[Store, FakeHost, Paths, Keys, list[str]]  # the fixture below


def office(endpoint: str | None = None, keepalive: int = 25) -> Peer:
    return Peer("office", OFFICE, ("10.200.0.77/32", "10.77.0.0/24"), endpoint, keepalive)


def plan_with(peer: Peer, base: InterfacePlan | None = None) -> InterfacePlan:
    plan = base or base_plan()
    return dataclasses.replace(plan, peers=(*(p for p in plan.peers if p.name != "office"), peer))


def endpoint_touches(host: FakeHost) -> list[list[str]]:
    """Every command that would set, reset or forget the office's endpoint: a `wg set` of it with an endpoint, its
    removal, a `wg syncconf` whose file gives it an Endpoint (stdin: checked by the peer's section)."""
    out = [argv for argv in host.mutating() if OFFICE in argv and ("endpoint" in argv or argv[-1] == "remove")]
    for argv, stdin in host.calls:
        section = (stdin or "").split(f"PublicKey = {OFFICE}", 1)[-1].split("[Peer]", 1)[0] if stdin else ""
        if argv[:2] == ["wg", "syncconf"] and OFFICE in (stdin or "") and "Endpoint" in section:
            out.append([*argv, "(its file has an Endpoint for office)"])
    return out


def endpoint_of(host: FakeHost) -> str:
    return host.peers[OFFICE][2]


def learn(host: FakeHost, where: str = LEARNT) -> None:
    """The office's first authenticated packet arrives from `where`: WireGuard sets the peer's endpoint to it."""
    allowed, keepalive, _ = host.peers[OFFICE]
    host.peers[OFFICE] = (allowed, keepalive, where)


@pytest.fixture
def gateway(tmp_path: Path) -> tuple[Store, FakeHost, Paths, Keys, list[str]]:
    """aws-use1's gateway booted (the agent's first run, then wg-quick up) with a document holding a dynamic peer,
    whose packets have since arrived from LEARNT."""
    keys, host, logs = Keys(), FakeHost(), []
    paths = Paths.under(str(tmp_path / "gw"))
    store = Store(doc_text(plan_with(office()), keys), keys.private)
    assert make(store, host, paths, logs).cycle()
    host.up_from(Path(paths.wg_conf))
    assert endpoint_of(host) == "(none)"  # wg-quick: nothing configured for it
    learn(host)
    host.calls.clear()
    return store, host, paths, keys, logs


def test_the_booted_config_has_no_endpoint_for_the_dynamic_peer(tmp_path: Path) -> None:
    keys, host = Keys(), FakeHost()
    paths = Paths.under(str(tmp_path))
    assert make(Store(doc_text(plan_with(office()), keys), keys.private), host, paths, []).cycle()
    peers = {p["PublicKey"][0]: p for name, p in parse_wg_quick_conf(Path(paths.wg_conf).read_text()) if name == "Peer"}
    assert "Endpoint" not in peers[OFFICE] and peers[OFFICE]["PersistentKeepalive"] == ["25"]
    assert all("Endpoint" in p for k, p in peers.items() if k != OFFICE)


def test_a_reapplied_document_leaves_the_learnt_endpoint_alone(
    gateway: Gateway,
) -> None:
    store, host, paths, keys, logs = gateway
    agent = make(store, host, paths, logs)
    assert agent.cycle()
    store.text = doc_text(plan_with(office()), keys)  # the same content, a newer serial: what every `pulumi up` writes
    assert agent.cycle()
    assert host.mutating() == [] and endpoint_of(host) == LEARNT


def test_before_its_first_packet_a_dynamic_peer_without_endpoint_is_no_drift(tmp_path: Path) -> None:
    keys, host = Keys(), FakeHost()
    paths = Paths.under(str(tmp_path))
    store = Store(doc_text(plan_with(office()), keys), keys.private)
    agent = make(store, host, paths, [])
    assert agent.cycle()
    host.up_from(Path(paths.wg_conf))
    host.calls.clear()
    assert agent.cycle()
    assert host.mutating() == [] and endpoint_of(host) == "(none)"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: plan_with(office(keepalive=15), p), id="its keepalive (wg syncconf)"),
        pytest.param(
            lambda p: dataclasses.replace(
                p,
                peers=(
                    *p.peers,
                    Peer("dc-ber", fake_public_key("dc-ber"), ("10.200.0.42/32",), "203.0.113.42:51820", 25),
                ),
            ),
            id="a peer added (wg set)",
        ),
        pytest.param(lambda p: dataclasses.replace(p, peers=p.peers[1:]), id="a peer removed (wg set)"),
        pytest.param(
            lambda p: dataclasses.replace(
                p,
                peers=tuple(
                    dataclasses.replace(x, allowed_ips=(*x.allowed_ips, "10.78.0.0/24")) if x.name == "office" else x
                    for x in p.peers
                ),
            ),
            id="its AllowedIPs (wg syncconf)",
        ),
        pytest.param(lambda p: dataclasses.replace(p, mtu=1380, mss=1340), id="the MTU"),
    ],
)
def test_a_document_change_never_touches_the_learnt_endpoint(gateway: Gateway, change: object) -> None:
    store, host, paths, keys, logs = gateway
    agent = make(store, host, paths, logs)
    store.text = doc_text(change(plan_with(office())), keys)  # type: ignore[operator]
    assert agent.cycle(), logs
    assert host.mutating(), "the change was applied"
    assert endpoint_touches(host) == []
    assert endpoint_of(host) == LEARNT


def test_a_restart_and_a_reboot_put_no_endpoint_back(gateway: Gateway) -> None:
    store, host, paths, _, logs = gateway
    learn(host, ROAMED)  # it roamed since: WireGuard followed it
    assert make(store, host, paths, logs).cycle()  # a restarted agent: its state from disk
    assert host.mutating() == [] and endpoint_of(host) == ROAMED
    rebooted = FakeHost()
    rebooted.up_from(Path(paths.wg_conf))  # wg-quick@wg0 at boot, from the file the agent wrote
    assert endpoint_of(rebooted) == "(none)"  # learnt again from the office's next keepalive
    assert make(store, rebooted, paths, logs).cycle()
    assert rebooted.mutating() == []


def test_an_ha_rearm_never_removes_a_dynamic_peer(gateway: Gateway) -> None:
    store, host, paths, _, logs = gateway
    agent = make(store, host, paths, logs)
    assert agent.cycle()
    host.calls.clear()
    other = next(p.public_key for p in base_plan().peers)
    agent.rearm([OFFICE, other])
    assert ["wg", "set", "wg0", "peer", other, "remove"] in host.mutating()  # a fixed peer is re-armed
    assert endpoint_touches(host) == [] and endpoint_of(host) == LEARNT


def test_a_key_rotation_swap_sets_no_endpoint_for_a_dynamic_peer() -> None:
    add, remove = rotation.swap_commands("wg0", office(), fake_public_key("office-old"), active=True)
    assert "endpoint" not in add and add[:5] == ["wg", "set", "wg0", "peer", OFFICE]
    assert remove[-1] == "remove"
    fixed, _ = rotation.swap_commands("wg0", office("198.51.100.9:51820"), fake_public_key("x"), active=True)
    assert fixed[-2:] == ["endpoint", "198.51.100.9:51820"]


def test_a_signed_turn_from_fixed_to_dynamic_and_back(tmp_path: Path) -> None:
    """The operator's own change. Fixed -> dynamic: whatever runs stays (the old address until the site's next packet
    from its new one), and wg0.conf has no Endpoint for it. Dynamic -> fixed: the agent does not override the running
    endpoint of a staying peer (as for any peer: WireGuard's roaming owns it), and wg0.conf has the fixed one for the
    next boot."""
    keys, host = Keys(), FakeHost()
    paths = Paths.under(str(tmp_path))
    fixed = "198.51.100.9:51820"
    store = Store(doc_text(plan_with(office(fixed)), keys), keys.private)
    agent = make(store, host, paths, [])
    assert agent.cycle()
    host.up_from(Path(paths.wg_conf))
    assert endpoint_of(host) == fixed
    learn(host)
    host.calls.clear()
    store.text = doc_text(plan_with(office()), keys)
    assert agent.cycle()
    assert endpoint_touches(host) == [] and endpoint_of(host) == LEARNT
    assert f"Endpoint = {fixed}" not in Path(paths.wg_conf).read_text()
    store.text = doc_text(plan_with(office(fixed)), keys)
    assert agent.cycle()
    assert endpoint_touches(host) == [] and endpoint_of(host) == LEARNT
    assert f"Endpoint = {fixed}" in Path(paths.wg_conf).read_text()


# --- hostile documents about a dynamic peer ---------------------------------------------------------------------


def office_edit(text: str, **fields: object) -> dict[str, object]:
    body = body_of(text)
    body["serial"] = next_serial()
    for peer in body["interface"]["peers"]:
        if peer["name"] == "office":
            peer.update(fields)
    return body


def without_endpoint_key(text: str) -> dict[str, object]:
    body = office_edit(text)
    for peer in body["interface"]["peers"]:  # type: ignore[union-attr]
        if peer["name"] == "office":
            del peer["endpoint"]
    return body


def hostile_cases(running: str) -> list[tuple[str, str, str]]:
    """(name, reason, text), each against the running document (office dynamic)."""
    cases = [
        (f"endpoint {value!r}", document.INVALID, resign(office_edit(running, endpoint=value)))
        for value in (
            "dynamic",
            "",
            "null",
            "198.51.100.9",
            "203.0.113.99:0",
            "office.example.com:51820",
            0,
            False,
            [],
            {},
            ["198.51.100.9:51820"],
        )
    ]
    cases += [
        ("endpoint key left out", document.INVALID, resign(without_endpoint_key(running))),
        ("a dynamic peer with a fallback_endpoint", document.INVALID,
         resign(office_edit(running, fallback_endpoint="198.51.100.9:51820"))),
        ("turned back to a fixed endpoint, signed by another key", document.SIGNATURE,
         resign(office_edit(running, endpoint="198.51.100.66:51820"), seed=OTHER_SEED)),
        ("turned back, the payload edited under the old signature", document.SIGNATURE,
         _edited_payload(running, '"endpoint":null', '"endpoint":"198.51.100.66:51820"')),
        ("a 127.0.0.1 endpoint for it", document.UNSAFE, resign(office_edit(running, endpoint="127.0.0.1:51820"))),
    ]  # fmt: skip
    return cases


def _edited_payload(text: str, old: str, new: str) -> str:
    envelope = json.loads(text)
    payload = base64.b64decode(envelope["payload"]).decode()
    assert old in payload, old
    envelope["payload"] = base64.b64encode(payload.replace(old, new, 1).encode()).decode()
    return json.dumps(envelope)


def test_hostile_documents_about_a_dynamic_peer_are_refused_and_the_host_does_not_change(
    gateway: Gateway,
) -> None:
    store, host, paths, keys, logs = gateway
    agent = make(store, host, paths, logs)
    assert agent.cycle()
    running = store.text
    older = signed(plan_with(office("198.51.100.9:51820")), keys.public, serial=1_600_000_000)  # a replayed one
    files = {p: Path(p).read_bytes() for p in (paths.wg_conf, paths.mapping, paths.state)}
    before = host.state()
    for name, reason, text in [*hostile_cases(running), ("an older document, office fixed", document.REPLAY, older)]:
        store.text = text
        counts = dict(agent.status.failures)
        assert not agent.cycle(), name
        assert agent.status.failures == counts | {reason: counts[reason] + 1}, name  # refused for its reason
        assert host.mutating() == [] and host.state() == before, name  # the host did not change
        assert {p: Path(p).read_bytes() for p in files} == files, name
        assert endpoint_of(host) == LEARNT
    store.text = doc_text(plan_with(office()), keys)
    assert agent.cycle() and host.mutating() == [] and endpoint_of(host) == LEARNT


def test_the_document_checks_refuse_each_with_its_reason(
    gateway: Gateway,
) -> None:
    store, *_ = gateway
    for name, reason, text in hostile_cases(store.text):
        with pytest.raises(document.DocumentError) as caught:
            document.decode(text, TRUST)
        assert caught.value.reason == reason, (name, str(caught.value))


def test_a_dynamic_peer_without_an_endpoint_yet_is_no_drift_and_never_stale() -> None:
    running = txn.WgState("k", "p", 51820, "off", {OFFICE: txn.WgPeer(OFFICE, office().allowed_ips, "(none)", 25)})
    plan = plan_with(office(), dataclasses.replace(base_plan(), peers=()))
    seen, dynamic = peerset.running_view(running, plan, active=True)
    assert seen[OFFICE] == (frozenset(office().allowed_ips), 25, True) and dynamic == {OFFICE}
    fixed = plan_with(office("198.51.100.9:51820"), dataclasses.replace(base_plan(), peers=()))
    assert peerset.running_view(running, fixed, active=True) == ({OFFICE: (frozenset(office().allowed_ips), 25, False)},
                                                                 frozenset())  # fmt: skip
    assert peerset.running_view(running, plan, active=False)[1] == frozenset()  # a standby strips every endpoint
