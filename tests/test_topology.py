"""Topology: peers, AllowedIPs, routes, MTU arithmetic, addressing of created networks."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path

import pytest

from wg_mesh.config import MeshConfig
from wg_mesh.plan.topology import (
    PeerAddress,
    allowed_ips,
    clamped_mss,
    gateway_subnet,
    interface_plan,
    peer_names,
    peer_source_ranges,
    remote_ranges,
    static_endpoints,
    tunnel_mtu,
)
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def prod() -> MeshConfig:
    return load(REPO / "Pulumi.prod.yaml")


def directory(cfg: MeshConfig) -> dict[str, PeerAddress]:
    return {s.name: PeerAddress(f"198.51.100.{i + 1}", f"PUB{i}") for i, s in enumerate(cfg.sites)}


def test_full_mesh_every_site_peers_with_every_other(prod: MeshConfig) -> None:
    assert peer_names(prod, "aws-use1") == ["gcp-euw3", "vps-fra"]
    assert peer_names(prod, "vps-fra") == ["aws-use1", "gcp-euw3"]
    with pytest.raises(KeyError):
        peer_names(prod, "nope")


def test_allowed_ips_are_overlay_host_and_site_cidrs(prod: MeshConfig) -> None:
    assert allowed_ips(prod, "gcp-euw3") == ("10.200.0.2/32", "10.100.0.0/16")


def test_routes_cover_the_overlay_and_every_remote_cidr_but_never_the_own(prod: MeshConfig) -> None:
    assert remote_ranges(prod, "aws-use1") == [
        IPv4Network("10.200.0.0/24"),
        IPv4Network("10.100.0.0/16"),
        IPv4Network("192.168.50.0/24"),
    ]
    for site in prod.sites:
        assert not set(site.cidrs) & set(remote_ranges(prod, site.name))


@pytest.mark.parametrize(
    ("underlays", "expected"),
    [
        ({"aws": 1500, "gcp": 1460}, 1400),  # GCP's default VPC MTU is the floor
        ({"aws": 1500, "gcp": 1500}, 1440),
        # jumbo networks meet over the internet at 1500 at most; a jumbo tunnel is a private path's (test_underlay.py)
        ({"aws": 9001, "gcp": 8896}, 1440),
    ],
)
def test_auto_mtu_is_smallest_underlay_at_most_1500_minus_60(underlays: dict[str, int], expected: int) -> None:
    raw = {
        "overlay_cidr": "10.200.0.0/24",
        "sites": [
            {"name": "a", "cloud": "aws", "region": "us-east-1", "overlay_ip": "10.200.0.1", "cidrs": ["10.10.0.0/16"],
             "underlay_mtu": underlays["aws"]},
            {"name": "g", "cloud": "gcp", "project": "my-project", "region": "europe-west3", "zone": "europe-west3-a",
             "overlay_ip": "10.200.0.2", "cidrs": ["10.100.0.0/16"], "underlay_mtu": underlays["gcp"]},
        ],
    }  # fmt: skip
    assert tunnel_mtu(load_mesh(raw)) == expected


def test_explicit_mtu_wins(prod: MeshConfig) -> None:
    assert tunnel_mtu(prod.model_copy(update={"mtu": 1380})) == 1380


def test_mss_is_mtu_minus_ipv4_and_tcp_headers() -> None:
    assert clamped_mss(1400) == 1360
    assert clamped_mss(1420) == 1380


def test_interface_plan(prod: MeshConfig) -> None:
    plan = interface_plan(prod, "gcp-euw3", directory(prod))
    assert plan.address == "10.200.0.2/24"
    assert (plan.listen_port, plan.mtu, plan.mss, plan.masquerade) == (51820, 1400, 1360, False)
    assert [(p.name, p.public_key, p.endpoint, p.allowed_ips) for p in plan.peers] == [
        ("aws-use1", "PUB0", "198.51.100.1:51820", ("10.200.0.1/32", "10.10.0.0/16")),
        ("vps-fra", "PUB2", "198.51.100.3:51820", ("10.200.0.3/32", "192.168.50.0/24")),
    ]
    assert all(p.persistent_keepalive == 25 for p in plan.peers)


def test_interface_plan_needs_every_peer(prod: MeshConfig) -> None:
    partial = directory(prod)
    del partial["vps-fra"]
    with pytest.raises(KeyError, match="vps-fra"):
        interface_plan(prod, "aws-use1", partial)


def test_firewall_sources_are_exactly_the_peers_public_addresses(prod: MeshConfig) -> None:
    assert peer_source_ranges(prod, "aws-use1", directory(prod)) == ["198.51.100.2/32", "198.51.100.3/32"]


def test_static_endpoints_come_from_config(prod: MeshConfig) -> None:
    assert static_endpoints(prod) == {"vps-fra": "203.0.113.7"}


@pytest.mark.parametrize(
    ("cidr", "subnet"),
    [("10.10.0.0/16", "10.10.0.0/24"), ("192.168.50.0/24", "192.168.50.0/24"), ("10.0.0.0/26", "10.0.0.0/26")],
)
def test_gateway_subnet_is_the_first_slash24(cidr: str, subnet: str) -> None:
    assert gateway_subnet(IPv4Network(cidr)) == IPv4Network(subnet)
