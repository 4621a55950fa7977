"""An AWS site: a WireGuard gateway instance in the site's VPC and the routes that point at it.

Order matters only through data: the Elastic IP exists before the instance (its address is in every
peer's config and firewall), the instance's user data holds the peers' addresses and keys, and the
route tables send every remote range to the instance's network interface.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from mesh import component, topology, userdata
from mesh.component import Directory
from mesh.config import AwsSite, MeshConfig

GATEWAY_TYPE = "wg-mesh:aws:Gateway"
CANONICAL_OWNER = "099720109477"
UBUNTU_AMI_NAME = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-{arch}-server-*"
ALL_PROTOCOLS = "-1"
# What AWS accepts in security group and rule descriptions (no apostrophes, for one).
SG_DESCRIPTION_CHARS = re.compile(r"[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]*")
ANYWHERE = "0.0.0.0/0"

# Graviton families have a 'g' right after the generation digit: t4g, c7g, m7gd, c6gn, is4gen, g5g.
_GRAVITON_FAMILY = re.compile(r"[a-z]+\d+g[a-z-]*")


def ami_architecture(instance_type: str) -> str:
    """`arm64` for Graviton instance types, else `amd64` (Ubuntu's names in the AMI name)."""
    family = instance_type.split(".", 1)[0]
    return "arm64" if _GRAVITON_FAMILY.fullmatch(family) else "amd64"


@dataclass(frozen=True)
class AwsGatewayArgs:
    mesh: MeshConfig
    site: AwsSite
    directory: Directory


@dataclass(frozen=True)
class _Network:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    route_table_ids: list[pulumi.Input[str]]


class AwsGateway(component.SiteComponent):
    provider: aws.Provider
    eip: aws.ec2.Eip
    security_group: aws.ec2.SecurityGroup
    instance: aws.ec2.Instance
    routes: list[aws.ec2.Route]

    def __init__(self, name: str, args: AwsGatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GATEWAY_TYPE, name, None, opts)
        mesh, site = args.mesh, args.site
        self.provider = aws.Provider(
            f"{name}-provider",
            region=site.region,
            default_tags=aws.ProviderDefaultTagsArgs(tags={"managed-by": "wg-mesh", "wg-mesh-site": site.name}),
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        self._create_identity(name, args.mesh, site, args.directory)

        network = self._network(name, site, child)
        self.eip = aws.ec2.Eip(f"{name}-eip", domain="vpc", tags={"Name": f"wg-mesh-{site.name}"}, opts=child)
        self.public_ip = self.eip.public_ip

        port = mesh.listen_port
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=network.vpc_id,
            description=f"wg-mesh gateway {site.name}: WireGuard from peers, forwarded traffic from the site",
            ingress=[
                aws.ec2.SecurityGroupIngressArgs(
                    description="WireGuard from the mesh peers",
                    protocol="udp",
                    from_port=port,
                    to_port=port,
                    cidr_blocks=component.peer_source_ranges(mesh, site.name, args.directory),
                ),
                aws.ec2.SecurityGroupIngressArgs(
                    description="traffic from the site networks, to forward into the mesh",
                    protocol=ALL_PROTOCOLS,
                    from_port=0,
                    to_port=0,
                    cidr_blocks=[str(cidr) for cidr in site.cidrs],
                ),
                *(
                    [
                        aws.ec2.SecurityGroupIngressArgs(
                            description="node-exporter, for Prometheus (monitoring_cidrs)",
                            protocol="tcp",
                            from_port=mesh.exporter_port,
                            to_port=mesh.exporter_port,
                            cidr_blocks=component.monitoring_ranges(mesh),
                        )
                    ]
                    if mesh.monitoring_cidrs
                    else []
                ),
            ],
            # Terraform removes AWS's default allow-all egress rule, so state it.
            egress=[
                aws.ec2.SecurityGroupEgressArgs(protocol=ALL_PROTOCOLS, from_port=0, to_port=0, cidr_blocks=[ANYWHERE])
            ],
            tags={"Name": f"wg-mesh-{site.name}"},
            opts=child,
        )

        arch = ami_architecture(site.instance_type)
        ami = aws.ec2.get_ami_output(
            most_recent=True,
            owners=[CANONICAL_OWNER],
            filters=[
                aws.ec2.GetAmiFilterArgs(name="name", values=[UBUNTU_AMI_NAME.format(arch=arch)]),
                aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
            ],
            opts=pulumi.InvokeOutputOptions(parent=self, provider=self.provider),
        )
        self.instance = aws.ec2.Instance(
            f"{name}-instance",
            ami=ami.id,
            instance_type=site.instance_type,
            subnet_id=network.subnet_id,
            vpc_security_group_ids=[self.security_group.id],
            # A public address from the first boot: cloud-init installs wireguard-tools from the Ubuntu
            # archive before the Elastic IP association (which needs the instance) can exist.
            associate_public_ip_address=True,
            source_dest_check=False,  # it forwards packets that are neither from nor to itself
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(encrypted=True, volume_type="gp3"),
            # gzip'd (deterministically) to stay under EC2's 16 KB: see mesh/userdata.py
            user_data_base64=self.user_data.apply(userdata.aws_user_data_base64),
            user_data_replace_on_change=True,  # cloud-init runs once: a new config needs a new instance
            tags={"Name": f"wg-mesh-{site.name}"},
            opts=child,
        )
        aws.ec2.EipAssociation(
            f"{name}-eip-assoc",
            allocation_id=self.eip.allocation_id,
            instance_id=self.instance.id,
            # On instance replacement, release the address from the old instance before claiming it.
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(delete_before_replace=True)),
        )

        eni = self.instance.primary_network_interface_id
        self.routes = [
            aws.ec2.Route(
                f"{name}-route-{i}-{component.cidr_slug(cidr)}",
                route_table_id=table_id,
                destination_cidr_block=str(cidr),
                network_interface_id=eni,
                opts=child,
            )
            for i, table_id in enumerate(network.route_table_ids)
            for cidr in topology.remote_ranges(mesh, site.name)
        ]
        self._register_site_outputs()

    def _network(self, name: str, site: AwsSite, child: pulumi.ResourceOptions) -> _Network:
        """The site's existing VPC, or a new one with a public gateway subnet."""
        if site.vpc_id is not None and site.subnet_id is not None and site.route_table_ids is not None:
            return _Network(site.vpc_id, site.subnet_id, list(site.route_table_ids))

        first, *more = site.cidrs
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=str(first),
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags={"Name": f"wg-mesh-{site.name}"},
            opts=child,
        )
        for i, cidr in enumerate(more, start=1):
            aws.ec2.VpcIpv4CidrBlockAssociation(f"{name}-cidr-{i}", vpc_id=vpc.id, cidr_block=str(cidr), opts=child)
        subnet = aws.ec2.Subnet(
            f"{name}-subnet",
            vpc_id=vpc.id,
            cidr_block=str(topology.gateway_subnet(first)),
            availability_zone=site.zone_name,
            availability_zone_id=site.zone_id,  # a zone ID (use1-az1) names the same zone in every account
            tags={"Name": f"wg-mesh-{site.name}-gateway"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"wg-mesh-{site.name}"}, opts=child)
        table = aws.ec2.RouteTable(f"{name}-rt", vpc_id=vpc.id, tags={"Name": f"wg-mesh-{site.name}"}, opts=child)
        # A standalone Route, not an inline one: a table with inline routes fights standalone Routes,
        # and the mesh routes below are standalone.
        aws.ec2.Route(
            f"{name}-rt-default",
            route_table_id=table.id,
            destination_cidr_block=ANYWHERE,
            gateway_id=igw.id,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(f"{name}-rt-assoc", subnet_id=subnet.id, route_table_id=table.id, opts=child)
        return _Network(vpc.id, subnet.id, [table.id])
