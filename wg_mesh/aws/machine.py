"""One AWS gateway machine and its readiness gate. Part of the AwsGateway component (wg_mesh.aws.gateway): both
gateways of an HA site are alike but for the subnet and the `ha` object's letter."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from wg_mesh.aws import facts
from wg_mesh.aws.images import BootImage
from wg_mesh.config import AwsSite
from wg_mesh.plan import userdata
from wg_mesh.tools import localcmd
from wg_mesh.tools.gatepoll import hold_words

GATE_MODULE = "wg_mesh.readygate"
READY_TIMEOUT_S = 900  # a first boot installs packages; apt mirrors can be slow


def gate_command(*args: str) -> str:
    """`python -m wg_mesh.readygate ARGS...` for a gate's `create` (and, with `--update`, its `update`): the same text
    on every machine, the interpreter found where it runs (wg_mesh.tools.localcmd.python_module)."""
    return localcmd.python_module(GATE_MODULE, *args)


def instance(
    prefix: str,
    site: AwsSite,
    instance_type: pulumi.Input[str],
    image: BootImage,
    subnet_id: pulumi.Input[str] | None,
    user_data: pulumi.Output[str],
    profile: aws.iam.InstanceProfile,
    security_group_id: pulumi.Input[str],
    first_boot: list[pulumi.Resource],
    child: pulumi.ResourceOptions,
    private_ip: str | None = None,
) -> aws.ec2.Instance:
    """One gateway machine; both of an HA site are alike but for the subnet and the `ha` object's letter."""
    return aws.ec2.Instance(
        # x86_64 keeps today's name; another architecture has its own, so a move across them is a new instance with
        # the newest AMI of its architecture, not the kept one (facts.instance_suffix).
        prefix + facts.instance_suffix(site.instance_type, private_ip is not None),
        iam_instance_profile=profile.name,
        ami=image.ami,
        instance_type=instance_type,
        subnet_id=subnet_id,
        private_ip=private_ip,  # fixed on a private path (docs/underlay.md): the address peers there reach
        vpc_security_group_ids=[security_group_id],
        # A public address from the first boot: cloud-init installs wireguard-tools from the Ubuntu
        # archive before the Elastic IP association (which needs the instance) can exist.
        associate_public_ip_address=True,
        source_dest_check=False,  # it forwards packets that are neither from nor to itself
        metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
            http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
        ),
        root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(encrypted=True, volume_type="gp3"),
        # gzip'd (deterministically) to stay under EC2's 16 KB: see wg_mesh/plan/userdata.py
        user_data_base64=user_data.apply(userdata.aws_user_data_base64),
        # cloud-init runs once: a new config needs a new instance. delivery: live: the user data holds no peer and
        # no key, so a mesh change leaves it (and the instance) as it is.
        user_data_replace_on_change=True,
        tags={"Name": f"wg-mesh-{site.name}"},
        opts=pulumi.ResourceOptions.merge(
            child,
            pulumi.ResourceOptions.merge(
                image.keep,
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


def readiness_gate(
    name: str,
    site: AwsSite,
    instance: aws.ec2.Instance,
    image: pulumi.Output[str],
    child: pulumi.ResourceOptions,
    not_before: pulumi.Output[int | None] | None = None,
) -> command.local.Command:
    """Runs `python -m wg_mesh.readygate` on the machine running `pulumi up`, for every new instance (its id is the
    trigger). `image`: the checked AMI (wg_mesh.aws.fit.fitting_image), so that a mismatch fails the preview before the
    gate runs; `not_before` (delivery: live): a new instance takes traffic no earlier (wg_mesh.plan.live.switch_floor:
    `create` holds, `--update` does not). Any other input change (credentials, a new wg-mesh's command text, a
    rotation's moment) runs the gate's `--update`, which re-checks nothing: the instance passed when it was created."""
    fixed = ["--region", site.region]
    fixed += ["--profile", site.profile] if site.profile else []
    fixed += ["--role-arn", site.assume_role_arn] if site.assume_role_arn else []
    fixed += ["--timeout", str(READY_TIMEOUT_S)]
    values = pulumi.Output.all(iid=instance.id, image=image, not_before=not_before)
    words = values.apply(lambda v: [*fixed, "--instance-id", v["iid"]])
    return localcmd.local_command(
        f"{name}-ready",
        create=values.apply(lambda v: gate_command(*fixed, "--instance-id", v["iid"], *hold_words(v["not_before"]))),
        update=words.apply(lambda w: gate_command(*w, "--update")),
        triggers=[instance.id],
        opts=child,
    )
