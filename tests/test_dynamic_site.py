"""Dynamic-address static sites (issue 24, `endpoint: dynamic`): the config's rules, the rendered wg0.conf of every
site (golden files under tests/golden/dynamic/), the firewalls' sources, and the program under mocks in both delivery
modes. The agent's side (a learned endpoint never touched) is tests/test_agent_dynamic.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import ProgramRun, run_program
from tests.golden import assert_golden
from tests.signed import verified_body
from tests.test_program import AWS_SG, GCP_FIREWALL
from tests.test_program_live import agent_json, stored_document
from tests.test_render import directory, fake_public_key, redacted
from wg_mesh import args
from wg_mesh.cli import initcmd
from wg_mesh.config import ConfigError, MeshConfig, StaticSite, parse_mesh, quotas
from wg_mesh.config.reach import is_dynamic
from wg_mesh.gateway import document
from wg_mesh.gateway.doctor.interface import check_handshake
from wg_mesh.gateway.trust import Trust, plan_problem
from wg_mesh.gateway.wgconf import parse_wg_quick_conf, wg_quick_conf
from wg_mesh.gateway.wgmetrics import PeerStat
from wg_mesh.plan import topology
from wg_mesh.plan.topology import PeerAddress, interface_plan


def raw_mesh(**office: Any) -> dict[str, Any]:
    """A cloud gateway on each cloud, a static site with a fixed address and `office` on a dynamic one."""
    return {
        "overlay_cidr": "10.200.0.0/24",
        "persistent_keepalive": 25,
        "sites": [
            {"name": "aws-use1", "cloud": "aws", "region": "us-east-1", "overlay_ip": "10.200.0.1",
             "cidrs": ["10.10.0.0/16"]},
            {"name": "gcp-euw3", "cloud": "gcp", "project": "my-project", "region": "europe-west3",
             "zone": "europe-west3-a", "overlay_ip": "10.200.0.2", "cidrs": ["10.100.0.0/16"],
             "workload_scope": "network"},
            {"name": "vps-fra", "cloud": "static", "endpoint": "203.0.113.10", "overlay_ip": "10.200.0.3",
             "cidrs": ["192.168.30.0/24"]},
            {"name": "office", "cloud": "static", "endpoint": "dynamic", "overlay_ip": "10.200.0.4",
             "cidrs": ["10.50.0.0/24"], **office},
        ],
    }  # fmt: skip


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_mesh(raw)
    return caught.value.problems


RANGES = ["198.51.100.0/24", "192.0.2.0/25"]


# --- config -------------------------------------------------------------------------------------------------------


def test_a_static_site_may_be_dynamic_with_or_without_ranges() -> None:
    cfg = parse_mesh(raw_mesh())
    office = cfg.site("office")
    assert isinstance(office, StaticSite) and is_dynamic(office) and office.endpoint == "dynamic"
    assert office.endpoint_ranges is None
    vps = cfg.site("vps-fra")
    assert isinstance(vps, StaticSite) and not is_dynamic(vps)
    ranged = parse_mesh(raw_mesh(endpoint_ranges=RANGES)).site("office")
    assert isinstance(ranged, StaticSite) and [str(r) for r in ranged.endpoint_ranges or []] == RANGES


def test_a_dynamic_site_needs_keepalives() -> None:
    assert problems(raw_mesh() | {"persistent_keepalive": 0}) == [
        "persistent_keepalive: 0, and sites[3] (office) has endpoint: dynamic: its keepalives are the only way the "
        "gateways learn its address and its NAT keeps the mapping open (set e.g. 25)"
    ]


def test_endpoint_ranges_only_on_a_dynamic_site() -> None:
    raw = raw_mesh()
    raw["sites"][2]["endpoint_ranges"] = RANGES
    assert problems(raw) == [
        "sites[2].endpoint_ranges: only for endpoint: dynamic or a DNS name (its peers admit its /32); remove "
        "endpoint_ranges or set endpoint: dynamic"
    ]
    raw = raw_mesh()
    raw["sites"][0]["endpoint_ranges"] = RANGES
    assert "sites[0].endpoint_ranges: unknown key (a key of static sites only)" in problems(raw)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("10.0.0.0/8", "10.0.0.0/8 overlaps 10.0.0.0/8: the gateways see the public address"),
        ("100.64.0.0/16", "100.64.0.0/16 overlaps 100.64.0.0/10"),
        ("0.0.0.0/0", "0.0.0.0/0 is wider than a /8: leave endpoint_ranges out to admit any address"),
        ("224.0.0.0/8", "224.0.0.0/8 overlaps 224.0.0.0/4, multicast"),
        ("198.51.100.7/24", "198.51.100.7/24 has host bits set"),
    ],
)
def test_endpoint_ranges_are_public_prefixes_no_wider_than_a_slash_8(value: str, message: str) -> None:
    (problem,) = problems(raw_mesh(endpoint_ranges=[value]))
    assert problem.startswith(f"sites[3].endpoint_ranges[0]: {message}"), problem


def test_a_misspelt_or_wrong_type_endpoint_is_one_clear_problem() -> None:
    assert problems(raw_mesh(endpoint="dynamc")) == [
        "sites[3].endpoint: 'dynamc' is neither an IPv4 address, 'dynamic' (a site with no fixed address) nor a "
        "fully qualified DNS name (e.g. vpn.example.com)"
    ]
    assert problems(raw_mesh(endpoint=5)) == [
        "sites[3].endpoint: expected an IPv4 address, 'dynamic' or a DNS name, got 5"
    ]


def test_a_dynamic_site_on_a_private_path_is_refused() -> None:
    raw = raw_mesh(private_ip="10.50.0.1") | {"delivery": "live"}
    raw["private_paths"] = [{"name": "wan", "sites": ["aws-use1", "office"], "kind": "wan"}]
    assert any(p.startswith("sites[3].endpoint: dynamic, and office is on a private path") for p in problems(raw))


def test_init_and_the_component_args_take_dynamic() -> None:
    text = initcmd.stack_text("edge", ["aws-use1:aws:us-east-1:10.10.0.0/16", "office:static:dynamic:10.50.0.0/24"],
                              "10.200.0.0/24", None)  # fmt: skip
    assert "endpoint: dynamic" in text
    mesh = args.to_config(raw_mesh(endpoint_ranges=RANGES))
    assert mesh.site("office").endpoint == "dynamic"  # type: ignore[union-attr]
    assert "'dynamic'" in _attribute_docstring(args.SiteArgs, "endpoint")
    assert "endpoint_ranges" in args.SiteArgs.__annotations__


def _attribute_docstring(cls: type, name: str) -> str:
    import inspect

    source = inspect.getsource(cls)
    after = source.split(f"    {name}: ", 1)[1]
    return after.split('"""', 2)[1]


