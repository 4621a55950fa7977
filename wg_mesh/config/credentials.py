"""A site's credentials as the clouds spell them: IAM role and KMS key ARNs, service account emails, and the rules
between them. Part of the config model (wg_mesh.config.sites, wg_mesh.config.rules); pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from wg_mesh.config.messages import quote

# A named profile is a section name of ~/.aws/config: printable ASCII, no control character (a newline would end the
# section's line), no space at either end (the files' parser strips it: another profile)
_PROFILE = re.compile(r"[!-~]([ -~]{0,126}[!-~])?")
_ROLE_ARN = re.compile(r"^arn:(aws|aws-us-gov|aws-cn):iam::(\d{12}):role/[\w+=,.@/-]{1,512}$")
# A KMS key by ARN (IAM policies name keys by ARN, never by alias): a key id is a UUID, a multi-Region key's is
# mrk- and 32 hexadecimal digits (AWS KMS developer guide, "Key identifiers (KeyId)").
_KMS_KEY_ARN = re.compile(
    r"^arn:(aws|aws-us-gov|aws-cn):kms:([a-z0-9-]+):\d{12}:key/"
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})$"
)
# GCP service accounts (https://cloud.google.com/iam/docs/service-account-types): user-managed ones are
# NAME@PROJECT_ID.iam.gserviceaccount.com (NAME 6-30 characters); the Compute Engine default service account is
# PROJECT_NUMBER-compute@developer.gserviceaccount.com and App Engine's PROJECT_ID@appspot.gserviceaccount.com, both
# as usable as a firewall rule's target (workload_service_accounts) or for impersonation as any other.
SERVICE_ACCOUNT = re.compile(
    r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.:-]+\.iam\.gserviceaccount\.com$"
    r"|^\d{1,20}-compute@developer\.gserviceaccount\.com$"
    r"|^[a-z][a-z0-9-]{4,28}[a-z0-9]@appspot\.gserviceaccount\.com$"
)
SERVICE_ACCOUNT_FORMS = (
    "a service account email (NAME@PROJECT.iam.gserviceaccount.com, PROJECT_NUMBER-compute@developer."
    "gserviceaccount.com or PROJECT@appspot.gserviceaccount.com)"
)


def kms_key_arn(arn: str) -> str:
    if not _KMS_KEY_ARN.fullmatch(arn):
        raise ValueError(
            f"{quote(arn)} is not a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/KEY-ID; an alias cannot be named in "
            "the gateway's IAM policy)"
        )
    return arn


def role_arn(arn: str) -> str:
    if not _ROLE_ARN.fullmatch(arn):
        raise ValueError(f"{quote(arn)} is not an IAM role ARN (arn:aws:iam::123456789012:role/NAME)")
    return arn


def account_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """`account_id` is the provider's allowed_account_ids: the account the site's credentials must resolve to. With
    `assume_role_arn` that is the role's own account ("allowed_account_ids - List of allowed AWS account IDs to
    prevent you from mistakenly using an incorrect one": terraform-provider-aws, provider arguments), so a role of
    another account makes every `pulumi up` of the site fail at its first call."""
    account, arn = site.get("account_id"), site.get("assume_role_arn")
    if site.get("cloud") != "aws" or not isinstance(account, str) or not isinstance(arn, str):
        return []
    match = _ROLE_ARN.fullmatch(arn)
    if match is None or match.group(2) == account:
        return []
    return [
        f"sites[{i}].account_id: {account} is not the account of assume_role_arn ({match.group(2)}): the provider "
        "refuses credentials of any other account (allowed_account_ids)"
    ]


def profile(name: str) -> str:
    """A site's `profile`: an AWS named profile as ~/.aws/config can spell it."""
    if not _PROFILE.fullmatch(name):
        raise ValueError(
            f"{quote(name)} is not an AWS profile name (printable ASCII, at most 128, no space at either end)"
        )
    return name
