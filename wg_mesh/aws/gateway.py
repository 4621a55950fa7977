"""An AWS site: a WireGuard gateway instance in the site's VPC and the routes that point at it.

Order matters mostly through data: the Elastic IP exists before the instance (its address is in every
peer's config and firewall), the instance's user data holds the peers' addresses and keys, and the
route tables send every remote range to the instance's network interface. Two orderings are explicit:
a created subnet reaches the internet before the instance boots (cloud-init runs once), and the Elastic
IP and the routes move to an instance only after it reported itself ready (the readiness gate).
With `gateways: 2` (docs/ha.md 5) a second instance, a lease table and the agents' rights (wg_mesh.aws.ha) are added;
the agents, not Pulumi, then own the Elastic IP's association and the routes' target. The network: wg_mesh.aws.network.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from wg_mesh import component, ha, readymark, topology, userdata
from wg_mesh.aws import facts as awsfacts
from wg_mesh.aws import fit as aws_fit
from wg_mesh.aws import ha as aws_ha
from wg_mesh.aws import iam as aws_iam
from wg_mesh.aws import live as aws_live
from wg_mesh.aws import network as aws_network
from wg_mesh.aws.facts import ami_architecture
from wg_mesh.component import Directory
from wg_mesh.config import AwsSite, MeshConfig
from wg_mesh.keys import SigningKey
from wg_mesh.providers import aws_default_tags, given_provider
from wg_mesh.stamp import python_command

__all__ = ["GATEWAY_TYPE", "SG_DESCRIPTION_CHARS", "AwsGateway", "AwsGatewayArgs", "ami_architecture"]

GATEWAY_TYPE = "wg-mesh:aws:Gateway"
ALL_PROTOCOLS = "-1"
# The readiness gate runs with the interpreter running this program (wg_mesh.stamp: not a path relative to the cwd).
GATE_COMMAND = python_command("-m", "wg_mesh.readygate")
READY_TIMEOUT_S = 900  # a first boot installs packages; apt mirrors can be slow
# What AWS accepts in security group and rule descriptions (no apostrophes, for one).
SG_DESCRIPTION_CHARS = re.compile(r"[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]*")
ANYWHERE = "0.0.0.0/0"


@dataclass(frozen=True)
class AwsGatewayArgs:
    mesh: MeshConfig
    site: AwsSite
    directory: Directory
    signing_key: SigningKey | None = None  # delivery: live: the mesh's document signing key (wg_mesh.mesh)


class AwsGateway(component.SiteComponent):
    provider: pulumi.ProviderResource  # the caller's (given to the Mesh) or the site's own
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
    security_group_id: pulumi.Output[str]  # the gateways' security group (a workload's rules can name it)
    network_interface_id: pulumi.Output[str]  # gateway a's primary ENI: the routes' target (HA: until a failover)
    newest_ami: pulumi.Output[str]  # Canonical's newest Ubuntu 24.04 AMI for this gateway, looked up on every run
    ami_in_use: pulumi.Output[str]

    def __init__(self, name: str, args: AwsGatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GATEWAY_TYPE, name, None, opts)
        mesh, site = args.mesh, args.site
        # The caller's aws provider when the Mesh was given one (wg_mesh.providers), else the site's own.
        self.provider = given_provider(self, "aws") or aws.Provider(
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
            default_tags=aws.ProviderDefaultTagsArgs(tags=aws_default_tags(site)),
            # The gateway sets this tag on itself when it is ready; it is not ours to remove.
            ignore_tags=aws.ProviderIgnoreTagsArgs(keys=[readymark.READY_TAG]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        self._create_identity(name, args.mesh, site, args.directory, args.signing_key)

        network = aws_network.network(aws_network.owner(self, self.provider), name, site, child)
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
                *(
                    [
                        # Echo request (ICMP type 8, code 0; an SG's from_port/to_port are type/code for ICMP): the
                        # agent's direct probe of the private path (wg_mesh.gateway.fallback). Replies are stateful.
                        aws.ec2.SecurityGroupIngressArgs(
                            description="ICMP echo from the private-path peers (their agents' path probe)",
                            protocol="icmp",
                            from_port=8,
                            to_port=0,
                            cidr_blocks=probes,
                        )
                    ]
                    if (probes := topology.path_probe_sources(mesh, site.name))
                    else []
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
        self.security_group_id = self.security_group.id

        self.newest_ami = self._ubuntu_ami(site, "*")
        if site.image is None:
            # The newest image when the instance is created, then kept: a new Ubuntu release must not
            # replace every gateway. Rolling is deliberate: set `image` (README, "Rolling the image").
            ami: pulumi.Input[str] = self.newest_ami
            keep_image = pulumi.ResourceOptions(ignore_changes=["ami"])
        else:
            ami = site.image if site.image.startswith("ami-") else self._ubuntu_ami(site, site.image)
            keep_image = pulumi.ResourceOptions()
        # delivery: live: the key parameter and document secret, readable by this gateway's role only
        # (wg_mesh.aws.live).
        stores = self.stores = None
        if self.document is not None:
            stores = self.stores = aws_live.create_stores(name, site, self.key.private_key, self.document, child)
        # gateways: 2 (docs/ha.md 5): the lease table, the DynamoDB endpoint, each role's HA policy, the `ha` objects.
        names = ha.ha_names(pulumi.get_project(), pulumi.get_stack(), site.name) if site.gateways > 1 else None
        self.lease_table = None
        ha_policy: pulumi.Output[str] | None = None
        if names is not None:
            created = network.gateway_table is not None  # wg-mesh's own network: its tables carry our tags
            self.lease_table = aws_ha.lease_table(name, names.lease_table, child)
            ha_policy = aws_ha.policy(
                site, names.lease_table, self.eip.allocation_id, network.route_table_ids, child, created
            )
            if network.gateway_table is not None:
                aws_ha.dynamodb_endpoint(name, site, network.vpc_id, network.gateway_table, child)
                subnet_ids = [network.subnet_id, network.standby_subnet_id]
                aws_ha.ec2_endpoint(name, site, network.vpc_id, [i for i in subnet_ids if i is not None], child)
        self.instances, self.private_ips = [], {}
        subnets = [network.subnet_id, network.standby_subnet_id][: site.gateways]
        configured_zones = [None, None] if site.uses_existing_network else [site.zone, site.standby_zone]
        invoke = pulumi.InvokeOutputOptions(parent=self, provider=self.provider)
        for letter, subnet_id, zone in zip(ha.LETTERS[: site.gateways], subnets, configured_zones, strict=False):
            prefix = ha.child_name(name, letter)
            # The type must be offered in the subnet's zone, else nothing changes (wg_mesh.aws.fit).
            instance_type = aws_fit.offered_type(site, subnet_id, zone, invoke)
            profile = aws_iam.gateway_profile(
                prefix,
                site.region,
                site.name,
                mesh.operator_access == "cloud",
                child,
                stores.policy if stores else None,
                ha_policy,
                stores.key_policy if stores else None,
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
            fixed = component.fixed_private_ip(mesh, site)
            instance = self._instance(
                prefix, site, instance_type, ami, keep_image, subnet_id, user_data, profile, first_boot, child, fixed
            )
            # The AMI the instance boots (unpinned: the one it keeps) must be of the type's architecture; the gate's
            # command waits for the check, so a mismatch fails the preview (wg_mesh.aws.fit).
            image = aws_fit.fitting_image(site, instance.ami, invoke)
            if names is not None:
                aws_ha.tag_interface(prefix, site, instance, child)
            if letter == "a":
                self.instance, self.instance_profile, self.user_data = instance, profile, user_data
                # Traffic moves to a (new) gateway only once it is ready: wg0 up, forwarding on (README,
                # "Replacements").
                self.ready = self._readiness_gate(prefix, site, instance, image, child)
            else:
                self.standby_ready = self._readiness_gate(prefix, site, instance, image, child)
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

        eni = self.network_interface_id = self.instance.primary_network_interface_id
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
        self._register_site_outputs(security_group_id=self.security_group_id, network_interface_id=eni)

    def _instance(
        self,
        prefix: str,
        site: AwsSite,
        instance_type: pulumi.Input[str],
        ami: pulumi.Input[str],
        keep_image: pulumi.ResourceOptions,
        subnet_id: pulumi.Input[str] | None,
        user_data: pulumi.Output[str],
        profile: aws.iam.InstanceProfile,
        first_boot: list[pulumi.Resource],
        child: pulumi.ResourceOptions,
        private_ip: str | None = None,
    ) -> aws.ec2.Instance:
        """One gateway machine; both of an HA site are alike but for the subnet and the `ha` object's letter."""
        return aws.ec2.Instance(
            f"{prefix}-instance",
            iam_instance_profile=profile.name,
            ami=ami,
            instance_type=instance_type,
            subnet_id=subnet_id,
            private_ip=private_ip,  # fixed on a private path (docs/underlay.md): the address peers there reach
            vpc_security_group_ids=[self.security_group.id],
            # A public address from the first boot: cloud-init installs wireguard-tools from the Ubuntu
            # archive before the Elastic IP association (which needs the instance) can exist.
            associate_public_ip_address=True,
            source_dest_check=False,  # it forwards packets that are neither from nor to itself
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(encrypted=True, volume_type="gp3"),
            # gzip'd (deterministically) to stay under EC2's 16 KB: see wg_mesh/userdata.py
            user_data_base64=user_data.apply(userdata.aws_user_data_base64),
            # cloud-init runs once: a new config needs a new instance. delivery: live: the user data holds no peer and
            # no key, so a mesh change leaves it (and the instance) as it is.
            user_data_replace_on_change=True,
            tags={"Name": f"wg-mesh-{site.name}"},
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions.merge(
                    keep_image,
                    # live: the first boot's `wg-mesh-agent --once` reads the document and the key. A fixed
                    # private address is the old instance's until it is gone (README, "Private paths").
                    # A new type is a new instance beside the old one, ready-gated like new user data: the provider
                    # would stop and start it in place, with no gate ("Updates to this field will trigger a
                    # stop/start of the EC2 instance": pulumi-aws 7.51.1, ec2.Instance.instance_type; README, "What
                    # a change does").
                    pulumi.ResourceOptions(
                        depends_on=first_boot,
                        delete_before_replace=private_ip is not None,
                        replace_on_changes=["instanceType"],
                    ),
                ),
            ),
        )

    def _readiness_gate(
        self,
        name: str,
        site: AwsSite,
        instance: aws.ec2.Instance,
        image: pulumi.Output[str],
        child: pulumi.ResourceOptions,
    ) -> command.local.Command:
        """Runs `python -m wg_mesh.readygate` on the machine running `pulumi up`, for every new instance."""
        fixed = [f"--region {shlex.quote(site.region)}"]
        fixed += [f"--profile {shlex.quote(site.profile)}"] if site.profile else []
        fixed += [f"--role-arn {shlex.quote(site.assume_role_arn)}"] if site.assume_role_arn else []
        return command.local.Command(
            f"{name}-ready",
            create=pulumi.Output.all(iid=instance.id, image=image).apply(
                lambda v: " ".join([GATE_COMMAND, *fixed, f"--timeout {READY_TIMEOUT_S}", f"--instance-id {v['iid']}"])
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
