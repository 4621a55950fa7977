"""wg_mesh.plan.live: the names of a site's stores, which its user data carries, fit the clouds' rules and never
collide."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_config import REPO
from wg_mesh.config import AwsSite, GcpSite, StaticSite
from wg_mesh.plan import live
from wg_mesh.tools.stackfile import load

# GCP service account ids: 6-30 characters, `[a-z]([-a-z0-9]*[a-z0-9])` (IAM API, projects.serviceAccounts.create).
GCP_ACCOUNT_ID = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]")
GCP_SECRET_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")  # Secret Manager secret ids
SSM_NAME = re.compile(r"/[A-Za-z0-9_./-]{1,1010}")  # Parameter Store names (with a leading /)
SECRETS_MANAGER_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
LONGEST_SITE = "s" + "-x" * 15 + "z"  # 32 characters, the longest site name


@pytest.mark.parametrize("stack", ["dev", "prod", "a.very_long-stack.name-" * 4])
def test_store_names_fit_the_clouds_rules(stack: str) -> None:
    assert len(LONGEST_SITE) == 32
    assert GCP_ACCOUNT_ID.fullmatch(live.gcp_service_account_id("wg-mesh", stack, LONGEST_SITE))
    assert GCP_SECRET_ID.fullmatch(live.gcp_key_secret_id("wg-mesh", stack, LONGEST_SITE))
    assert SSM_NAME.fullmatch(live.aws_private_key_parameter("wg-mesh", stack, LONGEST_SITE))
    assert SECRETS_MANAGER_NAME.fullmatch(live.aws_document_secret("wg-mesh", stack, LONGEST_SITE))
    assert SECRETS_MANAGER_NAME.fullmatch(live.aws_bundle_secret("wg-mesh", stack, LONGEST_SITE))
    assert not live.aws_private_key_parameter("wg-mesh", stack, "a").lower().startswith(("/aws", "/ssm"))


def test_names_differ_per_project_stack_and_site() -> None:
    combos = [(p, st, si) for p in ("wg-mesh", "other") for st in ("dev", "prod") for si in ("a1", "b2")]
    for name in (live.gcp_service_account_id, live.gcp_key_secret_id, live.aws_document_secret, live.aws_bundle_secret):
        assert len({name(*c) for c in combos}) == len(combos), name.__name__


def test_each_site_kind_gets_its_source() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    sources = {site.cloud: live.agent_source(site, "wg-mesh", "prod") for site in cfg.sites}
    aws, gcp, static = (cfg.site(n) for n in ("aws-use1", "gcp-euw3", "vps-fra"))
    assert isinstance(aws, AwsSite) and isinstance(gcp, GcpSite) and isinstance(static, StaticSite)
    assert sources["aws"] == {
        "kind": "aws",
        "region": "us-east-1",
        "document_secret": "wg-mesh/wg-mesh/prod/aws-use1/peers",
        "private_key_parameter": "/wg-mesh/wg-mesh/prod/aws-use1/private-key",
        "bundle_secret": "wg-mesh/wg-mesh/prod/aws-use1/agent",
    }
    secret = live.gcp_key_secret_id("wg-mesh", "prod", "gcp-euw3")
    assert secret == "wg-mesh-c05cd655-gcp-euw3-key"
    document = live.gcp_document_secret_id("wg-mesh", "prod", "gcp-euw3")
    assert document == "wg-mesh-c05cd655-gcp-euw3-peers"
    assert sources["gcp"] == {
        "kind": "gcp",
        "document_secret": f"projects/my-project/secrets/{document}/versions/latest",
        "private_key_secret": f"projects/my-project/secrets/{secret}/versions/latest",
        "bundle_file": "/usr/local/lib/wg-mesh/wgmesh_gateway.json.bz2",  # the package, as the user data writes it
    }
    assert sources["static"] == {"kind": "file", "document": "/etc/wg-mesh/document.json",
                                 "private_key": "/etc/wg-mesh/private.key"}  # fmt: skip


def test_the_store_policy_names_exactly_the_three_arns() -> None:
    parameter = "arn:aws:ssm:us-east-1:123456789012:parameter/wg-mesh/wg-mesh/prod/a/private-key"
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:wg-mesh/wg-mesh/prod/a/peers-AbCdEf"
    bundle = "arn:aws:secretsmanager:us-east-1:123456789012:secret:wg-mesh/wg-mesh/prod/a/agent-GhIjKl"
    policy = json.loads(live.store_policy(parameter, secret, bundle))
    allows = [s for s in policy["Statement"] if s["Effect"] == "Allow"]
    assert sorted((s["Action"], s["Resource"]) for s in allows) == [
        ("secretsmanager:GetSecretValue", [secret, bundle]),
        ("ssm:GetParameter", parameter),
    ]
    # Any other parameter is denied, whatever else the role is allowed (AmazonSSMManagedInstanceCore: ssm:Get* on *).
    (deny,) = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
    assert deny["NotResource"] == parameter and "Resource" not in deny
    assert set(deny["Action"]) >= {"ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"}
    assert "*" not in json.dumps(policy)
