"""An AWS site: a WireGuard gateway instance in the site's VPC and the routes that point at it.

Order matters mostly through data: the Elastic IP exists before the instance (its address is in every
peer's config and firewall), the instance's user data holds the peers' addresses and keys, and the
route tables send every remote range to the instance's network interface. Two orderings are explicit:
a created subnet reaches the internet before the instance boots (cloud-init runs once), and the Elastic
IP and the routes move to an instance only after it reported itself ready (the readiness gate).
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from mesh import aws_ha, aws_iam, aws_live, awsfacts, component, ha, readymark, topology, userdata, zones
from mesh.awsfacts import ami_architecture
from mesh.component import Directory
from mesh.config import AwsSite, MeshConfig

__all__ = ["GATEWAY_TYPE", "SG_DESCRIPTION_CHARS", "AwsGateway", "AwsGatewayArgs", "ami_architecture"]

GATEWAY_TYPE = "wg-mesh:aws:Gateway"
ALL_PROTOCOLS = "-1"
# The readiness gate runs with the project's virtualenv (Pulumi.yaml: virtualenv .venv), from the project directory.
GATE_COMMAND = ".venv/bin/python -m mesh.readygate"
READY_TIMEOUT_S = 900  # a first boot installs packages; apt mirrors can be slow
# What AWS accepts in security group and rule descriptions (no apostrophes, for one).
SG_DESCRIPTION_CHARS = re.compile(r"[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]*")
ANYWHERE = "0.0.0.0/0"


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
    standby_subnet_id: pulumi.Input[str] | None = None  # gateways: 2: gateway b's subnet
    gateway_table: pulumi.Input[str] | None = None  # created networks: the gateway subnets' route table
    # What must exist before the gateway boots: cloud-init runs once and installs packages from the
    # internet, so a created subnet needs its default route and route table association first.
    ready: list[pulumi.Resource] = field(default_factory=list)


class AwsGateway(component.SiteComponent):
    provider: aws.Provider
    eip: aws.ec2.Eip
    security_group: aws.ec2.SecurityGroup
    instance: aws.ec2.Instance  # gateway a (the only one unless gateways: 2)
    instances: list[aws.ec2.Instance]  # a, then b for gateways: 2
    private_ips: dict[str, pulumi.Output[str]]  # gateway letter -> its VPC address (monitoring scrapes each)
    lease_table: aws.dynamodb.Table | None  # gateways: 2
    standby_ready: command.local.Command  # gateways: 2: gateway b's readiness gate
    routes: list[aws.ec2.Route]
    instance_profile: aws.iam.InstanceProfile
    stores: aws_live.AwsStores | None  # delivery: live
    ready: command.local.Command
    newest_ami: pulumi.Output[str]  # Canonical's newest Ubuntu 24.04 AMI for this gateway, looked up on every run
    ami_in_use: pulumi.Output[str]

    def __init__(self, name: str, args: AwsGatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GATEWAY_TYPE, name, None, opts)
        mesh, site = args.mesh, args.site
        self.provider = aws.Provider(
            f"{name}-provider",
            region=site.region,
            # Per-site credentials (README, "Credentials"); unset: the environment's, as for every AWS tool.
            profile=site.profile,
            assume_roles=(
                [aws.ProviderAssumeRoleArgs(role_arn=site.assume_role_arn, session_name=f"wg-mesh-{site.name}")]
                if site.assume_role_arn
                else None
            ),
            allowed_account_ids=[site.account_id] if site.account_id else None,
            default_tags=aws.ProviderDefaultTagsArgs(
                tags={"managed-by": "wg-mesh", aws_iam.SITE_TAG: site.name, aws_iam.STACK_TAG: pulumi.get_stack()}
            ),
            # The gateway sets this tag on itself when it is ready; it is not ours to remove.
            ignore_tags=aws.ProviderIgnoreTagsArgs(keys=[readymark.READY_TAG]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        self._create_identity(name, args.mesh, site, args.directory)

        network = self._network(name, site, child)
        self.eip = aws.ec2.Eip(
            f"{name}-eip",
            domain="vpc",
            tags={"Name": f"wg-mesh-{site.name}"},
            opts=pulumi.ResourceOptions.merge(child, component.kept(mesh)),
        )
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

        self.newest_ami = self._ubuntu_ami(site, "*")
        if site.image is None:
            # The newest image when the instance is created, then kept: a new Ubuntu release must not
            # replace every gateway. Rolling is deliberate: set `image` (README, "Rolling the image").
            ami: pulumi.Input[str] = self.newest_ami
            keep_image = pulumi.ResourceOptions(ignore_changes=["ami"])
        else:
            ami = site.image if site.image.startswith("ami-") else self._ubuntu_ami(site, site.image)
            keep_image = pulumi.ResourceOptions()
        # delivery: live: the key parameter and document secret, readable by this gateway's role only (mesh.aws_live).
        stores = self.stores = None
        if self.document is not None:
            stores = self.stores = aws_live.create_stores(name, site, self.key.private_key, self.document, child)
        # gateways: 2 (docs/ha.md 5): the lease table, the DynamoDB endpoint, each role's HA policy, the `ha` objects.
        names = ha.ha_names(pulumi.get_project(), pulumi.get_stack(), site.name) if site.gateways > 1 else None
        self.lease_table = None
        ha_policy: pulumi.Output[str] | None = None
        if names is not None:
            self.lease_table = aws_ha.lease_table(name, names.lease_table, child)
            ha_policy = aws_ha.policy(site, names.lease_table, self.eip.allocation_id, network.route_table_ids, child)
            if network.gateway_table is not None:
                aws_ha.dynamodb_endpoint(name, site, network.vpc_id, network.gateway_table, child)
        self.instances, self.private_ips = [], {}
        subnets = [network.subnet_id, network.standby_subnet_id][: site.gateways]
        for letter, subnet_id in zip(ha.LETTERS[: site.gateways], subnets, strict=True):
            prefix = ha.child_name(name, letter)
            profile = aws_iam.gateway_profile(
                prefix,
                site.region,
                site.name,
                mesh.operator_access == "cloud",
                child,
                stores.policy if stores else None,
                ha_policy,
            )
            user_data = self.user_data
            if names is not None:
                objects = aws_ha.ha_object(
                    letter, site, names.lease_table, self.eip.allocation_id, network.route_table_ids
                )
                user_data = self._ha_user_data(mesh, site, objects)
            first_boot: list[pulumi.Resource] = [*network.ready, *(stores.resources if stores else [])]
            first_boot += [self.lease_table] if self.lease_table is not None else []
            # Gateway b is created (or replaced) only once a is ready: never both at once (docs/ha.md 9).
            first_boot += [self.ready] if letter != "a" else []
            instance = self._instance(prefix, site, ami, keep_image, subnet_id, user_data, profile, first_boot, child)
            if names is not None:
                aws_ha.tag_interface(prefix, site, instance, child)
            if letter == "a":
                self.instance, self.instance_profile, self.user_data = instance, profile, user_data
                # Traffic moves to a (new) gateway only once it is ready: wg0 up, forwarding on (README,
                # "Replacements").
                self.ready = self._readiness_gate(prefix, site, instance, child)
            else:
                self.standby_ready = self._readiness_gate(prefix, site, instance, child)
            self.instances.append(instance)
            self.private_ips[letter] = instance.private_ip
        self.ami_in_use = self.instance.ami
        after_ready = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.ready]))
        if names is None:
            aws.ec2.EipAssociation(
                f"{name}-eip-assoc",
                allocation_id=self.eip.allocation_id,
                instance_id=self.instance.id,
                # On instance replacement, release the address from the old instance before claiming it.
                opts=pulumi.ResourceOptions.merge(after_ready, pulumi.ResourceOptions(delete_before_replace=True)),
            )
        else:
            # HA: no EipAssociation, the active gateway's agent associates the address (its id changes on every move,
            # and terraform-provider-aws's EipAssociation read drops a missing id from state and re-creates it:
            # docs/ha.md 5.3). Routes start at gateway a; the active's agent ReplaceRoutes them, and Pulumi must not
            # move them back: the provider reads a route's target by table and destination (docs/ha.md 5.3).
            after_ready = pulumi.ResourceOptions.merge(
                after_ready, pulumi.ResourceOptions(ignore_changes=["networkInterfaceId"])
            )

        eni = self.instance.primary_network_interface_id
        self.routes = [
            aws.ec2.Route(
                f"{name}-route-{i}-{component.cidr_slug(cidr)}",
                route_table_id=table_id,
                destination_cidr_block=str(cidr),
                network_interface_id=eni,
                opts=after_ready,
            )
            for i, table_id in enumerate(network.route_table_ids)
            for cidr in topology.remote_ranges(mesh, site.name)
        ]
        self._register_site_outputs()

    def _instance(
        self,
        prefix: str,
        site: AwsSite,
        ami: pulumi.Input[str],
        keep_image: pulumi.ResourceOptions,
        subnet_id: pulumi.Input[str] | None,
        user_data: pulumi.Output[str],
        profile: aws.iam.InstanceProfile,
        first_boot: list[pulumi.Resource],
        child: pulumi.ResourceOptions,
    ) -> aws.ec2.Instance:
        """One gateway machine; both of an HA site are alike but for the subnet and the `ha` object's letter."""
        return aws.ec2.Instance(
            f"{prefix}-instance",
            iam_instance_profile=profile.name,
            ami=ami,
            instance_type=site.instance_type,
            subnet_id=subnet_id,
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
            user_data_base64=user_data.apply(userdata.aws_user_data_base64),
            # cloud-init runs once: a new config needs a new instance. delivery: live: the user data holds no peer and
            # no key, so a mesh change leaves it (and the instance) as it is.
            user_data_replace_on_change=True,
            tags={"Name": f"wg-mesh-{site.name}"},
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions.merge(
                    keep_image,
                    # live: the first boot's `wg-mesh-agent --once` reads the document and the key.
                    pulumi.ResourceOptions(depends_on=first_boot),
                ),
            ),
        )

    def _readiness_gate(
        self, name: str, site: AwsSite, instance: aws.ec2.Instance, child: pulumi.ResourceOptions
    ) -> command.local.Command:
        """Runs `python -m mesh.readygate` on the machine running `pulumi up`, for every new instance."""
        fixed = [f"--region {shlex.quote(site.region)}"]
        fixed += [f"--profile {shlex.quote(site.profile)}"] if site.profile else []
        fixed += [f"--role-arn {shlex.quote(site.assume_role_arn)}"] if site.assume_role_arn else []
        return command.local.Command(
            f"{name}-ready",
            create=instance.id.apply(
                lambda iid: " ".join([GATE_COMMAND, *fixed, f"--timeout {READY_TIMEOUT_S}", f"--instance-id {iid}"])
            ),
            triggers=[instance.id],
            opts=child,
        )

    def _ubuntu_ami(self, site: AwsSite, serial: str) -> pulumi.Output[str]:
        """Canonical's Ubuntu 24.04 AMI for the site's architecture and partition: one serial, or the newest."""
        return aws.ec2.get_ami_output(
            most_recent=True,
            owners=[awsfacts.canonical_owner(site.region)],
            filters=[
                aws.ec2.GetAmiFilterArgs(name="name", values=[awsfacts.ubuntu_ami_name(site.instance_type, serial)]),
                aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
            ],
            opts=pulumi.InvokeOutputOptions(parent=self, provider=self.provider),
        ).id

    def _zone(self, site: AwsSite) -> dict[str, pulumi.Input[str] | None]:
        """The gateway subnet's zone: the configured zone name or zone id, else one that offers the instance type."""
        if site.zone is not None:
            return {"availability_zone": site.zone_name, "availability_zone_id": site.zone_id}
        offerings = aws.ec2.get_instance_type_offerings_output(
            location_type="availability-zone",
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[site.instance_type])],
            region=site.region,
            opts=pulumi.InvokeOutputOptions(parent=self, provider=self.provider),
        )
        choose = functools.partial(awsfacts.choose_zone, site.instance_type, site.region)
        return {"availability_zone": offerings.locations.apply(choose)}

    def _standby_zone(self, site: AwsSite) -> dict[str, pulumi.Input[str] | None]:
        """Gateway b's subnet zone: `standby_zone`, else another zone that offers the instance type (by name, or by
        zone ID when `zone` is one), never the zone of gateway a unless written (docs/ha.md 5.1)."""
        if site.standby_zone is not None:
            kind = zones.aws_zone_kind(site.standby_zone, site.region)
            key = "availability_zone_id" if kind == "id" else "availability_zone"
            return {key: site.standby_zone}
        by_id = site.zone_id is not None
        offerings = self._offerings(site, "availability-zone-id" if by_id else "availability-zone")
        if site.zone is not None:
            first: pulumi.Input[str] = site.zone
        else:
            first = offerings.apply(functools.partial(awsfacts.choose_zone, site.instance_type, site.region))
        values = pulumi.Output.all(first=first, offered=offerings)
        other = values.apply(lambda v: ha.other_zone(site.instance_type, site.region, v["first"], v["offered"]))
        return {"availability_zone_id" if by_id else "availability_zone": other}

    def _offerings(self, site: AwsSite, location_type: str) -> pulumi.Output[list[str]]:
        return aws.ec2.get_instance_type_offerings_output(
            location_type=location_type,
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[site.instance_type])],
            region=site.region,
            opts=pulumi.InvokeOutputOptions(parent=self, provider=self.provider),
        ).locations

    def _network(self, name: str, site: AwsSite, child: pulumi.ResourceOptions) -> _Network:
        """The site's existing VPC, or a new one with a public gateway subnet."""
        if site.vpc_id is not None and site.subnet_id is not None and site.route_table_ids is not None:
            return _Network(site.vpc_id, site.subnet_id, list(site.route_table_ids), site.standby_subnet_id)

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
        zone = self._zone(site)
        subnet = aws.ec2.Subnet(
            f"{name}-subnet",
            vpc_id=vpc.id,
            cidr_block=str(topology.gateway_subnet(first)),
            availability_zone=zone.get("availability_zone"),
            availability_zone_id=zone.get("availability_zone_id"),
            tags={"Name": f"wg-mesh-{site.name}-gateway"},
            opts=pulumi.ResourceOptions.merge(
                # A zone chosen for us is kept once the subnet exists: a new zone would replace the gateway.
                child,
                pulumi.ResourceOptions(ignore_changes=["availabilityZone"] if site.zone is None else None),
            ),
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"wg-mesh-{site.name}"}, opts=child)
        table = aws.ec2.RouteTable(f"{name}-rt", vpc_id=vpc.id, tags={"Name": f"wg-mesh-{site.name}"}, opts=child)
        # A standalone Route, not an inline one: a table with inline routes fights standalone Routes,
        # and the mesh routes below are standalone.
        default = aws.ec2.Route(
            f"{name}-rt-default",
            route_table_id=table.id,
            destination_cidr_block=ANYWHERE,
            gateway_id=igw.id,
            opts=child,
        )
        association = aws.ec2.RouteTableAssociation(
            f"{name}-rt-assoc", subnet_id=subnet.id, route_table_id=table.id, opts=child
        )
        ready: list[pulumi.Resource] = [default, association]
        standby_id: pulumi.Output[str] | None = None
        if site.gateways > 1:  # docs/ha.md 5.1: the standby in its own subnet, of another zone by default
            second = topology.standby_gateway_subnet(first)
            assert second is not None  # mesh.rules.ha_site_problems: cidrs[0] has room for it
            standby_zone = self._standby_zone(site)
            standby = aws.ec2.Subnet(
                f"{ha.child_name(name, 'b')}-subnet",
                vpc_id=vpc.id,
                cidr_block=str(second),
                availability_zone=standby_zone.get("availability_zone"),
                availability_zone_id=standby_zone.get("availability_zone_id"),
                tags={"Name": f"wg-mesh-{site.name}-gateway-b"},
                opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(ignore_changes=["availabilityZone"] if site.zone is None else None)
                ),
            )
            ready.append(
                aws.ec2.RouteTableAssociation(
                    f"{ha.child_name(name, 'b')}-rt-assoc", subnet_id=standby.id, route_table_id=table.id, opts=child
                )
            )
            standby_id = standby.id
        return _Network(vpc.id, subnet.id, [table.id], standby_id, table.id, ready=ready)
