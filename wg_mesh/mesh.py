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

The component contract (README, "Use it from your program"): the caller's `providers`/`provider` reach every cloud
child (wg_mesh.providers; a site's own credentials keys with one is refused); `protect=True` in its opts is `protect:
true`, protecting the addresses and keys and leaving what must be replaceable alone (instances, gates, routes:
component.kept, `_site`); child names are unique by construction (wg_mesh.config.names), and a second Mesh of the
program whose sites' names meet the first's is refused before it declares anything (`_claim`).
"""

import functools
import weakref
from collections.abc import Callable
from typing import Any, cast

import pulumi
from pulumi.runtime.settings import get_root_resource

from wg_mesh import providers
from wg_mesh.args import MeshArgs, MeshConfigError, SiteOutputs, to_config
from wg_mesh.aws.gateway import AwsGateway, AwsGatewayArgs
from wg_mesh.component import Directory, SiteComponent, kept, site_options
from wg_mesh.config import AwsSite, GcpSite, MeshConfig, Site, names
from wg_mesh.config import StaticSite as StaticSiteConfig
from wg_mesh.gateway.readymark import READY_TAG
from wg_mesh.gcp import GcpGateway, GcpGatewayArgs
from wg_mesh.keys import SigningKey
from wg_mesh.plan import topology
from wg_mesh.plan.topology import PeerAddress
from wg_mesh.static import StaticSite, StaticSiteArgs

# The type token is in every user's resource URNs: changing it would replace every resource (tests/test_api.py).
MESH_TYPE = "wg-mesh:index:Mesh"
_UNPROTECTED = pulumi.ResourceOptions(protect=False)
# Per program (its root stack resource): the name prefixes each Mesh's sites claim (wg_mesh.config.names) -> that Mesh.
_CLAIMS: weakref.WeakKeyDictionary[pulumi.Resource, dict[str, str]] = weakref.WeakKeyDictionary()


def _claim(mesh_name: str, prefixes: set[str]) -> list[str]:
    """Two Meshes in one program: refused, one line per name, when their sites' names (or previous names, or an HA
    standby's prefix) meet; their URNs and their cloud names (wg_mesh.config.names) would be the same. Claimed on
    success."""
    root = get_root_resource()
    if root is None:
        return []
    taken = _CLAIMS.setdefault(root, {})
    problems = [
        f"sites: {prefix!r} is also a site's name (or previous name, or HA standby) in Mesh {taken[prefix]!r} of this "
        "program: the meshes' resources would have the same URNs and cloud names; give their sites different names"
        for prefix in sorted(prefixes & taken.keys())
    ]
    if not problems:
        taken.update(dict.fromkeys(prefixes, mesh_name))
    return problems


def _site(
    mesh: MeshConfig, site: Site, directory: Directory, signing: SigningKey | None, opts: pulumi.ResourceOptions
) -> SiteComponent:
    # protect=False: a site's instances, gates, routes and rules must stay replaceable under the Mesh's protect; what
    # protect is for (addresses, keys) sets it itself (component.kept). README, "Use it from your program".
    opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions.merge(site_options(site), _UNPROTECTED))
    if isinstance(site, AwsSite):
        return AwsGateway(site.name, AwsGatewayArgs(mesh, site, directory, signing), opts)
    if isinstance(site, GcpSite):
        return GcpGateway(site.name, GcpGatewayArgs(mesh, site, directory, signing), opts)
    if isinstance(site, StaticSiteConfig):
        return StaticSite(site.name, StaticSiteArgs(mesh, site, directory, signing), opts)
    raise TypeError(f"unknown site kind {type(site).__name__}")


def _with_given(
    opts: pulumi.ResourceOptions, site: Site, given: dict[str, pulumi.ProviderResource]
) -> pulumi.ResourceOptions:
    """An AWS site on the caller's aws provider gets the tags and the ignored ready tag its own provider would set."""
    if not isinstance(site, AwsSite) or "aws" not in given:
        return opts
    tags = providers.aws_site_tags(providers.aws_default_tags(site), [f'tags["{READY_TAG}"]'])
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(transformations=[tags]))


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
        # An invalid mesh stops here, every problem listed, before any resource.
        config = to_config(args, (pulumi.get_project(), pulumi.get_stack()))
        # The caller's providers reach every child (wg_mesh.providers); with a site's own credentials: refused.
        if problems := providers.conflicts(config, providers.given_packages(opts)):
            raise MeshConfigError(problems)
        if problems := _claim(name, names.claimed([site.__dict__ for site in config.sites])):
            raise MeshConfigError(problems)
        super().__init__(MESH_TYPE, name, None, opts)
        if self._protect and not config.protect:  # the Mesh's protect (given or inherited) is `protect: true`
            config = config.model_copy(update={"protect": True})
        self.config: MeshConfig = config
        given = {pkg: p for pkg in ("aws", "gcp") if (p := providers.given_provider(self, pkg)) is not None}
        self.tunnel_mtu = pulumi.Output.from_input(topology.tunnel_mtu(config))

        publish: Callable[[Directory], None]
        self.directory: Directory
        self.directory, publish = pulumi.deferred_output()
        child = pulumi.ResourceOptions(parent=self)
        # delivery: live: one document signing key for the mesh; every gateway pins its verify key (wg_mesh.keys)
        self.signing_key: SigningKey | None = None
        if config.delivery == "live":
            # protected with `protect: true` or the Mesh's protect (component.kept)
            key_opts = pulumi.ResourceOptions.merge(child, kept(config))
            self.signing_key = SigningKey(f"{name}-signing-key", config.signing_key_epoch, key_opts)
        self.sites: dict[str, SiteComponent] = {
            site.name: _site(config, site, self.directory, self.signing_key, _with_given(child, site, given))
            for site in config.sites
        }
        # A given provider in another region (GCP: project) than its sites': the run fails here, in preview too.
        checks = [
            providers.checked(given[s.cloud], s)
            for s in config.sites
            if isinstance(s, AwsSite | GcpSite) and s.cloud in given
        ]
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
                # (with the given providers' checks: a mismatch fails the run when the outputs are registered)
                "tunnel_mtu": pulumi.Output.all(self.tunnel_mtu, *checks).apply(lambda v: v[0]),
                "site_outputs": self.site_outputs,
            }
        )
