"""`gateways: 2` on AWS under mocks (docs/ha.md 5): fixtures and shared names in tests/test_program_ha.py."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ProgramRun
from tests.test_gate_command import gate_words
from tests.test_program import AWS_INSTANCE, AWS_ROUTE, user_data_input
from tests.test_program_ha import (
    COMMAND,
    EC2_TAG,
    EIP_ASSOC,
    ENDPOINT,
    ROLE_POLICY,
    STACK,
    SUBNET,
    TABLE,
    agent_json,
    ha_raw,
    run,
    single,
    sites,
)
from wg_mesh.aws import facts
from wg_mesh.config import AwsSite
from wg_mesh.gateway.ha_config import parse_ha
from wg_mesh.plan import ha


@pytest.fixture(scope="module")
def applied() -> ProgramRun:
    return run(ha_raw())


@pytest.fixture(scope="module")
def one_gateway() -> ProgramRun:
    return run(single(ha_raw()))


# --- AWS -------------------------------------------------------------------------------------


def test_aws_runs_two_alike_instances_in_two_subnets(applied: ProgramRun) -> None:
    aws, _ = sites(applied)
    a, b = (applied.named(AWS_INSTANCE, f"{aws.name}{s}-instance") for s in ("", "-b"))
    for key in ("ami", "instanceType", "vpcSecurityGroupIds", "metadataOptions", "rootBlockDevice"):
        assert a.inputs[key] == b.inputs[key], key
    assert a.inputs["sourceDestCheck"] is False and b.inputs["sourceDestCheck"] is False
    assert a.inputs["iamInstanceProfile"] != b.inputs["iamInstanceProfile"]  # a role each
    # Two subnets of one VPC, the first and second /24, in two zones (the mocks offer b and c).
    subnet_a, subnet_b = (applied.named(SUBNET, f"{aws.name}{s}-subnet") for s in ("", "-b"))
    assert (a.inputs["subnetId"], b.inputs["subnetId"]) == (subnet_a.id, subnet_b.id)
    assert (subnet_a.inputs["cidrBlock"], subnet_b.inputs["cidrBlock"]) == ("10.10.0.0/24", "10.10.1.0/24")
    assert (subnet_a.inputs["availabilityZone"], subnet_b.inputs["availabilityZone"]) == ("us-east-1b", "us-east-1c")
    # Both subnets use the gateway route table (the internet and the DynamoDB endpoint).
    assocs = [r for r in applied.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")]
    assert {r.inputs["subnetId"] for r in assocs} == {subnet_a.id, subnet_b.id}
    # b is created (or replaced) only after a's readiness gate.
    assert applied.depends_on(AWS_INSTANCE, b.name, COMMAND, f"{aws.name}-ready")
    assert gate_words(applied.named(COMMAND, f"{aws.name}-b-ready").inputs["create"])[-2:] == ["--instance-id", b.id]


def test_aws_user_data_differs_only_in_the_gateway_letter(applied: ProgramRun) -> None:
    aws, _ = sites(applied)
    a, b = (user_data_input(applied.named(AWS_INSTANCE, f"{aws.name}{s}-instance")) for s in ("", "-b"))
    assert a != b and a.replace('"gateway": "a"', '"gateway": "b"') == b
    eip = applied.named("aws:ec2/eip:Eip", f"{aws.name}-eip")
    table = applied.named("aws:ec2/routeTable:RouteTable", f"{aws.name}-rt")
    names = ha.ha_names("wg-mesh", STACK, aws.name)
    assert agent_json(a)["ha"] == {
        "cloud": "aws",
        "gateway": "a",
        "health_port": ha.HEALTH_PORT,
        "region": "us-east-1",
        "lease_table": names.lease_table,
        "allocation_id": eip.outputs["allocationId"],
        "route_table_ids": [table.id],
        "ec2_endpoint": f"https://{endpoint_regional_name(applied, aws)}",
    }
    assert parse_ha(agent_json(a)["ha"]).ec2_endpoint == agent_json(a)["ha"]["ec2_endpoint"]  # the agent takes it


def endpoint_regional_name(run: ProgramRun, aws: AwsSite) -> str:
    """The EC2 endpoint's Regional DNS name among its entries (the mocks list the zonal ones first)."""
    entries = [e["dnsName"] for e in run.named(ENDPOINT, f"{aws.name}-ec2").outputs["dnsEntries"]]
    (regional,) = [n for n in entries if n.split(".", 1)[0].count("-") == 2]
    assert entries.index(regional) == len(entries) - 1
    return regional


