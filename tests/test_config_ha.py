"""Config of highly available sites (`gateways: 2`, issue 11, docs/ha.md): every rule names its field."""

from __future__ import annotations

import copy
from ipaddress import IPv4Network
from typing import Any

import pytest

from tests.test_config import RTB1, SUBNET, VPC, base, problems_for
from wg_mesh.config import AwsSite, GcpSite, StaticSite, summary
from wg_mesh.plan import topology
from wg_mesh.plan.validate import load_mesh

SUBNET_B = "subnet-0123456789abcdef1"


def ha(aws: dict[str, Any] | None = None, gcp: dict[str, Any] | None = None, **mesh: Any) -> dict[str, Any]:
    """base() in live delivery with the AWS site (sites[0]) and the GCP site (sites[1]) changed."""
    raw = copy.deepcopy(base())
    raw["delivery"] = "live"
    raw.update(mesh)
    raw["sites"][0].update(aws or {})
    raw["sites"][1].update(gcp or {})
    return raw


def test_one_gateway_is_the_default_and_today() -> None:
    cfg = load_mesh(base())
    assert [getattr(site, "gateways", None) for site in cfg.sites] == [1, 1, 1]
    assert isinstance(cfg.sites[0], AwsSite) and cfg.sites[0].standby_zone is None
    assert cfg.sites[0].standby_subnet_id is None


def test_two_gateways_on_both_clouds() -> None:
    cfg = load_mesh(ha({"gateways": 2, "standby_zone": "us-east-1b"}, {"gateways": 2}))
    aws, gcp = cfg.sites[0], cfg.sites[1]
    assert isinstance(aws, AwsSite) and isinstance(gcp, GcpSite)
    assert (aws.gateways, aws.standby_zone, gcp.gateways, gcp.standby_zone) == (2, "us-east-1b", 2, None)


def test_gcp_standby_zone_may_equal_the_first_when_written() -> None:
    """No zone redundancy, but the user's explicit choice (documented): nothing of GCP's pair needs two zones."""
    cfg = load_mesh(ha(gcp={"gateways": 2, "standby_zone": "europe-west3-a"}))
    assert isinstance(cfg.sites[1], GcpSite) and cfg.sites[1].standby_zone == cfg.sites[1].zone


@pytest.mark.parametrize(("zone", "standby"), [("us-east-1a", "us-east-1a"), ("use1-az1", "use1-az1")])
def test_aws_standby_zone_equal_to_zone_is_refused_in_the_network_wg_mesh_creates(zone: str, standby: str) -> None:
    """The pair's EC2 interface endpoint takes one subnet per zone: CreateVpcEndpoint would fail
    (DuplicateSubnetsInSameZone) after the subnets and the first gateway were created. A zone name and a zone ID are
    not compared (mapped per account)."""
    assert problems_for(ha({"gateways": 2, "zone": zone, "standby_zone": standby})) == [
        f"sites[0].standby_zone: '{zone}' is also zone: the EC2 API endpoint wg-mesh creates in the two gateway "
        "subnets takes one subnet per availability zone (CreateVpcEndpoint refuses two in one zone: "
        "DuplicateSubnetsInSameZone); choose another zone of the region, or leave standby_zone out"
    ]
    assert load_mesh(ha({"gateways": 2, "zone": "us-east-1a", "standby_zone": "use1-az1"}))


def test_existing_aws_network_names_the_standby_subnet() -> None:
    existing = {"vpc_id": VPC, "subnet_id": SUBNET, "route_table_ids": [RTB1], "gateways": 2}
    cfg = load_mesh(ha({**existing, "standby_subnet_id": SUBNET_B}))
    assert isinstance(cfg.sites[0], AwsSite) and cfg.sites[0].standby_subnet_id == SUBNET_B
    assert problems_for(ha(existing)) == [
        "sites[0].standby_subnet_id: required with gateways: 2 and subnet_id (the standby gateway's subnet, in "
        "another availability zone than subnet_id's for zone redundancy)"
    ]
    assert problems_for(ha({**existing, "standby_subnet_id": SUBNET_B, "standby_zone": "us-east-1b"})) == [
        "sites[0].standby_zone: in an existing network standby_subnet_id's zone is the standby's zone; leave "
        "standby_zone out"
    ]


