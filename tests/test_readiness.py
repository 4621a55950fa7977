"""The AWS readiness gate against a real AWS API emulator: moto in server mode on loopback.

The gateway side (wg_mesh.gateway.readymark: IMDSv2 and Ubuntu's botocore, CreateTags) and the operator side
(wg_mesh.tools.readygate: boto3 DescribeInstances) talk to the same moto server, which also serves the instance
metadata paths; only the emulator's instance id is set to the instance the test launched there.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto.instance_metadata import responses as moto_imds

from tests.conftest import REPO, ProgramRun, run_program
from tests.test_gate_command import VENV, gate_words, run_text
from wg_mesh import aws
from wg_mesh.gateway import readymark
from wg_mesh.plan import metrics, userdata
from wg_mesh.tools import readygate
from wg_mesh.tools.stackfile import read_raw

REGION = "us-east-1"


@pytest.fixture
def ec2(moto_url: str) -> Any:
    return boto3.client(
        "ec2", region_name=REGION, endpoint_url=moto_url, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


@pytest.fixture
def instance_id(ec2: Any, moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A gateway instance in the emulator, and the emulator's metadata service answering as that instance.

    The gateway side finds the metadata service (and botocore its credentials there) through botocore's own
    setting, AWS_EC2_METADATA_SERVICE_ENDPOINT; no other credentials are in its environment."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", moto_url)
    image = ec2.describe_images()["Images"][0]["ImageId"]
    launched = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="c6i.large")
    iid: str = launched["Instances"][0]["InstanceId"]
    monkeypatch.setitem(moto_imds.INSTANCE_METADATA, "instance-id", iid)
    return iid


def tags_of(ec2: Any, iid: str) -> dict[str, str]:
    (instance,) = [i for r in ec2.describe_instances(InstanceIds=[iid])["Reservations"] for i in r["Instances"]]
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def test_a_ready_gateway_marks_itself_and_the_gate_opens(moto_url: str, ec2: Any, instance_id: str) -> None:
    assert readymark.READY_TAG not in tags_of(ec2, instance_id)
    status = readymark.run(REGION, moto_url, deadline_s=10, check=list, sleep_s=0.1)
    assert status == 0
    assert tags_of(ec2, instance_id)[readymark.READY_TAG] == "true"
    assert readygate.wait_ready(ec2, instance_id, timeout_s=5, interval_s=0.1) < 5


def test_a_gateway_that_is_not_ready_never_marks_itself_and_the_gate_fails(
    moto_url: str, ec2: Any, instance_id: str
) -> None:
    status = readymark.run(REGION, moto_url, deadline_s=0.3, check=lambda: ["wg0 is down"], sleep_s=0.1)
    assert status == 1
    assert readymark.READY_TAG not in tags_of(ec2, instance_id)
    with pytest.raises(TimeoutError, match=f"{instance_id} did not tag itself wg-mesh:ready=true"):
        readygate.wait_ready(ec2, instance_id, timeout_s=0.3, interval_s=0.1)


def test_the_gate_fails_fast_for_a_terminated_instance(ec2: Any, instance_id: str) -> None:
    ec2.terminate_instances(InstanceIds=[instance_id])
    with pytest.raises(RuntimeError, match="is terminated and never became ready"):
        readygate.wait_ready(ec2, instance_id, timeout_s=60, interval_s=0.1)


def test_the_gate_command_line_against_the_emulator(
    moto_url: str, ec2: Any, instance_id: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    argv = ["--region", REGION, "--instance-id", instance_id, "--endpoint", moto_url, "--timeout", "0.3"]
    assert readygate.main([*argv, "--interval", "0.1"]) == 1
    assert "did not tag itself" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("forward", "wg", "expected"),
    [
        ("1\n", ["true"], []),
        ("0\n", ["true"], ["is not 1: forwarding is off"]),
        ("1\n", ["false"], ["false failed"]),
    ],
)
def test_local_readiness_needs_forwarding_and_wg0(
    tmp_path: Path, forward: str, wg: list[str], expected: list[str]
) -> None:
    path = tmp_path / "ip_forward"
    path.write_text(forward)
    problems = readymark.local_problems(str(path), wg)
    assert len(problems) == len(expected)
    assert all(e in p for e, p in zip(expected, problems, strict=True))


def test_the_gateway_command_line_marks_it_ready_through_the_metadata_service(
    moto_url: str, ec2: Any, instance_id: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readymark, "local_problems", list)  # wg0 and forwarding: tested above, need root here
    assert readymark.main(["--region", REGION, "--endpoint", moto_url, "--deadline", "5"]) == 0
    assert f"{instance_id} marked wg-mesh:ready=true" in capsys.readouterr().out
    assert tags_of(ec2, instance_id)[readymark.READY_TAG] == "true"


# --- the gate in the Pulumi program (mocks) ----------------------------------------------------

COMMAND = "command:local:Command"
EIP_ASSOC = "aws:ec2/eipAssociation:EipAssociation"


def test_the_committed_packed_gateway_script_is_the_source() -> None:
    packed = (REPO / "wg_mesh" / "gateway" / userdata.READY_PACKED).read_text()
    assert metrics.unpack(packed) == (REPO / "wg_mesh" / "gateway" / "readymark.py").read_text(), (
        "wg_mesh/gateway/readymark.py changed: repack it with "
        "python -c 'from wg_mesh.plan import metrics; "
        'print(metrics.pack(open("wg_mesh/gateway/readymark.py").read()), end="")\' '
        "> wg_mesh/gateway/readymark.py.gz.b64"
    )


@pytest.fixture(scope="module")
def applied_dev() -> ProgramRun:
    raw = read_raw(REPO / "Pulumi.dev.yaml")
    assert isinstance(raw, dict)
    raw["sites"][0].update(profile="net", assume_role_arn="arn:aws:iam::123456789012:role/deploy")
    run = run_program(raw, preview=False)
    assert run.error is None, run.error
    return run


def test_aws_user_data_marks_the_gateway_ready_as_its_last_step(applied_dev: ProgramRun) -> None:
    aws_data = yaml.safe_load(applied_dev.sites["aws-use1"].user_data.value)
    # The last step before cloud-init's final check that every unit it set up is active (wg_mesh.plan.render).
    assert aws_data["runcmd"][-2] == ["python3", userdata.READY_SCRIPT_PATH, "--region", "us-east-1"]
    assert "python3-botocore" in aws_data["packages"]
    (script,) = [f for f in aws_data["write_files"] if f["path"] == userdata.READY_SCRIPT_PATH]
    assert (script["permissions"], script["encoding"]) == ("0755", "gz+b64")
    assert metrics.unpack(script["content"]) == (REPO / "wg_mesh" / "gateway" / "readymark.py").read_text()
    gcp_data = yaml.safe_load(applied_dev.sites["gcp-euw3"].user_data.value)  # the same script, GCP's mark
    assert gcp_data["runcmd"][-2] == ["python3", userdata.READY_SCRIPT_PATH, "--cloud", "gcp"]


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init not installed")
def test_aws_user_data_with_the_readiness_step_passes_cloud_init_schema(
    applied_dev: ProgramRun, tmp_path: Path
) -> None:
    path = tmp_path / "aws.yaml"
    path.write_text(applied_dev.sites["aws-use1"].user_data.value)
    done = subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_address_and_routes_move_only_after_the_gate(applied_dev: ProgramRun) -> None:
    gate = applied_dev.named(COMMAND, "aws-use1-ready")
    instance = applied_dev.named("aws:ec2/instance:Instance", "aws-use1-instance")
    assert gate.inputs["triggers"] == [instance.id]  # a new instance runs the gate again
    words = [
        "--region", "us-east-1", "--profile", "net", "--role-arn", "arn:aws:iam::123456789012:role/deploy",
        "--timeout", "900", "--instance-id", instance.id,
    ]  # fmt: skip
    # no interpreter: the Python is found where the gate runs (wg_mesh.tools.localcmd)
    assert gate_words(gate.inputs["create"]) == ["-m", "wg_mesh.readygate", *words]
    assert gate_words(gate.inputs["update"]) == ["-m", "wg_mesh.readygate", *words, "--update"]
    assert applied_dev.depends_on(COMMAND, "aws-use1-ready", "aws:ec2/instance:Instance", "aws-use1-instance")
    assert applied_dev.depends_on(EIP_ASSOC, "aws-use1-eip-assoc", COMMAND, "aws-use1-ready")
    routes = [r for r in applied_dev.of_type("aws:ec2/route:Route") if r.name.startswith("aws-use1-route-")]
    assert routes
    for route in routes:
        assert applied_dev.depends_on(route.type, route.name, COMMAND, "aws-use1-ready")
    # create before delete: the new association moves the address in one call (no moment on nothing)
    assert not applied_dev.options(EIP_ASSOC, "aws-use1-eip-assoc").delete_before_replace


def test_the_programs_gate_command_runs_from_the_project_directory(
    applied_dev: ProgramRun, moto_url: str, ec2: Any, instance_id: str
) -> None:
    """The exact command `pulumi up` runs (pulumi-command, /bin/sh -c, in the project directory), aimed at moto."""
    gate = applied_dev.named(COMMAND, "aws-use1-ready")
    program_instance = applied_dev.named("aws:ec2/instance:Instance", "aws-use1-instance").id
    words = " ".join(gate_words(gate.inputs["create"])[2:])  # without the site's credentials (moto has no profile)
    words = words.replace(" --profile net", "").replace(" --role-arn arn:aws:iam::123456789012:role/deploy", "")
    words = words.replace(program_instance, instance_id).replace("--timeout 900", "--timeout 5")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "PULUMI_RUNTIME_VIRTUALENV": str(VENV)}
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": readymark.READY_TAG, "Value": "true"}])
    done = run_text(aws.gate_command(*words.split(), "--endpoint", moto_url, "--interval", "0.1"), REPO, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{instance_id} ready after" in done.stdout