def test_aws_pulumi_never_moves_the_address_or_the_routes_back(applied: ProgramRun, one_gateway: ProgramRun) -> None:
    aws, _ = sites(applied)
    assert not applied.of_type(EIP_ASSOC)  # the agent associates the address (docs/ha.md 5.3)
    assert one_gateway.of_type(EIP_ASSOC)
    eni_a = applied.named(AWS_INSTANCE, f"{aws.name}-instance").outputs["primaryNetworkInterfaceId"]
    routes = [r for r in applied.of_type(AWS_ROUTE) if r.name.startswith(f"{aws.name}-route-")]
    assert routes
    for route in routes:
        assert route.inputs["networkInterfaceId"] == eni_a  # created toward a
        assert applied.options(AWS_ROUTE, route.name).ignore_changes == ("networkInterfaceId",)
        assert one_gateway.options(AWS_ROUTE, route.name).ignore_changes == ()


def test_aws_lease_table_and_dynamodb_endpoint(applied: ProgramRun) -> None:
    aws, _ = sites(applied)
    (table,) = applied.of_type(TABLE)
    assert table.name == f"{aws.name}-lease"
    assert table.inputs["name"] == ha.ha_names("wg-mesh", STACK, aws.name).lease_table
    assert table.inputs["billingMode"] == "PAY_PER_REQUEST"
    assert table.inputs["hashKey"] == "site" and table.inputs["attributes"] == [{"name": "site", "type": "S"}]
    endpoint = applied.named(ENDPOINT, f"{aws.name}-dynamodb")
    rtb = applied.named("aws:ec2/routeTable:RouteTable", f"{aws.name}-rt")
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.dynamodb"
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"
    assert endpoint.inputs["routeTableIds"] == [rtb.id]
    for letter in ("", "-b"):  # the first boot finds the table
        assert applied.depends_on(AWS_INSTANCE, f"{aws.name}{letter}-instance", TABLE, table.name)


