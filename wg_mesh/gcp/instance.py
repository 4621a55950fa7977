"""A GCP gateway's VM, its metadata and its readiness gate (part of the GcpGateway component, wg_mesh.gcp.gateway).

A new instance (first or replacement) boots with an ephemeral external address; the readiness gate
(wg_mesh.tools.gcpgate) waits for its guest attribute wg-mesh/ready, then moves the static address to it (a single
gateway; with `gateways: 2` the agents move it); only then do the routes follow it, and Pulumi deletes the old instance
last.
"""

from __future__ import annotations

import functools

import pulumi
import pulumi_command as command
import pulumi_gcp as gcp

from wg_mesh.aws import READY_TIMEOUT_S, gate_command
from wg_mesh.config import GcpSite
from wg_mesh.gcp import fit
from wg_mesh.gcp.facts import boot_disk_type, boot_image
from wg_mesh.gcp.network import Network
from wg_mesh.plan import ha
from wg_mesh.tools import localcmd
from wg_mesh.tools.gatepoll import hold_words

# The only metadata the guest reads once, at first boot; other keys (enable-oslogin) are updated in place, so toggling
# operator access does not replace the gateway: the provider replaces an instance for `metadata_startup_script` only,
# never for `metadata` (pulumi-gcp 10.2.0, compute.Instance, metadata_startup_script: "the only distinction is that
# this separate attribute will cause a recreate on modification"). Pulumi property-path syntax, which
# replaceOnChanges takes (https://www.pulumi.com/docs/reference/property-paths/).
REPLACE_ON = 'metadata["user-data"]'
# The gate moves the static address between instances with add/deleteAccessConfig, and Pulumi does not move it back:
# the instance declares one access config without `nat_ip`, which terraform-provider-google's schema makes optional
# and computed (resource_compute_instance.go), so the address the VM holds, ephemeral or static, is no diff. Not
# ignore_changes: Pulumi would give the replacement the recorded old value (the old VM's static address).


def metadata(user_data: pulumi.Input[str]) -> dict[str, pulumi.Input[str]]:
    """A gateway's instance metadata: its user data and the keys below. Not the peer document (delivery: live): that
    is a Secret Manager secret every VM of the site reads (wg_mesh.gcp.live), since `pulumi up` never updates the
    metadata of a VM it replaces."""
    # Guest attributes carry the gateway's readiness mark (wg_mesh.gateway.readymark --cloud gcp). A metadata key other
    # than user-data: set in place, no replacement (REPLACE_ON).
    values: dict[str, pulumi.Input[str]] = {"user-data": user_data, "enable-guest-attributes": "TRUE"}
    # No SSH key from metadata ever works on a gateway, whatever operator_access says (predefined metadata keys,
    # https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys; instance values override the
    # project's): block-project-ssh-keys keeps the project-wide `ssh-keys` off it, and OS Login makes the guest
    # ignore the instance's own `ssh-keys` too ("VMs don't accept SSH keys that are stored in metadata" once OS
    # Login is on: https://cloud.google.com/compute/docs/oslogin). A login then needs a Google identity with
    # roles/compute.osLogin or osAdminLogin AND a network path to port 22, which only operator_access: cloud opens
    # (the iap-ssh rule, wg_mesh.gcp.firewall; the host's INPUT policy admits 22 from IAP's range only:
    # wg_mesh.plan.inputpolicy). Both keys are set in place and the same in both modes, so toggling operator_access
    # changes no instance input.
    values["block-project-ssh-keys"] = "TRUE"
    values["enable-oslogin"] = "TRUE"
    return values


