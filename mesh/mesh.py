"""The whole mesh: one site component per configured site, wired together through a directory.

Every site's config and firewall need every other site's public address and public key, and vice
versa. The directory (site name -> `PeerAddress`) is one deferred output: every site is built
against it, then it is resolved from the sites' addresses and keys. There is no cycle, because a
gateway's address (AWS Elastic IP, GCP static address) and its key are resources of their own that
do not depend on the directory; only the instances, firewalls and configs do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

from mesh import topology
from mesh.aws import AwsGateway, AwsGatewayArgs
from mesh.component import Directory, SiteComponent, site_options
from mesh.config import AwsSite, GcpSite, MeshConfig, Site
from mesh.config import StaticSite as StaticSiteConfig
from mesh.gcp import GcpGateway, GcpGatewayArgs
from mesh.static import StaticSite, StaticSiteArgs
from mesh.topology import PeerAddress

MESH_TYPE = "wg-mesh:index:Mesh"


def _site(mesh: MeshConfig, site: Site, directory: Directory, opts: pulumi.ResourceOptions) -> SiteComponent:
    opts = pulumi.ResourceOptions.merge(opts, site_options(site))
    if isinstance(site, AwsSite):
        return AwsGateway(site.name, AwsGatewayArgs(mesh, site, directory), opts)
    if isinstance(site, GcpSite):
        return GcpGateway(site.name, GcpGatewayArgs(mesh, site, directory), opts)
    if isinstance(site, StaticSiteConfig):
        return StaticSite(site.name, StaticSiteArgs(mesh, site, directory), opts)
    raise TypeError(f"unknown site kind {type(site).__name__}")


def _directory(addresses: dict[str, Any]) -> dict[str, PeerAddress]:
    return {name: PeerAddress(public_ip=v["public_ip"], public_key=v["public_key"]) for name, v in addresses.items()}


class Mesh(pulumi.ComponentResource):
    """`sites` maps each site's name to its component (AwsGateway, GcpGateway or StaticSite)."""

    config: MeshConfig
    sites: dict[str, SiteComponent]
    directory: Directory
    tunnel_mtu: int

    def __init__(self, name: str, args: MeshConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(MESH_TYPE, name, None, opts)
        self.config = args
        self.tunnel_mtu = topology.tunnel_mtu(args)

        publish: Callable[[Directory], None]
        self.directory, publish = pulumi.deferred_output()
        child = pulumi.ResourceOptions(parent=self)
        self.sites = {site.name: _site(args, site, self.directory, child) for site in args.sites}
        addresses = {
            site_name: pulumi.Output.all(public_ip=site.public_ip, public_key=site.public_key)
            for site_name, site in self.sites.items()
        }
        publish(pulumi.Output.all(**addresses).apply(_directory))

        self.register_outputs(
            {
                "public_ips": pulumi.Output.all(**{n: s.public_ip for n, s in self.sites.items()}),
                "public_keys": pulumi.Output.all(**{n: s.public_key for n, s in self.sites.items()}),
                "tunnel_mtu": self.tunnel_mtu,
            }
        )
