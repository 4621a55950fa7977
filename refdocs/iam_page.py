"""docs/reference/iam.md: what a gateway may do in its cloud, rendered by the program's own policy functions from
plain example values (wg_mesh.plan.awsiam, wg_mesh.plan.live, wg_mesh.gcp.ha, wg_mesh.gcp.live): no mock run."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from refdocs import md
from wg_mesh.gcp import ha as gcp_ha
from wg_mesh.gcp import live as gcp_live
from wg_mesh.plan import awsiam, ha, live

SOURCE = "the policy functions of wg_mesh/plan/awsiam.py, wg_mesh/plan/live.py and wg_mesh/gcp/ (example values)"
# The example: one project, stack and site per cloud. Values that only the clouds know are placeholders.
PROJECT, STACK = "wg-mesh", "prod"
REGION, ACCOUNT, AWS_SITE = "us-east-1", "123456789012", "aws-use1"
GCP_PROJECT, GCP_SITE, GCP_ZONES = "my-project", "gcp-use4", ("us-east4-a", "us-east4-b")
ALLOCATION, TABLES = "eipalloc-0123456789abcdef0", ["rtb-0123456789abcdef0"]
KMS_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SECRET_SUFFIX = "-AbCdEf"  # Secrets Manager appends six random characters to a secret's ARN
GCP_ADDRESS = f"{GCP_SITE}-address-1a2b3c4"  # the static address's name: Pulumi appends seven random hex digits


def _first_paragraph(function: Callable[..., Any]) -> str:
    return " ".join((inspect.getdoc(function) or "").split("\n\n")[0].split())


def _policy(title: str, when: str, function: Callable[..., Any], document: str) -> list[str]:
    return [
        f"### {title}",
        "",
        f"**When:** {when}",
        "",
        f"{_first_paragraph(function)} Rendered by `{function.__module__}.{function.__name__}`.".lstrip(),
        "",
        *md.fenced(json.dumps(json.loads(document), indent=2, sort_keys=True), "json"),
    ]


def _aws() -> list[str]:
    parameter = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter" + live.aws_private_key_parameter(PROJECT, STACK, AWS_SITE)
    secret = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:"
    peers = secret + live.aws_document_secret(PROJECT, STACK, AWS_SITE) + SECRET_SUFFIX
    bundle = secret + live.aws_bundle_secret(PROJECT, STACK, AWS_SITE) + SECRET_SUFFIX
    table = ha.ha_names(PROJECT, STACK, AWS_SITE).lease_table
    lines = [
        "## AWS",
        "",
        "Each gateway has its own IAM role (`<site>-role`, trusted by EC2) and instance profile, with inline policies",
        "for what its configuration needs, all scoped to the site's own resources.",
        "",
        *_policy("Trust policy", "always (the role's `assume_role_policy`).", awsiam.trust_policy,
                 awsiam.trust_policy("ec2.amazonaws.com")),
        *_policy("Mark itself ready (`<site>-ready`)", "always.", awsiam.ready_policy,
                 awsiam.ready_policy(REGION, ACCOUNT, AWS_SITE, PROJECT, STACK)),
        *_policy("Read its own key and document (`<site>-stores`)", "`delivery: live`.", live.store_policy,
                 live.store_policy(parameter, peers, bundle)),
        *_policy("Decrypt its key with the site's KMS key (`<site>-key`)", "`delivery: live` with `ssm_kms_key_arn`.",
                 awsiam.kms_policy, awsiam.kms_policy(REGION, KMS_KEY, parameter)),
        *_policy("Move the site's address and routes (`<site>-ha`)", "`gateways: 2`, on both gateways.",
                 awsiam.ha_policy, awsiam.ha_policy(REGION, ACCOUNT, AWS_SITE, PROJECT, STACK, ALLOCATION, TABLES,
                                                    table, tables_tagged=True)),
        *_policy("No parameter at all (`<site>-no-parameters`)", "`operator_access: cloud` with `delivery: user-data`.",
                 awsiam.no_parameter_policy, awsiam.no_parameter_policy()),
        "### Session Manager (`<site>-ssm`)",
        "",
        "**When:** `operator_access: cloud`.",
        "",
        f"The AWS managed policy {md.code(awsiam.managed_policy_arn(REGION, awsiam.SSM_CORE_POLICY))} is attached, so",
        "operators reach the gateway through Session Manager; the deny of every other parameter above (or in the",
        "store policy) keeps it from reading other gateways' keys.",
        "",
    ]  # fmt: skip
    return lines


def _gcp() -> list[str]:
    scope = live.scope(PROJECT, STACK)
    account = live.gcp_service_account_id(PROJECT, STACK, GCP_SITE)
    prefixes = [
        gcp_ha.instance_prefix(GCP_PROJECT, zone, ha.vm_name(ha.child_name(GCP_SITE, letter), scope))
        for zone, letter in zip(GCP_ZONES, ha.LETTERS, strict=True)
    ]
    lines = [
        "## GCP",
        "",
        "### The gateway's service account and its key",
        "",
        "**When:** `delivery: live` (with `delivery: user-data` the VM runs without a service account).",
        "",
        *md.table(
            ("what", "rendered"),
            [
                ["service account", md.code(f"{account}@{GCP_PROJECT}.iam.gserviceaccount.com")],
                ["its key's secret", md.code(live.gcp_key_secret_id(PROJECT, STACK, GCP_SITE))],
                ["role on that one secret", md.code(gcp_live.ACCESSOR_ROLE)],
                ["the VM's access scopes", ", ".join(md.code(s) for s in gcp_live.SCOPES)],
            ],
        ),
        "With `gateways: 2` the standby VM has a service account of its own with the same role on the same secret.",
        "",
        "### The HA agents' custom role",
        "",
        "**When:** `gateways: 2`: one custom role per site, bound at the project to both gateways' service accounts",
        "with an IAM Condition.",
        "",
        *md.table(
            ("what", "rendered"),
            [
                ["role id", md.code(gcp_ha.role_id(scope, GCP_SITE, "x" * gcp_ha.ROLE_SUFFIX_CHARS))],
                ["permissions", ", ".join(md.code(p) for p in gcp_ha.AGENT_PERMISSIONS)],
            ],
        ),
        _first_paragraph(gcp_ha.condition_expression) + " (`wg_mesh.gcp.ha.condition_expression`):",
        "",
        *md.fenced(gcp_ha.condition_expression(prefixes, GCP_ADDRESS), "text"),
    ]
    return lines


def render() -> str:
    lines = md.header("IAM policies", SOURCE)
    lines += [
        "What a gateway may do with its own cloud credentials, as the program renders it. The example: Pulumi project",
        f"`{PROJECT}`, stack `{STACK}`, AWS site `{AWS_SITE}` in `{REGION}` (account `{ACCOUNT}`), GCP site",
        f"`{GCP_SITE}` in project `{GCP_PROJECT}`; ids the clouds choose are placeholders.",
        "",
        *_aws(),
        *_gcp(),
    ]
    return md.page(lines)
