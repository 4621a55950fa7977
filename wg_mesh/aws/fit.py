"""Does an AWS gateway's instance type fit: offered in its subnet's zone, and of its AMI's architecture.

An `instance_type` change replaces the gateway (wg_mesh.aws: `replace_on_changes`, through the readiness gate), and
two things can make the new instance fail where the old one ran: the type is not offered in the subnet's zone (a
subnet never moves; an unset `zone` was chosen for the old type and is kept), or the AMI is of the other architecture
(a pinned `image` of the wrong one; unpinned, only a gateway with a fixed private address can keep an AMI across a move
to or from Graviton: the others' instance name carries the architecture, facts.instance_suffix). Both are looked
up while the program runs, by invokes, so `pulumi preview` (and the preview `pulumi up` starts with) fails with one
line before anything changes. Part of the AwsGateway component.
"""

from __future__ import annotations

import functools

import pulumi
import pulumi_aws as aws

from wg_mesh.aws import facts
from wg_mesh.config import AwsSite, zones


def offered_type(
    site: AwsSite, subnet_id: pulumi.Input[str] | None, zone: str | None, opts: pulumi.InvokeOutputOptions
) -> pulumi.Output[str]:
    """The site's instance type once DescribeInstanceTypeOfferings lists it in the subnet's zone (the instance's
    `instance_type`, so a type offered elsewhere never reaches the instance). `zone`: the subnet's zone when the
    config names it (a name or a zone ID), else the subnet is looked up (DescribeSubnets)."""
    if zone is not None:
        kind = zones.aws_zone_kind(zone, site.region)
        where: pulumi.Input[str] = zone
    else:
        kind = "name"
        where = aws.ec2.get_subnet_output(id=subnet_id, region=site.region, opts=opts).availability_zone
    offerings = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone-id" if kind == "id" else "availability-zone",
        filters=pulumi.Output.from_input(where).apply(
            lambda zone: [
                aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[site.instance_type]),
                aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="location", values=[zone]),
            ]
        ),
        region=site.region,
        opts=opts,
    )
    found = pulumi.Output.all(zone=where, offered=offerings.locations)
    return found.apply(lambda v: facts.check_offered(site.instance_type, v["zone"], v["offered"]))


def fitting_image(site: AwsSite, ami: pulumi.Input[str], opts: pulumi.InvokeOutputOptions) -> pulumi.Output[str]:
    """The AMI the instance boots (its `ami` output: unpinned, the one it keeps), once DescribeImages says it is built
    for the instance type's architecture."""
    image = aws.ec2.get_ami_output(
        filters=pulumi.Output.from_input(ami).apply(lambda i: [aws.ec2.GetAmiFilterArgs(name="image-id", values=[i])]),
        region=site.region,
        opts=opts,
    )
    pinned = site.image is not None
    check = functools.partial(facts.check_ami_architecture, site.instance_type, pinned=pinned)
    return pulumi.Output.all(ami=ami, arch=image.architecture).apply(lambda v: check(v["ami"], v["arch"]))
