"""The AWS site under mocks: zones, images and partitions, protection and renames, credentials, the instance
profile (readiness, operator access) and the ordering of a gateway's boot. The readiness gate itself is in
test_readiness.py."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import NOT_OFFERED_TYPE, REPO, STACK_FILES, ProgramRun, RecordingMocks, run_program
from tests.test_program import (
    AWS_EIP,
    AWS_INSTANCE,
    AWS_ROUTE,
    AWS_SG,
    GCP_ADDRESS,
    RANDOM_BYTES,
    dev_raw,
    mesh_of,
    site_raw,
)
from tests.test_program_type_change import GATE, gated_replacement
from wg_mesh.aws import facts as awsfacts
from wg_mesh.config import AwsSite, ConfigError
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw


def test_gateway_boots_only_after_its_subnet_reaches_the_internet(applied: ProgramRun) -> None:
    """cloud-init runs once and installs packages: a created subnet's default route and association come first."""
    for site in mesh_of(applied).sites:
        if not isinstance(site, AwsSite) or site.uses_existing_network:
            continue
        instance = f"{site.name}-instance"
        assert applied.depends_on(AWS_INSTANCE, instance, AWS_ROUTE, f"{site.name}-rt-default")
        assert applied.depends_on(
            AWS_INSTANCE, instance, "aws:ec2/routeTableAssociation:RouteTableAssociation", f"{site.name}-rt-assoc"
        )


SUBNET = "aws:ec2/subnet:Subnet"
OFFERINGS_CALL = "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "update"])
def test_an_unset_aws_zone_is_one_that_offers_the_instance_type_and_is_kept(preview: bool) -> None:
    raw = dev_raw()
    site_raw(raw, "aws").pop("zone", None)
    run = run_program(raw, preview=preview)
    assert run.error is None, run.error
    offerings = [c for c in run.mocks.calls if c.token == OFFERINGS_CALL]
    (call,) = [c for c in offerings if len(c.args["filters"]) == 1]  # the choice; the others check the subnet's zone
    assert call.args["locationType"] == "availability-zone"
    assert call.args["filters"] == [{"name": "instance-type", "values": ["c6i.2xlarge"]}]
    subnet = run.named(SUBNET, "aws-use1-subnet")
    assert subnet.inputs["availabilityZone"] == "us-east-1b"  # the first, by name, of the zones offering it
    assert "availabilityZoneId" not in subnet.inputs
    assert run.options(SUBNET, "aws-use1-subnet").ignore_changes == ("availabilityZone",)


def test_an_instance_type_offered_nowhere_fails_with_its_name() -> None:
    # In a child process: a program that fails inside an apply leaves Pulumi's runtime unusable for later runs.
    raw = dev_raw()
    site_raw(raw, "aws")["instance_type"] = NOT_OFFERED_TYPE
    code = (
        "import json, sys\n"
        "from tests.conftest import run_program\n"
        "try:\n"
        "    run_program(json.loads(sys.argv[1]), preview=False)\n"
        "except Exception as exc:\n"
        "    print('FAILED:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(raw)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.startswith("FAILED:"), done
    assert "instance type x9z.nowhere is not offered in any availability zone of us-east-1" in done.stdout


def test_choose_zone_is_stable_and_explains_an_empty_offer() -> None:
    assert awsfacts.choose_zone("c6i.large", "eu-west-1", ["eu-west-1c", "eu-west-1a", "eu-west-1b"]) == "eu-west-1a"
    with pytest.raises(ValueError, match=r"c6i\.large is not offered in any availability zone of eu-west-1"):
        awsfacts.choose_zone("c6i.large", "eu-west-1", [])


# --- images: deliberate, per partition ---------------------------------------------------------

AMI_CALL = "aws:ec2/getAmi:getAmi"


def name_lookups(run: ProgramRun) -> list[Any]:
    """The AMI lookups by name (Canonical's images); the others are by id (the architecture check, wg_mesh.aws.fit)."""
    return [c for c in run.mocks.calls if c.token == AMI_CALL and c.args["filters"][0]["name"] == "name"]


def ami_names(run: ProgramRun) -> list[str]:
    return [c.args["filters"][0]["values"][0] for c in name_lookups(run)]


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "update"])
def test_an_unpinned_image_is_the_newest_at_creation_and_then_kept(preview: bool) -> None:
    """A new Ubuntu AMI must not replace the gateway: `ami` is ignored once the instance exists."""
    run = run_program(dev_raw(), preview=preview)
    assert run.error is None, run.error
    assert ami_names(run) == ["ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"]
    instance = run.named(AWS_INSTANCE, "aws-use1-instance")
    assert run.options(AWS_INSTANCE, "aws-use1-instance").ignore_changes == ("ami",)
    if not preview:
        (call,) = name_lookups(run)
        assert call.args["mostRecent"] is True
        assert instance.inputs["ami"].startswith("ami-")


