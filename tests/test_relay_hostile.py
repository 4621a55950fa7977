"""Hostile documents against relays (issue 24 item 2; docs/security.md section 3): a relay widens what one peer entry
may carry (another site's ranges behind the relay's key), so a relayed site's agent.json pins its relay and partners
(wg_mesh.gateway.relaytrust) and no signed document can put other ranges behind a key through it. Each document is
signed with the mesh's key (a stolen signing key, the strongest attacker short of the host): `decode` refuses it as
`unsafe`, and the pretend gateway (tests/agent_fake.py) running the office's good document changes nothing."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from pathlib import Path

import pytest

from tests.agent_fake import SEED, TRUST, FakeHost, Keys, resign
from tests.test_agent import Store
from tests.test_relay import EDGE, HOME
from tests.test_render import directory
from wg_mesh.config import parse_mesh
from wg_mesh.gateway import document, relaytrust, trust
from wg_mesh.gateway.agent import Agent, Config
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.document import DocumentError
from wg_mesh.gateway.trust import Trust, parse_trust
from wg_mesh.gateway.wgconf import InterfacePlan, Peer
from wg_mesh.plan import live, signing
from wg_mesh.plan.topology import interface_plan
from wg_mesh.tools.stackfile import read_raw

SCOPE, KEYS = "wg-mesh/edge", Keys()
CFG = parse_mesh({**copy.deepcopy(read_raw(EDGE)), "delivery": "live"})


def trust_of(site: str, **changes: object) -> Trust:
    raw = live.trust(CFG, CFG.site(site), "wg-mesh", "edge", TRUST.signing_key)
    return parse_trust({**raw, **changes})


def plan_of(site: str) -> InterfacePlan:
    return interface_plan(CFG, site, directory(CFG))


NOT_AFTER = 4_000_000_000  # 2096: the relay's agent.json (a cloud gateway's) requires an expiry


def signed(plan: InterfacePlan, serial: int) -> str:
    body = document.encode_body(plan, KEYS.public, scope=SCOPE, serial=serial, not_after=NOT_AFTER)
    return signing.sign(body, SEED)


def entry(plan: InterfacePlan, name: str, allowed: tuple[str, ...]) -> InterfacePlan:
    peers = tuple(dataclasses.replace(p, allowed_ips=allowed) if p.name == name else p for p in plan.peers)
    return dataclasses.replace(plan, peers=peers)


OFFICE = plan_of("office")
AWS = next(p for p in OFFICE.peers if p.name == "aws-use1").allowed_ips
GCP = next(p for p in OFFICE.peers if p.name == "gcp-euw3").allowed_ips
HOME_KEY = next(p for p in plan_of("aws-use1").peers if p.name == "home").public_key

HOSTILE = {
    # a range that is no partner's, carried behind the relay's key
    "a relayed range not belonging to the partner": (
        entry(OFFICE, "aws-use1", (*AWS, "10.99.0.0/16")),
        "peer aws-use1: 10.99.0.0/16 is neither the relay's nor a relayed partner's range",
    ),
    "a partner's range widened": (
        entry(OFFICE, "aws-use1", (*AWS[:2], "10.200.0.4/32", "192.168.0.0/16")),
        "peer aws-use1: 192.168.0.0/16 is neither the relay's nor a relayed partner's range",
    ),
    "a third overlay address behind the relay": (
        entry(OFFICE, "aws-use1", (*AWS, "10.200.0.9/32")),
        "peer aws-use1: 10.200.0.9/32 is neither the relay's nor a relayed partner's range",
    ),
    # the partner's ranges behind another key: a relay agent.json does not name
    "another site claims to relay the partner": (
        entry(entry(OFFICE, "aws-use1", AWS[:2]), "gcp-euw3", (*GCP, *HOME)),
        "peer gcp-euw3: 10.200.0.4/32 overlaps 10.200.0.4/32, a relayed partner's range (agent.json): only the relay "
        "aws-use1 carries it",
    ),
    "the partner as a direct peer": (
        dataclasses.replace(
            entry(OFFICE, "aws-use1", AWS[:2]),
            peers=(*entry(OFFICE, "aws-use1", AWS[:2]).peers, Peer("home", HOME_KEY, HOME, None, 25)),
        ),
        "peer home is reached through the relay aws-use1 (agent.json): never a direct peer",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_decode_refuses_what_the_pinned_relay_does_not_allow(name: str) -> None:
    plan, reason = HOSTILE[name]
    with pytest.raises(DocumentError) as caught:
        document.decode(signed(plan, 1_700_000_200), trust_of("office"), now=1_700_000_300)
    assert caught.value.reason == document.UNSAFE and reason in str(caught.value), str(caught.value)


def test_a_relay_agent_json_does_not_know_is_refused() -> None:
    """Without `trust.relay` (an agent.json from before the relay, or a site that is not relayed) the relayed entry
    carries two overlay addresses: one peer, one overlay /32, as ever."""
    with pytest.raises(DocumentError) as caught:
        document.decode(signed(OFFICE, 1_700_000_200), trust_of("office", relay=None), now=1_700_000_300)
    assert "peer aws-use1 has 2 addresses in the overlay (only its own /32)" in str(caught.value)
    assert document.decode(signed(OFFICE, 1_700_000_200), trust_of("office"), now=1_700_000_300).plan == OFFICE


RELAY = plan_of("aws-use1")
RANGES = list(RELAY.relay_ranges)


def relay_document(ranges: object, serial: int) -> str:
    """The relay's good document with `ranges` as its relay_ranges (any JSON value), signed with the mesh's key."""
    body = json.loads(document.encode_body(RELAY, KEYS.public, scope=SCOPE, serial=serial, not_after=NOT_AFTER))
    body["interface"]["relay_ranges"] = ranges
    return resign(body)


HOSTILE_RANGES = {
    "too many": (
        [f"10.{k // 256}.{k % 256}.0/24" for k in range(document.MAX_RELAY_RANGES + 1)],
        f"interface.relay_ranges: a list of {document.MAX_RELAY_RANGES + 1} items",
    ),
    "a range twice": ([*RANGES, RANGES[1]], "interface.relay_ranges: a range appears twice"),
    "a range behind no peer": (
        [*RANGES, "172.16.0.0/24"],
        "interface.relay_ranges: 172.16.0.0/24 is not inside a peer's AllowedIPs of this document",
    ),
    "a range wider than its peer's": (
        [*RANGES[:3], "192.168.0.0/16"],
        "interface.relay_ranges: 192.168.0.0/16 is not inside a peer's AllowedIPs of this document",
    ),
    "the relay's own cidr": (
        [*RANGES, "10.10.0.0/16"],
        "interface.relay_ranges: 10.10.0.0/16 overlaps this relay's own 10.10.0.0/16",
    ),
    "inside the relay's own cidr": (
        [*RANGES, "10.10.5.0/24"],
        "interface.relay_ranges: 10.10.5.0/24 overlaps this relay's own 10.10.0.0/16",
    ),
    "the relay's own overlay address": (
        ["10.200.0.1/32", *RANGES],
        "interface.relay_ranges: 10.200.0.1/32 overlaps this relay's own 10.200.0.1/32",
    ),
    "the whole overlay": (["10.200.0.0/24"], "interface.relay_ranges: 10.200.0.0/24 overlaps this relay's own"),
    "everything": (["0.0.0.0/0"], "interface.relay_ranges: 0.0.0.0/0 overlaps this relay's own"),
    "not a list": ("192.168.50.0/24", "interface.relay_ranges: not a list of at most"),
    "a pair, the old form": ([["192.168.50.0/24", "192.168.60.0/24"]], "interface.relay_ranges[0]"),
    "host bits set": (["192.168.50.1/24"], "interface.relay_ranges[0]"),
    "no prefix length": (["192.168.50.0"], "interface.relay_ranges[0]"),
    "a number": ([3232248320], "interface.relay_ranges[0]: 3232248320 is not a string"),
    "an IPv6 prefix": (["2001:db8::/32"], "interface.relay_ranges[0]"),
    "a rule smuggled in": (["192.168.50.0/24 -j ACCEPT"], "interface.relay_ranges[0]"),
    "a chain name": (["WGMESH-RELAY"], "interface.relay_ranges[0]"),
    "a newline": (["192.168.50.0/24\nCOMMIT"], "a control or non-ASCII character"),
}


@pytest.mark.parametrize("name", list(HOSTILE_RANGES))
def test_a_relays_ranges_are_its_own_peers_and_bounded(name: str) -> None:
    ranges, reason = HOSTILE_RANGES[name]
    with pytest.raises(DocumentError) as caught:
        document.decode(relay_document(ranges, 1_700_000_200), trust_of("aws-use1"), now=1_700_000_300)
    assert reason in str(caught.value), str(caught.value)
    good = document.decode(relay_document(RANGES, 1_700_000_200), trust_of("aws-use1"), now=1_700_000_300)
    assert good.plan.relay_ranges == RELAY.relay_ranges == ("10.200.0.3/32", "192.168.50.0/24", *HOME)


def running_agent(tmp_path: Path, site: str, text: str) -> tuple[Agent, FakeHost, Store, Paths]:
    """`site`'s agent that applied the signed document `text` and whose wg0 is up (wg-quick, as after a boot)."""
    host, paths = FakeHost(), Paths.under(str(tmp_path))
    store = Store(text, KEYS.private)
    config = Config(site=site, source={"kind": "test"}, trust=trust_of(site), pmtu_seconds=0)
    agent = Agent(config, store, host, paths, lambda line: None, clock=lambda: 1000.0)
    assert agent.cycle()
    host.up_from(Path(paths.wg_conf))
    assert agent.cycle()
    return agent, host, store, paths


