"""The whole mesh: one site component per configured site, wired together through a directory.

Every site's config and firewall need every other site's public address and public key, and vice
versa. The directory (site name -> `PeerAddress`) is one deferred output: every site is built
against it, then it is resolved from the sites' addresses and keys. There is no cycle, because a
gateway's address (AWS Elastic IP, GCP static address) and its key are resources of their own that
do not depend on the directory; only the instances, firewalls and configs do.

`Mesh` is the package's component (README, "Use it from your program"): its args are a `MeshArgs`
(wg_mesh.args), validated by the config model before any resource is declared; its class annotations are
its typed outputs, which Pulumi's schema inference reads (wg_mesh.provider): no `from __future__ import
annotations` in this module.
"""

import functools
from collections.abc import Callable
from typing import Any, cast

import pulumi

from wg_mesh import topology
from wg_mesh.args import MeshArgs, SiteOutputs, to_config
from wg_mesh.aws import AwsGateway, AwsGatewayArgs
from wg_mesh.component import Directory, SiteComponent, kept, site_options
from wg_mesh.config import AwsSite, GcpSite, MeshConfig, Site
from wg_mesh.config import StaticSite as StaticSiteConfig
from wg_mesh.gcp import GcpGateway, GcpGatewayArgs
from wg_mesh.keys import SigningKey
from wg_mesh.static import StaticSite, StaticSiteArgs
from wg_mesh.topology import PeerAddress

# The type token is in every user's resource URNs: changing it would replace every resource (tests/test_api.py).
MESH_TYPE = "wg-mesh:index:Mesh"


def _site(
    mesh: MeshConfig, site: Site, directory: Directory, signing: SigningKey | None, opts: pulumi.ResourceOptions
) -> SiteComponent:
    opts = pulumi.ResourceOptions.merge(opts, site_options(site))
    if isinstance(site, AwsSite):
        return AwsGateway(site.name, AwsGatewayArgs(mesh, site, directory, signing), opts)
    if isinstance(site, GcpSite):
        return GcpGateway(site.name, GcpGatewayArgs(mesh, site, directory, signing), opts)
    if isinstance(site, StaticSiteConfig):
        return StaticSite(site.name, StaticSiteArgs(mesh, site, directory, signing), opts)
    raise TypeError(f"unknown site kind {type(site).__name__}")


def _directory(private: dict[str, str], addresses: dict[str, Any]) -> dict[str, PeerAddress]:
    return {
        name: PeerAddress(
            public_ip=v["public_ip"], public_key=v["public_key"], private_ip=private.get(name), key_at=v.get("key_at")
        )
        for name, v in addresses.items()
    }


def _one_site_outputs(site: Site, component: SiteComponent) -> pulumi.Output[dict[str, Any]]:
    cloud: dict[str, pulumi.Output[str]] = {}
    if isinstance(component, AwsGateway):
        cloud = {
            "security_group_id": component.security_group_id,
            "network_interface_id": component.network_interface_id,
        }
    elif isinstance(component, GcpGateway):
        cloud = {"instance_self_link": component.instance_self_link, "network_tag": component.network_tag}
    return pulumi.Output.all(
        cloud=site.cloud,
        public_ip=component.public_ip,
        overlay_ip=component.overlay_ip,
        public_key=component.public_key,
        cidrs=[str(cidr) for cidr in site.cidrs],
        **cloud,
    )


class Mesh(pulumi.ComponentResource):
    """A WireGuard mesh between AWS VPCs, GCP networks and static hosts, with the VPCs' routes through its gateways.

    In Python, `sites` maps each site's name to its component (AwsGateway, GcpGateway or StaticSite);
    `aws_gateways`, `gcp_gateways` and `static_sites` hold the same components by kind, typed."""

    public_ips: pulumi.Output[dict[str, str]]
    """Each site's public address (the Elastic IP, the GCP static address, a static site's endpoint)."""
    public_keys: pulumi.Output[dict[str, str]]
    """Each site's WireGuard public key."""
    tunnel_mtu: pulumi.Output[int]
    """The internet tunnel MTU (a site on a private path runs wg0 at its largest peer's: README)."""
    site_outputs: pulumi.Output[dict[str, SiteOutputs]]
    """Per site: what a program needs to wire the rest of itself to it."""

    def __init__(self, name: str, args: MeshArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        config = to_config(args)  # an invalid mesh stops here, every problem listed, before any resource
        super().__init__(MESH_TYPE, name, None, opts)
        self.config: MeshConfig = config
        self.tunnel_mtu = pulumi.Output.from_input(topology.tunnel_mtu(config))

        publish: Callable[[Directory], None]
        self.directory: Directory
        self.directory, publish = pulumi.deferred_output()
        child = pulumi.ResourceOptions(parent=self)
        # delivery: live: one document signing key for the mesh; every gateway pins its verify key (wg_mesh.keys)
        self.signing_key: SigningKey | None = None
        if config.delivery == "live":
            # protected with `protect: true`, else as the Mesh is (the caller's protect, inherited from the parent)
            keep = kept(config) if config.protect else pulumi.ResourceOptions()
            key_opts = pulumi.ResourceOptions.merge(child, keep)
            self.signing_key = SigningKey(f"{name}-signing-key", config.signing_key_epoch, key_opts)
        self.sites: dict[str, SiteComponent] = {
            site.name: _site(config, site, self.directory, self.signing_key, child) for site in config.sites
        }
        self.aws_gateways = {n: s for n, s in self.sites.items() if isinstance(s, AwsGateway)}
        self.gcp_gateways = {n: s for n, s in self.sites.items() if isinstance(s, GcpGateway)}
        self.static_sites = {n: s for n, s in self.sites.items() if isinstance(s, StaticSite)}
        addresses = {
            site_name: pulumi.Output.all(public_ip=site.public_ip, public_key=site.public_key, key_at=site.key_at)
            for site_name, site in self.sites.items()
        }
        publish(pulumi.Output.all(**addresses).apply(functools.partial(_directory, topology.private_directory(config))))

        self.public_ips = pulumi.Output.all(**{n: s.public_ip for n, s in self.sites.items()})
        self.public_keys = pulumi.Output.all(**{n: s.public_key for n, s in self.sites.items()})
        per_site = {site.name: _one_site_outputs(site, self.sites[site.name]) for site in config.sites}
        # (Output.all(**named) is typed Output[dict[str, Any]]: its values are the SiteOutputs built above)
        self.site_outputs = cast("pulumi.Output[dict[str, SiteOutputs]]", pulumi.Output.all(**per_site))
        self.register_outputs(
            {
                "public_ips": self.public_ips,
                "public_keys": self.public_keys,
                "tunnel_mtu": self.tunnel_mtu,
                "site_outputs": self.site_outputs,
            }
        )
