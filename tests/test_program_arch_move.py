"""A move across x86_64 and Graviton (arm64) under mocks (issue 21 item 2): the program chooses the new architecture's
AMI itself, with no `image` pin.

An unpinned gateway keeps the AMI of its creation (`ignore_changes` on `ami`), and Pulumi applies that to a replacement
too (the recorded input replaces the program's), so the instance's logical name carries its architecture when it is
not x86_64 (wg_mesh.aws.facts.instance_suffix): a move declares a new instance, which gets the newest AMI of its
architecture, and the old one, no longer declared, is deleted at the end of `up`. The mocks answer an instance named in
RecordingMocks.kept_amis with that AMI, as the engine would for an instance in the stack's state: each test gives the
instance of the previous architecture a kept AMI of that architecture, and the new instance does not get it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ProgramRun, run_program
from tests.test_program import AWS_INSTANCE, AWS_ROUTE, GCP_INSTANCE, dev_raw, site_raw
from tests.test_program_ha import EC2_TAG, ha_raw
from tests.test_program_ha import run as ha_run
from tests.test_program_type_change import GATE, failing_run, gated_replacement
from tests.test_underlay import prod_raw
from wg_mesh import testing
from wg_mesh.aws import facts as awsfacts
from wg_mesh.config import names
from wg_mesh.plan import ha
from wg_mesh.testing import RecordingMocks

EIP_ASSOC = "aws:ec2/eipAssociation:EipAssociation"
KEPT_X86 = "ami-0123456789abcdef0"  # what the x86 gateway was created with, years ago
KEPT_ARM = "ami-0fedcba9876543210"


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """RecordingMocks.kept_amis for one test (instance name -> the AMI the engine would keep for it)."""
    amis: dict[str, str] = {}
    monkeypatch.setattr(RecordingMocks, "kept_amis", amis)
    monkeypatch.setattr(RecordingMocks, "ami_architectures", {KEPT_X86: "x86_64", KEPT_ARM: "arm64"})
    yield amis


def applied(raw: dict[str, Any]) -> ProgramRun:
    run = run_program(raw, preview=False)
    assert run.error is None, run.error
    return run


def newest(run: ProgramRun, arch: str) -> str:
    """The id of the newest Ubuntu AMI the program looked up by name (Canonical's account), of `arch`."""
    (lookup,) = [c for c in run.mocks.calls if c.token == "aws:ec2/getAmi:getAmi" and "owners" in c.args]
    (pattern,) = lookup.args["filters"][0]["values"]
    assert f"-{arch}-server-" in pattern
    return testing.mocks._hex_id("ami", pattern.replace("*", RecordingMocks.newest_ubuntu_serial))  # the mocks' answer


def follows(run: ProgramRun, site: str, instance_name: str) -> None:
    """The gate, the address and every route of a single-gateway site point at `instance_name`, the only instance."""
    instance = run.named(AWS_INSTANCE, instance_name)
    assert [r.name for r in run.of_type(AWS_INSTANCE) if r.name.startswith(site)] == [instance_name]
    assert gated_replacement(run, AWS_INSTANCE, "instanceType", AWS_ROUTE)
    gate = run.named(GATE, f"{site}-ready")
    assert run.depends_on(GATE, f"{site}-ready", AWS_INSTANCE, instance_name)
    assert gate.inputs["triggers"] == [instance.id]
    assert run.named(EIP_ASSOC, f"{site}-eip-assoc").inputs["instanceId"] == instance.id
    routes = [r for r in run.of_type(AWS_ROUTE) if r.name.startswith(f"{site}-route-")]
    eni = instance.outputs["primaryNetworkInterfaceId"]
    assert routes and {r.inputs["networkInterfaceId"] for r in routes} == {eni}


def test_x86_to_graviton_and_back_boots_each_architectures_newest_ami_with_no_pin(kept: dict[str, str]) -> None:
    raw = dev_raw()
    site_raw(raw, "aws")["instance_type"] = "c7g.2xlarge"
    site_raw(raw, "gcp")["instance_type"] = "t2a-standard-4"
    kept["aws-use1-instance"] = KEPT_X86  # the x86 gateway in the stack's state
    arm = applied(raw)
    # GCP: the family is an input, never ignored, so the replacement (machineType) boots the new architecture's family.
    vm = arm.named(GCP_INSTANCE, "gcp-euw3-instance")
    assert vm.inputs["bootDisk"]["initializeParams"]["image"] == "ubuntu-os-cloud/ubuntu-2404-lts-arm64"
    assert not [k for k in arm.options(GCP_INSTANCE, "gcp-euw3-instance").ignore_changes or [] if "bootDisk" in k]
    # A new resource: the old name is not declared, so Pulumi deletes it at the end.
    follows(arm, "aws-use1", "aws-use1-instance-arm64")
    instance = arm.named(AWS_INSTANCE, "aws-use1-instance-arm64")
    assert "ami" not in instance.outputs  # nothing kept: the instance boots its input
    assert instance.inputs["ami"] == newest(arm, "arm64")
    assert "ami" in arm.options(AWS_INSTANCE, "aws-use1-instance-arm64").ignore_changes  # kept within arm64

    kept.clear()
    kept["aws-use1-instance-arm64"] = KEPT_ARM  # now the arm64 gateway is in the state; back to x86
    back = applied(dev_raw())
    follows(back, "aws-use1", "aws-use1-instance")
    instance = back.named(AWS_INSTANCE, "aws-use1-instance")
    assert "ami" not in instance.outputs
    assert instance.inputs["ami"] == newest(back, "amd64")


def test_a_graviton_type_change_replaces_in_place_under_the_same_name_keeping_the_ami(kept: dict[str, str]) -> None:
    """Within one architecture nothing but the type differs (the name, so the kept AMI, stays): no roll on a new Ubuntu
    release, and the replacement is the one `replace_on_changes` makes of the same resource."""
    runs = []
    for typ in ("c7g.2xlarge", "m7g.xlarge"):
        raw = dev_raw()
        site_raw(raw, "aws")["instance_type"] = typ
        runs.append(applied(raw))
    old, new = (r.named(AWS_INSTANCE, "aws-use1-instance-arm64").inputs for r in runs)
    assert {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)} == {"instanceType"}
    kept["aws-use1-instance-arm64"] = KEPT_ARM
    raw = dev_raw()
    site_raw(raw, "aws")["instance_type"] = "m7g.xlarge"
    assert applied(raw).named(AWS_INSTANCE, "aws-use1-instance-arm64").outputs["ami"] == KEPT_ARM


