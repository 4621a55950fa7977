"""Relays (issue 24 item 2): the config's rules (field paths), who peers with whom, the relayed pair's AllowedIPs, the
relay's FORWARD rules (golden files under tests/golden/edge/), an HA relay, quotas and monitoring, and the program
running examples/edge/Pulumi.edge.yaml under mocks in both delivery modes. A hostile document against a relayed
site's pinned relay: tests/test_relay_hostile.py."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from ipaddress import ip_address, ip_network
from typing import Any

import pytest

from tests.conftest import run_program
from tests.golden import assert_golden
from tests.signed import verified_body
from tests.stacks import REPO
from tests.test_program_live import agent_json, stored_document
from tests.test_render import directory, redacted
from wg_mesh.config import ConfigError, parse_mesh, quotas, summary
from wg_mesh.config import relay as relaying
from wg_mesh.gateway import document, mapping, relaytrust, wgmetrics
from wg_mesh.gateway.hostplan import rule_commands
from wg_mesh.gateway.trust import parse_trust
from wg_mesh.gateway.wgconf import (
    RELAY_CHAIN,
    SYSCTL_SETTINGS,
    Chain,
    chains_removal,
    chains_restore,
    forwarding_chains,
    host_rules,
    parse_wg_quick_conf,
    restore_hook,
    wg_quick_conf,
)
from wg_mesh.plan import live, metrics, relay, render, topology
from wg_mesh.plan.topology import interface_plan
from wg_mesh.tools import monitoring
from wg_mesh.tools.stackfile import read_raw

EDGE = REPO / "examples" / "edge" / "Pulumi.edge.yaml"
AWS_RANGES, OFFICE, HOME = (
    ("10.200.0.1/32", "10.10.0.0/16"),
    ("10.200.0.3/32", "192.168.50.0/24"),
    (
        "10.200.0.4/32",
        "192.168.60.0/24",
    ),
)


def edge(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = copy.deepcopy(read_raw(EDGE))
    return {**raw, **changes}


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_mesh(raw)
    return caught.value.problems


# --- config ------------------------------------------------------------------------------------------------------


def test_the_edge_example_relays_its_two_offices_through_aws() -> None:
    cfg = parse_mesh(edge())
    assert relay.relay_of(cfg) == "aws-use1"
    assert "relay aws-use1 (office <-> home)" in summary(cfg)


def test_without_relay_the_first_cloud_site_relays() -> None:
    raw = edge()
    del raw["relay"]
    raw["sites"] = [raw["sites"][2], raw["sites"][1], raw["sites"][0], raw["sites"][3]]  # office, gcp, aws, home
    assert relay.relay_of(parse_mesh(raw)) == "gcp-euw3"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nope", "relay: 'nope' is not a site of this mesh (sites: aws-use1, gcp-euw3, office, home)"),
        ("office", "relay: office is a static site; a relay is a cloud gateway (aws or gcp) with a fixed address that "
                   "every relayed site already peers with"),
    ],
)  # fmt: skip
def test_relay_must_name_a_cloud_site(value: str, expected: str) -> None:
    assert problems(edge(relay=value)) == [expected]


def test_a_bad_relay_is_reported_with_another_fields_error() -> None:
    found = problems(edge(relay="nope", listen_port=0))
    assert "relay: 'nope' is not a site of this mesh (sites: aws-use1, gcp-euw3, office, home)" in found
    assert any(p.startswith("listen_port:") for p in found)


def test_two_dynamic_sites_and_no_cloud_site_are_refused_at_the_second() -> None:
    raw = edge()
    del raw["relay"]
    raw["sites"] = [
        {"name": "vps", "cloud": "static", "endpoint": "203.0.113.10", "overlay_ip": "10.200.0.9",
         "cidrs": ["192.168.9.0/24"]},
        *raw["sites"][2:],
    ]  # fmt: skip
    assert problems(raw) == [
        "sites[2].endpoint: home and office are both dynamic: neither can reach the other, and the mesh has no cloud "
        "gateway to relay them; give one of them a fixed endpoint or add a cloud site"
    ]


def test_a_relay_no_pair_needs_yet_is_accepted_and_said() -> None:
    raw = edge()
    raw["sites"][3]["endpoint"] = "203.0.113.20"
    cfg = parse_mesh(raw)
    assert relay.relay_of(cfg) is None and relay.ranges(cfg, "aws-use1") == ()
    assert "relay aws-use1 (no pair needs it yet)" in summary(cfg)
    assert topology.peer_names(cfg, "office") == ["aws-use1", "gcp-euw3", "home"]


def test_the_other_dynamic_rules_stay() -> None:
    assert problems(edge(persistent_keepalive=0))[0].startswith("persistent_keepalive: 0, and sites[2] (office)")


# --- topology ----------------------------------------------------------------------------------------------------


def test_the_relayed_pair_never_peers_and_reaches_each_other_through_the_relays_entry() -> None:
    cfg = parse_mesh(edge())
    assert topology.peer_names(cfg, "office") == ["aws-use1", "gcp-euw3"]
    assert topology.peer_names(cfg, "home") == ["aws-use1", "gcp-euw3"]
    assert topology.peer_names(cfg, "aws-use1") == ["gcp-euw3", "office", "home"]
    assert topology.peer_names(cfg, "gcp-euw3") == ["aws-use1", "office", "home"]
    office = {p.name: p.allowed_ips for p in interface_plan(cfg, "office", directory(cfg)).peers}
    assert office == {"aws-use1": (*AWS_RANGES, *HOME), "gcp-euw3": ("10.200.0.2/32", "10.100.0.0/16")}
    home = {p.name: p.allowed_ips for p in interface_plan(cfg, "home", directory(cfg)).peers}
    assert home["aws-use1"] == (*AWS_RANGES, *OFFICE)
    relay_peers = {p.name: p.allowed_ips for p in interface_plan(cfg, "aws-use1", directory(cfg)).peers}
    assert relay_peers == {"gcp-euw3": ("10.200.0.2/32", "10.100.0.0/16"), "office": OFFICE, "home": HOME}


def test_the_clouds_route_tables_and_firewalls_do_not_change() -> None:
    cfg, direct = parse_mesh(edge()), parse_mesh(edge())
    for site in ("aws-use1", "gcp-euw3"):
        assert topology.remote_ranges(cfg, site) == [cfg.overlay_cidr, *(c for s in cfg.sites if s.name != site
                                                                         for c in s.cidrs)]  # fmt: skip
        assert quotas.aws_inbound_rules(cfg, site) == quotas.aws_inbound_rules(direct, site)
    # the offices' routes still cover each other's ranges (their traffic goes into wg0, to the relay)
    assert [str(r) for r in topology.remote_ranges(cfg, "office")][-1] == "192.168.60.0/24"


def verdict(chains: list[Chain], source: str, destination: str) -> str:
    """What the relay's chains do with a packet wg0 -> wg0 (the FORWARD jump sends every one to RELAY_CHAIN): the
    first rule that matches, as iptables evaluates them (a jump into a chain; back at its end)."""
    by_name = {c.name: c for c in chains}

    def run(name: str) -> str | None:
        for rule in by_name[name].rules:
            words = dict(zip(rule[::2], rule[1::2], strict=True))
            address = ip_address(source if "-s" in words else destination)
            if ("-s" in words or "-d" in words) and address not in ip_network(words.get("-s", words.get("-d", ""))):
                continue
            target = words["-j"]
            result = run(target) if target in by_name else target
            if result is not None:
                return result
        return None

    return run(RELAY_CHAIN) or "RETURN"


def test_the_relay_forwards_the_relayed_pairs_and_nothing_else_wg0_to_wg0() -> None:
    """Every relayed range to every relayed range: the relayed pairs' flows, and one site's ranges to its own (a
    relayed site's packets back to itself, which its WireGuard drops: its relay entry lacks its own ranges). Checked
    packet by packet against the pairs, with a third office (three pairs) and a site that is not relayed."""
    raw = edge()
    raw["sites"].append({"name": "shop", "cloud": "static", "endpoint": "dynamic", "overlay_ip": "10.200.0.5",
                         "cidrs": ["172.16.5.0/24", "172.16.6.0/24"]})  # fmt: skip
    cfg = parse_mesh(raw)
    ranges = relay.ranges(cfg, "aws-use1")
    assert ranges == (*OFFICE, *HOME, "10.200.0.5/32", "172.16.5.0/24", "172.16.6.0/24")
    assert all(relay.ranges(cfg, s) == () for s in ("gcp-euw3", "office", "home", "shop"))
    plan = interface_plan(cfg, "aws-use1", directory(cfg))
    chains = forwarding_chains(plan)
    assert sum(len(c.rules) for c in chains) == 2 * len(ranges) + 1
    owner = {r: s.name for s in cfg.sites for r in relay.own_ranges(s)}
    pairs = {frozenset(p) for p in relaying.relayed_pairs(cfg.sites)}
    hosts = {r: str(next(iter(ip_network(r).hosts()), ip_network(r).network_address)) for r in owner}
    for a, b in itertools.product(owner, repeat=2):
        relayed = frozenset((owner[a], owner[b])) in pairs or (owner[a] == owner[b] and a in ranges)
        assert verdict(chains, hosts[a], hosts[b]) == ("ACCEPT" if relayed else "DROP"), (a, b)
    conf = wg_quick_conf(plan, redacted("aws-use1"))
    (interface,) = [body for name, body in parse_wg_quick_conf(conf) if name == "Interface"]
    jump = "iptables -t filter -I FORWARD -i %i -o %i -j WGMESH-RELAY"
    assert [c for c in interface["PostUp"] if "-i %i -o %i" in c] == [jump]  # above wg0's ACCEPTs: inserted after
    assert interface["PostUp"].index(jump) > interface["PostUp"].index("iptables -t filter -I FORWARD -i %i -j ACCEPT")
    assert interface["PostUp"][len(SYSCTL_SETTINGS) + 1] == restore_hook(chains_restore(chains))  # before the jump
    assert interface["PostDown"][-1] == restore_hook(chains_removal(chains))  # after it is gone
    assert not any("MASQUERADE" in c or "SNAT" in c for c in interface["PostUp"])  # sources kept
    # the MSS clamps match wg0 -> wg0 too: -o %i and -i %i, each in mangle FORWARD
    assert sum("mangle -A FORWARD -o %i -p tcp" in c or "mangle -A FORWARD -i %i -p tcp" in c
               for c in interface["PostUp"]) == 4  # fmt: skip
    other = wg_quick_conf(interface_plan(cfg, "gcp-euw3", directory(cfg)), redacted("gcp-euw3"))
    assert "WGMESH" not in other and "-i %i -o %i" not in other


@pytest.mark.parametrize("offices", [2, 16, 50, 200])
def test_the_relays_rules_grow_linearly_with_the_offices(offices: int) -> None:
    """Fifty branch offices (issue 24's yardstick), and two hundred: one LAN each, all dynamic. The relay's rules are
    two per range and a DROP in its chains, and one jump in FORWARD: 4n + 2 for n offices, where a rule per pair of
    ranges both ways was 4n(n - 1) (9800 for fifty, refused past sixteen)."""
    cfg = parse_mesh(offices_mesh(offices))
    plan = interface_plan(cfg, "aws-use1", directory(cfg))
    chains = forwarding_chains(plan)
    jumps = [r for r in render.forwarding_rules(plan) if r.args[-1] == RELAY_CHAIN]
    assert sum(len(c.rules) for c in chains) + len(jumps) == 4 * offices + 2
    assert len(relaying.relayed_pairs(cfg.sites)) == offices * (offices - 1) // 2
    office = {p.name: p for p in interface_plan(cfg, "office0", directory(cfg)).peers}
    assert len(office["aws-use1"].allowed_ips) == 2 + 2 * (offices - 1)  # the relay's ranges, every partner's
    assert set(office) == {"aws-use1", "gcp-euw3"}


def offices_mesh(offices: int, cidrs: int = 1) -> dict[str, Any]:
    """The edge example with `offices` dynamic offices (each `cidrs` LANs) in place of office and home; the overlay a
    /16 so that any number fits."""
    raw = edge(overlay_cidr="10.200.0.0/16")
    raw["sites"] = raw["sites"][:2] + [
        {"name": f"office{i}", "cloud": "static", "endpoint": "dynamic",
         "overlay_ip": f"10.200.{1 + i // 200}.{1 + i % 200}",
         "cidrs": [f"172.{16 + (i * cidrs + k) // 256}.{(i * cidrs + k) % 256}.0/24" for k in range(cidrs)]}
        for i in range(offices)
    ]  # fmt: skip
    return raw


def test_a_masquerading_relay_still_keeps_the_relayed_sources() -> None:
    cfg = parse_mesh(edge(masquerade=True))
    rules = render.forwarding_rules(interface_plan(cfg, "aws-use1", directory(cfg)))
    nat = [r for r in rules if r.table == "nat"]
    assert [r.args[:2] for r in nat] == [("-o", "%d")]  # the default route's device only, never wg0


@pytest.mark.parametrize("site", ["aws-use1", "gcp-euw3", "office", "home"])
def test_wg_conf_matches_golden(site: str) -> None:
    cfg = parse_mesh(edge())
    assert_golden(f"edge/{site}.wg0.conf", wg_quick_conf(interface_plan(cfg, site, directory(cfg)), redacted(site)))


def test_an_ha_relay_keeps_relaying_across_a_failover() -> None:
    """The standby renders the same plan (docs/ha.md 3: role standby only drops Endpoint and keepalives): the relay's
    flows and DROP are in its wg0.conf, and the offices' entry for the site is the HA pair's one peer (one key,
    one address that moves), so their relayed AllowedIPs follow the failover with nothing to change."""
    raw = copy.deepcopy(read_raw(REPO / "Pulumi.ha.yaml"))
    ha_site = next(s for s in raw["sites"] if s.get("gateways") == 2)
    overlay = raw["overlay_cidr"].rsplit(".", 1)[0]
    raw["sites"] += [
        {"name": "office", "cloud": "static", "endpoint": "dynamic", "overlay_ip": f"{overlay}.201",
         "cidrs": ["192.168.50.0/24"]},
        {"name": "home", "cloud": "static", "endpoint": "dynamic", "overlay_ip": f"{overlay}.202",
         "cidrs": ["192.168.60.0/24"]},
    ]  # fmt: skip
    raw["relay"] = ha_site["name"]
    cfg = parse_mesh(raw)
    plan = interface_plan(cfg, ha_site["name"], directory(cfg))
    active, standby = (wg_quick_conf(plan, redacted(ha_site["name"]), role) for role in ("active", "standby"))
    chains = restore_hook(chains_restore(forwarding_chains(plan)))
    assert relay.ranges(cfg, ha_site["name"]) and chains in active and chains in standby
    assert "-i %i -o %i -j WGMESH-RELAY" in standby
    entry = next(p for p in interface_plan(cfg, "office", directory(cfg)).peers if p.name == ha_site["name"])
    assert entry.allowed_ips[-2:] == (f"{overlay}.202/32", "192.168.60.0/24")


def test_monitoring_expects_no_handshake_between_the_relayed_pair() -> None:
    cfg = parse_mesh(edge())
    expected = [r["labels"] for g in monitoring.rules(cfg)["groups"] for r in g["rules"]
                if r.get("record") == monitoring.EXPECTED_PEER]  # fmt: skip
    assert {"site": "office", "peer_site": "home"} not in expected
    assert {"site": "office", "peer_site": "aws-use1"} in expected and len(expected) == 10


def test_a_reinserted_accept_of_wg0_moves_the_relays_jump_back_above_it() -> None:
    """Drift on a relay (a firewall reload removed wg0's ACCEPT, the jump to the relay's chains stayed): re-inserted
    first, the ACCEPT would take wg0 -> wg0 before the jump, so the agent moves the jump back above it. A re-inserted
    DROP of the WireGuard port moves the sources' ACCEPTs, and an ACCEPT among ACCEPTs moves nothing."""
    rules = host_rules(1360, 51820, ("198.51.100.2/32", "198.51.100.3/32"), False, True, ("10.0.1.0/24",))
    argvs = [r.argv("-C", "wg0") for r in rules]

    def commands(missing: str) -> list[str]:
        present = [" ".join(r.args) != missing for r in rules]
        return [" ".join(a[3:]) for a in rule_commands(rules, argvs, present)]

    assert commands("-i %i -j ACCEPT") == [
        "-I FORWARD -i wg0 -j ACCEPT",
        "-D FORWARD -i wg0 -o wg0 -j WGMESH-RELAY",
        "-I FORWARD -i wg0 -o wg0 -j WGMESH-RELAY",
    ]
    assert commands("-p udp --dport 51820 -j DROP") == [
        "-I INPUT -p udp --dport 51820 -j DROP",
        *(f"{verb} INPUT -p udp --dport 51820 -s 198.51.100.{n}/32 -j ACCEPT" for n in (2, 3) for verb in ("-D", "-I")),
    ]
    assert commands("-p udp --dport 51820 -s 198.51.100.2/32 -j ACCEPT") == [
        "-I INPUT -p udp --dport 51820 -s 198.51.100.2/32 -j ACCEPT"
    ]
    assert rule_commands(rules, argvs, [True] * len(rules)) == []


# --- live: agent.json and the documents -----------------------------------------------------------------------------


def test_only_a_relayed_site_pins_its_relay_in_agent_json() -> None:
    cfg = parse_mesh(edge(delivery="live"))
    pinned = live.trust(cfg, cfg.site("office"), "wg-mesh", "edge", "A" * 43 + "=")["relay"]
    assert pinned == {"site": "aws-use1", "ranges": list(AWS_RANGES), "partners": {"home": list(HOME)}}
    for cloud in ("aws-use1", "gcp-euw3"):  # a cloud gateway's user data is as it was: nothing replaced
        assert "relay" not in live.trust(cfg, cfg.site(cloud), "wg-mesh", "edge", "A" * 43 + "=")


def test_only_the_relays_document_carries_ranges() -> None:
    cfg = parse_mesh(edge(delivery="live"))
    for site in ("aws-use1", "gcp-euw3"):
        plan = interface_plan(cfg, site, directory(cfg))
        body = document.encode_body(plan, "B" * 43 + "=", scope="wg-mesh/edge", serial=1)
        assert ('"relay_ranges"' in body) == (site == "aws-use1")


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "update"])
@pytest.mark.parametrize("delivery", ["user-data", "live"])
def test_the_edge_example_runs_under_mocks(preview: bool, delivery: str) -> None:
    cfg = parse_mesh(edge(delivery=delivery))
    run = run_program(edge(delivery=delivery), preview=preview, stack="edge")
    assert run.error is None, run.error
    if preview or delivery != "live":
        return
    trust = agent_json(run, cfg.site("office"))["trust"]
    parse_trust(trust)
    assert trust["relay"]["site"] == "aws-use1"
    body = verified_body(stored_document(run, cfg.site("aws-use1")), agent_json(run, cfg.site("aws-use1"))["trust"])
    assert body["interface"]["relay_ranges"] == [*OFFICE, *HOME]
    office = verified_body(stored_document(run, cfg.site("office")), trust)
    entry = next(p for p in office["interface"]["peers"] if p["name"] == "aws-use1")
    assert entry["allowed_ips"] == [*AWS_RANGES, *HOME]
    assert "home" not in {p["name"] for p in office["interface"]["peers"]}


