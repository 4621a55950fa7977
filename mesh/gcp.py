"""A GCP site: a WireGuard gateway instance in the site's VPC network and the routes through it.

The static external address exists before the instance (peers need it). Firewall rules admit
WireGuard from the peers' addresses only, the site's own traffic to the gateway (to forward it),
and the remote sites' ranges into the whole network (so workloads accept cross-cloud traffic).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from mesh import component, topology
from mesh.component import Directory
from mesh.config import GcpSite, MeshConfig

GATEWAY_TYPE = "wg-mesh:gcp:Gateway"
UBUNTU_IMAGE = "ubuntu-os-cloud/ubuntu-2404-lts-{arch}"
ARM_MACHINE_FAMILIES = ("t2a", "c4a")  # Ampere Altra, Google Axion
ROUTE_PRIORITY = 900  # ahead of the default 1000, so the mesh wins a tie with a broader route


def image_family(machine_type: str) -> str:
    """The Ubuntu 24.04 LTS image family matching the machine type's CPU architecture."""
    arch = "arm64" if machine_type.split("-", 1)[0] in ARM_MACHINE_FAMILIES else "amd64"
    return UBUNTU_IMAGE.format(arch=arch)


def gateway_tag(name: str) -> str:
    """The network tag the gateway's firewall rules target."""
    return f"{name}-wg-gateway"


@dataclass(frozen=True)
class GcpGatewayArgs:
    mesh: MeshConfig
    site: GcpSite
    directory: Directory


@dataclass(frozen=True)
class _Network:
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]


class GcpGateway(component.SiteComponent):
    provider: gcp.Provider
    address: gcp.compute.Address
    instance: gcp.compute.Instance
    routes: list[gcp.compute.Route]

    def __init__(self, name: str, args: GcpGatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GATEWAY_TYPE, name, None, opts)
        mesh, site = args.mesh, args.site
        self.provider = gcp.Provider(
            f"{name}-provider",
            project=site.project,
            region=site.region,
            zone=site.zone,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        self._create_identity(name, args.mesh, site, args.directory)

        network = self._network(name, site, child)
        self.address = gcp.compute.Address(
            f"{name}-address",
            address_type="EXTERNAL",
            region=site.region,
            description=f"wg-mesh gateway {site.name}",
            opts=pulumi.ResourceOptions.merge(child, component.kept(mesh)),
        )
        self.public_ip = self.address.address

        tag = gateway_tag(name)
        gcp.compute.Firewall(
            f"{name}-fw-wireguard",
            network=network.network,
            description=f"wg-mesh {site.name}: WireGuard from the mesh peers",
            direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol="udp", ports=[str(mesh.listen_port)])],
            source_ranges=component.peer_source_ranges(mesh, site.name, args.directory),
            target_tags=[tag],
            opts=child,
        )
        gcp.compute.Firewall(
            f"{name}-fw-forward",
            network=network.network,
            description=f"wg-mesh {site.name}: traffic from the site's networks to the gateway, to forward",
            direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol="all")],
            source_ranges=[str(cidr) for cidr in site.cidrs],
            target_tags=[tag],
            opts=child,
        )
        if mesh.monitoring_cidrs:  # never with empty source_ranges: GCP would read that as 0.0.0.0/0
            gcp.compute.Firewall(
                f"{name}-fw-exporter",
                network=network.network,
                description=f"wg-mesh {site.name}: node-exporter, for Prometheus (monitoring_cidrs)",
                direction="INGRESS",
                allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(mesh.exporter_port)])],
                source_ranges=component.monitoring_ranges(mesh),
                target_tags=[tag],
                opts=child,
            )
        gcp.compute.Firewall(
            f"{name}-fw-remote",
            network=network.network,
            description=f"wg-mesh {site.name}: traffic from the other sites, to every instance of the network",
            direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol="all")],
            source_ranges=[str(cidr) for cidr in topology.remote_ranges(mesh, site.name)],
            opts=child,
        )

        self.instance = gcp.compute.Instance(
            f"{name}-instance",
            machine_type=site.instance_type,
            zone=site.zone,
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=image_family(site.instance_type)
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
                    access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs(nat_ip=self.address.address)],
                )
            ],
            tags=[tag],
            metadata={"user-data": self.user_data},
            allow_stopping_for_update=True,
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    # cloud-init reads user-data once, at first boot: a new config needs a new instance,
                    # and the static address can be held by one instance at a time.
                    replace_on_changes=["metadata"],
                    delete_before_replace=True,
                ),
            ),
        )

        # Logical names stay within 55 characters: GCP names are at most 63 and Pulumi appends 8.
        self.routes = [
            gcp.compute.Route(
                f"{name}-to-{component.cidr_slug(cidr)}",
                dest_range=str(cidr),
                network=network.network,
                next_hop_instance=self.instance.self_link,
                priority=ROUTE_PRIORITY,
                description=f"wg-mesh: {cidr} through the {site.name} gateway",
                opts=child,
            )
            for cidr in topology.remote_ranges(mesh, site.name)
        ]
        self._register_site_outputs()

    def _network(self, name: str, site: GcpSite, child: pulumi.ResourceOptions) -> _Network:
        """The site's existing network, or a new one (custom mode, explicit MTU) with a gateway subnet."""
        if site.network is not None and site.subnetwork is not None:
            return _Network(site.network, site.subnetwork)
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
            opts=child,
        )
        return _Network(network.self_link, subnetwork.self_link)
