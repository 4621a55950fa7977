"""The GCP site under mocks: boot disks, images, firewall scope, per-stack names, operator access, credentials."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mesh import gcp
from mesh.stackfile import read_raw
from tests.conftest import STACK_FILES, ProgramRun, run_program

GCP_INSTANCE = "gcp:compute/instance:Instance"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
GCP_PROVIDER = "pulumi:providers:gcp"


def dev_raw() -> dict[str, Any]:
    raw = read_raw(next(p for p in STACK_FILES if p.name == "Pulumi.dev.yaml"))
    assert isinstance(raw, dict)
    return copy.deepcopy(raw)


def gcp_site(raw: dict[str, Any]) -> dict[str, Any]:
    (site,) = [s for s in raw["sites"] if s["cloud"] == "gcp"]
    assert isinstance(site, dict)
    return site


def run_with(preview: bool = False, stack: str = "test", **site_keys: Any) -> ProgramRun:
    raw = dev_raw()
    gcp_site(raw).update(site_keys)
    run = run_program(raw, preview=preview, stack=stack)
    assert run.error is None, run.error
    return run


def boot_disk(run: ProgramRun) -> dict[str, Any]:
    params = run.named(GCP_INSTANCE, "gcp-euw3-instance").inputs["bootDisk"]["initializeParams"]
    assert isinstance(params, dict)
    return params


# --- boot disk type by machine series --------------------------------------------------------


@pytest.mark.parametrize(
    ("machine_type", "disk"),
    [
        ("n2-standard-8", "pd-balanced"),
        ("n2d-highcpu-16", "pd-balanced"),
        ("e2-medium", "pd-balanced"),
        ("n1-standard-4", "pd-balanced"),
        ("t2a-standard-4", "pd-balanced"),
        ("c2d-highcpu-8", "pd-balanced"),
        ("c3-highcpu-8", "pd-balanced"),
        ("c3d-standard-8", "pd-balanced"),
        ("n2-custom-8-16384", "pd-balanced"),
        ("c4-standard-8", "hyperdisk-balanced"),
        ("c4a-highcpu-8", "hyperdisk-balanced"),
        ("c4d-standard-8", "hyperdisk-balanced"),
        ("n4-standard-8", "hyperdisk-balanced"),
        ("n4d-standard-8", "hyperdisk-balanced"),
        ("h3-standard-88", "hyperdisk-balanced"),
        ("z3-highmem-88", "hyperdisk-balanced"),
        ("a3-highgpu-8g", "hyperdisk-balanced"),
        ("x4-megamem-960-metal", "hyperdisk-balanced"),
        ("m4-megamem-28", "hyperdisk-balanced"),
    ],
)
def test_boot_disk_type_by_machine_series(machine_type: str, disk: str) -> None:
    assert gcp.boot_disk_type(machine_type) == disk


@pytest.mark.parametrize(
    ("machine_type", "disk"), [("c4-standard-8", "hyperdisk-balanced"), ("n2-standard-8", "pd-balanced")]
)
def test_the_instance_gets_a_boot_disk_its_machine_series_accepts(machine_type: str, disk: str) -> None:
    run = run_with(instance_type=machine_type)
    assert boot_disk(run)["type"] == disk


# --- per-site credentials -------------------------------------------------------------------


def test_a_site_can_deploy_as_its_own_service_account() -> None:
    email = "wg-mesh-deploy@other-project.iam.gserviceaccount.com"
    run = run_with(impersonate_service_account=email)
    (provider,) = [r for r in run.of_type(GCP_PROVIDER) if r.name == "gcp-euw3-provider"]
    assert provider.inputs["impersonateServiceAccount"] == email
    plain = run_with()
    (provider,) = [r for r in plain.of_type(GCP_PROVIDER) if r.name == "gcp-euw3-provider"]
    assert "impersonateServiceAccount" not in provider.inputs


def test_a_service_account_that_is_not_an_email_is_refused_by_name() -> None:
    raw = dev_raw()
    gcp_site(raw)["impersonate_service_account"] = "deployer"
    run = run_program(raw, preview=True)
    assert run.error is not None
    assert "sites[1].impersonate_service_account: 'deployer' is not a service account email" in str(run.error)
    assert run.resources == []