def gateway_instance(
    prefix: str,
    site: GcpSite,
    zone: pulumi.Input[str],
    network: Network,
    tag: str,
    metadata: dict[str, pulumi.Input[str]],
    account: gcp.compute.InstanceServiceAccountArgs | None,
    first_boot: list[pulumi.Resource],
    child: pulumi.ResourceOptions,
    private_ip: str | None = None,
    scope: str | None = None,
) -> gcp.compute.Instance:
    """One gateway VM; both of an HA site are alike but for the zone, the account and the `ha` object's letter.
    scope (gateways: 2): the stack's, in the VM's logical name (wg_mesh.plan.ha.vm_name); the other form of the name
    is an alias, so a VM created under it keeps its name and is not replaced for it (1 -> 2, or an HA site deployed
    before issue 32: its IAM Condition names it exactly, wg_mesh.gcp.ha.condition_expression)."""
    # The machine type must be offered in the VM's zone, else nothing changes; its architecture picks the image
    # (wg_mesh.gcp.fit).
    machine = fit.offered_machine(site, zone, pulumi.InvokeOutputOptions(parent=child.parent, provider=child.provider))
    other = ha.vm_name(prefix, None) if scope is not None else None
    return gcp.compute.Instance(
        ha.vm_name(prefix, scope),
        machine_type=machine.machine_type,
        zone=zone,
        boot_disk=gcp.compute.InstanceBootDiskArgs(
            initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                image=machine.reported_architecture.apply(functools.partial(boot_image, site)),
                type=boot_disk_type(site.instance_type),
            ),
        ),
        can_ip_forward=True,  # it forwards packets that are neither from nor to itself
        shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
        ),
        network_interfaces=[
            gcp.compute.InstanceNetworkInterfaceArgs(
                network=network.network,
                subnetwork=network.subnetwork,
                # Ephemeral: cloud-init needs the Ubuntu archive before the gate gives it the static address.
                # The internal address is GCP's choice (a replacement runs next to the old gateway), but on a
                # private path the fixed one peers there reach (docs/underlay.md).
                network_ip=private_ip,
                access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs()],
            )
        ],
        tags=[tag],
        metadata=metadata,
        service_account=account,
        allow_stopping_for_update=True,
        opts=pulumi.ResourceOptions.merge(
            child,
            pulumi.ResourceOptions(
                # cloud-init reads user-data once, at first boot: a new config needs a new instance, created
                # before the old one is deleted (README, "Replacements"). So does a new machine type, which the
                # provider would otherwise apply by stopping and starting the VM with no gate (pulumi-gcp 10.2.0,
                # compute.Instance.machine_type: "If you want to update this value (resize the VM) after initial
                # creation, you must set allow_stopping_for_update to true"; README, "What a change does").
                replace_on_changes=[REPLACE_ON, "machineType"],
                # A fixed private address is the old instance's until it is gone (README, "Private paths").
                delete_before_replace=private_ip is not None,
                # live: the first boot's `wg-mesh-agent --once` reads the key with the account's binding.
                depends_on=first_boot or None,
                aliases=[pulumi.Alias(name=other)] if other else None,
            ),
        ),
    )


def readiness_gate(
    name: str,
    site: GcpSite,
    instance: gcp.compute.Instance,
    address: gcp.compute.Address,
    wait_only: bool,
    child: pulumi.ResourceOptions,
    not_before: pulumi.Output[int | None] | None = None,
) -> command.local.Command:
    """Runs `python -m wg_mesh.readygate gcp` on the machine running `pulumi up`, for every new instance (its id is
    the trigger): waits for its guest attribute, then moves the static `address` to it (wg_mesh.tools.gcpgate).
    wait_only (gateways: 2): moves nothing, the agents own the address (docs/ha.md 9). `not_before` (delivery: live): a
    new instance takes traffic no earlier (wg_mesh.plan.live.switch_floor: `create` holds, `--update` does not). Any
    other input change (a new address, credentials, a new wg-mesh's command text, a rotation's moment) runs the
    gate's `--update`: the address moved again if it is not on the instance, no wait."""
    fixed = ["--impersonate", site.impersonate_service_account] if site.impersonate_service_account else []
    fixed += ["--wait-only"] if wait_only else []
    fixed += ["--timeout", str(READY_TIMEOUT_S)]
    links = pulumi.Output.all(instance=instance.self_link, address=address.self_link, not_before=not_before)
    words = links.apply(lambda v: ["gcp", *fixed, "--address", v["address"], "--instance", v["instance"]])
    held = links.apply(lambda v: hold_words(v["not_before"]))
    return localcmd.local_command(
        f"{name}-ready",
        create=pulumi.Output.all(words, held).apply(lambda v: gate_command(*v[0], *v[1])),
        update=words.apply(lambda w: gate_command(*w, "--update")),
        triggers=[instance.id],
        opts=child,
    )
