"""An AWS site: a WireGuard gateway instance in the site's VPC and the routes that point at it.

Order matters mostly through data: the Elastic IP exists before the instance (its address is in every
peer's config and firewall), the instance's user data holds the peers' addresses and keys, and the
route tables send every remote range to the instance's network interface. Two orderings are explicit:
a created subnet reaches the internet before the instance boots (cloud-init runs once), and the Elastic
IP and the routes move to an instance only after it reported itself ready (the readiness gate).
With `gateways: 2` (docs/ha.md 5) a second instance, a lease table and the agents' rights (wg_mesh.aws.ha) are added;
the agents, not Pulumi, then own the Elastic IP's association and the routes' target. The constructor is the list of
steps; the parts they use are the package's other modules (wg_mesh.aws lists them).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from wg_mesh import component
from wg_mesh.aws import firewall, fit, iam, images, machine
from wg_mesh.aws import ha as aws_ha
from wg_mesh.aws import live as aws_live
from wg_mesh.aws import network as aws_network
from wg_mesh.component import Directory
from wg_mesh.config import AwsSite, MeshConfig
from wg_mesh.gateway import readymark
from wg_mesh.plan import ha, topology
from wg_mesh.providers import aws_default_tags, given_provider

__all__ = ["GATEWAY_TYPE", "AwsGateway", "AwsGatewayArgs"]

GATEWAY_TYPE = "wg-mesh:aws:Gateway"


class AwsGatewayArgs(component.SiteComponentArgs[AwsSite]):
    """An AWS site's gateway component's inputs (wg_mesh.component.SiteComponentArgs)."""


@dataclass(frozen=True)
class _Build:
    """What every step of the constructor builds from."""

    name: str
    mesh: MeshConfig
    site: AwsSite
    network: aws_network.Network
    child: pulumi.ResourceOptions  # parent: the component; provider: the site's
    invoke: pulumi.InvokeOutputOptions  # the same, for lookups


@dataclass(frozen=True)
class _Ha:
    """gateways: 2 (docs/ha.md 5): the lease table's name, the agents' policy (one per gateway role) and (created
    networks) the EC2 endpoint's DNS name the agents call EC2 by."""

    table: str
    policy: pulumi.Output[str]
    ec2_endpoint: pulumi.Output[str] | None = None


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
        self.provider = given_provider(self, "aws") or self._own_provider(name, site)
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self._create_identity(name, mesh, site, args.directory, args.signing_key)
        network = aws_network.network(aws_network.owner(self, self.provider), name, site, child)
        invoke = pulumi.InvokeOutputOptions(parent=self, provider=self.provider)
        build = _Build(name, mesh, site, network, child, invoke)
        self._address(build)
        self._firewall(build, args.directory)
        image = self._image(build)
        self._live_stores(build)
        high_availability = self._high_availability(build)
        self._gateways(build, image, high_availability)
        self._associate_address(build, high_availability)
        self._routes(build, high_availability)
        self._register_site_outputs(
            security_group_id=self.security_group_id, network_interface_id=self.network_interface_id
        )

    def _own_provider(self, name: str, site: AwsSite) -> aws.Provider:
        """The site's own aws provider: its region, its credentials, wg-mesh's default tags."""
        return aws.Provider(
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

    def _address(self, b: _Build) -> None:
        """The Elastic IP: the gateway's public address, in every peer's config and firewall."""
        self.eip = aws.ec2.Eip(
            f"{b.name}-eip",
            domain="vpc",
            tags={"Name": f"wg-mesh-{b.site.name}"},
            opts=pulumi.ResourceOptions.merge(b.child, self.kept(b.mesh)),
        )
        self.public_ip = self.eip.public_ip

    def _firewall(self, b: _Build, directory: Directory) -> None:
        """The gateways' security group (wg_mesh.aws.firewall)."""
        self.security_group = firewall.security_group(b.name, b.mesh, b.site, directory, b.network.vpc_id, b.child)
        self.security_group_id = self.security_group.id

    def _image(self, b: _Build) -> images.BootImage:
        """The AMI the gateways boot (wg_mesh.aws.images); the newest is looked up on every run, as an output."""
        self.newest_ami = images.ubuntu_ami(b.site, "*", b.invoke)
        return images.boot_image(b.site, self.newest_ami, b.invoke)

    def _live_stores(self, b: _Build) -> None:
        """delivery: live: the key parameter and document secret, readable by this gateway's role only
        (wg_mesh.aws.live)."""
        self.stores = None
        if self.document is not None:
            self.stores = aws_live.create_stores(b.name, b.site, self.key.private_key, self.document, b.child)

    def _high_availability(self, b: _Build) -> _Ha | None:
        """gateways: 2 (docs/ha.md 5): the lease table, the DynamoDB and EC2 endpoints of a created network, each
        role's HA policy (wg_mesh.aws.ha). None for a single gateway."""
        self.lease_table = None
        if b.site.gateways <= 1:
            return None
        site, network = b.site, b.network
        names = ha.ha_names(pulumi.get_project(), pulumi.get_stack(), site.name)
        created = network.gateway_table is not None  # wg-mesh's own network: its tables carry our tags
        self.lease_table = aws_ha.lease_table(b.name, names.lease_table, b.child)
        policy = aws_ha.policy(
            site, names.lease_table, self.eip.allocation_id, network.route_table_ids, b.child, created
        )
        if network.gateway_table is None:
            return _Ha(names.lease_table, policy)
        aws_ha.dynamodb_endpoint(b.name, site, network.vpc_id, network.gateway_table, b.child)
        subnet_ids = [i for i in (network.subnet_id, network.standby_subnet_id) if i is not None]
        endpoint = aws_ha.ec2_endpoint(b.name, site, network.vpc_id, subnet_ids, b.child)
        return _Ha(names.lease_table, policy, aws_ha.endpoint_dns_name(endpoint))

    def _gateways(self, b: _Build, image: images.BootImage, high_availability: _Ha | None) -> None:
        """Gateway a in the gateway subnet, and with gateways: 2 gateway b in the standby subnet."""
        self.instances, self.private_ips = [], {}
        site = b.site
        subnets = [b.network.subnet_id, b.network.standby_subnet_id][: site.gateways]
        configured_zones = [None, None] if site.uses_existing_network else [site.zone, site.standby_zone]
        for letter, subnet_id, zone in zip(ha.LETTERS[: site.gateways], subnets, configured_zones, strict=False):
            self._gateway(b, letter, subnet_id, zone, image, high_availability)
        self.ami_in_use = self.instance.ami

    def _gateway(
        self,
        b: _Build,
        letter: str,
        subnet_id: pulumi.Input[str] | None,
        zone: str | None,
        image: images.BootImage,
        high_availability: _Ha | None,
    ) -> None:
        """One gateway: its type checked in its zone, its role, its user data, the machine, its readiness gate."""
        prefix = ha.child_name(b.name, letter)
        # The type must be offered in the subnet's zone, else nothing changes (wg_mesh.aws.fit).
        instance_type = fit.offered_type(b.site, subnet_id, zone, b.invoke)
        profile = self._profile(b, prefix, high_availability)
        user_data = self._user_data(b, letter, high_availability)
        first_boot = self._first_boot(b, letter)
        instance = machine.instance(
            prefix,
            b.site,
            instance_type,
            image,
            subnet_id,
            user_data,
            profile,
            self.security_group.id,
            first_boot,
            b.child,
            component.fixed_private_ip(b.mesh, b.site),
        )
        # The AMI the instance boots (unpinned: the one it keeps) must be of the type's architecture; the gate's
        # command waits for the check, so a mismatch fails the preview (wg_mesh.aws.fit).
        checked_image = fit.fitting_image(b.site, instance.ami, b.invoke)
        if high_availability is not None:
            aws_ha.tag_interface(prefix, b.site, instance, b.child)
        if letter == "a":
            self.instance, self.instance_profile, self.user_data = instance, profile, user_data
            # Traffic moves to a (new) gateway only once it is ready: wg0 up, forwarding on (README,
            # "Replacements").
            self.ready = machine.readiness_gate(prefix, b.site, instance, checked_image, b.child, self.switch_floor)
        else:
            self.standby_ready = machine.readiness_gate(
                prefix, b.site, instance, checked_image, b.child, self.switch_floor
            )
        self.instances.append(instance)
        self.private_ips[letter] = instance.private_ip

    def _profile(self, b: _Build, prefix: str, high_availability: _Ha | None) -> aws.iam.InstanceProfile:
        """The gateway's role and instance profile (wg_mesh.aws.iam), with the live stores' and HA's rights."""
        stores = self.stores
        return iam.gateway_profile(
            prefix,
            b.site.region,
            b.site.name,
            b.mesh.operator_access == "cloud",
            b.child,
            stores.policy if stores else None,
            high_availability.policy if high_availability else None,
            stores.key_policy if stores else None,
        )

    def _user_data(self, b: _Build, letter: str, high_availability: _Ha | None) -> pulumi.Output[str]:
        """The site's user data; gateways: 2: with the gateway's `ha` object in agent.json (wg_mesh.aws.ha)."""
        if high_availability is None:
            return self.user_data
        objects = aws_ha.ha_object(
            letter,
            b.site,
            high_availability.table,
            self.eip.allocation_id,
            b.network.route_table_ids,
            high_availability.ec2_endpoint,
        )
        return self._ha_user_data(b.mesh, b.site, objects, letter)

    def _first_boot(self, b: _Build, letter: str) -> list[pulumi.Resource]:
        """What must exist before a gateway boots (cloud-init runs once): the network's routes, the live stores, the
        lease table; gateway b is created (or replaced) only once a is ready: never both at once (docs/ha.md 9)."""
        first_boot: list[pulumi.Resource] = [*b.network.ready, *(self.stores.resources if self.stores else [])]
        first_boot += [self.lease_table] if self.lease_table is not None else []
        first_boot += [self.ready] if letter != "a" else []
        return first_boot

    def _after_ready(self, b: _Build) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions.merge(b.child, pulumi.ResourceOptions(depends_on=[self.ready]))

    def _associate_address(self, b: _Build, high_availability: _Ha | None) -> None:
        """The Elastic IP moves to a (new) gateway a once it is ready. HA: no EipAssociation, the active gateway's
        agent associates the address (its id changes on every move, and terraform-provider-aws's EipAssociation read
        drops a missing id from state and re-creates it: docs/ha.md 5.3)."""
        if high_availability is not None:
            return
        aws.ec2.EipAssociation(
            f"{b.name}-eip-assoc",
            allocation_id=self.eip.allocation_id,
            instance_id=self.instance.id,
            # Create before delete: the new association moves the address from the old instance in one call
            # (AssociateAddress in a VPC reassociates, with a new association id), and deleting the old one at the end
            # of `up` is DisassociateAddress of an id that no longer exists: InvalidAssociationID.NotFound, which the
            # provider ignores (resourceEIPAssociationDelete). Delete-before-create left the address on nothing between
            # the two calls (`wg-mesh lab --before` found it: docs/concepts/replacements.md).
            opts=self._after_ready(b),
        )

    def _routes(self, b: _Build, high_availability: _Ha | None) -> None:
        """Every remote range, in every route table, through gateway a's ENI once it is ready. HA: routes start at
        gateway a; the active's agent ReplaceRoutes them, and Pulumi must not move them back: the provider reads a
        route's target by table and destination (docs/ha.md 5.3)."""
        after_ready = self._after_ready(b)
        if high_availability is not None:
            after_ready = pulumi.ResourceOptions.merge(
                after_ready, pulumi.ResourceOptions(ignore_changes=["networkInterfaceId"])
            )
        eni = self.network_interface_id = self.instance.primary_network_interface_id
        self.routes = [
            aws.ec2.Route(
                f"{b.name}-route-{i}-{component.cidr_slug(cidr)}",
                route_table_id=table_id,
                destination_cidr_block=str(cidr),
                network_interface_id=eni,
                opts=after_ready,
            )
            for i, table_id in enumerate(b.network.route_table_ids)
            for cidr in topology.remote_ranges(b.mesh, b.site.name)
        ]
