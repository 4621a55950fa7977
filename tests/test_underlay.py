"""Private paths (issue 13, docs/underlay.md): the config's rules and messages, who uses which endpoint and MTU, the
routes and firewall sources that follow, the peer document, the path-MTU monitor's per-peer full size; under mocks,
the fixed private addresses of the gateways and their firewalls."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests import test_program as program_tests  # a module, not its tests: nothing is collected twice
from tests.agent_fake import SCOPE, TRUST, resign, sign
from tests.conftest import STACK_FILES, run_program
from wg_mesh.config import ConfigError, summary
from wg_mesh.gateway import document, pmtu_heal
from wg_mesh.gateway.doctor.base import CommandResult, parse_conf
from wg_mesh.gateway.doctor.path import path_checks
from wg_mesh.gateway.pmtu import PathMonitor
from wg_mesh.gateway.pmtu_probe import SMALL_SIZE
from wg_mesh.gateway.wgconf import (
    DEFAULT_ROUTE_GUARD,
    endpoint_routes,
    parse_wg_quick_conf,
    route_mtus,
    wg_quick_conf,
)
from wg_mesh.plan import topology
from wg_mesh.plan.topology import PeerAddress
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw

KEY = "A" * 43 + "="
EXAMPLE_STACK = Path(__file__).resolve().parent.parent / "examples" / "underlay" / "Pulumi.underlay.yaml"
PATH = {"name": "use1-euw3", "sites": ["aws-use1", "gcp-euw3"], "mtu": 8896}


def prod_raw(**changes: Any) -> dict[str, Any]:
    """Pulumi.prod.yaml (AWS, GCP, a VPS; delivery: live) with AWS and GCP on one interconnect at 8896."""
    raw = read_raw(next(p for p in STACK_FILES if p.name == "Pulumi.prod.yaml"))
    assert isinstance(raw, dict)
    raw = copy.deepcopy(raw)
    raw["sites"][1]["underlay_mtu"] = 8896
    raw["private_paths"] = [copy.deepcopy(PATH)]
    raw.update(changes)
    return raw


def directory(cfg: Any) -> dict[str, PeerAddress]:
    private = topology.private_directory(cfg)
    return {
        s.name: PeerAddress(f"203.0.113.{i + 1}", KEY[: -2 - i] + "B" * i + "E=", private.get(s.name))
        for i, s in enumerate(cfg.sites)
    }


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_mesh(raw)
    return err.value.problems


# --- config ---------------------------------------------------------------------------------------------------


def test_a_valid_path_and_the_private_addresses_it_implies() -> None:
    cfg = load_mesh(prod_raw())
    assert cfg.private_paths[0].tunnel_mtu == 8836
    # the 10th address of the gateway subnet wg-mesh creates (the first /24 of the first CIDR)
    assert topology.private_directory(cfg) == {"aws-use1": "10.10.0.10", "gcp-euw3": "10.100.0.10"}
    assert topology.path_between(cfg, "aws-use1", "gcp-euw3") is cfg.private_paths[0]
    assert topology.path_between(cfg, "aws-use1", "vps-fra") is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: r["private_paths"][0]["sites"].append("nope"), "private_paths[0].sites[2]: no site is named 'nope'"),
        (
            lambda r: r["private_paths"][0]["sites"].append("aws-use1"),
            "private_paths[0].sites[2]: 'aws-use1' is named twice in this path",
        ),
        (lambda r: r["private_paths"][0].update(sites=["aws-use1"]), "private_paths[0].sites: "),
        (lambda r: r["private_paths"][0].update(mtu=9002), "private_paths[0].mtu: 9002 is above the maximum 9001"),
        (lambda r: r["private_paths"][0].update(mtu=1339), "private_paths[0].mtu: 1339 is below the minimum 1340"),
        (lambda r: r["sites"][1].update(underlay_mtu=1460), "private_paths[0].mtu: 8896 is above gcp-euw3's network"),
        (
            lambda r: r["private_paths"].append({"name": "use1-euw3", "sites": ["aws-use1", "vps-fra"]}),
            "private_paths[1].name: 'use1-euw3' names two paths",
        ),
        (
            lambda r: r["private_paths"].append({"name": "again", "sites": ["gcp-euw3", "aws-use1"]}),
            "private_paths[1].sites: gcp-euw3 and aws-use1 are also on path 'use1-euw3': one path per pair",
        ),
        (
            lambda r: r["private_paths"][0]["sites"].append("vps-fra"),
            "sites[2].private_ip: required on private path 'use1-euw3' (a static site)",
        ),
        (lambda r: r.update(delivery="user-data"), "private_paths: needs `delivery: live`"),
        (lambda r: r["sites"][0].update(private_ip="10.99.0.1"), "sites[0].private_ip: 10.99.0.1 is in none of"),
        (
            lambda r: r["sites"][0].update(private_ip="10.10.5.1"),
            "sites[0].private_ip: 10.10.5.1 is not in the gateway subnet wg-mesh creates (10.10.0.0/24)",
        ),
        (
            lambda r: r["sites"][2].update(private_ip="192.168.50.9"),
            "sites[2].private_ip: vps-fra is on no private path (private_paths), nothing uses it",
        ),
        (lambda r: r["sites"][0].update(gateways=2), "sites[0].gateways: 2 on private path 'use1-euw3'"),
        (
            lambda r: r["sites"][0].update(cidrs=["10.10.0.0/24"]),
            "sites[0].cidrs[0]: 10.10.0.0/24 is the whole gateway",
        ),
        (lambda r: r["private_paths"][0].update(kind="carrier-pigeon"), "private_paths[0].kind: "),
        (lambda r: r["private_paths"][0].update(colour="blue"), "private_paths[0].colour: unknown key"),
    ],
)
def test_every_rule_has_a_message_with_its_field_path(change: Any, expected: str) -> None:
    raw = prod_raw()
    change(raw)
    found = problems(raw)
    assert any(p.startswith(expected) for p in found), found


def test_a_static_member_needs_its_private_address_outside_the_overlay_and_not_its_endpoint() -> None:
    raw = prod_raw()
    raw["private_paths"][0]["sites"].append("vps-fra")
    raw["sites"][2]["private_ip"] = str(raw["sites"][2]["endpoint"])
    assert any(p.startswith("sites[2].private_ip: ") and "public endpoint" in p for p in problems(raw))
    raw["sites"][2]["private_ip"] = "10.200.0.77"
    assert "sites[2].private_ip: 10.200.0.77 is inside the overlay (10.200.0.0/24)" in problems(raw)
    raw["sites"][2]["private_ip"] = "172.16.9.5"
    assert (
        "private_paths[0].mtu: 8896 is above vps-fra's underlay MTU (1500, underlay_mtu): a host sends no frame "
        "larger than its link's; set its underlay_mtu to its link's MTU or lower the path's" in problems(raw)
    )
    raw["sites"][2]["underlay_mtu"] = 9000  # its link carries the path's frames
    assert load_mesh(raw).private_paths[0].sites[-1] == "vps-fra"


def test_validate_names_the_path_and_its_tunnel_mtu() -> None:
    line = summary(load_mesh(prod_raw()))
    assert "tunnel MTU 1440, private path use1-euw3 (aws-use1, gcp-euw3: tunnel MTU 8836), delivery live" in line


def test_an_existing_network_needs_the_address_given() -> None:
    raw = prod_raw()
    raw["sites"][0].update(vpc_id="vpc-0a1b2c3d", subnet_id="subnet-0a1b2c3d", route_table_ids=["rtb-0a1b2c3d"])
    assert any(p.startswith("sites[0].private_ip: required on private path") for p in problems(raw))
    raw["sites"][0]["private_ip"] = "10.10.7.20"  # any address of its CIDRs: the subnet is the user's
    assert topology.private_directory(load_mesh(raw))["aws-use1"] == "10.10.7.20"


# --- endpoints, MTUs, routes, firewalls -------------------------------------------------------------------------


def test_the_pair_on_the_path_uses_private_endpoints_and_the_jumbo_mtu_the_rest_stays_as_it_was() -> None:
    cfg = load_mesh(prod_raw())
    plain = load_mesh({**prod_raw(), "private_paths": []})
    d = directory(cfg)
    aws = topology.interface_plan(cfg, "aws-use1", d)
    assert aws.mtu == 8836 and aws.mss == 8796
    peers = {p.name: p for p in aws.peers}
    assert peers["gcp-euw3"].endpoint == "10.100.0.10:51820" and peers["gcp-euw3"].mtu is None
    assert peers["gcp-euw3"].fallback_endpoint == "203.0.113.2:51820" and peers["vps-fra"].fallback_endpoint is None
    # the VPS is an internet peer: its own MTU on its routes, the mesh's internet tunnel MTU
    assert peers["vps-fra"].endpoint == "203.0.113.3:51820" and peers["vps-fra"].mtu == topology.tunnel_mtu(cfg)
    # the path peer from its private address and, for the fallback, its public one; the VPS from its public one
    assert topology.peer_source_ranges(cfg, "aws-use1", d) == ["10.100.0.10/32", "203.0.113.2/32", "203.0.113.3/32"]
    assert topology.path_probe_sources(cfg, "aws-use1") == ["10.100.0.10/32"]
    assert topology.path_probe_sources(cfg, "vps-fra") == []
    # the VPS has no private path: its plan is the one it has without private paths
    assert topology.interface_plan(cfg, "vps-fra", d) == topology.interface_plan(plain, "vps-fra", d)
    assert topology.peer_source_ranges(cfg, "vps-fra", d) == ["203.0.113.1/32", "203.0.113.2/32"]


def test_wg0_conf_routes_the_private_endpoint_through_the_nic_and_lowers_the_internet_peers_routes() -> None:
    cfg = load_mesh(prod_raw())
    plan = topology.interface_plan(cfg, "aws-use1", directory(cfg))
    assert endpoint_routes(plan) == ["10.100.0.10/32"]  # inside gcp-euw3's 10.100.0.0/16: would loop into wg0
    assert route_mtus(plan) == [("192.168.50.0/24", 1440)]  # the VPS's LAN; its overlay /32 is wg0's own prefix
    interface = dict(parse_wg_quick_conf(wg_quick_conf(plan, "PRIVATE"))[0:1])["Interface"]
    assert interface["MTU"] == ["8836"]
    up, down = interface["PostUp"], interface["PostDown"]
    assert up[-2].startswith(DEFAULT_ROUTE_GUARD)  # no default route: it fails (tests/test_default_route_hooks.py)
    assert up[-2].endswith('ip -4 route replace 10.100.0.10/32 ${gw:+via "$gw"} dev "$dev"')
    assert up[-1] == "ip -4 route replace 192.168.50.0/24 dev %i mtu 1440"
    assert down[-1] == "ip -4 route del 10.100.0.10/32"
    plain = load_mesh({**prod_raw(), "private_paths": []})
    ordinary = topology.interface_plan(plain, "aws-use1", directory(plain))
    assert endpoint_routes(ordinary) == [] and route_mtus(ordinary) == []


def test_the_internet_mtu_is_at_most_1500_whatever_a_network_s_own() -> None:
    cfg = load_mesh(prod_raw())  # gcp-euw3's network at 8896, AWS and the VPS at 1500
    assert topology.tunnel_mtu(cfg) == 1440
    only_jumbo = prod_raw()
    only_jumbo["sites"][0]["underlay_mtu"] = 9001
    only_jumbo["sites"][2]["underlay_mtu"] = 9000
    assert topology.tunnel_mtu(load_mesh(only_jumbo)) == 1440


def test_the_document_carries_a_peer_mtu_only_where_there_is_one() -> None:
    cfg = load_mesh(prod_raw())
    plan = topology.interface_plan(cfg, "aws-use1", directory(cfg))
    text = document.encode_body(plan, KEY, scope=SCOPE, serial=1)
    assert text.count('"mtu":') == 2  # the interface's and the VPS's
    assert text.count('"fallback_endpoint":"203.0.113.2:51820"') == 1
    assert document.decode(sign(text), TRUST).plan == plan
    vps = topology.interface_plan(cfg, "vps-fra", directory(cfg))
    vps_text = document.encode_body(vps, KEY, scope=SCOPE, serial=1)
    assert vps_text.count('"mtu":') == 1  # no private path: the bytes it always had
    assert "fallback_endpoint" not in vps_text
    broken = json.loads(text.replace('"mtu":1440', '"mtu":8900'))
    with pytest.raises(document.DocumentError, match="the MTU of vps-fra is above the interface's"):
        document.decode(resign(broken), TRUST)


def test_path_mtu_probes_each_peer_at_its_own_tunnel_mtu_and_a_heal_restores_its_route_mtu() -> None:
    cfg = load_mesh(prod_raw())
    plan = topology.interface_plan(cfg, "aws-use1", directory(cfg))
    monitor = PathMonitor(plan, lambda argv: (0, ""))  # not ticked: its sizes and the heal's commands are pure
    assert monitor.full("gcp-euw3") == 8836 and monitor.full("vps-fra") == 1440
    routes = {"192.168.50.0/24": 1352, "10.100.0.0/16": None}  # a heal from before: the VPS's route lowered
    assert pmtu_heal.adopted(plan, routes) == {"vps-fra": 1352}
    assert pmtu_heal.adopted(plan, {"192.168.50.0/24": 1440, "10.100.0.0/16": None}) == {}  # its static MTU
    # restored: back to the VPS's own MTU, not to wg0's 8836 (which would be a black hole on the internet)
    assert pmtu_heal.commands(plan, {}, routes) == [
        ["ip", "-4", "route", "replace", "192.168.50.0/24", "dev", "wg0", "mtu", "1440"]
    ]
    assert pmtu_heal.commands(plan, {}, {"192.168.50.0/24": 1440, "10.100.0.0/16": None}) == []


# --- the program, under mocks -------------------------------------------------------------------------------------

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
GCP_INSTANCE = "gcp:compute/instance:Instance"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"


def test_the_gateways_get_their_fixed_private_addresses_and_admit_each_other_from_them() -> None:
    run = run_program(prod_raw(), preview=False, stack="underlay")
    assert run.error is None, run.error
    aws = run.named(AWS_INSTANCE, "aws-use1-instance")
    assert aws.inputs["privateIp"] == "10.10.0.10"
    assert run.options(AWS_INSTANCE, "aws-use1-instance").delete_before_replace
    gcp = run.named(GCP_INSTANCE, "gcp-euw3-instance")
    assert gcp.inputs["networkInterfaces"][0]["networkIp"] == "10.100.0.10"
    assert run.options(GCP_INSTANCE, "gcp-euw3-instance").delete_before_replace
    (wireguard,) = [i for i in run.named(AWS_SG, "aws-use1-sg").inputs["ingress"] if i["protocol"] == "udp"]
    assert "10.100.0.10/32" in wireguard["cidrBlocks"] and len(wireguard["cidrBlocks"]) == 3
    (icmp,) = [i for i in run.named(AWS_SG, "aws-use1-sg").inputs["ingress"] if i["protocol"] == "icmp"]
    assert (icmp["fromPort"], icmp["toPort"], icmp["cidrBlocks"]) == (8, 0, ["10.100.0.10/32"])
    wireguard_rule = run.named(GCP_FIREWALL, "gcp-euw3-fw-wireguard").inputs
    assert "10.10.0.10/32" in wireguard_rule["sourceRanges"] and len(wireguard_rule["sourceRanges"]) == 3
    probe_rule = run.named(GCP_FIREWALL, "gcp-euw3-fw-path-probe").inputs
    assert probe_rule["sourceRanges"] == ["10.10.0.10/32"] and probe_rule["allows"] == [{"protocol": "icmp"}]


def test_without_private_paths_the_cloud_chooses_the_address_and_replaces_before_deleting() -> None:
    run = run_program({**prod_raw(), "private_paths": []}, preview=True, stack="underlay")
    assert run.error is None, run.error
    assert "privateIp" not in run.named(AWS_INSTANCE, "aws-use1-instance").inputs
    assert not run.options(AWS_INSTANCE, "aws-use1-instance").delete_before_replace
    assert "networkIp" not in run.named(GCP_INSTANCE, "gcp-euw3-instance").inputs["networkInterfaces"][0]


def test_doctor_probes_an_internet_peer_at_its_own_mtu() -> None:
    cfg = load_mesh(prod_raw())
    conf = parse_conf(wg_quick_conf(topology.interface_plan(cfg, "aws-use1", directory(cfg)), "PRIVATE"))
    assert conf.mtu == 8836 and dict(conf.route_mtus) == {"192.168.50.0/24": 1440}
    sizes = {p.name: conf.peer_mtu(p, 8836) for p in conf.peers}
    assert sizes == {"gcp-euw3": 8836, "vps-fra": 1440}
    probed: list[tuple[str, int]] = []

    class Pings:
        def run(self, argv: Sequence[str]) -> CommandResult:
            probed.append((argv[-1], int(argv[argv.index("-s") + 1]) + 28))
            return CommandResult(0, "", "")

        def read(self, path: str) -> str:
            raise FileNotFoundError(path)

        def now(self) -> float:
            return 0.0

    checks = path_checks(Pings(), conf.peers, conf.mtu, conf.peer_mtu)
    assert [c.status for c in checks] == ["ok", "ok"]
    assert sorted(probed) == sorted(
        [("10.200.0.2", SMALL_SIZE), ("10.200.0.2", 8836), ("10.200.0.3", SMALL_SIZE), ("10.200.0.3", 1440)]
    )


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "update"])
def test_the_underlay_example_stack_runs_under_mocks_and_leaks_no_key(preview: bool) -> None:
    """examples/underlay/Pulumi.underlay.yaml (not in the every-stack tests: docs/how-to/private-paths.md): the
    program runs it, the path's gateways are fixed to their private addresses, and the key-material scan of every
    stack file (tests/test_program.py) finds nothing public."""
    raw = read_raw(EXAMPLE_STACK)
    assert isinstance(raw, dict) and raw["private_paths"][0]["sites"] == ["aws-use1", "gcp-use4"]
    run = run_program(raw, preview=preview, stack="underlay")
    assert run.error is None, run.error
    assert run.named(AWS_INSTANCE, "aws-use1-instance").inputs["privateIp"] == "10.10.0.10"
    assert run.named(GCP_INSTANCE, "gcp-use4-instance").inputs["networkInterfaces"][0]["networkIp"] == "10.100.0.10"
    if not preview:
        program_tests.test_no_private_key_appears_anywhere_public(run)
