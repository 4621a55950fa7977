"""The GCP readiness gate: the gateway's guest attribute (mesh.readymark --cloud gcp) and pulumi up's wait and
address move (mesh.gcpgate), against tests/gce_fake.py (a local server following the documented REST protocol:
no Compute Engine emulator exists)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh import gcpgate, readygate, readymark
from tests import gce_fake
from tests.gce_fake import PROJECT, REGION, TOKEN, ZONE, Cloud, Vm

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


def test_credentials_are_sent(url: str) -> None:
    with pytest.raises(gcpgate.ApiError, match="HTTP 401"):
        gcpgate.Compute(lambda: "wrong", f"{url}/compute/v1/").call("GET", INSTANCE)


def test_the_command_line_the_program_runs(url: str, cloud: Cloud, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    argv = [
        "gcp", "--project", PROJECT, "--zone", ZONE, "--instance", NEW, "--region", REGION, "--address", "gw-address",
        "--api", f"{url}/compute/v1/", "--access-token-file", str(token), "--interval", "0.05",
    ]  # fmt: skip
    assert readygate.main([*argv, "--timeout", "0.2"]) == 1
    assert cloud.vms[OLD].nat_ip == STATIC
    cloud.vms[NEW].attributes["wg-mesh/ready"] = "true"
    done = subprocess.run(
        [sys.executable, "-m", "mesh.readygate", *argv, "--timeout", "5"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"{NEW} ready after" in done.stdout and "static address moved" in done.stdout
    assert cloud.vms[NEW].nat_ip == STATIC
