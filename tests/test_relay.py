"""Relays (issue 24 item 2): the config's rules (field paths), who peers with whom, the relayed pair's AllowedIPs, the
relay's FORWARD rules (golden files under tests/golden/edge/), an HA relay, quotas and monitoring, and the program
running examples/edge/Pulumi.edge.yaml under mocks in both delivery modes. A hostile document against a relayed
site's pinned relay: tests/test_relay_hostile.py."""

from __future__ import annotations

import copy
import dataclasses
import json
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
from wg_mesh.gateway import document, mapping, wgmetrics
from wg_mesh.gateway.hostplan import rule_commands
from wg_mesh.gateway.trust import parse_trust
from wg_mesh.gateway.wgconf import host_rules, parse_wg_quick_conf, wg_quick_conf
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
    assert relay.relay_of(cfg) is None and relay.flows(cfg, "aws-use1") == ()
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


def test_the_relay_forwards_exactly_the_relayed_flows_and_nothing_else_wg0_to_wg0() -> None:
    cfg = parse_mesh(edge())
    flows = relay.flows(cfg, "aws-use1")
    assert set(flows) == {(a, b) for a in OFFICE for b in HOME} | {(b, a) for a in OFFICE for b in HOME}
    assert len(flows) == 8 and all(relay.flows(cfg, s) == () for s in ("gcp-euw3", "office", "home"))
    conf = wg_quick_conf(interface_plan(cfg, "aws-use1", directory(cfg)), redacted("aws-use1"))
    (interface,) = [body for name, body in parse_wg_quick_conf(conf) if name == "Interface"]
    wg0_to_wg0 = [c for c in interface["PostUp"] if "-i %i -o %i" in c]
    drop = "iptables -t filter -I FORWARD -i %i -o %i -j DROP"
    assert wg0_to_wg0[0] == drop  # inserted first, then every flow above it
    assert wg0_to_wg0[1:] == [f"iptables -t filter -I FORWARD -i %i -o %i -s {a} -d {b} -j ACCEPT" for a, b in flows]
    assert not any("MASQUERADE" in c or "SNAT" in c for c in interface["PostUp"])  # sources kept
    # the MSS clamps match wg0 -> wg0 too: -o %i and -i %i, each in mangle FORWARD
    assert sum("mangle -A FORWARD -o %i -p tcp" in c or "mangle -A FORWARD -i %i -p tcp" in c
               for c in interface["PostUp"]) == 4  # fmt: skip
    assert [c.replace(" -D ", " -I ") for c in interface["PostDown"] if "-i %i -o %i" in c] == wg0_to_wg0
    other = wg_quick_conf(interface_plan(cfg, "gcp-euw3", directory(cfg)), redacted("gcp-euw3"))
    assert "-o %i -j DROP" not in other and "-i %i -o %i" not in other


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
    flows = [f"-s {a} -d {b} -j ACCEPT" for a, b in relay.flows(cfg, ha_site["name"])]
    assert flows and all(f in active and f in standby for f in flows)
    assert "-i %i -o %i -j DROP" in standby
    entry = next(p for p in interface_plan(cfg, "office", directory(cfg)).peers if p.name == ha_site["name"])
    assert entry.allowed_ips[-2:] == (f"{overlay}.202/32", "192.168.60.0/24")


def test_monitoring_expects_no_handshake_between_the_relayed_pair() -> None:
    cfg = parse_mesh(edge())
    expected = [r["labels"] for g in monitoring.rules(cfg)["groups"] for r in g["rules"]
                if r.get("record") == monitoring.EXPECTED_PEER]  # fmt: skip
    assert {"site": "office", "peer_site": "home"} not in expected
    assert {"site": "office", "peer_site": "aws-use1"} in expected and len(expected) == 10


def test_a_dropped_drop_rule_is_put_back_below_the_flows() -> None:
    """Drift on a relay (a firewall reload removed the wg0 -> wg0 DROP, the flows stayed): re-inserting the DROP
    first would shadow every flow, so the agent moves the flows back above it."""
    rules = host_rules(1360, 51820, (), False, True, (("10.0.1.0/24", "10.0.2.0/24"),))
    argvs = [r.argv("-C", "wg0") for r in rules]
    present = ["DROP" not in r.args or r.chain != "FORWARD" for r in rules]
    commands = [" ".join(a[3:]) for a in rule_commands(rules, argvs, present)]
    assert commands == [
        "-I FORWARD -i wg0 -o wg0 -j DROP",
        "-D FORWARD -i wg0 -o wg0 -s 10.0.1.0/24 -d 10.0.2.0/24 -j ACCEPT",
        "-I FORWARD -i wg0 -o wg0 -s 10.0.1.0/24 -d 10.0.2.0/24 -j ACCEPT",
    ]
    assert rule_commands(rules, argvs, [True] * len(rules)) == []


# --- live: agent.json and the documents -----------------------------------------------------------------------------


def test_only_a_relayed_site_pins_its_relay_in_agent_json() -> None:
    cfg = parse_mesh(edge(delivery="live"))
    pinned = live.trust(cfg, cfg.site("office"), "wg-mesh", "edge", "A" * 43 + "=")["relay"]
    assert pinned == {"site": "aws-use1", "ranges": list(AWS_RANGES), "partners": {"home": list(HOME)}}
    for cloud in ("aws-use1", "gcp-euw3"):  # a cloud gateway's user data is as it was: nothing replaced
        assert "relay" not in live.trust(cfg, cfg.site(cloud), "wg-mesh", "edge", "A" * 43 + "=")


def test_only_the_relays_document_carries_flows_and_they_round_trip() -> None:
    cfg = parse_mesh(edge(delivery="live"))
    for site in ("aws-use1", "gcp-euw3"):
        plan = interface_plan(cfg, site, directory(cfg))
        body = document.encode_body(plan, "B" * 43 + "=", scope="wg-mesh/edge", serial=1)
        assert ('"relay_flows"' in body) == (site == "aws-use1")


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
    assert {tuple(f) for f in body["interface"]["relay_flows"]} == set(relay.flows(cfg, "aws-use1"))
    office = verified_body(stored_document(run, cfg.site("office")), trust)
    entry = next(p for p in office["interface"]["peers"] if p["name"] == "aws-use1")
    assert entry["allowed_ips"] == [*AWS_RANGES, *HOME]
    assert "home" not in {p["name"] for p in office["interface"]["peers"]}


def test_a_relay_past_its_agents_limit_of_flows_is_refused() -> None:
    raw = edge()
    raw["sites"] += [
        {"name": f"shop{i}", "cloud": "static", "endpoint": "dynamic", "overlay_ip": f"10.200.0.{10 + i}",
         "cidrs": [f"172.16.{i}.0/24", f"172.17.{i}.0/24"]}
        for i in range(10)
    ]  # fmt: skip
    (problem,) = problems(raw)  # 45 pairs of shops x 18, 20 shop-office/home pairs x 12, office-home 8
    assert problem.startswith("relay: 66 relayed pairs need 1058 forwarding rules on the relay")
    assert relaying.MAX_RELAY_FLOWS == document.MAX_RELAY_FLOWS
    del raw["sites"][-1]
    assert len(relay.flows(parse_mesh(raw), "aws-use1")) <= relaying.MAX_RELAY_FLOWS


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
