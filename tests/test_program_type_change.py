"""A type change under mocks (issue 21 item 2): an `instance_type` / `machine_type` change replaces the gateway through
the readiness gate, as new user data does (the providers would stop and start it in place, ungated); a type the
gateway's zone does not offer, or an AMI of the other architecture (pinned; unpinned, only with a fixed private address:
tests/test_program_arch_move.py), fails the program before the instance changes.

The mocks cannot run a replacement (no engine, no state): what they prove is what the engine acts on — the instance's
`replace_on_changes` names the type, it is not `delete_before_replace` (so Pulumi creates the new instance beside the
old one, and deletes the old one last), its readiness gate depends on it, and the address and routes depend on the
gate; and that the inputs of two runs differing only in the type differ only in the type. The wiring is checked on
every stack file's shared run: test_program_aws.py (AWS) and test_gcp_readiness.py (GCP) call gated_replacement.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import REPO, ProgramRun, run_program
from tests.test_program import AWS_INSTANCE, GCP_INSTANCE, dev_raw, site_raw
from wg_mesh.aws import facts as awsfacts
from wg_mesh.gcp import facts as gcpfacts

GATE = "command:local:Command"


def gated_replacement(run: ProgramRun, typ: str, type_key: str, routes: str) -> list[str]:
    """Every instance of `typ` replaces on a type change, create before delete, and its gate depends on it; the
    routes depend on gateway a's gate. The instances' names."""
    names = [r.name for r in run.of_type(typ)]
    for name in names:
        prefix = re.sub(r"-instance(-arm64)?$", "", name)  # an AWS instance's name carries its architecture
        assert type_key in run.monitor.replace_on_changes[name], name
        assert run.options(typ, name).delete_before_replace is False, name  # the new one beside the old
        assert run.depends_on(GATE, f"{prefix}-ready", typ, name), name  # the gate waits for the new instance
    for route in run.of_type(routes):
        if "-route-" not in route.name and "-to-" not in route.name:
            continue  # a created network's own default route
        site = route.name.split("-route-")[0].split("-to-")[0]
        assert run.depends_on(routes, route.name, GATE, f"{site}-ready"), route.name
    return names


def test_only_the_type_differs_between_two_types() -> None:
    """So the replacement (replace_on_changes) is all a type change does: no other input of either instance moves."""
    before, after = dev_raw(), dev_raw()
    site_raw(after, "aws")["instance_type"] = "c7i.2xlarge"
    site_raw(after, "gcp")["instance_type"] = "n2-standard-16"
    runs = [run_program(raw, preview=False) for raw in (before, after)]
    assert all(run.error is None for run in runs), [run.error for run in runs]
    instances = [
        (AWS_INSTANCE, "aws-use1-instance", "instanceType"),
        (GCP_INSTANCE, "gcp-euw3-instance", "machineType"),
    ]
    for typ, name, key in instances:
        old, new = (run.named(typ, name).inputs for run in runs)
        assert {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)} == {key}, name
    assert runs[1].named(AWS_INSTANCE, "aws-use1-instance").inputs["instanceType"] == "c7i.2xlarge"


# --- what fails before anything changes ------------------------------------------------------------------------------


def failing_run(raw: dict[str, Any], mocks: dict[str, Any]) -> str:
    """The program's failure, in a child process (a program that fails inside an apply leaves Pulumi's runtime
    unusable for later runs); `mocks`: RecordingMocks class settings (type_gaps, kept_amis, ami_architectures,
    machine_architectures)."""
    code = (
        "import json, sys\n"
        "from tests.conftest import RecordingMocks, run_program\n"
        "settings = json.loads(sys.argv[2])\n"
        "RecordingMocks.type_gaps = {k: frozenset(v) for k, v in settings.get('type_gaps', {}).items()}\n"
        "RecordingMocks.kept_amis = settings.get('kept_amis', {})\n"
        "RecordingMocks.ami_architectures = settings.get('ami_architectures', {})\n"
        "RecordingMocks.machine_architectures = settings.get('machine_architectures', {})\n"
        "try:\n"
        "    run = run_program(json.loads(sys.argv[1]), preview=False)\n"
        "    print('PASSED:', run.error)\n"
        "except Exception as exc:\n"
        "    print('FAILED:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(raw), json.dumps(mocks)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


EXISTING_NETWORK = {
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_id": "subnet-0123456789abcdef0",  # the mocks' DescribeSubnets: in us-east-1b
    "route_table_ids": ["rtb-0123456789abcdef0"],
}


@pytest.mark.parametrize("where", [{"zone": "us-east-1b"}, EXISTING_NETWORK], ids=["zone", "existing-subnet"])
def test_a_type_the_aws_subnets_zone_does_not_offer_fails_with_its_zone(where: dict[str, Any]) -> None:
    """The subnet stays where it is (a configured zone, or the user's subnet, looked up); the new type is offered
    only elsewhere. (An unset zone was chosen for the first type and is kept, `ignore_changes`: the lookup of the
    subnet answers it, as for a user's subnet.)"""
    raw = dev_raw()
    site_raw(raw, "aws").update(instance_type="c7i.2xlarge", **where)
    out = failing_run(raw, {"type_gaps": {"c7i.2xlarge": ["us-east-1b"]}})
    assert out.startswith("FAILED:"), out
    assert "instance type c7i.2xlarge is not offered in us-east-1b, the zone of the gateway's subnet" in out


def test_a_machine_type_the_gcp_zone_does_not_offer_fails_with_its_zone() -> None:
    raw = dev_raw()
    site_raw(raw, "gcp")["instance_type"] = "c4a-standard-8"
    out = failing_run(raw, {"type_gaps": {"c4a-standard-8": ["europe-west3-a"]}})
    assert out.startswith("FAILED:"), out
    assert "machine type c4a-standard-8 is not offered in europe-west3-a, the gateway's zone" in out


def test_a_pinned_ami_of_the_other_architecture_fails() -> None:
    raw = dev_raw()
    site_raw(raw, "aws").update(instance_type="c7g.2xlarge", image="ami-0123456789abcdef0")
    out = failing_run(raw, {})
    assert out.startswith("FAILED:"), out
    assert "but the pinned image ami-0123456789abcdef0 is x86_64" in out


def test_the_way_out_a_serial_pin_boots_the_arm64_build() -> None:
    raw = dev_raw()
    site_raw(raw, "aws").update(instance_type="c7g.2xlarge", image="20250804")
    run = run_program(raw, preview=False)
    assert run.error is None, run.error
    ami = run.named(AWS_INSTANCE, "aws-use1-instance-arm64").inputs["ami"]  # an arm64 instance: its own name
    (check,) = [c for c in run.mocks.calls if c.token == "aws:ec2/getAmi:getAmi" and "owners" not in c.args]
    assert check.args["filters"] == [{"name": "image-id", "values": [ami]}]  # the AMI the instance boots, checked


# --- the pure checks, both ways -------------------------------------------------------------------------------------


def test_aws_offering_check_both_ways() -> None:
    assert awsfacts.check_offered("c7g.large", "eu-west-1a", ["eu-west-1a"]) == "c7g.large"
    with pytest.raises(ValueError, match=r"c7g\.large is not offered in eu-west-1b"):
        awsfacts.check_offered("c7g.large", "eu-west-1b", [])


@pytest.mark.parametrize(
    ("instance_type", "architecture", "fits"),
    [
        ("c6i.large", "x86_64", True),
        ("c6i.large", "arm64", False),
        ("c7g.large", "arm64", True),
        ("c7g.large", "x86_64", False),
        ("a1.large", "arm64", True),
        ("t4g.micro", "x86_64_mac", False),
        ("c7g.large", "", False),
    ],
)
def test_ami_architecture_check_both_ways(instance_type: str, architecture: str, fits: bool) -> None:
    if fits:
        assert awsfacts.check_ami_architecture(instance_type, "ami-1", architecture, pinned=True) == "ami-1"
    else:
        with pytest.raises(ValueError, match="set `image`"):
            awsfacts.check_ami_architecture(instance_type, "ami-1", architecture, pinned=False)


def test_a_gcp_image_pinned_for_the_other_architecture_than_the_api_reports_fails_the_preview() -> None:
    """validate decides by series; a type whose series it does not know as Arm is checked against machineTypes.list's
    architecture before the instance is declared."""
    raw = dev_raw()
    site_raw(raw, "gcp").update(
        instance_type="z9-standard-4", image="ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130"
    )
    out = failing_run(raw, {"machine_architectures": {"z9-standard-4": "ARM64"}})
    assert "FAILED:" in out and "is an amd64 image, but z9-standard-4 is arm64 (machineTypes.list)" in out, out


def test_gcp_offering_check_both_ways() -> None:
    assert gcpfacts.check_offered("t2a-standard-4", "us-central1-a", ["t2a-standard-4"]) == "t2a-standard-4"
    with pytest.raises(ValueError, match="t2a-standard-4 is not offered in europe-west3-c"):
        gcpfacts.check_offered("t2a-standard-4", "europe-west3-c", ["t2a-standard-8"])
    assert gcpfacts.machine_type_filter("c4a-highcpu-4") == 'name = "c4a-highcpu-4"'


@pytest.mark.parametrize(
    ("machine_type", "family"),
    [
        ("n2-standard-8", "ubuntu-os-cloud/ubuntu-2404-lts-amd64"),
        ("t2a-standard-4", "ubuntu-os-cloud/ubuntu-2404-lts-arm64"),
        ("c4a-highcpu-4", "ubuntu-os-cloud/ubuntu-2404-lts-arm64"),
        ("n4a-standard-8", "ubuntu-os-cloud/ubuntu-2404-lts-arm64"),  # Google Axion, like C4A
    ],
)
def test_a_gcp_move_across_architectures_changes_the_family_too(machine_type: str, family: str) -> None:
    """The boot image follows the machine type, and the boot image forces a new instance: one replacement."""
    assert gcpfacts.image_family(machine_type) == family
