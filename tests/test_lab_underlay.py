"""The lab's private paths (issue 13, docs/underlay.md; wg_mesh/lab/fabric/privatepath.py, underlaycheck.py): the plan
(pure) and, as root, the underlay stack (examples/underlay/Pulumi.underlay.yaml: outside the every-stack tests' glob)
built for real with check 7."""

from __future__ import annotations

import json
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import pytest
import yaml

from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.fabric.netns import missing_requirements
from wg_mesh.lab.fabric.plan import LabPlanError, plan_lab
from wg_mesh.lab.fabric.privatepath import LINK_POOL
from wg_mesh.lab.run import run_lab
from wg_mesh.plan import topology
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent
STACK = REPO / "examples" / "underlay" / "Pulumi.underlay.yaml"
PREFIX = "wgl0a1c"
IFNAMSIZ = 15
CANNOT_RUN = missing_requirements()
needs_lab = pytest.mark.skipif(bool(CANNOT_RUN), reason="the lab cannot run here: " + "; ".join(CANNOT_RUN))


def underlay() -> MeshConfig:
    return load(STACK)


def raw_underlay() -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(STACK.read_text())["config"]["wg-mesh:mesh"]
    return raw


def test_private_path_is_one_link_between_the_vpc_routers_at_the_paths_mtu() -> None:
    cfg = underlay()
    plan = plan_lab(cfg, PREFIX)
    aws, gcp, vps = plan.sites
    (link,) = plan.private_links
    assert (link.path, link.kind, link.mtu, link.tunnel_mtu) == ("use1-use4", "interconnect", 8896, 8836)
    assert (link.a.site, link.b.site) == (aws.name, gcp.name)
    assert (link.a.vpc_ns, link.b.vpc_ns) == (aws.vpc_ns, gcp.vpc_ns)
    assert all(len(end.interface) <= IFNAMSIZ for end in (link.a, link.b))
    # Link-local addresses on one /30, colliding with nothing of the mesh's
    assert link.a.address.network == link.b.address.network and link.a.address.network.subnet_of(LINK_POOL)
    used = [cidr for s in cfg.sites for cidr in s.cidrs] + [cfg.overlay_cidr]
    used += [s.transit_internet.network for s in plan.sites]
    assert not any(link.a.address.network.overlaps(IPv4Network(str(net))) for net in used)
    assert plan.private_link(gcp.name, aws.name) is link and plan.private_link(aws.name, vps.name) is None
    assert plan.private_link(gcp.name, vps.name) is None


def test_the_private_link_routes_only_the_far_gateway_never_a_workload_range() -> None:
    cfg = underlay()
    plan = plan_lab(cfg, PREFIX)
    (link,) = plan.private_links
    routes = link.routes()
    gateways = {plan.site(end.site).vpc_ns: plan.site(far.site).gateway_ip.ip for end, far in link.ends()}
    assert [(ns, str(dst)) for ns, dst, _, _ in routes] == [(ns, f"{gw}/32") for ns, gw in gateways.items()]
    for _, destination, via, device in routes:
        assert destination.prefixlen == 32 and via in link.a.address.network and device.startswith("pp")
    # The workload hosts' routes are unchanged: every remote range via their own gateway (the VPC route table).
    for site in plan.sites:
        assert list(site.host_routes) == topology.remote_ranges(cfg, site.name)
    ranges = [IPv4Network(str(c)) for s in cfg.sites for c in s.cidrs]
    assert not any(destination.supernet_of(r) for _, destination, _, _ in routes for r in ranges)


def test_mtus_jumbo_vpc_and_path_internet_unchanged() -> None:
    cfg = underlay()
    plan = plan_lab(cfg, PREFIX)
    aws, gcp, vps = plan.sites
    # GCP's VPC at its underlay_mtu (8896) on the NICs; the internet carries 1500 at most (sites.INTERNET_MTU).
    assert [(s.nic_mtu, s.uplink_mtu) for s in plan.sites] == [(9001, 1500), (8896, 1500), (1500, 1500)]
    assert plan.peer_mtu(aws.name, gcp.name) == plan.peer_mtu(gcp.name, aws.name) == 8836
    assert plan.peer_mss(aws.name, gcp.name) == 8796
    for a, b in ((aws, vps), (gcp, vps)):
        assert plan.peer_mtu(a.name, b.name) == plan.tunnel_mtu
    for a, b in ((aws, gcp), (aws, vps), (gcp, vps)):
        assert plan.peer_mtu(a.name, b.name) == topology.peer_tunnel_mtu(cfg, a.name, b.name)


