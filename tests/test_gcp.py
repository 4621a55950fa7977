"""The GCP site under mocks: boot disks, images, firewall scope, per-stack names, operator access, credentials."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import STACK_FILES, ProgramRun, run_program
from wg_mesh.gcp.facts import boot_disk_type
from wg_mesh.gcp.gateway import gateway_tag, stack_scope
from wg_mesh.testing import RecordingMocks
from wg_mesh.tools.stackfile import read_raw

GCP_INSTANCE = "gcp:compute/instance:Instance"
MACHINE_TYPES_CALL = "gcp:compute/getMachineTypes:getMachineTypes"  # the zone check of the machine type
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
GCP_PROVIDER = "pulumi:providers:gcp"
GATEWAY_IP_IN_MOCKS = "10.255.0.3"  # the internal address conftest's mocks give a GCP instance


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
    gcp_site(raw).pop("workload_scope")  # the dev stack's choice; each test makes its own
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
    assert boot_disk_type(machine_type) == disk


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


# --- workload scope and path-MTU ICMP -------------------------------------------------------


def firewalls(run: ProgramRun) -> dict[str, dict[str, Any]]:
    return {r.name.removeprefix("gcp-euw3-fw-"): r.inputs for r in run.of_type(GCP_FIREWALL)}


REMOTE = {"10.200.0.0/24", "10.10.0.0/16"}  # the overlay and the AWS site's CIDR


def test_no_workload_scope_opens_no_workload_to_the_other_sites() -> None:
    rules = firewalls(run_with())
    assert "remote" not in rules
    # In a network wg-mesh creates, the gateway may still send ICMP to the network's instances (path MTU).
    assert rules["pmtu"]["allows"] == [{"protocol": "icmp"}]
    assert rules["pmtu"]["sourceRanges"] == [GATEWAY_IP_IN_MOCKS + "/32"]  # the gateway's own address
    assert "targetTags" not in rules["pmtu"] and "targetServiceAccounts" not in rules["pmtu"]
    # In your own network without a workload scope, wg-mesh adds nothing that targets your instances.
    existing = firewalls(run_with(network="prod-vpc", subnetwork="prod-euw3"))
    assert set(existing) == {"wireguard", "forward"}


def test_workload_tags_scope_the_remote_and_icmp_rules() -> None:
    run = run_with(workload_tags=["db", "app"])
    rules = firewalls(run)
    assert rules["remote"]["targetTags"] == rules["pmtu"]["targetTags"] == ["db", "app"]
    assert set(rules["remote"]["sourceRanges"]) == REMOTE
    assert rules["remote"]["allows"] == [{"protocol": "all"}]
    # The ICMP comes from the gateway's own internal address only (GCP's choice: a replacement runs next to the
    # old gateway, so it cannot be one reserved address).
    nic = run.named(GCP_INSTANCE, "gcp-euw3-instance").inputs["networkInterfaces"][0]
    assert "networkIp" not in nic and rules["pmtu"]["sourceRanges"] == [GATEWAY_IP_IN_MOCKS + "/32"]


def test_workload_service_accounts_scope_the_rules() -> None:
    email = "app-server@my-project.iam.gserviceaccount.com"
    rules = firewalls(run_with(workload_service_accounts=[email]))
    assert rules["remote"]["targetServiceAccounts"] == rules["pmtu"]["targetServiceAccounts"] == [email]
    assert "targetTags" not in rules["remote"]


def test_network_wide_only_when_asked() -> None:
    rules = firewalls(run_with(workload_scope="network"))
    assert set(rules["remote"]["sourceRanges"]) == REMOTE
    assert "targetTags" not in rules["remote"] and "targetServiceAccounts" not in rules["remote"]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"workload_tags": ["db"], "workload_service_accounts": ["app-server@my-project.iam.gserviceaccount.com"]},
            "sites[1].workload_service_accounts: a GCP firewall rule targets network tags or service accounts",
        ),
        ({"workload_scope": "network", "workload_tags": ["db"]}, "sites[1].workload_scope: network (every instance)"),
        ({"workload_scope": "everything"}, "sites[1].workload_scope: Input should be 'network'"),
        ({"workload_tags": ["DB"]}, "sites[1].workload_tags: 'DB' is not a GCP network tag"),
    ],
)
def test_workload_scope_mistakes_are_refused_by_field(keys: dict[str, Any], message: str) -> None:
    raw = dev_raw()
    gcp_site(raw).pop("workload_scope", None)
    gcp_site(raw).update(keys)
    run = run_program(raw, preview=True)
    assert run.error is not None and message in str(run.error), run.error
    assert run.resources == []


# --- two stacks in one network --------------------------------------------------------------


def test_two_stacks_sharing_a_network_never_target_each_others_gateways() -> None:
    shared = {"network": "shared-vpc", "subnetwork": "shared-euw3"}
    runs = [run_with(stack=stack, **shared) for stack in ("team-a", "team-b")]
    tags = [set(run.named(GCP_INSTANCE, "gcp-euw3-instance").inputs["tags"]) for run in runs]
    assert tags[0].isdisjoint(tags[1])
    for run, own, other in ((runs[0], tags[0], tags[1]), (runs[1], tags[1], tags[0])):
        for rule in run.of_type(GCP_FIREWALL):
            target = set(rule.inputs.get("targetTags", []))
            assert target.isdisjoint(other), rule.name
            assert rule.inputs["description"].startswith("wg-mesh wg-mesh/team-")
        gateway_rules = [r for r in run.of_type(GCP_FIREWALL) if r.name.endswith(("-wireguard", "-forward"))]
        assert all(set(r.inputs["targetTags"]) == own for r in gateway_rules)
    # Stable: the same stack gets the same tag on every run.
    assert set(run_with(stack="team-a", **shared).named(GCP_INSTANCE, "gcp-euw3-instance").inputs["tags"]) == tags[0]


def test_a_renamed_sites_gateway_rules_admit_the_old_gateway_until_it_is_deleted() -> None:
    """A rename (previous_names) gives the new VM the new name's tag; the old VM, which Pulumi replaces and so never
    updates, keeps its tag until it is deleted at the end of `up`, while the rules are updated in place early in that
    `up`: they target both tags, or the old gateway would lose WireGuard and the site's traffic for the new one's
    boot (they targeted the new tag only)."""
    run = run_with(name="gcp-paris", previous_names=["gcp-euw3"])
    scope = stack_scope("wg-mesh", "test")
    new, old = gateway_tag("gcp-paris", scope), gateway_tag("gcp-euw3", scope)
    assert run.named(GCP_INSTANCE, "gcp-paris-instance").inputs["tags"] == [new]
    rules = {r.name: r.inputs["targetTags"] for r in run.of_type(GCP_FIREWALL) if "targetTags" in r.inputs}
    assert {"gcp-paris-fw-wireguard", "gcp-paris-fw-forward"} <= set(rules)
    assert all(targets == [new, old] for targets in rules.values()), rules


# --- operator access ------------------------------------------------------------------------


def run_mesh(preview: bool = False, **mesh_keys: Any) -> ProgramRun:
    raw = dev_raw()
    raw.update(mesh_keys)
    run = run_program(raw, preview=preview)
    assert run.error is None, run.error
    return run


def test_operator_access_cloud_opens_ssh_to_iap_only_and_turns_on_os_login() -> None:
    run = run_mesh(operator_access="cloud")
    rules = firewalls(run)
    instance = run.named(GCP_INSTANCE, "gcp-euw3-instance")
    assert rules["iap-ssh"]["sourceRanges"] == ["35.235.240.0/20"]
    assert rules["iap-ssh"]["allows"] == [{"protocol": "tcp", "ports": ["22"]}]
    assert rules["iap-ssh"]["targetTags"] == instance.inputs["tags"]
    assert instance.inputs["metadata"]["enable-oslogin"] == "TRUE"


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "update"])
def test_operator_access_is_off_by_default(preview: bool) -> None:
    run = run_mesh(preview=preview)
    assert "iap-ssh" not in firewalls(run)


@pytest.mark.parametrize("access", ["none", "cloud"])
def test_no_metadata_ssh_key_works_on_a_gateway_in_either_mode(access: str) -> None:
    """Project keys are blocked and OS Login ignores the instance's own keys: with access off there is no login at all
    (no network path either), with it on only Google identities with OS Login roles, through IAP."""
    metadata = run_mesh(operator_access=access).named(GCP_INSTANCE, "gcp-euw3-instance").inputs["metadata"]
    assert metadata["block-project-ssh-keys"] == "TRUE" and metadata["enable-oslogin"] == "TRUE"
    assert "ssh-keys" not in metadata and "startup-script" not in metadata


def test_toggling_operator_access_does_not_replace_the_gateway() -> None:
    """Only the user data (read once, at first boot) and the machine type replace the instance; access is the firewall
    rule alone."""
    off, on = run_mesh(), run_mesh(operator_access="cloud")
    for run in (off, on):
        assert run.monitor.replace_on_changes["gcp-euw3-instance"] == ['metadata["user-data"]', "machineType"]
    before, after = (r.named(GCP_INSTANCE, "gcp-euw3-instance").inputs for r in (off, on))
    assert before == after


# --- boot image: the family, or a pinned image -----------------------------------------------


def test_without_a_pin_the_family_is_declared_and_nothing_resolves_it_at_run_time() -> None:
    """No invoke looks up the newest image (the AWS AMI drift): the input is the family on every run, and the
    provider's DiskImageDiffSuppress matches it against the instance's resolved image, so a second preview is empty."""
    first, second = run_with(), run_with()
    assert boot_disk(first)["image"] == boot_disk(second)["image"] == "ubuntu-os-cloud/ubuntu-2404-lts-amd64"
    assert [c.token for c in first.mocks.calls if c.token.startswith("gcp:")] == [MACHINE_TYPES_CALL]  # no image


def test_a_pinned_image_is_used_as_given_and_only_a_new_pin_changes_the_instance() -> None:
    pinned = "ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130"
    run, rolled = run_with(image=pinned), run_with(image=pinned.replace("20250130", "20250301"))
    assert boot_disk(run)["image"] == pinned
    before, after = (r.named(GCP_INSTANCE, "gcp-euw3-instance").inputs for r in (run, rolled))
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == {"bootDisk"}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"image": "ubuntu-os-cloud/ubuntu-2404-noble-arm64-v20250130"},
            "is an arm64 image, but n2-standard-8 is amd64",
        ),
        (
            {"image": "ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130", "instance_type": "c4a-standard-8"},
            "is an amd64 image, but c4a-standard-8 is arm64",
        ),
        (
            {"image": "ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130", "instance_type": "n4a-standard-8"},
            "is an amd64 image, but n4a-standard-8 is arm64",
        ),
        ({"image": "ubuntu 24.04"}, "sites[1].image: 'ubuntu 24.04' is not a GCE image reference"),
    ],
)
def test_image_mistakes_are_refused(keys: dict[str, Any], message: str) -> None:
    raw = dev_raw()
    gcp_site(raw).update(keys)
    run = run_program(raw, preview=True)
    assert run.error is not None and message in str(run.error), run.error
    assert run.resources == []


@pytest.mark.parametrize(
    ("machine_type", "reported", "family"),
    [
        ("z9-standard-4", "ARM64", "arm64"),  # a series no table knows: the API's architecture decides
        ("n4a-standard-8", "ARM64", "arm64"),
        ("n4a-standard-8", "", "arm64"),  # none reported: by series, and N4A (Google Axion) is Arm
        ("n2-standard-8", "X86_64", "amd64"),
    ],
)
def test_the_image_family_follows_the_architecture_machine_types_list_reports(
    monkeypatch: pytest.MonkeyPatch, machine_type: str, reported: str, family: str
) -> None:
    """The gateway's boot image family is the architecture machineTypes.list reports for its machine type (the
    program looked up the type already, for its zone); N4A was booted with the amd64 family."""
    monkeypatch.setattr(RecordingMocks, "machine_architectures", {machine_type: reported})
    assert boot_disk(run_with(instance_type=machine_type))["image"] == f"ubuntu-os-cloud/ubuntu-2404-lts-{family}"