def test_an_ha_pair_moves_to_graviton_one_gateway_after_the_other(kept: dict[str, str]) -> None:
    raw = copy.deepcopy(ha_raw())
    (aws_site,) = [s for s in raw["sites"] if s.get("cloud") == "aws"]
    aws_site["instance_type"] = "c7g.2xlarge"
    kept.update({f"{ha.child_name(aws_site['name'], letter)}-instance": KEPT_X86 for letter in ha.LETTERS})
    run = ha_run(raw)
    site = aws_site["name"]
    a, b = (run.named(AWS_INSTANCE, f"{ha.child_name(site, letter)}-instance-arm64") for letter in ha.LETTERS)
    assert len([r for r in run.of_type(AWS_INSTANCE) if r.name.startswith(site)]) == 2
    assert a.inputs["ami"] == b.inputs["ami"] != KEPT_X86
    assert run.depends_on(AWS_INSTANCE, b.name, GATE, f"{site}-ready")  # b only once the new a is ready
    assert run.depends_on(GATE, f"{site}-b-ready", AWS_INSTANCE, b.name)
    for instance in (a, b):  # the HA tags the policy checks are on the new instances' ENIs
        prefix = instance.name.removesuffix("-instance-arm64")
        tags = [t for t in run.of_type(EC2_TAG) if t.name.startswith(f"{prefix}-eni-")]
        assert tags and {t.inputs["resourceId"] for t in tags} == {instance.outputs["primaryNetworkInterfaceId"]}


def test_a_fixed_private_address_keeps_one_name_so_its_move_still_asks_for_a_pin() -> None:
    """Its address is the old instance's until that is gone (delete before replace): old and new cannot run side by
    side under two names, so the move is a replacement under its one name, which keeps the AMI: one line, as before."""
    raw = prod_raw()
    site_raw(raw, "aws")["instance_type"] = "c7g.2xlarge"
    out = failing_run(raw, {"kept_amis": {"aws-use1-instance": KEPT_X86}})
    assert out.startswith("FAILED:"), out
    assert "instance type c7g.2xlarge runs arm64, but the image this gateway keeps" in out
    assert f"{KEPT_X86} is x86_64: set `image` to an Ubuntu serial" in out


# --- the names, pure -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "fixed", "suffix"),
    [
        ("c6i.large", False, "-instance"),  # today's name: no x86 stack changes
        ("t3.micro", True, "-instance"),
        ("c7g.large", False, "-instance-arm64"),
        ("a1.large", False, "-instance-arm64"),
        ("c7g.large", True, "-instance"),  # fixed address: one name (delete before replace)
    ],
)
def test_the_instance_name_carries_the_architecture_unless_the_address_is_fixed(
    instance_type: str, fixed: bool, suffix: str
) -> None:
    assert awsfacts.instance_suffix(instance_type, fixed) == suffix


def test_instance_names_stay_unique_by_construction() -> None:
    """Sites whose names end like another site's instance names (and that names.py accepts) never share an instance
    name, whatever the architecture: the suffix ends the name, after `-instance`."""
    sites = [
        {"name": "x", "gateways": 2},
        {"name": "x-instance"},
        {"name": "x-arm64"},
        {"name": "x-instance-arm64", "gateways": 2},
        {"name": "x-b-instance"},
    ]
    assert names.name_problems(sites) == []
    owners: dict[str, str] = {}
    for site in sites:
        for letter in ha.LETTERS[: int(site.get("gateways", 1))]:
            for typ in ("c6i.large", "c7g.large"):
                name = ha.child_name(str(site["name"]), letter) + awsfacts.instance_suffix(typ, fixed_address=False)
                assert owners.setdefault(name, f"{site['name']}/{letter}") == f"{site['name']}/{letter}", name