def test_a_new_ubuntu_release_changes_nothing_pulumi_would_act_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pulumi up` today, Canonical publishes a new AMI, `pulumi preview` tomorrow: every input Pulumi compares is
    the same (the instance's `ami` is ignored once it exists), so the preview is empty."""
    today = run_program(dev_raw(), preview=False)
    monkeypatch.setattr(RecordingMocks, "newest_ubuntu_serial", "20260101")
    tomorrow = run_program(dev_raw(), preview=False)
    assert today.exports["aws_images"].value != tomorrow.exports["aws_images"].value  # there is a newer image

    def compared(run: ProgramRun) -> dict[tuple[str, str], dict[str, Any]]:
        return {
            (r.type, r.name): {k: v for k, v in r.inputs.items() if k not in run.options(r.type, r.name).ignore_changes}
            for r in run.resources
        }

    assert compared(today) == compared(tomorrow)
    assert "ami" in today.options(AWS_INSTANCE, "aws-use1-instance").ignore_changes


@pytest.mark.parametrize(
    ("image", "name"),
    [
        ("ami-0123456789abcdef0", None),
        ("20250804", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250804"),
        ("20250804.1", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250804.1"),
    ],
)
def test_a_pinned_image_is_used_as_given_and_rolls_when_changed(image: str, name: str | None) -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["image"] = image
    run = run_program(raw, preview=False)
    assert run.error is None, run.error
    options = run.options(AWS_INSTANCE, "aws-use1-instance")
    assert "ami" not in options.ignore_changes  # a changed pin reaches the instance: that is the roll
    ami = run.named(AWS_INSTANCE, "aws-use1-instance").inputs["ami"]
    newest = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
    if name is None:
        assert ami == image
        assert ami_names(run) == [newest]  # looked up only to report it (stack output aws_images)
    else:
        assert sorted(ami_names(run)) == sorted([newest, name])  # calls are recorded as they complete
        assert ami.startswith("ami-")
    images = run.exports["aws_images"].value["aws-use1"]
    assert images["in_use"] == ami


@pytest.mark.parametrize(
    ("region", "owner"),
    [("us-east-1", "099720109477"), ("us-gov-west-1", "513442679011"), ("cn-northwest-1", "837727238323")],
)
def test_ubuntu_images_come_from_canonicals_account_in_the_sites_partition(region: str, owner: str) -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["region"] = region
    run = run_program(raw, preview=True)
    assert run.error is None, run.error
    assert {tuple(c.args["owners"]) for c in name_lookups(run)} == {(owner,)}


def test_isolated_partitions_are_refused_by_validate() -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["region"] = "us-iso-east-1"
    run = run_program(raw, preview=True)
    assert run.error is not None
    assert "sites[0].region: us-iso-east-1 is in an isolated AWS partition" in str(run.error)
    assert run.resources == []


@pytest.mark.parametrize("image", ["ami-123", "latest", "2025-08-04", "ami-0123456789ABCDEF0", ""])
def test_a_malformed_image_is_refused_naming_the_field(image: str) -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["image"] = image
    with pytest.raises(ConfigError, match=r"sites\[0\]\.image: .* is neither an AMI id"):
        load_mesh(raw)


# --- protection and renames -------------------------------------------------------------------

KEPT = ((AWS_EIP, "{}-eip"), (GCP_ADDRESS, "{}-address"), (RANDOM_BYTES, "{}-key-random"))


def kept_resources(run: ProgramRun) -> list[tuple[str, str]]:
    cfg = mesh_of(run)
    found = [(typ, pattern.format(site.name)) for site in cfg.sites for typ, pattern in KEPT]
    return [(typ, name) for typ, name in found if any(r.type == typ and r.name == name for r in run.resources)]


@pytest.mark.parametrize("protect", [True, False])
def test_addresses_and_keys_are_protected_when_asked_and_nothing_else(protect: bool) -> None:
    raw = dev_raw()
    raw["protect"] = protect
    run = run_program(raw, preview=True)
    assert run.error is None, run.error
    kept = kept_resources(run)
    assert len(kept) == 3 * 2 - 2  # per site: its key and (cloud sites) its address; dev has two cloud sites
    for typ, name in kept:
        assert run.options(typ, name).protect is protect, name
        assert run.options(typ, name).retain_on_delete is False, name
    # (The key component carries the flag down to its RandomBytes.)
    others = [r for r in run.resources if (r.type, r.name) not in kept and r.type != "wg-mesh:index:WireGuardKey"]
    assert others and not any(run.options(r.type, r.name).protect for r in others)


def test_the_prod_stack_protects_and_dev_does_not() -> None:
    for path in STACK_FILES:
        cfg = load_mesh(read_raw(path))
        assert cfg.protect is (path.name == "Pulumi.prod.yaml"), path.name


def test_a_renamed_site_is_an_alias_of_its_previous_names() -> None:
    raw = dev_raw()
    site_raw(raw, "aws").update(name="aws-east", previous_names=["aws-use1"])
    run = run_program(raw, preview=True)
    assert run.error is None, run.error
    assert run.options("wg-mesh:aws:Gateway", "aws-east").aliases == ("aws-use1",)
    assert run.options("wg-mesh:gcp:Gateway", "gcp-euw3").aliases == ()
    # Children are named after the site, so the engine derives their aliases from the component's.
    assert {r.name for r in run.resources if r.type in (AWS_EIP, RANDOM_BYTES)} >= {
        "aws-east-eip",
        "aws-east-key-random",
    }


@pytest.mark.parametrize(
    ("previous", "problem"),
    [
        (["gcp-euw3"], "sites[0].previous_names[0]: 'gcp-euw3' is the name of sites[1]"),
        (["Old_Name"], "sites[0].previous_names: 'Old_Name' is not a DNS label"),
    ],
)
def test_previous_names_must_be_unambiguous(previous: list[str], problem: str) -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["previous_names"] = previous
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_a_previous_name_belongs_to_one_site() -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["previous_names"] = ["old"]
    site_raw(raw, "gcp")["previous_names"] = ["old"]
    with pytest.raises(ConfigError, match=r"sites\[1\]\.previous_names\[0\]: 'old' is already a previous name"):
        load_mesh(raw)


# --- per-site AWS credentials -----------------------------------------------------------------


def aws_provider_inputs(run: ProgramRun, site: str) -> dict[str, Any]:
    return run.named("pulumi:providers:aws", f"{site}-provider").inputs


def test_each_aws_site_can_have_its_own_profile_role_and_account() -> None:
    raw = dev_raw()
    role = "arn:aws:iam::123456789012:role/wg-mesh-deploy"
    site_raw(raw, "aws").update(profile="network-prod", assume_role_arn=role, account_id="123456789012")
    run = run_program(raw, preview=True)
    assert run.error is None, run.error
    inputs = aws_provider_inputs(run, "aws-use1")
    assert inputs["profile"] == "network-prod"
    assert json.loads(inputs["assumeRoles"]) == [{"roleArn": role, "sessionName": "wg-mesh-aws-use1"}]
    assert json.loads(inputs["allowedAccountIds"]) == ["123456789012"]


def test_without_site_credentials_the_environment_decides() -> None:
    run = run_program(dev_raw(), preview=True)
    inputs = aws_provider_inputs(run, "aws-use1")
    assert not {"profile", "assumeRoles", "allowedAccountIds"} & set(inputs)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"assume_role_arn": "arn:aws:iam::12345:role/x"},
            "sites[0].assume_role_arn: 'arn:aws:iam::12345:role/x' is not",
        ),
        (
            {"assume_role_arn": "arn:aws-cn:iam::123456789012:role/x"},
            "sites[0].assume_role_arn: arn:aws-cn:iam::123456789012:role/x is in partition aws-cn, region us-east-1",
        ),
        ({"account_id": "1234"}, "sites[0].account_id:"),
        ({"profile": ""}, "sites[0].profile:"),
    ],
)
def test_bad_site_credentials_are_refused_naming_the_field(fields: dict[str, str], problem: str) -> None:
    raw = dev_raw()
    site_raw(raw, "aws").update(fields)
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


# --- the gateway's instance profile: readiness and operator access -----------------------------

IAM_ROLE = "aws:iam/role:Role"
IAM_ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
IAM_PROFILE = "aws:iam/instanceProfile:InstanceProfile"
IAM_POLICY = "aws:iam/rolePolicy:RolePolicy"


@pytest.mark.parametrize("access", ["none", "cloud"])
def test_operator_access_cloud_adds_session_manager_and_no_ssh(access: str) -> None:
    raw = dev_raw()
    raw["operator_access"] = access
    run = run_program(raw, preview=False)
    assert run.error is None, run.error
    role = run.named(IAM_ROLE, "aws-use1-role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"] == [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ]
    assert run.depends_on(IAM_PROFILE, "aws-use1-profile", IAM_ROLE, "aws-use1-role")
    assert run.depends_on(IAM_PROFILE, "aws-use1-profile", IAM_POLICY, "aws-use1-ready")
    if access == "cloud":
        assert run.depends_on(IAM_PROFILE, "aws-use1-profile", IAM_ATTACH, "aws-use1-ssm")
    assert run.depends_on(AWS_INSTANCE, "aws-use1-instance", IAM_PROFILE, "aws-use1-profile")
    attachments = run.of_type(IAM_ATTACH)
    if access == "cloud":
        assert [a.inputs["policyArn"] for a in attachments] == ["arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"]
    else:
        assert attachments == []
    # Session Manager needs no inbound port: the security group is the same either way.
    assert not any(
        rule["protocol"] == "tcp" and rule["fromPort"] <= 22 <= rule["toPort"]
        for rule in run.named(AWS_SG, "aws-use1-sg").inputs["ingress"]
    )


def test_operator_access_is_none_or_cloud() -> None:
    raw = dev_raw()
    raw["operator_access"] = "ssh"
    with pytest.raises(ConfigError, match=r"operator_access: "):
        load_mesh(raw)


@pytest.mark.parametrize(("region", "partition"), [("us-gov-east-1", "aws-us-gov"), ("cn-north-1", "aws-cn")])
def test_iam_arns_and_principals_follow_the_partition(region: str, partition: str) -> None:
    raw = dev_raw()
    raw["operator_access"] = "cloud"
    site_raw(raw, "aws")["region"] = region
    run = run_program(raw, preview=True)
    assert run.error is None, run.error
    (attachment,) = run.of_type(IAM_ATTACH)
    assert attachment.inputs["policyArn"] == f"arn:{partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
    policy = json.loads(run.named(IAM_POLICY, "aws-use1-ready").inputs["policy"])
    assert policy["Statement"][0]["Resource"] == f"arn:{partition}:ec2:{region}:123456789012:instance/*"


def test_a_gateway_may_only_mark_its_own_sites_instances_ready() -> None:
    run = run_program(dev_raw(), preview=True, stack="dev")
    (statement,) = json.loads(run.named(IAM_POLICY, "aws-use1-ready").inputs["policy"])["Statement"]
    assert statement["Action"] == "ec2:CreateTags"
    assert statement["Resource"] != "*"
    assert statement["Condition"] == {
        "StringEquals": {
            "ec2:ResourceTag/wg-mesh-site": "aws-use1",
            "ec2:ResourceTag/wg-mesh-stack": "dev",
            "ec2:ResourceTag/wg-mesh-project": "wg-mesh",
            "aws:RequestTag/wg-mesh:ready": "true",
        },
        "ForAllValues:StringEquals": {"aws:TagKeys": ["wg-mesh:ready"]},
        "Null": {"ec2:SourceInstanceARN": "false"},
    }
    provider = aws_provider_inputs(run, "aws-use1")
    assert json.loads(provider["defaultTags"])["tags"] == {
        "managed-by": "wg-mesh",
        "wg-mesh-site": "aws-use1",
        "wg-mesh-stack": "dev",
        "wg-mesh-project": "wg-mesh",
    }
    assert json.loads(provider["ignoreTags"]) == {"keys": ["wg-mesh:ready"]}


def test_turning_operator_access_on_changes_no_instance_input() -> None:
    """The role is always there (readiness), so access is one policy attachment, not a new gateway."""
    off = run_program(dev_raw(), preview=False)
    raw = dev_raw()
    raw["operator_access"] = "cloud"
    on = run_program(raw, preview=False)
    assert off.named(AWS_INSTANCE, "aws-use1-instance").inputs == on.named(AWS_INSTANCE, "aws-use1-instance").inputs


def test_a_previous_name_clash_is_reported_with_other_field_errors() -> None:
    raw = dev_raw()
    raw["operator_access"] = "ssh"
    site_raw(raw, "aws")["previous_names"] = ["gcp-euw3"]
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    assert "sites[0].previous_names[0]: 'gcp-euw3' is the name of sites[1]" in info.value.problems
    assert any(p.startswith("operator_access:") for p in info.value.problems)


@pytest.mark.parametrize(("zone", "argument"), [("us-east-1d", "availabilityZone"), ("use1-az4", "availabilityZoneId")])
def test_a_configured_zone_reaches_the_subnet_by_name_or_id(zone: str, argument: str) -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["zone"] = zone
    run = run_program(raw, preview=True)
    assert run.error is None, run.error
    subnet = run.named(SUBNET, "aws-use1-subnet")
    assert subnet.inputs[argument] == zone
    (other,) = {"availabilityZone", "availabilityZoneId"} - {argument}
    assert other not in subnet.inputs
    assert run.options(SUBNET, "aws-use1-subnet").ignore_changes == ()  # a chosen zone is yours to change
    # No zone to choose; the one lookup checks the configured zone offers the type (wg_mesh.aws.fit).
    (check,) = [c for c in run.mocks.calls if c.token == OFFERINGS_CALL]
    assert {f["name"]: f["values"] for f in check.args["filters"]}["location"] == [zone]
    kind = "availability-zone-id" if argument == "availabilityZoneId" else "availability-zone"
    assert check.args["locationType"] == kind


# --- a type change: a ready-gated replacement (issue 21 item 2; tests/test_program_type_change.py) -------------------


def test_a_type_change_replaces_aws_gateways_through_the_gate(applied: ProgramRun) -> None:
    names = gated_replacement(applied, AWS_INSTANCE, "instanceType", AWS_ROUTE)
    assert names
    association = "aws:ec2/eipAssociation:EipAssociation"
    for assoc in applied.of_type(association):  # single gateways: the address moves after the gate
        assert applied.depends_on(association, assoc.name, GATE, f"{assoc.name.removesuffix('-eip-assoc')}-ready")
    for name in names:
        if name.endswith("-b-instance"):  # HA: b is created (or replaced) only once a is ready, one at a time
            assert applied.depends_on(AWS_INSTANCE, name, GATE, f"{name.removesuffix('-b-instance')}-ready")
    # Every gateway's type was checked against its subnet's zone (one location-filtered offerings lookup each).
    checks = [c for c in applied.mocks.calls if c.token == OFFERINGS_CALL and len(c.args["filters"]) == 2]
    assert len(checks) == len(names)