def test_the_relay_gateway_refuses_each_and_nothing_changes(tmp_path: Path) -> None:
    """The relay's agent running its good document (its chains in place) is sent each hostile one: no command that
    changes the host, its files and the chains as they were."""
    agent, host, store, paths = running_agent(tmp_path, "aws-use1", relay_document(RANGES, 1_700_000_100))
    before, state = host.mutating(), host.state()
    files = {p: Path(p).read_bytes() for p in (paths.wg_conf, paths.mapping, paths.state)}
    assert state["own"] == [("filter", "WGMESH-RELAY"), ("filter", "WGMESH-RELAY-TO")]
    for serial, (name, (ranges, _)) in enumerate(HOSTILE_RANGES.items(), start=1_700_000_200):
        store.text = relay_document(ranges, serial)
        assert not agent.cycle(), name
        assert host.mutating() == before, name
        assert {p: Path(p).read_bytes() for p in files} == files, name
        assert host.state() == state, name
    assert json.loads(files[paths.state])["applied_serial"] == 1_700_000_100


def test_a_single_host_relays_nothing() -> None:
    plan = plan_of("aws-use1")
    with pytest.raises(DocumentError, match="forwards nothing"):
        document.decode(signed(plan, 1_700_000_200), trust_of("aws-use1", cidrs=[]), now=1_700_000_300)


