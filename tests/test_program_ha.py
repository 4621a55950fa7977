"""`gateways: 2` under mocks (issue 11, docs/ha.md 5-6): the second gateway, what the pair shares, what the agents
may do, and what Pulumi must not do (move the address or the routes back). Failover itself is the agent's."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from mesh import ha
from mesh.config import AwsSite, GcpSite
from mesh.stackfile import read_raw
from tests.conftest import REPO, ProgramRun, Recorded, run_program
from tests.test_program import (
    AWS_INSTANCE,
    AWS_ROUTE,
    GCP_FIREWALL,
    GCP_INSTANCE,
    GCP_ROUTE,
    mesh_of,
    user_data_input,
)
from tests.test_program_live import day_two

HA_STACK = REPO / "Pulumi.ha.yaml"
STACK = "ha"
EIP_ASSOC = "aws:ec2/eipAssociation:EipAssociation"
TABLE = "aws:dynamodb/table:Table"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
EC2_TAG = "aws:ec2/tag:Tag"
SUBNET = "aws:ec2/subnet:Subnet"
GCP_SUBNET = "gcp:compute/subnetwork:Subnetwork"
GROUP = "gcp:compute/instanceGroup:InstanceGroup"
CHECK = "gcp:compute/regionHealthCheck:RegionHealthCheck"
BACKEND = "gcp:compute/regionBackendService:RegionBackendService"
RULE = "gcp:compute/forwardingRule:ForwardingRule"
GCP_SA = "gcp:serviceaccount/account:Account"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
COMMAND = "command:local:Command"


def ha_raw() -> dict[str, Any]:
    raw = read_raw(HA_STACK)
    assert isinstance(raw, dict)
    return raw


def single(raw: dict[str, Any]) -> dict[str, Any]:
    """The same stack with one gateway per site: what a site looked like before `gateways: 2`."""
    raw = copy.deepcopy(raw)
    for site in raw["sites"]:
        for key in ("gateways", "standby_zone", "standby_subnet_id"):
            site.pop(key, None)
    return raw


def run(raw: dict[str, Any]) -> ProgramRun:
    done = run_program(raw, preview=False, stack=STACK)
    assert done.error is None, done.error
    return done


@pytest.fixture(scope="module")
def applied() -> ProgramRun:
    return run(ha_raw())


@pytest.fixture(scope="module")
def one_gateway() -> ProgramRun:
    return run(single(ha_raw()))


def sites(run: ProgramRun) -> tuple[AwsSite, GcpSite]:
    cfg = mesh_of(run)
    (aws,) = [s for s in cfg.sites if isinstance(s, AwsSite)]
    (gcp,) = [s for s in cfg.sites if isinstance(s, GcpSite)]
    assert aws.gateways == gcp.gateways == 2
    return aws, gcp


def agent_json(user_data: str) -> dict[str, Any]:
    import yaml

    (config,) = [f for f in yaml.safe_load(user_data)["write_files"] if f["path"] == "/etc/wg-mesh/agent.json"]
    loaded = json.loads(config["content"])
    assert isinstance(loaded, dict)
    return loaded


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
    assert applied.named(COMMAND, f"{aws.name}-b-ready").inputs["create"].endswith(f"--instance-id {b.id}")


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
    }


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
    (endpoint,) = applied.of_type(ENDPOINT)
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
                "StringEquals": {"aws:ResourceTag/wg-mesh-site": aws.name, "aws:ResourceTag/wg-mesh-stack": STACK},
                "Null": {"ec2:SourceInstanceARN": "false"},
            },
        }
        assert statements["MoveSiteRoutes"]["Action"] == "ec2:ReplaceRoute"
        assert statements["MoveSiteRoutes"]["Resource"] == [f"{ec2}:route-table/{rtb}"]
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
        assert tags == {"wg-mesh-site": aws.name, "wg-mesh-stack": STACK}
        assert all(
            t.inputs["resourceId"] == eni
            for t in applied.of_type(EC2_TAG)
            if t.name.startswith(f"{aws.name}{suffix}-eni")
        )


# --- GCP -------------------------------------------------------------------------------------


def test_gcp_runs_two_vms_in_two_zones_with_an_account_each(applied: ProgramRun) -> None:
    _, gcp = sites(applied)
    a, b = (applied.named(GCP_INSTANCE, f"{gcp.name}{s}-instance") for s in ("", "-b"))
    assert (a.inputs["zone"], b.inputs["zone"]) == ("europe-west3-a", "europe-west3-b")
    assert a.inputs["canIpForward"] is True and b.inputs["canIpForward"] is True
    for key in ("machineType", "bootDisk", "tags", "networkInterfaces", "shieldedInstanceConfig"):
        assert a.inputs[key] == b.inputs[key], key
    accounts = {applied.named(GCP_SA, f"{gcp.name}{s}-sa").outputs["email"] for s in ("", "-b")}
    assert {a.inputs["serviceAccount"]["email"], b.inputs["serviceAccount"]["email"]} == accounts
    assert len(accounts) == 2
    ua, ub = a.inputs["metadata"]["user-data"], b.inputs["metadata"]["user-data"]
    assert ua != ub and ua.replace('"gateway": "a"', '"gateway": "b"') == ub
    address = applied.named("gcp:compute/address:Address", f"{gcp.name}-address")
    assert address.outputs["name"].startswith(f"{gcp.name}-address-")  # the mocks auto-name as Pulumi does
    names = ha.ha_names("wg-mesh", STACK, gcp.name)
    assert agent_json(ua)["ha"] == {
        "cloud": "gcp",
        "gateway": "a",
        "health_port": ha.HEALTH_PORT,
        "project": "my-project",
        "region": "europe-west3",
        "address": address.outputs["name"],
        "address_ip": address.outputs["address"],
        "backend_service": names.backend_service,
        "groups": {
            "a": {"zone": "europe-west3-a", "name": names.groups["a"]},
            "b": {"zone": "europe-west3-b", "name": names.groups["b"]},
        },
    }
    assert applied.depends_on(GCP_INSTANCE, b.name, COMMAND, f"{gcp.name}-ready")
    for gate in (f"{gcp.name}-ready", f"{gcp.name}-b-ready"):  # the gates wait, the agents move the address
        assert "--wait-only" in applied.named(COMMAND, gate).inputs["create"]


def test_gcp_standby_zone_defaults_to_the_next_zone() -> None:
    raw = ha_raw()
    (site,) = [s for s in raw["sites"] if s["cloud"] == "gcp"]
    del site["standby_zone"]
    done = run(raw)
    b = done.named(GCP_INSTANCE, f"{site['name']}-b-instance")
    assert b.inputs["zone"] == "europe-west3-b"  # the mocks list -c, -a, -b: next after -a by letter
    assert ha.next_zone("europe-west3-c", ["europe-west3-a", "europe-west3-c"]) == "europe-west3-a"
    with pytest.raises(ValueError, match="set standby_zone"):
        ha.next_zone("europe-west3-a", ["europe-west3-a"])


def test_gcp_load_balancer_fails_over_to_b(applied: ProgramRun) -> None:
    _, gcp = sites(applied)
    names = ha.ha_names("wg-mesh", STACK, gcp.name)
    groups = [applied.named(GROUP, f"{gcp.name}{s}-ig") for s in ("", "-b")]
    for group, letter in zip(groups, "ab", strict=True):
        instance = applied.named(GCP_INSTANCE, f"{gcp.name}{'' if letter == 'a' else '-b'}-instance")
        assert group.inputs["instances"] == [instance.outputs["selfLink"]]
        assert group.inputs["name"] == names.groups[letter] and group.inputs["zone"] == instance.inputs["zone"]
    check = applied.named(CHECK, f"{gcp.name}-hc")
    assert {
        k: check.inputs[k] for k in ("checkIntervalSec", "timeoutSec", "unhealthyThreshold", "healthyThreshold")
    } == {
        "checkIntervalSec": 1,
        "timeoutSec": 1,
        "unhealthyThreshold": 2,
        "healthyThreshold": 1,
    }
    assert check.inputs["httpHealthCheck"] == {"port": 9181, "requestPath": "/healthz"}
    backend = applied.named(BACKEND, f"{gcp.name}-bs")
    assert backend.inputs["loadBalancingScheme"] == "INTERNAL" and backend.inputs["protocol"] == "UNSPECIFIED"
    assert backend.inputs["healthChecks"] == check.id
    assert backend.inputs["backends"] == [
        {"group": groups[0].outputs["selfLink"], "balancingMode": "CONNECTION", "failover": False},
        {"group": groups[1].outputs["selfLink"], "balancingMode": "CONNECTION", "failover": True},
    ]
    assert backend.inputs["failoverPolicy"] == {
        "failoverRatio": 0,
        "dropTrafficIfUnhealthy": True,
        "disableConnectionDrainOnFailover": True,
    }
    assert backend.inputs["connectionTrackingPolicy"] == {"connectionPersistenceOnUnhealthyBackends": "NEVER_PERSIST"}
    rule = applied.named(RULE, f"{gcp.name}-fr")
    assert (rule.inputs["ipProtocol"], rule.inputs["allPorts"], rule.inputs["loadBalancingScheme"]) == (
        "L3_DEFAULT",
        True,
        "INTERNAL",
    )
    assert rule.inputs["backendService"] == backend.id
    routes = [r for r in applied.of_type(GCP_ROUTE) if r.name.startswith(f"{gcp.name}-to-")]
    assert routes
    for route in routes:
        assert route.inputs["nextHopIlb"] == rule.outputs["selfLink"] and "nextHopInstance" not in route.inputs
        assert route.inputs["priority"] == 900
    subnet = applied.named(GCP_SUBNET, f"{gcp.name}-subnet")
    assert subnet.inputs["privateIpGoogleAccess"] is True


def test_gcp_probers_reach_only_the_health_port_of_the_gateways(applied: ProgramRun) -> None:
    _, gcp = sites(applied)
    rule = applied.named(GCP_FIREWALL, f"{gcp.name}-fw-health")
    assert sorted(rule.inputs["sourceRanges"]) == ["130.211.0.0/22", "35.191.0.0/16"]
    assert rule.inputs["allows"] == [{"protocol": "tcp", "ports": ["9181"]}]
    wireguard = applied.named(GCP_FIREWALL, f"{gcp.name}-fw-wireguard")
    assert rule.inputs["targetTags"] == wireguard.inputs["targetTags"]  # the gateways' tag
    # Path-MTU ICMP comes from either gateway.
    pmtu = applied.named(GCP_FIREWALL, f"{gcp.name}-fw-pmtu")
    ips = {
        f"{applied.named(GCP_INSTANCE, f'{gcp.name}{s}-instance').outputs['networkInterfaces'][0]['networkIp']}/32"
        for s in ("", "-b")
    }
    assert set(pmtu.inputs["sourceRanges"]) == ips


def test_gcp_both_accounts_read_the_key_and_nothing_else(applied: ProgramRun) -> None:
    _, gcp = sites(applied)
    secret = applied.named("gcp:secretmanager/secret:Secret", f"{gcp.name}-key-secret")
    members = {f"serviceAccount:{applied.named(GCP_SA, f'{gcp.name}{s}-sa').outputs['email']}" for s in ("", "-b")}
    bindings = applied.of_type(SECRET_IAM)
    assert {b.inputs["member"] for b in bindings} == members
    for binding in bindings:
        assert binding.inputs["secretId"] == secret.id
        assert binding.inputs["role"] == "roles/secretmanager.secretAccessor"
    for suffix in ("", "-b"):  # the first boot reads the key with the binding in place
        assert applied.depends_on(
            GCP_INSTANCE, f"{gcp.name}{suffix}-instance", SECRET_IAM, f"{gcp.name}{suffix}-key-accessor"
        )
    # Their only other grant: the agent's custom role, conditioned on the site's own resources.
    (role,) = applied.of_type(CUSTOM_ROLE)
    assert re.fullmatch(r"wgMeshHa_[0-9a-f]{8}_gcp_euw3_[0-9a-z]{6}", role.inputs["roleId"]), role.inputs["roleId"]
    assert "compute.instances.addAccessConfig" in role.inputs["permissions"]
    assert not any(p.startswith(("compute.routes.", "iam.", "resourcemanager.")) for p in role.inputs["permissions"])
    project = applied.of_type(PROJECT_IAM)
    assert {b.inputs["member"] for b in project} == members and len(project) == 2
    address = applied.named("gcp:compute/address:Address", f"{gcp.name}-address").outputs["selfLink"]
    for binding in project:
        assert binding.inputs["role"] == role.outputs["name"]
        expression = binding.inputs["condition"]["expression"]
        assert address[address.index("projects/") :] in expression
        for suffix in ("", "-b"):
            link = applied.named(GCP_INSTANCE, f"{gcp.name}{suffix}-instance").outputs["selfLink"]
            assert link[link.index("projects/") :] in expression


# --- both clouds ------------------------------------------------------------------------------


def test_the_stack_exports_both_gateways_private_addresses(applied: ProgramRun) -> None:
    aws, gcp = sites(applied)
    out = applied.exports["ha_gateways"]
    assert not out.secret
    assert set(out.value) == {aws.name, gcp.name}
    assert set(out.value[aws.name]) == {"a", "b"} and set(out.value[gcp.name]) == {"a", "b"}
    assert (
        out.value[gcp.name]["a"]
        == applied.named(GCP_INSTANCE, f"{gcp.name}-instance").outputs["networkInterfaces"][0]["networkIp"]
    )


def test_one_gateway_exports_no_ha_addresses(one_gateway: ProgramRun) -> None:
    assert "ha_gateways" not in one_gateway.exports


def comparable(resource: Recorded) -> dict[str, Any]:
    inputs = copy.deepcopy(resource.inputs)
    for key in ("userDataBase64",):
        inputs.pop(key, None)
    if "metadata" in inputs:
        inputs["metadata"].pop("user-data", None)
    return inputs


def test_adding_the_standby_keeps_every_resource_of_gateway_a(applied: ProgramRun, one_gateway: ProgramRun) -> None:
    """1 -> 2 renames nothing and changes nothing of gateway a but its instance's user data (agent.json gains the
    `ha` object; cloud-init reads it once, so the instance is replaced: create-before-delete, and the new pair's
    takeover makes it a planned handover). Removed: the EipAssociation (AWS) only; GCP routes get the ILB next hop."""
    before = {(r.type, r.name): r for r in one_gateway.resources}
    after = {(r.type, r.name): r for r in applied.resources}
    removed = set(before) - set(after)
    assert {t for t, _ in removed} == {EIP_ASSOC}
    changed = []
    for key, old in before.items():
        if key not in after:
            continue
        new = after[key]
        if old.inputs == new.inputs:
            continue
        changed.append(key)
    aws, gcp = sites(applied)
    # What may change, and why: the instances' user data (the ha object), the gates' command lines (GCP: --wait-only),
    # the GCP routes' next hop (the load balancer), the ICMP rule's sources (both gateways), Private Google Access.
    allowed = {
        (AWS_INSTANCE, f"{aws.name}-instance"),
        (GCP_INSTANCE, f"{gcp.name}-instance"),
        (COMMAND, f"{gcp.name}-ready"),
        (GCP_FIREWALL, f"{gcp.name}-fw-pmtu"),
        (GCP_SUBNET, f"{gcp.name}-subnet"),
        *((GCP_ROUTE, r.name) for r in applied.of_type(GCP_ROUTE)),
    }
    assert set(changed) <= allowed, sorted(set(changed) - allowed)
    for typ in (AWS_INSTANCE, GCP_INSTANCE):
        (name,) = [n for t, n in allowed if t == typ]
        assert comparable(before[(typ, name)]) == comparable(after[(typ, name)]), name
    # The public address, the key, the AWS routes: the same resources with the same inputs.
    for typ, name in (
        ("aws:ec2/eip:Eip", f"{aws.name}-eip"),
        ("gcp:compute/address:Address", f"{gcp.name}-address"),
        *(
            ("random:index/randomBytes:RandomBytes", r.name)
            for r in one_gateway.of_type("random:index/randomBytes:RandomBytes")
        ),
    ):
        assert (typ, name) in before and before[(typ, name)].inputs == after[(typ, name)].inputs


def test_a_mesh_change_leaves_both_gateways_inputs_byte_identical(applied: ProgramRun) -> None:
    """Live delivery's invariant for gateway b too: a peer change (new sites, rotated keys) reaches the stores only."""
    changed = run(day_two(ha_raw()))
    for site in sites(applied):
        for suffix in ("", "-b"):
            typ = AWS_INSTANCE if isinstance(site, AwsSite) else GCP_INSTANCE
            old, new = (r.named(typ, f"{site.name}{suffix}-instance") for r in (applied, changed))
            old_inputs, new_inputs = copy.deepcopy(old.inputs), copy.deepcopy(new.inputs)
            if typ == GCP_INSTANCE:  # the peer document: metadata set in place, no replacement
                del old_inputs["metadata"]["wg-mesh-peers"], new_inputs["metadata"]["wg-mesh-peers"]
            assert old_inputs == new_inputs, old.name