def test_aws_counts_a_dynamic_peers_sources_as_rules() -> None:
    cfg = parse_mesh(raw_mesh())
    assert quotas.aws_inbound_rules(cfg, "aws-use1")["WireGuard"] == len(topology.peer_source_ranges(
        cfg, "aws-use1", directory(cfg))) == 3  # fmt: skip
    cfg = parse_mesh(raw_mesh(endpoint_ranges=RANGES))
    assert quotas.aws_inbound_rules(cfg, "aws-use1")["WireGuard"] == 4


# --- rendering ----------------------------------------------------------------------------------------------------


def conf_peers(conf: str) -> dict[str, dict[str, list[str]]]:
    keys = {fake_public_key(n): n for n in ("aws-use1", "gcp-euw3", "vps-fra", "office")}
    return {keys[p["PublicKey"][0]]: p for name, p in parse_wg_quick_conf(conf) if name == "Peer"}


@pytest.mark.parametrize("site", ["aws-use1", "gcp-euw3", "vps-fra", "office"])
def test_wg_conf_matches_golden(site: str) -> None:
    cfg = parse_mesh(raw_mesh())
    conf = wg_quick_conf(interface_plan(cfg, site, directory(cfg)), redacted(site))
    assert_golden(f"dynamic/{site}.wg0.conf", conf)


