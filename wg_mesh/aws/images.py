"""The AMI an AWS gateway boots: Canonical's Ubuntu 24.04 for the site's architecture and partition, the newest one
when the instance is created and then kept, or the one `image` pins. Part of the AwsGateway component
(wg_mesh.aws.gateway); the architecture check is wg_mesh.aws.fit."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from wg_mesh.aws import facts
from wg_mesh.config import AwsSite


@dataclass(frozen=True)
class BootImage:
    ami: pulumi.Input[str]
    keep: pulumi.ResourceOptions  # the instance's options that keep (or not) the AMI it was created with


def ubuntu_ami(site: AwsSite, serial: str, opts: pulumi.InvokeOutputOptions) -> pulumi.Output[str]:
    """Canonical's Ubuntu 24.04 AMI for the site's architecture and partition: one serial, or the newest."""
    return aws.ec2.get_ami_output(
        most_recent=True,
        owners=[facts.canonical_owner(site.region)],
        filters=[
            aws.ec2.GetAmiFilterArgs(name="name", values=[facts.ubuntu_ami_name(site.instance_type, serial)]),
            aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
        ],
        opts=opts,
    ).id


def boot_image(site: AwsSite, newest: pulumi.Output[str], opts: pulumi.InvokeOutputOptions) -> BootImage:
    """`newest`: ubuntu_ami(site, "*"). Unpinned, the newest image when the instance is created, then kept: a new
    Ubuntu release must not replace every gateway. Rolling is deliberate: set `image` (README, "Rolling the image").
    Kept within one architecture: a move to another is a new instance name, with no kept AMI (facts.instance_suffix)."""
    if site.image is None:
        return BootImage(newest, pulumi.ResourceOptions(ignore_changes=["ami"]))
    ami = site.image if site.image.startswith("ami-") else ubuntu_ami(site, site.image, opts)
    return BootImage(ami, pulumi.ResourceOptions())