def test_a_relay_past_its_agents_limit_of_ranges_is_refused() -> None:
    """The relay's document carries at most 1024 ranges (the parser's bound on any list: 512 peers, one LAN each):
    342 offices with two LANs have 1026 (each its overlay /32 too); 341 have 1023."""
    raw = offices_mesh(342, cidrs=2)
    raw["sites"][0]["quotas"] = {"routes_per_route_table": 1000}  # AWS's route table holds every office's ranges
    (problem,) = problems(raw)
    assert problem == (
        "relay: 342 relayed sites have 1026 ranges (overlay addresses and cidrs), more than the relay's 1024: give "
        "some dynamic sites a fixed endpoint, or fewer cidrs"
    )
    assert relaying.MAX_RELAY_RANGES == document.MAX_RELAY_RANGES == relaytrust.MAX_PINNED
    assert len(relay.ranges(parse_mesh(offices_mesh(341, cidrs=2)), "aws-use1")) == 1023


# --- the metrics mapping: relayed peers by name, from the pinned relay ------------------------------------------


def _mapped(cfg: Any, site: str) -> list[dict[str, Any]]:
    return list(json.loads(metrics.peer_mapping(cfg, site, directory(cfg)))["peers"])


def test_a_relayed_sites_mapping_names_its_partners_behind_the_relays_key() -> None:
    cfg = parse_mesh(edge())
    relay_key = directory(cfg)["aws-use1"].public_key
    peers = _mapped(cfg, "office")
    assert [(p["site"], p.get("kind", "configured")) for p in peers] == [
        ("aws-use1", "configured"), ("gcp-euw3", "configured"), ("home", "relayed")
    ]  # fmt: skip
    assert peers[-1] == {"site": "home", "public_key": relay_key, "allowed_ips": list(HOME), "kind": "relayed",
                         "via": "aws-use1"}  # fmt: skip
    parsed = wgmetrics.parse_mapping(metrics.peer_mapping(cfg, "office", directory(cfg)))
    assert [p.site for p in parsed.direct] == ["aws-use1", "gcp-euw3"]  # wgmesh_peers_expected: 2, not 3
    assert parsed.site_of(relay_key) == "aws-use1"
    for site in ("aws-use1", "gcp-euw3"):  # the relay and the others see two dynamic peers, nothing relayed
        assert [p.get("kind") for p in _mapped(cfg, site) if p["site"] in ("office", "home")] == ["dynamic"] * 2


def test_the_agent_writes_the_mapping_the_user_data_renders_and_only_from_its_pinned_relay() -> None:
    cfg = parse_mesh(edge(delivery="live"))
    plan = interface_plan(cfg, "office", directory(cfg))
    trust = live.trust(cfg, cfg.site("office"), "wg-mesh", "edge", "A" * 43 + "=")  # agent.json's
    pinned = parse_trust(json.loads(json.dumps(trust))).relay
    assert pinned is not None
    assert mapping.peer_mapping(plan, relay=pinned) == metrics.peer_mapping(cfg, "office", directory(cfg))
    # without the pin (no agent.json relay), nothing is relayed, whatever the plan's entry carries
    assert '"relayed"' not in mapping.peer_mapping(plan)
    # a pin naming a relay the plan has no peer for adds nothing (no key to put the partners behind)
    other = dataclasses.replace(pinned, site="nowhere")
    assert '"relayed"' not in mapping.peer_mapping(plan, relay=other)
