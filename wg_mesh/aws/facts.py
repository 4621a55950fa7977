"""Plain facts about AWS that the AwsGateway component decides on: partitions, images, zones.

Pure functions of configured values (no Pulumi), so that every decision is a unit test.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from wg_mesh.config.awsnames import partition as partition  # re-exported (the config model's)

# Canonical publishes Ubuntu AMIs under one account per partition, and only in these three
# (Ubuntu public-images docs, "Find Ubuntu images on AWS" -> "Ownership verification":
# 099720109477 default, 513442679011 GovCloud, 837727238323 China).
CANONICAL_OWNERS = {"aws": "099720109477", "aws-us-gov": "513442679011", "aws-cn": "837727238323"}

# Graviton families have a 'g' right after the generation digit: t4g, c7g, m7gd, c6gn, is4gen, g5g, hpc7g;
# the first Graviton family, a1, has none (EC2 instance types: "A1 ... AWS Graviton Processors").
_GRAVITON_FAMILY = re.compile(r"[a-z]+\d+g[a-z-]*|a1")

# Canonical's AMI names end in the image's serial (YYYYMMDD, sometimes .N); the same serial is published in
# every region, so a serial pins one image build across regions.
UBUNTU_AMI_NAME = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-{arch}-server-{serial}"


def canonical_owner(region: str) -> str:
    """The account that publishes Ubuntu's AMIs in the region's partition."""
    return CANONICAL_OWNERS[partition(region)]


def ami_architecture(instance_type: str) -> str:
    """`arm64` for Graviton instance types, else `amd64` (Ubuntu's names in the AMI name)."""
    family = instance_type.split(".", 1)[0]
    return "arm64" if _GRAVITON_FAMILY.fullmatch(family) else "amd64"


def choose_zone(instance_type: str, region: str, offered_in: Sequence[str], avoid: str | None = None) -> str:
    """The first zone, by name, that offers the instance type: stable from run to run. `avoid`: a written standby_zone
    (gateways: 2), which the pair's EC2 endpoint needs apart from gateway a's (wg_mesh.config.rules._one_zone_pair)."""
    zones = sorted(zone for zone in offered_in if zone != avoid)
    if not zones and offered_in:
        raise ValueError(
            f"instance type {instance_type} is offered in {region} only in {avoid}, the standby_zone: gateway a needs "
            "another zone (the pair's EC2 endpoint takes one subnet per zone); choose another instance type"
        )
    if not zones:
        raise ValueError(
            f"instance type {instance_type} is not offered in any availability zone of {region} "
            "(aws ec2 describe-instance-type-offerings --location-type availability-zone): choose another one"
        )
    return zones[0]


# DescribeImages' `Architecture` for Ubuntu's architecture names (EC2 API reference, Image: "i386 | x86_64 | arm64 |
# x86_64_mac | arm64_mac").
EC2_ARCHITECTURE = {"amd64": "x86_64", "arm64": "arm64"}


def check_offered(instance_type: str, zone: str, offered: Sequence[str]) -> str:
    """The instance type, if DescribeInstanceTypeOfferings lists it in the gateway subnet's zone; else ValueError.

    EC2 launches (RunInstances, and a stop/start to a new type) only types offered in the subnet's zone, and the subnet
    does not move: a type missing there fails `up` part-way (EC2 API reference, DescribeInstanceTypeOfferings:
    "Lists the instance types that are offered for the specified location")."""
    if zone not in offered:
        raise ValueError(
            f"instance type {instance_type} is not offered in {zone}, the zone of the gateway's subnet "
            f"(aws ec2 describe-instance-type-offerings --location-type availability-zone --filters "
            f"Name=location,Values={zone}): choose a type offered there; nothing was changed"
        )
    return instance_type


def instance_suffix(instance_type: str, fixed_address: bool) -> str:
    """The end of a gateway instance's logical name: `-instance` (today's, for x86_64), `-instance-arm64` for Graviton.

    Unpinned, an instance keeps the AMI of its creation (`ignore_changes` on `ami`, so a new Ubuntu release rolls no
    gateway), and Pulumi applies that to a replacement too: the engine puts the recorded input in place of the ignored
    one (pulumi/pulumi#2657: "replaces the values of input properties in the goal state with old inputs"), and uses the
    program's value only "when there is no prior state" (Pulumi docs, "Resource option: ignoreChanges"). So the
    architecture is in the name: a move across x86/Graviton declares a resource with no prior state, which gets the
    newest AMI of its own architecture, and the old name is no longer declared, so Pulumi deletes it at the end of
    `up`, after creating the new one and everything that follows it (the gate, the routes: pulumi/pulumi#9979, "pulumi
    first creates all new resources and schedules the deletion of resources at the very end"). Within one
    architecture the name, and so the kept AMI, stays.

    A gateway with a fixed private address keeps one name: its address is the old instance's until that is gone
    (`delete_before_replace`, which a new name cannot have), so old and new cannot run side by side; its move across
    architectures is a replacement under one name and needs `image` (check_ami_architecture says so).

    Unique by construction: the suffix ends the name, and every other child of a site ends in a fixed word or a CIDR
    slug, none of them `arm64` (wg_mesh.names)."""
    if fixed_address or ami_architecture(instance_type) == "amd64":
        return "-instance"
    return f"-instance-{ami_architecture(instance_type)}"


def check_ami_architecture(instance_type: str, ami: str, architecture: str, pinned: bool) -> str:
    """The AMI, if built for the instance type's architecture; else ValueError naming the way out.

    Unpinned, the instance keeps the AMI of its creation, replacement or not (instance_suffix): only a gateway with a
    fixed private address, whose name does not follow its architecture, can keep an AMI of the other architecture, so
    its move across architectures needs a pin: an Ubuntu serial names the build of either architecture."""
    wanted = EC2_ARCHITECTURE[ami_architecture(instance_type)]
    if architecture == wanted:
        return ami
    why = (
        "the pinned image"
        if pinned
        else "the image this gateway keeps (the newest when it was created; a gateway with a fixed private address "
        "is replaced under its one name)"
    )
    found = architecture or "of no known architecture"
    raise ValueError(
        f"instance type {instance_type} runs {wanted}, but {why} {ami} is {found}: "
        "set `image` to an Ubuntu serial such as 20250804 (its build for the type's architecture is looked up) or to "
        f"an {wanted} AMI id; the type and the image then change in one replacement; nothing was changed"
    )


def ubuntu_ami_name(instance_type: str, serial: str = "*") -> str:
    """The name filter for Ubuntu 24.04 server AMIs of the instance type's architecture: one serial, or all."""
    return UBUNTU_AMI_NAME.format(arch=ami_architecture(instance_type), serial=serial)
