"""A GCP site: a WireGuard gateway instance in the site's VPC network and the routes through it.

The static external address exists before the instance (peers need it). A new instance (first or
replacement) boots with an ephemeral external address; the readiness gate (wg_mesh.gcpgate) waits for its
guest attribute wg-mesh/ready, then moves the static address to it, and only then do the routes (and
the ICMP rule) follow it; Pulumi deletes the old instance last. Firewall rules admit
WireGuard from the peers' addresses only, the site's own traffic to the gateway (to forward it),
the remote sites' ranges to the workloads the site names (tags, service accounts, or the whole
network when asked), and ICMP from the gateway's internal address (path-MTU discovery).
Network tags carry a hash of the Pulumi project and stack, so stacks sharing a network stay apart.
With `gateways: 2` (docs/ha.md 6) a second VM and an internal load balancer (wg_mesh.gcp.ha) carry the site: the routes
point at the load balancer, and the agents, not the gate, move the static address.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_gcp as gcp

from wg_mesh import component, ha, live, topology
from wg_mesh.aws import GATE_COMMAND, READY_TIMEOUT_S
from wg_mesh.component import Directory
from wg_mesh.config import GcpSite, MeshConfig
from wg_mesh.gcp import fit
from wg_mesh.gcp import ha as gcp_ha
from wg_mesh.gcp import live as gcp_live
from wg_mesh.gcp.facts import (
    ARM_MACHINE_FAMILIES,
    HYPERDISK_BOOT_DISK,
    PD_BOOT_DISK,
    PERSISTENT_DISK_SERIES,
    UBUNTU_IMAGE,
    boot_disk_type,
    boot_image,
    image_family,
    machine_architecture,
    machine_series,
)
from wg_mesh.keys import SigningKey
from wg_mesh.providers import given_provider

__all__ = [  # re-exported from wg_mesh.gcp.facts
    "ARM_MACHINE_FAMILIES",
    "HYPERDISK_BOOT_DISK",
    "PD_BOOT_DISK",
    "PERSISTENT_DISK_SERIES",
    "UBUNTU_IMAGE",
    "GcpGateway",
    "GcpGatewayArgs",
    "boot_disk_type",
    "boot_image",
    "image_family",
    "machine_architecture",
    "machine_series",
]

GATEWAY_TYPE = "wg-mesh:gcp:Gateway"
STACK_SCOPE_CHARS = live.SCOPE_CHARS
# Where IAP TCP forwarding connects from (https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule).
IAP_TCP_FORWARDING_RANGE = "35.235.240.0/20"
SSH_PORT = "22"
# The only metadata the guest reads once, at first boot; other keys (enable-oslogin, and with delivery: live the peer
# document wg-mesh-peers) are updated in place, so toggling operator access or changing the mesh does not replace the
# gateway: the provider replaces an instance for `metadata_startup_script` only, never for `metadata` (pulumi-gcp
# 10.2.0, compute.Instance, metadata_startup_script: "the only distinction is that this separate attribute will cause
# a recreate on modification"). Pulumi property-path syntax, which replaceOnChanges takes
# (https://www.pulumi.com/docs/reference/property-paths/).
REPLACE_ON = 'metadata["user-data"]'
# The gate moves the static address between instances with add/deleteAccessConfig, and Pulumi does not move it back:
# the instance declares one access config without `nat_ip`, which terraform-provider-google's schema makes optional
# and computed (resource_compute_instance.go), so the address the VM holds, ephemeral or static, is no diff. Not
# ignore_changes: Pulumi would give the replacement the recorded old value (the old VM's static address).
ROUTE_PRIORITY = 900  # ahead of the default 1000, so the mesh wins a tie with a broader route


def stack_scope(project: str, stack: str) -> str:
    """A short, stable id of the Pulumi project and stack, for names that are shared network-wide (network tags):
    two stacks in one network, even with equal site names, never target each other's instances."""
    return live.scope(project, stack)


def gateway_tag(name: str, scope: str) -> str:
    """The network tag the gateway's firewall rules target (at most 32 + 7 + 8 characters; GCP allows 63)."""
    return f"{name}-wg-gw-{scope}"


def workload_targets(site: GcpSite) -> dict[str, list[str]]:
    """Firewall target arguments for the site's workloads: their tags, their service accounts, or (empty) all."""
    if site.workload_tags:
        return {"target_tags": list(site.workload_tags)}
    if site.workload_service_accounts:
        return {"target_service_accounts": list(site.workload_service_accounts)}
    return {}


@dataclass(frozen=True)
class GcpGatewayArgs:
    mesh: MeshConfig
    site: GcpSite
    directory: Directory
    signing_key: SigningKey | None = None  # delivery: live: the mesh's document signing key (wg_mesh.mesh)


@dataclass(frozen=True)
class _Network:
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]


