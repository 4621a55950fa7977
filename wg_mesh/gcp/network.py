"""A GCP site's network: the one the site names, or a new custom-mode network with a gateway subnet (part of the
GcpGateway component, wg_mesh.gcp.gateway)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from wg_mesh import component
from wg_mesh.config import GcpSite
from wg_mesh.plan import topology


@dataclass(frozen=True)
class Network:
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]


def site_network(name: str, site: GcpSite, child: pulumi.ResourceOptions) -> Network:
    """The site's existing network, or a new one (custom mode, explicit MTU) with a gateway subnet."""
    if site.network is not None and site.subnetwork is not None:
        return Network(component.given(site.network), component.given(site.subnetwork))
    network = gcp.compute.Network(
        f"{name}-network",
        auto_create_subnetworks=False,
        mtu=site.underlay_mtu,
        description=f"wg-mesh site {site.name}",
        # kept across a rename: a new network would take every instance in it along (component.description_kept)
        opts=pulumi.ResourceOptions.merge(child, component.description_kept()),
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
    return Network(network.self_link, subnetwork.self_link)