def test_aws_ha_policy_names_exactly_the_sites_resources(applied: ProgramRun) -> None:
    aws, _ = sites(applied)
    eip = applied.named("aws:ec2/eip:Eip", f"{aws.name}-eip").outputs["allocationId"]
    rtb = applied.named("aws:ec2/routeTable:RouteTable", f"{aws.name}-rt").id
    table = ha.ha_names("wg-mesh", STACK, aws.name).lease_table
    ec2 = "arn:aws:ec2:us-east-1:123456789012"
    policies = [applied.named(ROLE_POLICY, f"{aws.name}{s}-ha") for s in ("", "-b")]
    roles = {p.inputs["role"] for p in policies}
    assert len(roles) == 2  # one per gateway role
    for policy in policies:
        statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
        assert statements["ClaimSiteAddress"] == {
            "Sid": "ClaimSiteAddress",
            "Effect": "Allow",
            "Action": "ec2:AssociateAddress",
            "Resource": [f"{ec2}:elastic-ip/{eip}", f"{ec2}:instance/*", f"{ec2}:network-interface/*"],
            "Condition": {
                "StringEquals": {
                    "aws:ResourceTag/wg-mesh-site": aws.name,
                    "aws:ResourceTag/wg-mesh-stack": STACK,
                    "aws:ResourceTag/wg-mesh-project": "wg-mesh",
                },
                "Null": {"ec2:SourceInstanceARN": "false"},
            },
        }
        assert statements["MoveSiteRoutes"]["Action"] == "ec2:ReplaceRoute"
        assert statements["MoveSiteRoutes"]["Resource"] == [f"{ec2}:route-table/{rtb}"]
        # a table wg-mesh created carries the provider's default tags: IAM checks them too (ec2:ResourceTag on
        # route-table, Service Authorization Reference); only from an instance's credentials
        assert statements["MoveSiteRoutes"]["Condition"] == {
            "StringEquals": {
                "ec2:ResourceTag/wg-mesh-site": aws.name,
                "ec2:ResourceTag/wg-mesh-stack": STACK,
                "ec2:ResourceTag/wg-mesh-project": "wg-mesh",
            },
            "Null": {"ec2:SourceInstanceARN": "false"},
        }
        read = statements["ReadAddressAndRoutes"]
        assert read["Action"] == ["ec2:DescribeAddresses", "ec2:DescribeRouteTables"] and read["Resource"] == "*"
        assert read["Condition"] == {"StringEquals": {"ec2:Region": "us-east-1"}}
        lease = statements["SiteLease"]
        assert lease["Action"] == ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
        assert lease["Resource"] == f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}"
        assert lease["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [aws.name]}}
        assert set(statements) == {"ClaimSiteAddress", "MoveSiteRoutes", "ReadAddressAndRoutes", "SiteLease"}
        assert all(s["Effect"] == "Allow" for s in statements.values())


def test_aws_enis_carry_the_tags_the_policy_checks(applied: ProgramRun) -> None:
    aws, _ = sites(applied)
    for suffix in ("", "-b"):
        eni = applied.named(AWS_INSTANCE, f"{aws.name}{suffix}-instance").outputs["primaryNetworkInterfaceId"]
        tags = {
            t.inputs["key"]: t.inputs["value"]
            for t in applied.of_type(EC2_TAG)
            if t.name.startswith(f"{aws.name}{suffix}-eni-")
        }
        assert tags == {"wg-mesh-site": aws.name, "wg-mesh-stack": STACK, "wg-mesh-project": "wg-mesh"}
        assert all(
            t.inputs["resourceId"] == eni
            for t in applied.of_type(EC2_TAG)
            if t.name.startswith(f"{aws.name}{suffix}-eni")
        )


def test_aws_in_an_existing_network_uses_the_given_subnets_and_tables() -> None:
    raw = ha_raw()
    (site,) = [s for s in raw["sites"] if s["cloud"] == "aws"]
    site.update(
        vpc_id="vpc-0123abcd",
        subnet_id="subnet-0123456789abcdef0",
        standby_subnet_id="subnet-0123456789abcdef1",
        route_table_ids=["rtb-0a1b2c3d", "rtb-0a1b2c3e"],
    )
    done = run(raw)
    a, b = (done.named(AWS_INSTANCE, f"{site['name']}{s}-instance") for s in ("", "-b"))
    assert (a.inputs["subnetId"], b.inputs["subnetId"]) == ("subnet-0123456789abcdef0", "subnet-0123456789abcdef1")
    assert not done.of_type(SUBNET) and not done.of_type(ENDPOINT)  # the user's network: no endpoint added
    policy = json.loads(done.named(ROLE_POLICY, f"{site['name']}-ha").inputs["policy"])
    (routes,) = [s for s in policy["Statement"] if s["Sid"] == "MoveSiteRoutes"]
    ec2 = "arn:aws:ec2:us-east-1:123456789012"
    assert routes["Resource"] == [f"{ec2}:route-table/rtb-0a1b2c3d", f"{ec2}:route-table/rtb-0a1b2c3e"]
    assert routes["Condition"] == {"Null": {"ec2:SourceInstanceARN": "false"}}  # the user's tables: no tag of ours
    assert agent_json(user_data_input(b))["ha"]["route_table_ids"] == ["rtb-0a1b2c3d", "rtb-0a1b2c3e"]
    assert "ec2_endpoint" not in agent_json(user_data_input(b))["ha"]  # the regional name (your endpoint, if any)


def test_aws_standby_zone_written_or_chosen_apart_from_a() -> None:
    raw = ha_raw()
    (site,) = [s for s in raw["sites"] if s["cloud"] == "aws"]
    site.update(zone="us-east-1c")
    done = run(raw)
    subnet_b = done.named(SUBNET, f"{site['name']}-b-subnet")
    assert subnet_b.inputs["availabilityZone"] == "us-east-1b"  # offered: c, b; a is in c
    site.update(standby_zone="use1-az4")
    done = run(raw)
    subnet_b = done.named(SUBNET, f"{site['name']}-b-subnet")
    assert subnet_b.inputs["availabilityZoneId"] == "use1-az4" and "availabilityZone" not in subnet_b.inputs
    with pytest.raises(ValueError, match=r"choose another instance type .* existing network's two subnets"):
        ha.other_zone("c6i.2xlarge", "us-east-1", "us-east-1b", ["us-east-1b"])


def test_aws_gateway_a_is_placed_apart_from_a_written_standby_zone() -> None:
    """`zone` left out, `standby_zone` written: gateway a's zone is chosen among the others (the first offering one
    by name, us-east-1b, was chosen: both subnets in one zone, and the pair's EC2 endpoint refused at create with
    DuplicateSubnetsInSameZone). Offered only there: one line before anything."""
    raw = ha_raw()
    (site,) = [s for s in raw["sites"] if s["cloud"] == "aws"]
    site.update(standby_zone="us-east-1b")
    done = run(raw)
    subnet_a, subnet_b = (done.named(SUBNET, f"{site['name']}{s}-subnet") for s in ("", "-b"))
    assert (subnet_a.inputs["availabilityZone"], subnet_b.inputs["availabilityZone"]) == ("us-east-1c", "us-east-1b")
    with pytest.raises(ValueError, match="offered in us-east-1 only in us-east-1b, the standby_zone"):
        facts.choose_zone("c6i.2xlarge", "us-east-1", ["us-east-1b"], avoid="us-east-1b")


def test_aws_ec2_endpoint_keeps_the_demoted_gateways_api_path(applied: ProgramRun) -> None:
    """docs/ha.md 5.5: an EC2 interface endpoint in both gateway subnets, HTTPS from them only, and WITHOUT private
    DNS (issue 32): with it, every workload of the VPC resolved ec2.<region>.amazonaws.com to this endpoint, whose
    security group admits the gateways only, and timed out. The agents call it by its own name (agent.json)."""
    aws, _ = sites(applied)
    endpoint = applied.named(ENDPOINT, f"{aws.name}-ec2")
    subnets = [applied.named(SUBNET, f"{aws.name}{s}-subnet").id for s in ("", "-b")]
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.ec2"
    assert endpoint.inputs["vpcEndpointType"] == "Interface" and endpoint.inputs["privateDnsEnabled"] is False
    assert endpoint.inputs["subnetIds"] == subnets  # one network interface per gateway zone
    group = applied.named("aws:ec2/securityGroup:SecurityGroup", f"{aws.name}-ec2-endpoint")
    assert endpoint.inputs["securityGroupIds"] == [group.id]
    (rule,) = group.inputs["ingress"]
    assert (rule["protocol"], rule["fromPort"], rule["toPort"]) == ("tcp", 443, 443)
    assert rule["cidrBlocks"] == ["10.10.0.0/24", "10.10.1.0/24"]
    assert not group.inputs.get("egress")


def test_aws_ready_tag_is_scoped_to_account_project_stack_and_site(applied: ProgramRun) -> None:
    aws, _ = sites(applied)
    for suffix in ("", "-b"):
        (statement,) = json.loads(applied.named(ROLE_POLICY, f"{aws.name}{suffix}-ready").inputs["policy"])["Statement"]
        assert statement["Resource"] == "arn:aws:ec2:us-east-1:123456789012:instance/*"  # this account's only
        assert statement["Condition"]["StringEquals"] == {
            "ec2:ResourceTag/wg-mesh-project": "wg-mesh",
            "ec2:ResourceTag/wg-mesh-stack": STACK,
            "ec2:ResourceTag/wg-mesh-site": aws.name,
            "aws:RequestTag/wg-mesh:ready": "true",
        }
        assert statement["Condition"]["Null"] == {"ec2:SourceInstanceARN": "false"}