@pytest.mark.parametrize(
    ("relay", "message"),
    [
        ({"site": "office", "ranges": ["10.10.0.0/16"], "partners": {"home": ["10.200.0.4/32"]}}, "another site"),
        ({"site": "aws-use1", "ranges": ["10.10.0.0/16"], "partners": {"aws-use1": ["10.200.0.4/32"]}}, "third"),
        ({"site": "aws-use1", "ranges": ["10.10.0.0/16"], "partners": {"home": ["10.10.1.0/24"]}}, "overlaps"),
        ({"site": "aws-use1", "ranges": ["10.10.0.1/16"], "partners": {"home": ["10.200.0.4/32"]}}, "prefix"),
        ({"site": "aws-use1", "partners": {"home": ["10.200.0.4/32"]}}, "not an object"),
    ],
)
def test_agent_json_refuses_a_broken_pin(relay: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        trust_of("office", relay=relay)


def test_the_office_gateway_refuses_each_and_nothing_changes(tmp_path: Path) -> None:
    agent, host, store, paths = running_agent(tmp_path, "office", signed(OFFICE, 1_700_000_100))
    before = host.mutating()
    files = {p: Path(p).read_bytes() for p in (paths.wg_conf, paths.mapping, paths.state)}
    state = (dict(host.peers), set(host.routes), set(host.rules), host.mtu, list(host.addresses))
    assert any("192.168.60.0/24" in allowed for allowed, _, _ in host.peers.values())  # home, through the relay
    for serial, (name, (plan, _)) in enumerate(HOSTILE.items(), start=1_700_000_200):
        store.text = signed(plan, serial)
        assert not agent.cycle(), name
        assert host.mutating() == before, name
        assert {p: Path(p).read_bytes() for p in files} == files, name
        assert (dict(host.peers), set(host.routes), set(host.rules), host.mtu, list(host.addresses)) == state, name
    assert json.loads(files[paths.state])["applied_serial"] == 1_700_000_100


def test_the_agents_name_rule_is_the_trusts() -> None:
    assert relaytrust.NAME.pattern == trust.NAME.pattern


# --- linear in the pinned ranges (issue 33 item 6) ------------------------------------------------------------------

CALLS_PER_RANGE = 250  # Python calls per pinned range, far above the ~115 measured: only a quadratic check breaks it


class _Quadratic(Exception):
    pass


def python_calls(partners: int) -> int:
    """Python function calls (sys.settrace's `call` events: an operation count, not a clock) to load a relayed site's
    agent.json pinning `partners` partners of two ranges and decode a document whose relay entry carries them all
    (bench.relay_load builds both). Stops at CALLS_PER_RANGE per range: a quadratic check fails fast."""
    from bench.relay_load import relayed_site
    from wg_mesh.gateway.agentconfig import load_config

    text, signed = relayed_site(partners, 2)
    budget, calls = CALLS_PER_RANGE * 2 * partners, 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += 1
        if calls > budget:
            raise _Quadratic(f"{partners} partners: more than {budget} calls")

    sys.settrace(count)
    try:
        config = load_config(text)
        assert config.trust is not None
        document.decode(signed, config.trust)
    finally:
        sys.settrace(None)
    return calls


def test_a_relays_pin_loads_and_checks_in_time_linear_in_its_ranges() -> None:
    """256 partners cost about 8x the calls of 32 (main, 58f58f7: every range against every other at load and per
    document, ~64x; `python -m bench.relay_load` times both: 512 partners loaded in 3.97 s and decoded in 2.55 s
    there, 94 ms and 241 ms now)."""
    small, large = python_calls(32), python_calls(256)
    assert large / small < 10, (small, large)


def test_a_pin_of_more_ranges_than_a_relay_entry_can_carry_is_refused() -> None:
    """The config's bound (wg_mesh.config.relay.MAX_RELAY_RANGES), now agent.json's too."""
    partners = {f"p{i}": [f"10.{i}.{k}.0/24" for k in range(61)] for i in range(17)}  # 17 x 61 = 1037 ranges
    raw = {"site": "relay", "ranges": ["100.97.0.1/32"], "partners": partners}
    with pytest.raises(ValueError, match=f"1037 ranges, more than {relaytrust.MAX_PINNED}"):
        relaytrust.parse_relay(raw, "office")
