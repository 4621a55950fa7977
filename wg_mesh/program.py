"""The steps of the Pulumi program (`__main__.py`) that are worth a name: the config key and the stack outputs.

(Validation is Mesh's own: wg_mesh.args.to_config, before any resource is declared.)"""

from __future__ import annotations

from typing import Any

import pulumi

from wg_mesh.aws.gateway import AwsGateway
from wg_mesh.config import AwsSite, GcpSite, StaticSite
from wg_mesh.gcp import GcpGateway
from wg_mesh.mesh import Mesh

CONFIG_NAMESPACE = "wg-mesh"
CONFIG_KEY = "mesh"


def stack_outputs(mesh: Mesh) -> dict[str, pulumi.Output[Any]]:
    """What `pulumi stack output` shows. Everything that embeds a private key is a secret."""
    cfg = mesh.config
    sites = {
        site.name: {
            "cloud": site.cloud,
            "public_ip": mesh.sites[site.name].public_ip,
            "overlay_ip": mesh.sites[site.name].overlay_ip,
            "public_key": mesh.sites[site.name].public_key,
            "cidrs": [str(cidr) for cidr in site.cidrs],
        }
        for site in cfg.sites
    }
    wireguard_configs = {name: component.wg_config for name, component in mesh.sites.items()}
    static_cloud_init = {
        site.name: mesh.sites[site.name].user_data for site in cfg.sites if isinstance(site, StaticSite)
    }
    # Per AWS gateway: the AMI it runs and Canonical's newest, to decide when to roll (README, "Rolling the image").
    aws_images = {
        name: {"in_use": component.ami_in_use, "newest": component.newest_ami}
        for name, component in mesh.sites.items()
        if isinstance(component, AwsGateway)
    }
    # gateways: 2: each gateway's VPC address per HA site; both share the overlay address, so Prometheus scrapes each by
    # this one (docs/ha.md 10). Absent for single-gateway sites.
    ha_gateways = {
        site.name: component.private_ips
        for site in cfg.sites
        if isinstance(site, AwsSite | GcpSite)
        and site.gateways > 1
        and isinstance(component := mesh.sites[site.name], AwsGateway | GcpGateway)
    }
    live = {}
    if cfg.delivery == "live":
        # What a static site's wg-mesh-agent reads from files (README, "Delivery"): the document has public keys only,
        # but it is a secret like the rest of a static site's config; the key is a secret.
        static_components = {s.name: mesh.sites[s.name] for s in cfg.sites if isinstance(s, StaticSite)}
        live = {
            "static_site_documents": pulumi.Output.secret({n: c.document for n, c in static_components.items()}),
            "static_site_private_keys": pulumi.Output.secret(
                {n: c.key.private_key for n, c in static_components.items()}
            ),
        }
    return {
        **live,
        "sites": pulumi.Output.from_input(sites),
        "aws_images": pulumi.Output.from_input(aws_images),
        **({"ha_gateways": pulumi.Output.from_input(ha_gateways)} if ha_gateways else {}),
        "tunnel_mtu": pulumi.Output.from_input(mesh.tunnel_mtu),
        "wireguard_configs": pulumi.Output.secret(wireguard_configs),
        "static_site_cloud_init": pulumi.Output.secret(static_cloud_init),
    }


def main() -> Mesh:
    """The whole program, as the repository's __main__.py runs it: the stack's `wg-mesh:mesh` in, the mesh and its
    stack outputs out (`wg-mesh plan` runs this under mocks)."""
    mesh = Mesh("mesh", pulumi.Config(CONFIG_NAMESPACE).require_object(CONFIG_KEY))
    for output_name, value in stack_outputs(mesh).items():
        pulumi.export(output_name, value)
    return mesh