@pytest.mark.parametrize(
    ("aws", "gcp", "expected"),
    [
        ({"gateways": 3}, {}, "sites[0].gateways: 3 is above the maximum 2"),
        ({"gateways": 0}, {}, "sites[0].gateways: 0 is below the minimum 1"),
        ({}, {"gateways": True}, "sites[1].gateways: expected an integer, got the boolean true"),
        ({"gateways": "2"}, {}, "sites[0].gateways: expected an integer, got str '2'"),
        ({"standby_zone": "us-east-1b"}, {}, "sites[0].standby_zone: only with gateways: 2"),
        ({}, {"standby_zone": "europe-west3-b"}, "sites[1].standby_zone: only with gateways: 2"),
        ({"standby_subnet_id": SUBNET}, {}, "sites[0].standby_subnet_id: only with gateways: 2"),
        ({"gateways": 2, "standby_zone": "eu-west-1a"}, {}, "sites[0].standby_zone: 'eu-west-1a' is not in region"),
        ({}, {"gateways": 2, "standby_zone": "europe-west1-b"}, "sites[1].standby_zone: 'europe-west1-b' is not in"),
        ({"gateways": 2, "standby_zone": "nowhere"}, {}, "sites[0].standby_zone: 'nowhere' is not an AWS zone"),
        (
            {"gateways": 2, "vpc_id": VPC, "subnet_id": SUBNET, "route_table_ids": [RTB1], "standby_subnet_id": "s-1"},
            {},
            "sites[0].standby_subnet_id: 's-1' is not a subnet id",
        ),
        (
            {"gateways": 2, "standby_subnet_id": SUBNET},
            {},
            "sites[0].standby_subnet_id: only with an existing network (subnet_id)",
        ),
        (
            {"gateways": 2, "cidrs": ["10.10.0.0/24"]},
            {},
            "sites[0].gateways: 2 needs a second gateway subnet in cidrs[0], but 10.10.0.0/24 is a /24",
        ),
        ({}, {"standby_subnet_id": SUBNET}, "sites[1].standby_subnet_id: unknown key (a key of aws sites only)"),
    ],
)
def test_each_bad_ha_input_names_its_field(aws: dict[str, Any], gcp: dict[str, Any], expected: str) -> None:
    problems = problems_for(ha(aws, gcp))
    assert len(problems) == 1 and problems[0].startswith(expected), problems


@pytest.mark.parametrize("delivery", [None, "user-data"])
def test_two_gateways_need_live_delivery(delivery: str | None) -> None:
    raw = ha({"gateways": 2}, {"gateways": 2})
    if delivery is None:
        del raw["delivery"]
    else:
        raw["delivery"] = delivery
    assert problems_for(raw) == [
        f"sites[{i}].gateways: 2 needs delivery: live (the failover is done by wg-mesh-agent, which runs only in "
        "live delivery; delivery is 'user-data')"
        for i in (0, 1)
    ]


def test_the_delivery_rule_is_reported_with_field_errors() -> None:
    raw = ha({"gateways": 2, "overlay_ip": "nope"}, delivery="user-data")
    assert problems_for(raw) == [
        "sites[0].overlay_ip: 'nope' is not an IPv4 address",
        "sites[0].gateways: 2 needs delivery: live (the failover is done by wg-mesh-agent, which runs only in live "
        "delivery; delivery is 'user-data')",
    ]


def test_static_sites_are_one_host() -> None:
    raw = ha()
    raw["sites"][2]["gateways"] = 2
    assert problems_for(raw) == [
        "sites[2].gateways: a static site is one host (got 2); two gateways (high availability) are for aws and gcp "
        "sites"
    ]
    raw["sites"][2]["gateways"] = 1
    assert isinstance(load_mesh(raw).sites[2], StaticSite)


def test_the_standby_subnet_is_the_second_slash24() -> None:
    assert topology.standby_gateway_subnet(IPv4Network("10.10.0.0/16")) == IPv4Network("10.10.1.0/24")
    assert topology.standby_gateway_subnet(IPv4Network("10.10.0.0/23")) == IPv4Network("10.10.1.0/24")
    assert topology.standby_gateway_subnet(IPv4Network("10.10.0.0/24")) is None
    assert topology.standby_gateway_subnet(IPv4Network("10.10.0.0/28")) is None


def test_validate_names_the_ha_sites() -> None:
    line = summary(load_mesh(ha({"gateways": 2})))
    assert "aws-use1 (aws, 2 gateways), gcp-euw3 (gcp), vps-fra (static)" in line