class GcpGateway(component.SiteComponent):
    provider: pulumi.ProviderResource  # the caller's (given to the Mesh) or the site's own
    address: gcp.compute.Address
    instance: gcp.compute.Instance  # gateway a (the only one unless gateways: 2)
    instances: list[gcp.compute.Instance]  # a, then b for gateways: 2
    private_ips: dict[str, pulumi.Output[str]]  # gateway letter -> its VPC address (monitoring scrapes each)
    ready: command.local.Command
    standby_ready: command.local.Command  # gateways: 2: gateway b's readiness gate
    routes: list[gcp.compute.Route]
    stores: gcp_live.GcpStores | None  # delivery: live
    instance_self_link: pulumi.Output[str]  # gateway a (HA: the routes' next hop is the internal load balancer)
    network_tag: pulumi.Output[str]  # the gateways' network tag: the target of the mesh's firewall rules

    def __init__(self, name: str, args: GcpGatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GATEWAY_TYPE, name, None, opts)
        mesh, site = args.mesh, args.site
        # The caller's gcp provider when the Mesh was given one (wg_mesh.providers), else the site's own.
        self.provider = given_provider(self, "gcp") or gcp.Provider(
            f"{name}-provider",
            project=site.project,
            region=site.region,
            zone=site.zone,
            # None: the credentials of whoever runs pulumi (one GCP identity for every site without this key).
            impersonate_service_account=site.impersonate_service_account,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        self._create_identity(name, args.mesh, site, args.directory, args.signing_key)

        network = self._network(name, site, child)
        self.address = gcp.compute.Address(
            f"{name}-address",
            address_type="EXTERNAL",
            region=site.region,
            description=f"wg-mesh gateway {site.name}",
            opts=pulumi.ResourceOptions.merge(child, component.kept(mesh)),
        )
        self.public_ip = self.address.address

        scope = stack_scope(pulumi.get_project(), pulumi.get_stack())
        where = f"wg-mesh {pulumi.get_project()}/{pulumi.get_stack()} {site.name}"
        tag = gateway_tag(name, scope)
        self.network_tag = pulumi.Output.from_input(tag)

        def firewall(
            suffix: str,
            description: str,
            allows: list[gcp.compute.FirewallAllowArgs],
            opts: pulumi.ResourceOptions = child,
            **kw: Any,
        ) -> None:
            gcp.compute.Firewall(
                f"{name}-fw-{suffix}",
                network=network.network,
                description=f"{where}: {description}",
                direction="INGRESS",
                allows=allows,
                opts=opts,
                **kw,
            )

        firewall(
            "wireguard",
            "WireGuard from the mesh peers",
            [gcp.compute.FirewallAllowArgs(protocol="udp", ports=[str(mesh.listen_port)])],
            source_ranges=component.peer_source_ranges(mesh, site.name, args.directory),
            target_tags=[tag],
        )
        if probes := topology.path_probe_sources(mesh, site.name):
            firewall(
                "path-probe",
                "ICMP from the private-path peers (their agents' path probe, wg_mesh.gateway.fallback)",
                [gcp.compute.FirewallAllowArgs(protocol="icmp")],
                source_ranges=probes,
                target_tags=[tag],
            )
        firewall(
            "forward",
            "traffic from the site's networks to the gateway, to forward",
            [gcp.compute.FirewallAllowArgs(protocol="all")],
            source_ranges=[str(cidr) for cidr in site.cidrs],
            target_tags=[tag],
        )
        if mesh.monitoring_cidrs:  # never with empty source_ranges: GCP would read that as 0.0.0.0/0
            firewall(
                "exporter",
                "node-exporter, for Prometheus (monitoring_cidrs)",
                [gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(mesh.exporter_port)])],
                source_ranges=component.monitoring_ranges(mesh),
                target_tags=[tag],
            )
        if mesh.operator_access == "cloud":
            firewall(
                "iap-ssh",
                "SSH through IAP TCP forwarding only (operator_access: cloud)",
                [gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[SSH_PORT])],
                source_ranges=[IAP_TCP_FORWARDING_RANGE],
                target_tags=[tag],
            )
        targets: dict[str, Any] = workload_targets(site)  # (Any: also passed through firewall()'s **kw)
        targeted = bool(targets) or site.workload_scope == "network"
        if targeted:
            firewall(
                "remote",
                "traffic from the other sites to the workloads "
                + ("of every instance of the network" if not targets else "(workload_tags/service accounts)"),
                [gcp.compute.FirewallAllowArgs(protocol="all")],
                source_ranges=[str(cidr) for cidr in topology.remote_ranges(mesh, site.name)],
                **targets,
            )
        # Guest attributes carry the gateway's readiness mark (wg_mesh.readymark --cloud gcp). A metadata key other than
        # user-data: set in place, no replacement (REPLACE_ON).
        metadata: dict[str, pulumi.Input[str]] = {"user-data": self.user_data, "enable-guest-attributes": "TRUE"}
        # No SSH key from metadata ever works on a gateway, whatever operator_access says (predefined metadata keys,
        # https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys; instance values override the
        # project's): block-project-ssh-keys keeps the project-wide `ssh-keys` off it, and OS Login makes the guest
        # ignore the instance's own `ssh-keys` too ("VMs don't accept SSH keys that are stored in metadata" once OS
        # Login is on: https://cloud.google.com/compute/docs/oslogin). A login then needs a Google identity with
        # roles/compute.osLogin or osAdminLogin AND a network path to port 22, which only operator_access: cloud opens
        # (the iap-ssh rule above; the host's INPUT policy admits 22 from IAP's range only: wg_mesh.inputpolicy). Both
        # keys are set in place and the same in both modes, so toggling operator_access changes no instance input.
        metadata["block-project-ssh-keys"] = "TRUE"
        metadata["enable-oslogin"] = "TRUE"
        # delivery: live: its own service account and key secret; the peer document in metadata, set in place.
        self.stores = None
        if self.document is not None:
            self.stores = gcp_live.create_stores(name, site, self.key.private_key, child)
            metadata[live.GCP_ATTRIBUTE] = self.document
        # gateways: 2 (docs/ha.md 6.2): gateway b in standby_zone with its own service account; both carry the `ha`
        # object in agent.json. Gateway a keeps every name it has as a single gateway.
        names = ha.ha_names(pulumi.get_project(), pulumi.get_stack(), site.name) if site.gateways > 1 else None
        zone_b: pulumi.Input[str] = gcp_ha.standby_zone(site, child) if names is not None else site.zone
        self.instances, self.private_ips = [], {}
        for letter in ha.LETTERS[: site.gateways]:
            prefix = ha.child_name(name, letter)
            gateway_metadata = dict(metadata)
            if names is not None:
                objects = gcp_ha.ha_object(letter, site, names, self.address, zone_b)
                gateway_metadata["user-data"] = self._ha_user_data(mesh, site, objects)
            if letter == "a":
                account = self.stores.service_account() if self.stores else None
                first_boot: list[pulumi.Resource] = self.stores.resources if self.stores else []
            else:
                assert self.stores is not None  # gateways: 2 needs delivery: live (wg_mesh.rules)
                reader = gcp_live.standby_reader(prefix, site, self.stores, child)
                # Gateway b is created (or replaced) only once a is ready: never both at once (docs/ha.md 9).
                account, first_boot = reader.service_account(), [reader.accessor, self.stores.version, self.ready]
            zone: pulumi.Input[str] = site.zone if letter == "a" else zone_b
            fixed = component.fixed_private_ip(mesh, site)
            instance = self._instance(
                prefix, site, zone, network, tag, gateway_metadata, account, first_boot, child, fixed
            )
            if letter == "a":
                self.instance, self.user_data = instance, pulumi.Output.from_input(gateway_metadata["user-data"])
                # Traffic moves to a (new) gateway only once it is ready and (single gateway) holds the static address.
                self.ready = self._readiness_gate(prefix, site, instance, names is not None, child)
            else:
                self.standby_ready = self._readiness_gate(prefix, site, instance, True, child)
            self.instances.append(instance)
            self.private_ips[letter] = instance.network_interfaces.apply(lambda nics: str(nics[0].network_ip))
        after_ready = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.ready]))
        next_hop_instance: pulumi.Input[str] | None = self.instance.self_link
        next_hop_ilb: pulumi.Input[str] | None = None
        if names is not None:
            gates = [self.ready, self.standby_ready]  # a VM joins its group only once ready (wg_mesh.gcp.ha)
            groups = [
                gcp_ha.instance_group(
                    ha.child_name(name, letter), names.groups[letter], instance, gate, network.network, child
                )
                for letter, instance, gate in zip(ha.LETTERS, self.instances, gates, strict=True)
            ]
            _, rule = gcp_ha.load_balancer(name, site, names, network.network, network.subnetwork, groups, child)
            gcp_ha.prober_firewall(name, network.network, tag, where, child)
            members = [self.stores.account.member, reader.account.member] if self.stores else []
            gcp_ha.agent_iam(name, site, scope, members, [site.zone, zone_b], child)
            # The routes' next hop is the load balancer by URL (pulumi-gcp 10.2.0 Route.next_hop_ilb: "With the GA
            # provider you can only specify the forwarding rule as a partial or full URL").
            next_hop_instance, next_hop_ilb = None, rule.self_link
        if targeted or not site.uses_existing_network:
            # Path-MTU discovery: the gateway tells a workload that a packet is too big for the tunnel (ICMP type 3
            # code 4). GCP firewall rules match ICMP by protocol only (no type/code: Allowed.ports applies to TCP,
            # UDP and SCTP), so the rule admits ICMP from the gateway's own address and nothing else; it moves to a new
            # gateway's address with the routes.
            firewall(
                "pmtu",
                "ICMP from the gateway (fragmentation needed), for path-MTU discovery",
                [gcp.compute.FirewallAllowArgs(protocol="icmp")],
                source_ranges=[ip.apply(lambda address: f"{address}/32") for ip in self.private_ips.values()],
                opts=after_ready,
                **targets,
            )

        # A route to the old gateway is worthless once the gate has moved the static address away from it, and GCP
        # would spread flows over an old and a new route of equal priority: delete the old one first (the new route
        # is registered only after the gate has finished, so its replacement starts then).
        replace_route = pulumi.ResourceOptions.merge(after_ready, pulumi.ResourceOptions(delete_before_replace=True))
        # Logical names stay within 55 characters: GCP names are at most 63 and Pulumi appends 8.
        self.routes = [
            gcp.compute.Route(
                f"{name}-to-{component.cidr_slug(cidr)}",
                dest_range=str(cidr),
                network=network.network,
                next_hop_instance=next_hop_instance,
                next_hop_ilb=next_hop_ilb,
                priority=ROUTE_PRIORITY,
                description=f"{where}: {cidr} through the gateway",
                opts=replace_route,
            )
            for cidr in topology.remote_ranges(mesh, site.name)
        ]
        self.instance_self_link = self.instance.self_link
        self._register_site_outputs(instance_self_link=self.instance_self_link, network_tag=self.network_tag)

    def _instance(
        self,
        prefix: str,
        site: GcpSite,
        zone: pulumi.Input[str],
        network: _Network,
        tag: str,
        metadata: dict[str, pulumi.Input[str]],
        account: gcp.compute.InstanceServiceAccountArgs | None,
        first_boot: list[pulumi.Resource],
        child: pulumi.ResourceOptions,
        private_ip: str | None = None,
    ) -> gcp.compute.Instance:
        """One gateway VM; both of an HA site are alike but for the zone, the account and the `ha` object's letter."""
        # The machine type must be offered in the VM's zone, else nothing changes (wg_mesh.gcp.fit).
        machine_type = fit.offered_machine_type(
            site, zone, pulumi.InvokeOutputOptions(parent=self, provider=self.provider)
        )
        return gcp.compute.Instance(
            f"{prefix}-instance",
            machine_type=machine_type,
            zone=zone,
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=boot_image(site),
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
                ),
            ),
        )

    def _readiness_gate(
        self,
        name: str,
        site: GcpSite,
        instance: gcp.compute.Instance,
        wait_only: bool,
        child: pulumi.ResourceOptions,
    ) -> command.local.Command:
        """Runs `python -m wg_mesh.readygate gcp` on the machine running `pulumi up`, for every new instance: waits for
        its guest attribute, then moves the static address to it (wg_mesh.gcpgate). wait_only (gateways: 2): moves
        nothing, the agents own the address (docs/ha.md 9)."""
        fixed = (
            [f"--impersonate {shlex.quote(site.impersonate_service_account)}"]
            if site.impersonate_service_account
            else []
        )
        fixed += ["--wait-only"] if wait_only else []
        links = pulumi.Output.all(instance=instance.self_link, address=self.address.self_link)

        def line(v: dict[str, str]) -> str:
            where = [f"--address {shlex.quote(v['address'])}", f"--instance {shlex.quote(v['instance'])}"]
            return " ".join([GATE_COMMAND, "gcp", *fixed, f"--timeout {READY_TIMEOUT_S}", *where])

        return command.local.Command(
            f"{name}-ready",
            create=links.apply(line),
            triggers=[instance.id],
            opts=child,
        )

    def _network(self, name: str, site: GcpSite, child: pulumi.ResourceOptions) -> _Network:
        """The site's existing network, or a new one (custom mode, explicit MTU) with a gateway subnet."""
        if site.network is not None and site.subnetwork is not None:
            return _Network(component.given(site.network), component.given(site.subnetwork))
        network = gcp.compute.Network(
            f"{name}-network",
            auto_create_subnetworks=False,
            mtu=site.underlay_mtu,
            description=f"wg-mesh site {site.name}",
            opts=child,
        )
        subnetwork = gcp.compute.Subnetwork(
            f"{name}-subnet",
            network=network.self_link,
            ip_cidr_range=str(topology.gateway_subnet(site.cidrs[0])),
            region=site.region,
            # gateways: 2: a claiming VM briefly has no external address and still calls the Compute API
            # (docs/ha.md 6.2). Unset otherwise: a single gateway's subnet stays as it was.
            private_ip_google_access=True if site.gateways > 1 else None,
            opts=child,
        )
        return _Network(network.self_link, subnetwork.self_link)