def test_the_directory_carries_the_cloud_gateways_private_addresses() -> None:
    plan = plan_lab(underlay(), PREFIX)
    directory = plan.directory({s.name: f"key-{s.name}" for s in plan.sites})
    for site in plan.sites:
        want = str(site.gateway_ip.ip) if site.is_cloud else None
        assert directory[site.name].private_ip == want
        assert directory[site.name].public_ip == str(site.public_ip)


def test_a_path_of_three_sites_links_every_pair_on_its_own_subnet_and_interfaces() -> None:
    raw = raw_underlay()
    site = {"name": "aws-usw2", "cloud": "aws", "region": "us-west-2", "overlay_ip": "10.200.0.4"}
    raw["sites"].append({**site, "cidrs": ["10.20.0.0/16"]})
    raw["private_paths"][0]["sites"].append("aws-usw2")
    cfg = load_mesh(raw)
    plan = plan_lab(cfg, PREFIX)
    pairs = {link.sites for link in plan.private_links}
    expected = (("aws-use1", "gcp-use4"), ("aws-use1", "aws-usw2"), ("gcp-use4", "aws-usw2"))
    assert pairs == {frozenset(p) for p in expected}
    assert len({link.a.address.network for link in plan.private_links}) == 3
    names = [(end.vpc_ns, end.interface) for link in plan.private_links for end in (link.a, link.b)]
    assert len(set(names)) == len(names) == 6
    for link in plan.private_links:
        assert plan.peer_mtu(link.a.site, link.b.site) == topology.peer_tunnel_mtu(cfg, link.a.site, link.b.site)


def test_stacks_without_private_paths_get_no_link() -> None:
    for name in ("dev", "prod"):
        assert plan_lab(load(REPO / f"Pulumi.{name}.yaml"), PREFIX).private_links == ()


def test_a_static_member_is_refused_not_silently_left_on_the_internet() -> None:
    raw = raw_underlay()
    raw["sites"][2]["private_ip"] = "10.60.0.5"
    raw["private_paths"][0].update(sites=["aws-use1", "vps-fra"], mtu=1500)
    refused = r"private_paths\[0\] \(use1-use4\): vps-fra is a static site: .*not modelled"
    with pytest.raises(LabPlanError, match=refused):
        plan_lab(load_mesh(raw), PREFIX)


def test_bench_section_renders_from_the_published_json() -> None:
    from bench.report.underlay import section

    path = REPO / "docs" / "bench" / "underlay.json"
    data = json.loads(path.read_text())
    text = section(data)
    assert "Ratio private / internet" in text and data["private_path"]["path"] in text


@pytest.mark.integration
@needs_lab
def test_lab_on_the_underlay_stack_passes_with_the_private_path_check() -> None:
    cfg = underlay()
    options = LabOptions(handshake_timeout=20, iperf_seconds=1, bulk_bytes=4 * 1024 * 1024)
    report = run_lab(cfg, "underlay", options=options)
    data = report.to_json()
    assert report.ok, json.dumps({k: (c["ok"], c["summary"]) for k, c in data["checks"].items()}, indent=1)
    checks = data["checks"]
    assert list(checks) == ["handshakes", "ping", "path_mtu", "bulk_tcp", "throughput", "recovery", "private_paths"]
    private = checks["private_paths"]
    plan = report.plan
    aws, gcp, vps = plan.sites
    by_pair = {(e["gateway"], e["peer"]): e for e in private["endpoints"]}
    assert by_pair[(aws.name, gcp.name)]["endpoint"] == str(gcp.gateway_ip.ip)
    assert by_pair[(gcp.name, aws.name)]["endpoint"] == str(aws.gateway_ip.ip)
    assert by_pair[(aws.name, vps.name)]["endpoint"] == str(vps.public_ip)
    assert by_pair[(vps.name, gcp.name)]["endpoint"] == str(gcp.public_ip)
    assert all(x["wireguard_packets"] > 0 and x["other_packets"] == 0 for x in private["link_traffic"])
    assert all(h["ok"] for h in private["host_routes"])
    probes = {(p["from"], p["to"]): p for p in checks["path_mtu"]["probes"]}
    assert probes[(aws.name, gcp.name)]["max_payload"] == 8836 - 28
    assert probes[(aws.name, vps.name)]["max_payload"] == plan.tunnel_mtu - 28
    assert all(p["over_refused_cleanly"] for p in probes.values())
    assert all(v == 0 for counters in checks["path_mtu"]["fragmentation"].values() for v in counters.values())
    transfers = {t["to"]: t for t in checks["bulk_tcp"]["transfers"]}
    assert max(transfers[gcp.name]["mss_sender"], transfers[gcp.name]["mss_receiver"]) <= 8796
    assert data["duration_s"] < 60
