"""An AWS gateway's instance profile: what the instance itself may do with its role's credentials.

Always: mark itself ready (one tag, `wg-mesh:ready`, on instances of its own account, project, stack and site,
from an instance's credentials only) - the readiness gate that holds the Elastic IP and the routes until then.
With `delivery: live`: read its own private key parameter and peer document secret (wg_mesh.aws.live).
With `operator_access: cloud`: the AWS managed policy AmazonSSMManagedInstanceCore, so operators reach the
gateway through Systems Manager Session Manager (no SSH port, no key pair), and in every delivery mode a deny of every
other parameter's value (that policy allows ssm:GetParameter(s) on every parameter: `no_other_parameter`).
With `ssm_kms_key_arn` (delivery: live): kms:Decrypt on exactly that key, through SSM, for exactly its own parameter.
The policy documents themselves are wg_mesh.plan.awsiam's (pure).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from wg_mesh.plan.awsiam import SSM_CORE_POLICY, managed_policy_arn, no_parameter_policy, ready_policy, trust_policy


def gateway_profile(
    name: str,
    region: str,
    site_name: str,
    operator_access: bool,
    opts: pulumi.ResourceOptions,
    store_policy: pulumi.Input[str] | None = None,
    ha_policy: pulumi.Input[str] | None = None,
    key_policy: pulumi.Input[str] | None = None,
) -> aws.iam.InstanceProfile:
    """The role, its policies and the instance profile of one gateway; children of `opts.parent`.

    store_policy (delivery: live): read access to the gateway's own key parameter and document secret
    (wg_mesh.plan.live.store_policy, which denies every other parameter). ha_policy (gateways: 2): awsiam.ha_policy,
    for this gateway's agent. key_policy (ssm_kms_key_arn): awsiam.kms_policy."""
    invoke = pulumi.InvokeOutputOptions(parent=opts.parent, provider=opts.provider)
    principal = aws.get_service_principal_output(service_name="ec2", region=region, opts=invoke).name
    account = aws.get_caller_identity_output(opts=invoke).account_id
    role = aws.iam.Role(
        f"{name}-role",
        description=f"wg-mesh gateway {site_name}",
        assume_role_policy=principal.apply(trust_policy),
        opts=opts,
    )
    policies: list[pulumi.Resource] = [
        aws.iam.RolePolicy(
            f"{name}-ready",
            role=role.id,
            policy=account.apply(
                lambda account_id: ready_policy(region, account_id, site_name, pulumi.get_project(), pulumi.get_stack())
            ),
            opts=opts,
        )
    ]
    if store_policy is not None:
        policies.append(aws.iam.RolePolicy(f"{name}-stores", role=role.id, policy=store_policy, opts=opts))
    if ha_policy is not None:
        policies.append(aws.iam.RolePolicy(f"{name}-ha", role=role.id, policy=ha_policy, opts=opts))
    if key_policy is not None:
        policies.append(aws.iam.RolePolicy(f"{name}-key", role=role.id, policy=key_policy, opts=opts))
    if operator_access and store_policy is None:
        # The managed policy below would let this role read every parameter of the region: deny them all (live: the
        # store policy denies all but its own).
        policies.append(
            aws.iam.RolePolicy(f"{name}-no-parameters", role=role.id, policy=no_parameter_policy(), opts=opts)
        )
    if operator_access:
        policies.append(
            aws.iam.RolePolicyAttachment(
                f"{name}-ssm",
                role=role.name,
                policy_arn=managed_policy_arn(region, SSM_CORE_POLICY),
                opts=opts,
            )
        )
    # The instance (which depends on the profile) boots with its permissions already in place.
    return aws.iam.InstanceProfile(
        f"{name}-profile",
        role=role.name,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=policies)),
    )