@pytest.mark.parametrize("site", ["aws-use1", "gcp-euw3", "vps-fra"])
def test_the_peers_of_a_dynamic_site_have_no_endpoint_for_it(site: str) -> None:
    cfg = parse_mesh(raw_mesh())
    peers = conf_peers(wg_quick_conf(interface_plan(cfg, site, directory(cfg)), redacted(site)))
    assert "Endpoint" not in peers["office"]
    assert peers["office"]["PersistentKeepalive"] == ["25"]  # harmless: sent once WireGuard learnt the address
    assert all("Endpoint" in p for name, p in peers.items() if name != "office")


def test_the_dynamic_site_dials_every_peer_and_keeps_the_path_open() -> None:
    cfg = parse_mesh(raw_mesh())
    addresses = directory(cfg)
    peers = conf_peers(wg_quick_conf(interface_plan(cfg, "office", addresses), redacted("office")))
    assert set(peers) == {"aws-use1", "gcp-euw3", "vps-fra"}
    for name, peer in peers.items():
        assert peer["Endpoint"] == [f"{addresses[name].public_ip}:51820"]
        assert peer["PersistentKeepalive"] == ["25"]


def test_firewall_sources_open_the_wireguard_port_to_a_dynamic_peer_and_keep_every_other_a_slash_32() -> None:
    cfg = parse_mesh(raw_mesh())
    addresses = directory(cfg)
    others = {f"{addresses[n].public_ip}/32" for n in ("gcp-euw3", "vps-fra")}
    assert set(topology.peer_source_ranges(cfg, "aws-use1", addresses)) == others | {"0.0.0.0/0"}
    ranged = parse_mesh(raw_mesh(endpoint_ranges=RANGES))
    assert set(topology.peer_source_ranges(ranged, "aws-use1", addresses)) == others | set(RANGES)
    # the dynamic site's own host filter admits exactly its peers' /32s
    own = interface_plan(cfg, "office", addresses).listen_sources
    assert set(own) == {f"{addresses[n].public_ip}/32" for n in ("aws-use1", "gcp-euw3", "vps-fra")}


def test_a_static_peer_of_a_dynamic_site_filters_on_its_ranges_or_not_at_all() -> None:
    cfg = parse_mesh(raw_mesh())
    plan = interface_plan(cfg, "vps-fra", directory(cfg))
    assert plan.listen_sources == ()  # any address may be the office's: no host filter on the port
    conf = wg_quick_conf(plan, redacted("vps-fra"))
    assert "--dport 51820 -j DROP" not in conf
    ranged = parse_mesh(raw_mesh(endpoint_ranges=RANGES))
    plan = interface_plan(ranged, "vps-fra", directory(ranged))
    assert set(RANGES) <= set(plan.listen_sources)
    conf = wg_quick_conf(plan, redacted("vps-fra"))
    assert all(f"-s {r} -j ACCEPT" in conf for r in RANGES) and "--dport 51820 -j DROP" in conf


def test_the_document_carries_a_dynamic_peer_as_null_and_the_gateway_reads_it_back() -> None:
    cfg = parse_mesh(raw_mesh(endpoint_ranges=RANGES))
    for site in ("aws-use1", "vps-fra"):
        plan = interface_plan(cfg, site, directory(cfg))
        body = json.loads(document.encode_body(plan, fake_public_key(site), scope="wg-mesh/edge", serial=1))
        (office,) = [p for p in body["interface"]["peers"] if p["name"] == "office"]
        assert office["endpoint"] is None and "fallback_endpoint" not in office
        assert document._plan(body["interface"], site) == plan
        trust = Trust(signing_key=fake_public_key("signer"), scope="wg-mesh/edge", site=site,
                      cidrs=tuple(str(c) for c in cfg.site(site).cidrs), overlay="10.200.0.0/24")  # fmt: skip
        assert plan_problem(plan, trust) is None


# --- the program under mocks --------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["user-data", "live"])
def applied_dynamic(request: pytest.FixtureRequest) -> ProgramRun:
    run = run_program(raw_mesh() | {"delivery": request.param}, preview=False, stack="edge")
    assert run.error is None, run.error
    return run


