"""An AWS site's network: the user's VPC, or a new one with a public gateway subnet (and, for `gateways: 2`, a second
gateway subnet in another zone: docs/ha.md 5.1). Part of the AwsGateway component (wg_mesh.aws)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from wg_mesh.aws import facts
from wg_mesh.component import given
from wg_mesh.config import AwsSite, zones
from wg_mesh.plan import ha, topology

ANYWHERE = "0.0.0.0/0"


@dataclass(frozen=True)
class _Owner:
    """The component the network belongs to: the parent of its invokes, and its provider."""

    parent: pulumi.Resource
    provider: pulumi.ProviderResource


def owner(parent: pulumi.Resource, provider: pulumi.ProviderResource) -> _Owner:
    return _Owner(parent, provider)


@dataclass(frozen=True)
class Network:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    route_table_ids: list[pulumi.Input[str]]
    standby_subnet_id: pulumi.Input[str] | None = None  # gateways: 2: gateway b's subnet
    gateway_table: pulumi.Input[str] | None = None  # created networks: the gateway subnets' route table
    # What must exist before the gateway boots: cloud-init runs once and installs packages from the
    # internet, so a created subnet needs its default route and route table association first.
    ready: list[pulumi.Resource] = field(default_factory=list)


def _zone(owner: _Owner, site: AwsSite) -> dict[str, pulumi.Input[str] | None]:
    """The gateway subnet's zone: the configured zone name or zone id, else one that offers the instance type (not a
    standby_zone written as a zone name: the HA pair's EC2 endpoint needs the two apart)."""
    if site.zone is not None:
        return {"availability_zone": site.zone_name, "availability_zone_id": site.zone_id}
    offerings = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone",
        filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[site.instance_type])],
        region=site.region,
        opts=pulumi.InvokeOutputOptions(parent=owner.parent, provider=owner.provider),
    )
    standby = site.standby_zone if site.gateways > 1 and site.standby_zone is not None else None
    avoid = standby if standby is not None and zones.aws_zone_kind(standby, site.region) == "name" else None
    choose = functools.partial(facts.choose_zone, site.instance_type, site.region, avoid=avoid)
    return {"availability_zone": offerings.locations.apply(choose)}


def _standby_zone(owner: _Owner, site: AwsSite) -> dict[str, pulumi.Input[str] | None]:
    """Gateway b's subnet zone: `standby_zone`, else another zone that offers the instance type (by name, or by
    zone ID when `zone` is one), never the zone of gateway a unless written (docs/ha.md 5.1)."""
    if site.standby_zone is not None:
        kind = zones.aws_zone_kind(site.standby_zone, site.region)
        key = "availability_zone_id" if kind == "id" else "availability_zone"
        return {key: site.standby_zone}
    by_id = site.zone_id is not None
    offerings = _offerings(owner, site, "availability-zone-id" if by_id else "availability-zone")
    if site.zone is not None:
        first: pulumi.Input[str] = site.zone
    else:
        first = offerings.apply(functools.partial(facts.choose_zone, site.instance_type, site.region))
    values = pulumi.Output.all(first=first, offered=offerings)
    other = values.apply(lambda v: ha.other_zone(site.instance_type, site.region, v["first"], v["offered"]))
    return {"availability_zone_id" if by_id else "availability_zone": other}


def standby_ignores(site: AwsSite) -> list[str] | None:
    """The standby subnet's ignore_changes: a zone chosen for it (no `standby_zone`) is kept once the subnet exists,
    by name or by ID, whether `zone` is written or not; a later run's lookups (a type offered in a new zone, or no
    longer in the chosen one) would otherwise move it, and with it gateway b (issue 32). Pulumi gives a resource the
    recorded value of an ignored input, also when it replaces it (Pulumi docs, "ignoreChanges"). A written
    `standby_zone` is the user's to change: not ignored."""
    return ["availabilityZone", "availabilityZoneId"] if site.standby_zone is None else None


def _offerings(owner: _Owner, site: AwsSite, location_type: str) -> pulumi.Output[list[str]]:
    return aws.ec2.get_instance_type_offerings_output(
        location_type=location_type,
        filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[site.instance_type])],
        region=site.region,
        opts=pulumi.InvokeOutputOptions(parent=owner.parent, provider=owner.provider),
    ).locations


def network(owner: _Owner, name: str, site: AwsSite, child: pulumi.ResourceOptions) -> Network:
    """The site's existing VPC, or a new one with a public gateway subnet."""
    if site.vpc_id is not None and site.subnet_id is not None and site.route_table_ids is not None:
        tables = [given(table) for table in site.route_table_ids]
        standby_subnet = None if site.standby_subnet_id is None else given(site.standby_subnet_id)
        return Network(given(site.vpc_id), given(site.subnet_id), tables, standby_subnet)

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
    zone = _zone(owner, site)
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
        assert second is not None  # wg_mesh.rules.ha_site_problems: cidrs[0] has room for it
        standby_zone = _standby_zone(owner, site)
        standby = aws.ec2.Subnet(
            f"{ha.child_name(name, 'b')}-subnet",
            vpc_id=vpc.id,
            cidr_block=str(second),
            availability_zone=standby_zone.get("availability_zone"),
            availability_zone_id=standby_zone.get("availability_zone_id"),
            tags={"Name": f"wg-mesh-{site.name}-gateway-b"},
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=standby_ignores(site))),
        )
        ready.append(
            aws.ec2.RouteTableAssociation(
                f"{ha.child_name(name, 'b')}-rt-assoc", subnet_id=standby.id, route_table_id=table.id, opts=child
            )
        )
        standby_id = standby.id
    return Network(vpc.id, subnet.id, [table.id], standby_id, table.id, ready=ready)
