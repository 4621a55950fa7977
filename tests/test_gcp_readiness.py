"""The GCP readiness gate: the gateway's guest attribute (wg_mesh.gateway.readymark --cloud gcp) and pulumi up's wait
and address move (wg_mesh.tools.gcpgate), against tests/gce_fake.py (a local server following the documented REST
protocol: no Compute Engine emulator exists)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import gce_fake
from tests.conftest import REPO, ProgramRun, run_program
from tests.gce_fake import PROJECT, REGION, TOKEN, ZONE, Cloud, Vm
from tests.test_gate_command import VENV, gate_words, run_text
from wg_mesh import aws
from wg_mesh.gateway import readymark
from wg_mesh.gcp.instance import REPLACE_ON
from wg_mesh.plan import metrics, userdata
from wg_mesh.tools import gcpgate, readygate
from wg_mesh.tools.stackfile import read_raw

STATIC = "34.1.2.3"
OLD, NEW = "gw-old", "gw-new"
INSTANCE = gcpgate.instance_path(PROJECT, ZONE, NEW)
ADDRESS = f"projects/{PROJECT}/regions/{REGION}/addresses/gw-address"


@pytest.fixture
def cloud() -> Cloud:
    """A replacement in progress: the old gateway holds the static address, the new one booted with an ephemeral."""
    return Cloud(
        vms={OLD: Vm(OLD, STATIC), NEW: Vm(NEW, "35.9.9.9")},
        addresses={"gw-address": STATIC},
        metadata_of=NEW,
    )


@pytest.fixture
def url(cloud: Cloud) -> Iterator[str]:
    server = gce_fake.serve(cloud)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def api(url: str) -> gcpgate.Compute:
    return gcpgate.Compute(lambda: TOKEN, f"{url}/compute/v1/", sleep=lambda _: None)


def test_a_ready_gateway_marks_itself_and_takes_the_static_address_from_the_old_one(url: str, cloud: Cloud) -> None:
    compute = api(url)
    assert not gcpgate.is_ready(compute, INSTANCE)
    assert readymark.run(url, None, deadline_s=5, check=list, sleep_s=0.1, cloud="gcp") == 0
    assert cloud.vms[NEW].attributes == {"wg-mesh/ready": "true"}

    assert gcpgate.wait_ready(compute, INSTANCE, timeout_s=5, interval_s=0.01) < 5
    gap = gcpgate.move_address(compute, INSTANCE, ADDRESS)
    assert (cloud.vms[OLD].nat_ip, cloud.vms[NEW].nat_ip) == (None, STATIC)
    # The new VM's ephemeral goes first (it serves nothing); the static address is off the old VM for as long as
    # the two operations in the middle take, which the gate reports.
    assert cloud.events == [f"{NEW} -35.9.9.9", f"{OLD} -{STATIC}", f"{NEW} +{STATIC}"]
    assert gap > 0
    assert gcpgate.move_address(compute, INSTANCE, ADDRESS) == 0.0  # a rerun changes nothing
    assert len(cloud.events) == 3


def test_a_gateway_that_is_not_ready_keeps_the_address_where_it_is(url: str, cloud: Cloud) -> None:
    status = readymark.run(url, None, deadline_s=0.2, check=lambda: ["wg0 is down"], sleep_s=0.05, cloud="gcp")
    assert status == 1 and cloud.vms[NEW].attributes == {}
    with pytest.raises(TimeoutError, match="did not set guest attribute wg-mesh/ready=true") as caught:
        gcpgate.wait_ready(api(url), INSTANCE, timeout_s=0.2, interval_s=0.05)
    assert f"get-serial-port-output {NEW} --zone {ZONE}" in str(caught.value)
    assert (cloud.vms[OLD].nat_ip, cloud.vms[NEW].nat_ip) == (STATIC, "35.9.9.9") and cloud.events == []


def test_without_guest_attributes_enabled_the_gateway_cannot_mark_itself(url: str, cloud: Cloud) -> None:
    cloud.vms[NEW].guest_attributes_enabled = False
    assert readymark.run(url, None, deadline_s=0.2, check=list, sleep_s=0.05, cloud="gcp") == 1
    assert not gcpgate.is_ready(api(url), INSTANCE)


def test_the_gate_fails_fast_for_a_stopped_instance(url: str, cloud: Cloud) -> None:
    cloud.vms[NEW].status = "TERMINATED"
    with pytest.raises(RuntimeError, match="is TERMINATED and never became ready"):
        gcpgate.wait_ready(api(url), INSTANCE, timeout_s=60, interval_s=0.01)


def test_a_first_gateway_takes_the_unused_address(url: str, cloud: Cloud) -> None:
    del cloud.vms[OLD]
    assert gcpgate.move_address(api(url), INSTANCE, ADDRESS) == 0.0
    assert cloud.vms[NEW].nat_ip == STATIC and cloud.events == [f"{NEW} -35.9.9.9", f"{NEW} +{STATIC}"]


def test_a_failed_operation_stops_the_gate(url: str, cloud: Cloud) -> None:
    cloud.fail.add(f"deleteAccessConfig:{OLD}")
    with pytest.raises(RuntimeError, match=r"deleteAccessConfig failed: .*injected failure"):
        gcpgate.move_address(api(url), INSTANCE, ADDRESS)
    assert cloud.vms[OLD].nat_ip == STATIC  # nothing claimed the address


def test_missing_credentials_are_a_clear_error(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An explicit credentials file that does not exist: google-auth fails before any network access.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    argv = ["gcp", "--instance", INSTANCE, "--address", ADDRESS, "--api", f"{url}/compute/v1/", "--timeout", "1"]
    assert readygate.main(argv) == 1
    assert "absent.json" in capsys.readouterr().err


def test_credentials_are_sent(url: str) -> None:
    with pytest.raises(gcpgate.ApiError, match="HTTP 401"):
        gcpgate.Compute(lambda: "wrong", f"{url}/compute/v1/").call("GET", INSTANCE)


def test_the_command_line_the_program_runs(url: str, cloud: Cloud, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    argv = [
        "gcp", "--instance", f"{gce_fake.LINK}{INSTANCE}", "--address", f"{gce_fake.LINK}{ADDRESS}",
        "--api", f"{url}/compute/v1/", "--access-token-file", str(token), "--interval", "0.05",
    ]  # fmt: skip
    assert readygate.main([*argv, "--timeout", "0.2"]) == 1
    assert cloud.vms[OLD].nat_ip == STATIC
    cloud.vms[NEW].attributes["wg-mesh/ready"] = "true"
    done = subprocess.run(
        [sys.executable, "-m", "wg_mesh.readygate", *argv, "--timeout", "5"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"{INSTANCE} ready after" in done.stdout and "static address moved" in done.stdout
    assert cloud.vms[NEW].nat_ip == STATIC


def test_a_new_gateway_takes_the_address_no_earlier_than_a_key_switch_in_flight(
    url: str, cloud: Cloud, tmp_path: Path
) -> None:
    """Issue 32 item 7: a key rotated in the `up` that replaces this gateway switches at key_at; the new VM runs the new
    keys from its first boot, so the gate holds the address until then (`--not-before`, gatepoll.hold_until), and a
    moment past its timeout fails the gate at once with nothing moved (the old VM keeps serving)."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    cloud.vms[NEW].attributes["wg-mesh/ready"] = "true"
    argv = [
        "gcp", "--instance", f"{gce_fake.LINK}{INSTANCE}", "--address", f"{gce_fake.LINK}{ADDRESS}",
        "--api", f"{url}/compute/v1/", "--access-token-file", str(token), "--interval", "0.05", "--timeout", "5",
    ]  # fmt: skip
    assert readygate.main([*argv, "--not-before", str(int(time.time()) + 3600)]) == 1
    assert cloud.vms[OLD].nat_ip == STATIC and cloud.events == []
    started = time.time()  # (--wait-only: the hold alone; the move after it is the first test's)
    assert readygate.main([*argv, "--wait-only", "--not-before", str(int(started) + 1)]) == 0
    assert time.time() >= int(started) + 1 and cloud.vms[OLD].nat_ip == STATIC