def test_the_clouds_open_the_wireguard_port_for_the_dynamic_site(applied_dynamic: ProgramRun) -> None:
    sg = applied_dynamic.named(AWS_SG, "aws-use1-sg")
    (udp,) = [rule for rule in sg.inputs["ingress"] if rule["protocol"] == "udp"]
    assert "0.0.0.0/0" in udp["cidrBlocks"] and len(udp["cidrBlocks"]) == 3
    assert all(c.endswith("/32") for c in udp["cidrBlocks"] if c != "0.0.0.0/0")
    others = [r for r in sg.inputs["ingress"] if r["protocol"] != "udp"]
    assert all("0.0.0.0/0" not in r.get("cidrBlocks", []) for r in others)  # every other rule stays narrow
    wireguard = [f for f in applied_dynamic.of_type(GCP_FIREWALL) if any(
        a.get("ports") == ["51820"] for a in f.inputs.get("allows", []))]  # fmt: skip
    (fw,) = wireguard
    assert "0.0.0.0/0" in fw.inputs["sourceRanges"]
    assert applied_dynamic.exports["sites"].value["office"]["public_ip"] == "dynamic"


def test_no_gateway_is_given_an_endpoint_for_the_dynamic_site(applied_dynamic: ProgramRun) -> None:
    cfg: MeshConfig = parse_mesh(applied_dynamic.raw)
    delivery = cfg.delivery
    if delivery == "user-data":
        configs = applied_dynamic.exports["wireguard_configs"].value
        for site in ("aws-use1", "gcp-euw3", "vps-fra"):
            peers = conf_peers_by_key(configs[site])
            assert "Endpoint" not in peers[office_key(applied_dynamic)], site
        assert all("Endpoint" in p for p in conf_peers_by_key(configs["office"]).values())
    else:
        for site in ("aws-use1", "gcp-euw3", "vps-fra"):
            model = cfg.site(site)
            body = verified_body(stored_document(applied_dynamic, model), agent_json(applied_dynamic, model)["trust"])
            (office,) = [p for p in body["interface"]["peers"] if p["name"] == "office"]
            assert office["endpoint"] is None, site
        office_body = verified_body(stored_document(applied_dynamic, cfg.site("office")),
                                    agent_json(applied_dynamic, cfg.site("office"))["trust"])  # fmt: skip
        assert all(p["endpoint"] for p in office_body["interface"]["peers"])


def office_key(run: ProgramRun) -> str:
    return str(run.exports["sites"].value["office"]["public_key"])


def conf_peers_by_key(conf: str) -> dict[str, dict[str, list[str]]]:
    return {p["PublicKey"][0]: p for name, p in parse_wg_quick_conf(conf) if name == "Peer"}


def test_a_peer_address_directory_entry_for_a_dynamic_site_is_never_dialled() -> None:
    cfg = parse_mesh(raw_mesh())
    addresses = dict(directory(cfg))
    addresses["office"] = PeerAddress("dynamic", fake_public_key("office"))  # what the component's output says
    for site in ("aws-use1", "vps-fra"):
        plan = interface_plan(cfg, site, addresses)
        assert "dynamic" not in wg_quick_conf(plan, redacted(site))
        assert all("dynamic" not in s for s in topology.peer_source_ranges(cfg, site, addresses))


def test_a_static_peers_host_filter_with_endpoint_ranges_matches_golden() -> None:
    cfg = parse_mesh(raw_mesh(endpoint_ranges=RANGES))
    assert_golden("dynamic/vps-fra.ranges.wg0.conf", wg_quick_conf(interface_plan(cfg, "vps-fra", directory(cfg)),
                                                                   redacted("vps-fra")))  # fmt: skip


def test_doctor_says_a_silent_dynamic_peer_is_waited_for_not_unreachable() -> None:
    silent = PeerStat("wg0", fake_public_key("office"), None, ("10.200.0.4/32",), 0, 0, 0)
    check = check_handshake(silent, "office", "office", 1_800_000_000.0, dynamic=True)
    assert check.detail.startswith("nothing received yet from office, a dynamic site (no endpoint known)")
    assert "endpoint_ranges" in check.hint
    fixed = check_handshake(silent, "vps-fra", "vps-fra", 1_800_000_000.0)
    assert fixed.detail.startswith("endpoint unreachable")
