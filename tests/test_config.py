"""Config validation: every bad input fails with a line naming its field; valid stacks load."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.stacks import STACK_FILES
from wg_mesh.config import AwsSite, ConfigError, GcpSite, MeshConfig, StaticSite
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent
STACKS = STACK_FILES
VPC, SUBNET, RTB1, RTB2 = "vpc-0123abcd", "subnet-0123456789abcdef0", "rtb-0a1b2c3d", "rtb-0a1b2c3e"


def base() -> dict[str, Any]:
    return {
        "overlay_cidr": "10.200.0.0/24",
        "listen_port": 51820,
        "mtu": "auto",
        "persistent_keepalive": 25,
        "sites": [
            {
                "name": "aws-use1",
                "cloud": "aws",
                "region": "us-east-1",
                "overlay_ip": "10.200.0.1",
                "cidrs": ["10.10.0.0/16"],
            },
            {
                "name": "gcp-euw3",
                "cloud": "gcp",
                "project": "my-project",
                "region": "europe-west3",
                "zone": "europe-west3-a",
                "overlay_ip": "10.200.0.2",
                "cidrs": ["10.100.0.0/16"],
            },
            {
                "name": "vps-fra",
                "cloud": "static",
                "endpoint": "203.0.113.7",
                "overlay_ip": "10.200.0.3",
                "cidrs": ["192.168.50.0/24"],
            },
        ],
    }


def problems_for(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_mesh(raw)
    return caught.value.problems


def with_change(path: str, value: Any) -> dict[str, Any]:
    """base() with one value set; path like 'sites.1.overlay_ip'; value None deletes the key."""
    raw = copy.deepcopy(base())
    *parents, last = path.split(".")
    node: Any = raw
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    key: Any = int(last) if last.isdigit() else last
    if value is None:
        del node[key]
    else:
        node[key] = value
    return raw


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.name)
def test_every_stack_file_in_the_repo_is_valid(stack: Path) -> None:
    cfg = load(stack)
    assert len(cfg.sites) >= 2


def test_defaults_follow_the_clouds() -> None:
    cfg = load_mesh(base())
    aws, gcp, static = cfg.sites
    assert isinstance(aws, AwsSite) and aws.instance_type == "c6i.2xlarge" and aws.underlay_mtu == 1500
    assert isinstance(gcp, GcpSite) and gcp.instance_type == "n2-standard-8" and gcp.underlay_mtu == 1460
    assert isinstance(static, StaticSite) and static.underlay_mtu == 1500
    assert cfg.masquerade is False and all(site.key_epoch == 0 for site in cfg.sites)
    assert not aws.uses_existing_network and not gcp.uses_existing_network
    assert cfg.delivery == "user-data"  # today's behaviour unless a stack asks for live


def test_prod_delivers_live_and_dev_through_user_data() -> None:
    assert load(REPO / "Pulumi.prod.yaml").delivery == "live"
    assert load(REPO / "Pulumi.dev.yaml").delivery == "user-data"


def test_dev_stack_is_the_reference_topology() -> None:
    cfg = load(REPO / "Pulumi.dev.yaml")
    assert [(s.cloud, str(s.overlay_ip), [str(c) for c in s.cidrs]) for s in cfg.sites] == [
        ("aws", "10.200.0.1", ["10.10.0.0/16"]),
        ("gcp", "10.200.0.2", ["10.100.0.0/16"]),
    ]
    assert [s.region for s in cfg.sites if not isinstance(s, StaticSite)] == ["us-east-1", "europe-west3"]


def test_prod_stack_has_aws_gcp_and_a_static_site() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    assert sorted(s.cloud for s in cfg.sites) == ["aws", "gcp", "static"]


BAD_INPUTS = [
    # (change, expected line)
    (("sites.1.name", "aws-use1"), "sites[1].name: 'aws-use1' is already used by sites[0]"),
    (("sites.0.name", "AWS_use1"), "sites[0].name: 'AWS_use1' is not a DNS label"),
    (("sites.0.name", "1aws"), "sites[0].name: '1aws' is not a DNS label"),
    (("sites.0.name", "a" * 40), "is longer than 32 characters"),
    (("sites.1.overlay_ip", "10.201.0.2"), "sites[1].overlay_ip: 10.201.0.2 is outside overlay_cidr 10.200.0.0/24"),
    (("sites.0.overlay_ip", "10.200.0.0"), "sites[0].overlay_ip: 10.200.0.0 is the network address"),
    (("sites.0.overlay_ip", "10.200.0.255"), "sites[0].overlay_ip: 10.200.0.255 is the broadcast address"),
    (("sites.2.overlay_ip", "10.200.0.1"), "sites[2].overlay_ip: 10.200.0.1 is already used by sites[0]"),
    (("sites.0.overlay_ip", "not-an-ip"), "sites[0].overlay_ip: 'not-an-ip' is not an IPv4 address"),
    (
        ("sites.1.cidrs", ["10.10.128.0/17"]),
        "sites[1].cidrs[0]: 10.10.128.0/17 overlaps sites[0].cidrs[0] 10.10.0.0/16",
    ),
    (("sites.1.cidrs", ["10.200.0.0/16"]), "sites[1].cidrs[0]: 10.200.0.0/16 overlaps overlay_cidr 10.200.0.0/24"),
    (
        ("sites.0.cidrs", ["10.10.0.1/16"]),
        "sites[0].cidrs[0]: 10.10.0.1/16 has host bits set (did you mean 10.10.0.0/16?)",
    ),
    (("sites.0.cidrs", ["10.10.0.0"]), "sites[0].cidrs[0]: 10.10.0.0 has no prefix length"),
    (("sites.0.cidrs", []), "sites[0].cidrs:"),
    (("overlay_cidr", "10.200.0.1/24"), "overlay_cidr: 10.200.0.1/24 has host bits set"),
    (("listen_port", 0), "listen_port: 0 is below the minimum 1"),
    (("listen_port", 65536), "listen_port: 65536 is above the maximum 65535"),
    (("mtu", 1279), "mtu: 1279 is neither 'auto' nor an integer in 1280..1440"),
    (("mtu", 1441), "mtu: 1441 is neither 'auto' nor an integer in 1280..1440"),
    (("mtu", "big"), "mtu: 'big' is neither 'auto' nor an integer in 1280..1440"),
    (("mtu", 1420), "mtu: 1420 does not fit sites[1] (gcp-euw3): its underlay_mtu 1460 leaves at most 1400"),
    (("persistent_keepalive", -1), "persistent_keepalive: -1 is below the minimum 0"),
    (("persistent_keepalive", 65536), "persistent_keepalive: 65536 is above the maximum 65535"),
    (("sites.1.zone", "europe-west4-a"), "sites[1].zone: 'europe-west4-a' is not in region europe-west3"),
    (("sites.0.zone", "us-west-2a"), "sites[0].zone: 'us-west-2a' is not in region us-east-1"),
    (("sites.0.region", "us-east"), "sites[0].region: 'us-east' is not an AWS region name"),
    (("sites.1.project", "X"), "sites[1].project: 'X' is not a GCP project id"),
    (("sites.1.project", None), "sites[1].project: required"),
    (("sites.1.zone", None), "sites[1].zone: required"),
    (("sites.2.endpoint", None), "sites[2].endpoint: required"),
    (("sites.0.region", None), "sites[0].region: required"),
    (("sites.0.cloud", "azure"), "sites[0].cloud: 'azure' is not one of 'aws', 'gcp', 'static'"),
    (("sites.0.cloud", None), "sites[0].cloud: required (one of 'aws', 'gcp', 'static')"),
    (("sites.0.vpc_id", "vpc-0123abcd"), "sites[0].subnet_id: required with vpc_id"),
    (("sites.1.network", "shared-vpc"), "sites[1].subnetwork: required with network"),
    (("sites.0.route_table_ids", []), "sites[0].route_table_ids:"),
    (("sites.0.instance_typo", "c6i.2xlarge"), "sites[0].instance_typo: unknown key (did you mean 'instance_type'?)"),
    (("listen_prot", 51820), "listen_prot: unknown key (did you mean 'listen_port'?)"),
    (("sites.2.instance_type", "c6i.large"), "sites[2].instance_type: unknown key (a key of aws and gcp sites only)"),
    (("sites.0.key_epoch", -1), "sites[0].key_epoch: -1 is below the minimum 0"),
    (("sites.1.underlay_mtu", 9000), "sites[1].underlay_mtu: 9000 is above the maximum 8896"),
    (("overlay_cidr", None), "overlay_cidr: required"),
    (("delivery", "push"), "delivery: Input should be 'user-data' or 'live'"),
    (("delivery", "Live"), "delivery: Input should be 'user-data' or 'live'"),
]


@pytest.mark.parametrize(
    ("change", "expected"), BAD_INPUTS, ids=[c[0][0] + "=" + repr(c[0][1])[:20] for c in BAD_INPUTS]
)
def test_each_bad_input_names_its_field(change: tuple[str, Any], expected: str) -> None:
    problems = problems_for(with_change(*change))
    assert any(expected in p for p in problems), problems


def test_fewer_than_two_sites() -> None:
    raw = base()
    raw["sites"] = raw["sites"][:1]
    assert problems_for(raw) == ["sites: a mesh needs at least two sites, got 1"]


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_mesh(["sites"])


def test_every_problem_is_listed_at_once() -> None:
    """Field errors and mesh-wide errors come together, so one edit can fix them all."""
    raw = base()
    raw["listen_port"] = 0
    raw["sites"][0]["instance_typo"] = "x"  # field error in site 0 ...
    raw["sites"][0]["overlay_ip"] = "10.200.0.2"  # ... and a duplicate that involves it
    raw["sites"][1]["zone"] = "us-east1-b"
    raw["sites"][2]["cidrs"] = ["10.10.5.0/24"]
    problems = problems_for(raw)
    assert problems == [
        "listen_port: 0 is below the minimum 1",
        "sites[0].instance_typo: unknown key (did you mean 'instance_type'?)",
        "sites[1].zone: 'us-east1-b' is not in region europe-west3 (zones of europe-west3 look like europe-west3-a)",
        "sites[1].overlay_ip: 10.200.0.2 is already used by sites[0]",
        "sites[2].cidrs[0]: 10.10.5.0/24 overlaps sites[0].cidrs[0] 10.10.0.0/16",
    ]


def test_existing_networks_are_accepted_whole() -> None:
    raw = base()
    raw["sites"][0].update(vpc_id=VPC, subnet_id=SUBNET, route_table_ids=[RTB1, RTB2])
    raw["sites"][1].update(network="shared", subnetwork="shared-euw3")
    cfg = load_mesh(raw)
    aws, gcp, _ = cfg.sites
    assert isinstance(aws, AwsSite) and aws.uses_existing_network and aws.route_table_ids == [RTB1, RTB2]
    assert isinstance(gcp, GcpSite) and gcp.uses_existing_network


def test_masquerade_is_off_by_default_and_per_site_overrides() -> None:
    raw = base()
    raw["sites"][2]["masquerade"] = True
    cfg = load_mesh(raw)
    assert [cfg.masquerades(s) for s in cfg.sites] == [False, False, True]
    raw["masquerade"] = True
    raw["sites"][2]["masquerade"] = False
    cfg = load_mesh(raw)
    assert [cfg.masquerades(s) for s in cfg.sites] == [True, True, False]


def test_explicit_mtu_that_fits_is_kept() -> None:
    assert load_mesh(with_change("mtu", 1380)).mtu == 1380


def test_config_is_immutable() -> None:
    cfg = load_mesh(base())
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is an implementation detail
        cfg.listen_port = 1  # type: ignore[misc]
    assert isinstance(cfg, MeshConfig)