def test_for_ha_sites_the_gate_waits_and_moves_nothing(url: str, cloud: Cloud, tmp_path: Path) -> None:
    """gateways: 2: the agents own the static address (docs/ha.md 9); the gate only waits for the ready mark."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    argv = [
        "gcp", "--instance", f"{gce_fake.LINK}{INSTANCE}", "--address", f"{gce_fake.LINK}{ADDRESS}",
        "--api", f"{url}/compute/v1/", "--access-token-file", str(token), "--interval", "0.05", "--wait-only",
    ]  # fmt: skip
    assert readygate.main([*argv, "--timeout", "0.2"]) == 1  # not ready yet: the gate fails
    cloud.vms[NEW].attributes["wg-mesh/ready"] = "true"
    assert readygate.main([*argv, "--timeout", "5"]) == 0
    assert cloud.vms[OLD].nat_ip == STATIC and cloud.vms[NEW].nat_ip != STATIC


# --- the gate in the Pulumi program (mocks) ----------------------------------------------------

COMMAND = "command:local:Command"
GCP_INSTANCE = "gcp:compute/instance:Instance"
GCP_ROUTE = "gcp:compute/route:Route"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"


@pytest.fixture(scope="module")
def applied() -> ProgramRun:
    raw = read_raw(REPO / "Pulumi.dev.yaml")
    assert isinstance(raw, dict)
    (site,) = [s for s in raw["sites"] if s["cloud"] == "gcp"]
    site["impersonate_service_account"] = "deployer@proj.iam.gserviceaccount.com"
    run = run_program(raw, preview=False)
    assert run.error is None, run.error
    return run


def test_the_routes_and_the_icmp_rule_follow_the_gate(applied: ProgramRun) -> None:
    gate = applied.named(COMMAND, "gcp-euw3-ready")
    instance = applied.named(GCP_INSTANCE, "gcp-euw3-instance")
    address = applied.named("gcp:compute/address:Address", "gcp-euw3-address")
    assert gate.inputs["triggers"] == [instance.id]  # a new instance runs the gate again
    words = [
        "-m", "wg_mesh.readygate", "gcp", "--impersonate", "deployer@proj.iam.gserviceaccount.com", "--timeout", "900",
        "--address", address.outputs["selfLink"], "--instance", instance.outputs["selfLink"],
    ]  # fmt: skip
    assert gate_words(gate.inputs["create"]) == words  # no interpreter (wg_mesh.tools.localcmd)
    assert gate_words(gate.inputs["update"]) == [*words, "--update"]
    assert not gate.secret_inputs  # nothing secret in the command line (pulumi preview shows it)
    assert "PrivateKey" not in str(gate.inputs)
    assert applied.depends_on(COMMAND, "gcp-euw3-ready", GCP_INSTANCE, "gcp-euw3-instance")
    routes = [r for r in applied.of_type(GCP_ROUTE) if r.name.startswith("gcp-euw3-")]
    assert routes
    for route in routes:
        assert applied.depends_on(GCP_ROUTE, route.name, COMMAND, "gcp-euw3-ready")
        # A route to the old gateway goes as soon as the new one can be made (after the gate), not at the end.
        assert applied.options(GCP_ROUTE, route.name).delete_before_replace
    assert applied.depends_on(GCP_FIREWALL, "gcp-euw3-fw-pmtu", COMMAND, "gcp-euw3-ready")
    assert not applied.depends_on(GCP_FIREWALL, "gcp-euw3-fw-wireguard", COMMAND, "gcp-euw3-ready")


def test_a_replacement_is_created_before_the_old_gateway_is_deleted(applied: ProgramRun) -> None:
    options = applied.options(GCP_INSTANCE, "gcp-euw3-instance")
    assert not options.delete_before_replace
    assert applied.monitor.replace_on_changes["gcp-euw3-instance"] == [REPLACE_ON, "machineType"]
    # No ignore_changes: Pulumi would create the replacement with the old VM's recorded access config.
    assert options.ignore_changes == ()
    inputs = applied.named(GCP_INSTANCE, "gcp-euw3-instance").inputs
    (nic,) = inputs["networkInterfaces"]
    assert nic["accessConfigs"] == [{}] and "networkIp" not in nic  # ephemeral external, GCP-chosen internal
    assert inputs["metadata"]["enable-guest-attributes"] == "TRUE"
    assert not [r for r in applied.of_type("gcp:compute/address:Address") if r.inputs["addressType"] == "INTERNAL"]


def test_gcp_user_data_marks_the_gateway_ready_with_the_same_script(applied: ProgramRun) -> None:
    data = yaml.safe_load(applied.sites["gcp-euw3"].user_data.value)
    assert data["runcmd"][-2] == ["python3", userdata.READY_SCRIPT_PATH, "--cloud", "gcp"]
    (script,) = [f for f in data["write_files"] if f["path"] == userdata.READY_SCRIPT_PATH]
    assert metrics.unpack(script["content"]) == (REPO / "wg_mesh" / "gateway" / "readymark.py").read_text()


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init not installed")
def test_gcp_user_data_with_the_readiness_step_passes_cloud_init_schema(applied: ProgramRun, tmp_path: Path) -> None:
    path = tmp_path / "gcp.yaml"
    path.write_text(applied.sites["gcp-euw3"].user_data.value)
    done = subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_programs_gate_command_runs_from_the_project_directory(applied: ProgramRun, tmp_path: Path) -> None:
    """The exact command `pulumi up` runs (pulumi-command, /bin/sh -c, in the project directory), aimed at the fake
    Compute API with the mocks' project, zone and names."""
    words = " ".join(gate_words(applied.named(COMMAND, "gcp-euw3-ready").inputs["create"])[2:])
    words = words.replace(" --impersonate deployer@proj.iam.gserviceaccount.com", "").replace("900", "5")
    cloud = Cloud(
        vms={"old": Vm("old", STATIC), "gcp-euw3-instance": Vm("gcp-euw3-instance", "35.9.9.9")},
        # the address's name as the provider auto-names it (the mocks: its logical name and a suffix)
        addresses={applied.named("gcp:compute/address:Address", "gcp-euw3-address").outputs["name"]: STATIC},
        project="mock",
        zone="somewhere",
    )
    cloud.vms["gcp-euw3-instance"].attributes["wg-mesh/ready"] = "true"
    server = gce_fake.serve(cloud)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    try:
        api_url = f"http://127.0.0.1:{server.server_address[1]}/compute/v1/"
        extra = ["--api", api_url, "--access-token-file", str(token), "--interval", "0.1"]
        done = run_text(aws.gate_command(*words.split(), *extra), REPO, PULUMI_RUNTIME_VIRTUALENV=str(VENV))
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert cloud.vms["gcp-euw3-instance"].nat_ip == STATIC and cloud.vms["old"].nat_ip is None


def test_a_machine_type_change_replaces_gcp_gateways_through_the_gate(applied: ProgramRun) -> None:
    """Issue 21 item 2 (tests/test_program_type_change.py): a new machine type is a ready-gated replacement, and each
    VM's type was checked against its zone."""
    from tests.test_program_type_change import gated_replacement

    instance = "gcp:compute/instance:Instance"
    names = gated_replacement(applied, instance, "machineType", "gcp:compute/route:Route")
    zones = [c.args["zone"] for c in applied.mocks.calls if c.token == "gcp:compute/getMachineTypes:getMachineTypes"]
    assert sorted(zones) == sorted(applied.named(instance, name).inputs["zone"] for name in names)
