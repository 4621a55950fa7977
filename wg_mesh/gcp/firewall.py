"""A GCP site's firewall rules (part of the GcpGateway component, wg_mesh.gcp.gateway). Every rule admits INGRESS on
the site's network and says in its description which stack and site it belongs to:

- WireGuard from the peers' addresses only, to the gateways' network tag;
- ICMP from the private-path peers (their agents' path probe), when there are any;
- the site's own traffic to the gateways (to forward it);
- node-exporter from `monitoring_cidrs`, when set; SSH from IAP TCP forwarding only, with `operator_access: cloud`;
- the remote sites' ranges to the workloads the site names (tags, service accounts, or the whole network when asked);
- ICMP from the gateways' internal addresses (path-MTU discovery), once they are ready (`pmtu_rule`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from wg_mesh import component
from wg_mesh.component import Directory
from wg_mesh.config import GcpSite, MeshConfig
from wg_mesh.plan import topology

# Where IAP TCP forwarding connects from (https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule).
IAP_TCP_FORWARDING_RANGE = "35.235.240.0/20"
SSH_PORT = "22"


def workload_targets(site: GcpSite) -> dict[str, list[str]]:
    """Firewall target arguments for the site's workloads: their tags, their service accounts, or (empty) all."""
    if site.workload_tags:
        return {"target_tags": list(site.workload_tags)}
    if site.workload_service_accounts:
        return {"target_service_accounts": list(site.workload_service_accounts)}
    return {}


def targets_workloads(site: GcpSite) -> bool:
    """Whether the site's workloads get rules of their own: named ones, or every instance of the network."""
    return bool(workload_targets(site)) or site.workload_scope == "network"


@dataclass(frozen=True)
class Rules:
    """Makes the site's rules: `{name}-fw-{suffix}` on `network`, described as `{where}: {description}`."""

    name: str
    network: pulumi.Input[str]
    where: str  # the stack and the site, for the descriptions
    opts: pulumi.ResourceOptions

    def add(
        self,
        suffix: str,
        description: str,
        allows: list[gcp.compute.FirewallAllowArgs],
        opts: pulumi.ResourceOptions | None = None,
        **kw: Any,
    ) -> None:
        gcp.compute.Firewall(
            f"{self.name}-fw-{suffix}",
            network=self.network,
            description=f"{self.where}: {description}",
            direction="INGRESS",
            allows=allows,
            opts=self.opts if opts is None else opts,
            **kw,
        )


def gateway_rules(rules: Rules, mesh: MeshConfig, site: GcpSite, directory: Directory, targets: list[str]) -> None:
    """What the gateways (network tags `targets`: wg_mesh.gcp.gateway.rule_targets) admit: WireGuard, path probes,
    traffic to forward, and the operator's."""
    rules.add(
        "wireguard",
        "WireGuard from the mesh peers",
        [gcp.compute.FirewallAllowArgs(protocol="udp", ports=[str(mesh.listen_port)])],
        source_ranges=component.peer_source_ranges(mesh, site.name, directory),
        target_tags=targets,
    )
    if probes := topology.path_probe_sources(mesh, site.name):
        rules.add(
            "path-probe",
            "ICMP from the private-path peers (their agents' path probe, wg_mesh.gateway.fallback)",
            [gcp.compute.FirewallAllowArgs(protocol="icmp")],
            source_ranges=probes,
            target_tags=targets,
        )
    rules.add(
        "forward",
        "traffic from the site's networks to the gateway, to forward",
        [gcp.compute.FirewallAllowArgs(protocol="all")],
        source_ranges=[str(cidr) for cidr in site.cidrs],
        target_tags=targets,
    )
    if mesh.monitoring_cidrs:  # never with empty source_ranges: GCP would read that as 0.0.0.0/0
        rules.add(
            "exporter",
            "node-exporter, for Prometheus (monitoring_cidrs)",
            [gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(mesh.exporter_port)])],
            source_ranges=component.monitoring_ranges(mesh),
            target_tags=targets,
        )
    if mesh.operator_access == "cloud":
        rules.add(
            "iap-ssh",
            "SSH through IAP TCP forwarding only (operator_access: cloud)",
            [gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[SSH_PORT])],
            source_ranges=[IAP_TCP_FORWARDING_RANGE],
            target_tags=targets,
        )


def workload_rule(rules: Rules, mesh: MeshConfig, site: GcpSite) -> None:
    """The other sites' traffic to the site's workloads, when it names them (or asks for the whole network)."""
    if not targets_workloads(site):
        return
    targets: dict[str, Any] = workload_targets(site)  # (Any: passed through add()'s **kw)
    rules.add(
        "remote",
        "traffic from the other sites to the workloads "
        + ("of every instance of the network" if not targets else "(workload_tags/service accounts)"),
        [gcp.compute.FirewallAllowArgs(protocol="all")],
        source_ranges=[str(cidr) for cidr in topology.remote_ranges(mesh, site.name)],
        **targets,
    )


def pmtu_rule(
    rules: Rules, site: GcpSite, private_ips: Sequence[pulumi.Output[str]], after_ready: pulumi.ResourceOptions
) -> None:
    """Path-MTU discovery: the gateway tells a workload that a packet is too big for the tunnel (ICMP type 3 code 4).
    GCP firewall rules match ICMP by protocol only (no type/code: Allowed.ports applies to TCP, UDP and SCTP), so the
    rule admits ICMP from the gateways' own addresses and nothing else; it moves to a new gateway's address with the
    routes (`after_ready`)."""
    if not (targets_workloads(site) or not site.uses_existing_network):
        return
    targets: dict[str, Any] = workload_targets(site)
    rules.add(
        "pmtu",
        "ICMP from the gateway (fragmentation needed), for path-MTU discovery",
        [gcp.compute.FirewallAllowArgs(protocol="icmp")],
        source_ranges=[ip.apply(lambda address: f"{address}/32") for ip in private_ips],
        opts=after_ready,
        **targets,
    )