def test_no_key_material_in_any_public_input_or_output(applied: ProgramRun) -> None:
    keys = applied.private_keys()
    from tests.test_program import strings_in

    public: list[tuple[str, Any]] = [(f"{r.type} {r.name}", r.public_inputs()) for r in applied.resources]
    public += [
        (f"{r.type} {r.name} outputs", r.outputs)
        for r in applied.resources
        if r.type != "random:index/randomBytes:RandomBytes"
    ]
    public += [(f"stack output {k}", v.value) for k, v in applied.exports.items() if not v.secret]
    for where, value in public:
        for text in strings_in(value):
            assert not any(key in text for key in keys), f"key material in {where}"


def test_the_ha_stack_file_is_one_of_the_stacks(tmp_path: Path) -> None:
    assert HA_STACK.exists()
    raw = ha_raw()
    assert raw["delivery"] == "live"
    assert [s.get("gateways") for s in raw["sites"] if s["cloud"] in ("aws", "gcp")] == [2, 2]


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
    assert agent_json(user_data_input(b))["ha"]["route_table_ids"] == ["rtb-0a1b2c3d", "rtb-0a1b2c3e"]


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
    with pytest.raises(ValueError, match="set standby_zone"):
        ha.other_zone("c6i.2xlarge", "us-east-1", "us-east-1b", ["us-east-1b"])
