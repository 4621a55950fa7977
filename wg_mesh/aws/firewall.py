"""An AWS gateway's security group: WireGuard from the peers, the agents' path probes, the site's traffic to forward,
node-exporter for monitoring. Part of the AwsGateway component (wg_mesh.aws.gateway)."""

from __future__ import annotations

import re

import pulumi
import pulumi_aws as aws

from wg_mesh import component
from wg_mesh.component import Directory
from wg_mesh.config import AwsSite, MeshConfig
from wg_mesh.plan import topology

ALL_PROTOCOLS = "-1"
# What AWS accepts in security group and rule descriptions (no apostrophes, for one).
SG_DESCRIPTION_CHARS = re.compile(r"[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]*")
ANYWHERE = "0.0.0.0/0"


def security_group(
    name: str,
    mesh: MeshConfig,
    site: AwsSite,
    directory: Directory,
    vpc_id: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> aws.ec2.SecurityGroup:
    """The gateways' security group (both of an HA site share it); its rules, in the order AWS lists them."""
    return aws.ec2.SecurityGroup(
        f"{name}-sg",
        vpc_id=vpc_id,
        description=f"wg-mesh gateway {site.name}: WireGuard from peers, forwarded traffic from the site",
        ingress=[
            _wireguard(mesh, site, directory),
            *_path_probes(mesh, site),
            aws.ec2.SecurityGroupIngressArgs(
                description="traffic from the site networks, to forward into the mesh",
                protocol=ALL_PROTOCOLS,
                from_port=0,
                to_port=0,
                cidr_blocks=[str(cidr) for cidr in site.cidrs],
            ),
            *_monitoring(mesh),
        ],
        # Terraform removes AWS's default allow-all egress rule, so state it.
        egress=[
            aws.ec2.SecurityGroupEgressArgs(protocol=ALL_PROTOCOLS, from_port=0, to_port=0, cidr_blocks=[ANYWHERE])
        ],
        tags={"Name": f"wg-mesh-{site.name}"},
        # kept across a rename: a new security group would be a new one for the instance (component.description_kept)
        opts=pulumi.ResourceOptions.merge(opts, component.description_kept()),
    )


def _wireguard(mesh: MeshConfig, site: AwsSite, directory: Directory) -> aws.ec2.SecurityGroupIngressArgs:
    port = mesh.listen_port
    return aws.ec2.SecurityGroupIngressArgs(
        description="WireGuard from the mesh peers",
        protocol="udp",
        from_port=port,
        to_port=port,
        cidr_blocks=component.peer_source_ranges(mesh, site.name, directory),
    )


def _path_probes(mesh: MeshConfig, site: AwsSite) -> list[aws.ec2.SecurityGroupIngressArgs]:
    """Echo request (ICMP type 8, code 0; an SG's from_port/to_port are type/code for ICMP): the agent's direct probe
    of the private path (wg_mesh.gateway.fallback). Replies are stateful."""
    probes = topology.path_probe_sources(mesh, site.name)
    if not probes:
        return []
    return [
        aws.ec2.SecurityGroupIngressArgs(
            description="ICMP echo from the private-path peers (their agents' path probe)",
            protocol="icmp",
            from_port=8,
            to_port=0,
            cidr_blocks=probes,
        )
    ]


def _monitoring(mesh: MeshConfig) -> list[aws.ec2.SecurityGroupIngressArgs]:
    if not mesh.monitoring_cidrs:
        return []
    return [
        aws.ec2.SecurityGroupIngressArgs(
            description="node-exporter, for Prometheus (monitoring_cidrs)",
            protocol="tcp",
            from_port=mesh.exporter_port,
            to_port=mesh.exporter_port,
            cidr_blocks=component.monitoring_ranges(mesh),
        )
    ]
