"""An AWS gateway role's inline policies against IAM's 10,240 characters per role (issue 32, item 9): the HA policy
names every route table of an existing network by ARN, so `route_table_ids` is bounded by `validate` and by the
program (with its real project and stack) before any resource, at exactly the count that still fits; and the size
`validate` computes is the size the program attaches (mocks, the longest cloud-assigned ids)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.conftest import run_program
from tests.test_config import SUBNET, VPC
from tests.test_config_ha import SUBNET_B, ha
from wg_mesh.config import AwsSite, ConfigError
from wg_mesh.plan import awsiam
from wg_mesh.plan.userdata import ESTIMATE_PROJECT, ESTIMATE_STACK
from wg_mesh.plan.validate import load_mesh

ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
PROJECT, STACK = "wg-mesh", "policy-size"  # what run_program gives the program
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def tables(n: int) -> list[str]:
    return [f"rtb-{i:017x}" for i in range(n)]


def existing(n: int, **more: Any) -> dict[str, Any]:
    """base() in live delivery, its AWS site an HA pair in an existing VPC with n route tables."""
    site = {"vpc_id": VPC, "subnet_id": SUBNET, "standby_subnet_id": SUBNET_B, "route_table_ids": tables(n)}
    return ha({**site, "gateways": 2, **more})


def chars(raw: dict[str, Any], project: str = PROJECT, stack: str = STACK) -> int:
    cfg = load_mesh(raw, check_limits=False)
    site = cfg.sites[0]
    assert isinstance(site, AwsSite)
    return awsiam.role_policy_chars(cfg, site, project, stack)


def most_that_fit(project: str = PROJECT, stack: str = STACK) -> int:
    n = 50
    assert chars(existing(n), project, stack) <= awsiam.ROLE_INLINE_CHARS
    while chars(existing(n + 1), project, stack) <= awsiam.ROLE_INLINE_CHARS:
        n += 1
    return n


def test_route_tables_are_bounded_at_exactly_the_count_that_fits() -> None:
    n = most_that_fit()
    assert 60 < n < 120  # ~76 characters a table: the ~100 of the issue, less the other policies
    assert load_mesh(existing(n), project=PROJECT, stack=STACK).sites[0].name == "aws-use1"
    with pytest.raises(ConfigError) as refused:
        load_mesh(existing(n + 1), project=PROJECT, stack=STACK)
    (line,) = refused.value.problems
    assert line.startswith(f"sites[0].route_table_ids: {n + 1} route tables give aws-use1's gateway roles ")
    assert line.endswith(f"IAM allows 10,240 per role (IAM quotas, role policy size): at most {n} here")


def test_the_bound_follows_the_project_and_stack_names() -> None:
    """They are in the policies' tag conditions and ARNs: validate assumes a long stack name, the program has its own
    (a short one fits a table or more that the estimate refuses, never the other way round)."""
    assert most_that_fit("p", "s") > most_that_fit()
    estimate = most_that_fit(ESTIMATE_PROJECT, ESTIMATE_STACK)
    with pytest.raises(ConfigError):
        load_mesh(existing(estimate + 1))
    assert load_mesh(existing(estimate)).sites[0].name == "aws-use1"


def test_one_gateway_and_created_networks_never_reach_the_limit() -> None:
    """Only the HA policy grows, and only with an existing network's tables: a created network has one table."""
    one = existing(150)
    one["sites"][0]["gateways"] = 1
    one["sites"][0].pop("standby_subnet_id")
    assert chars(one) < awsiam.ROLE_INLINE_CHARS / 2
    created = ha({"gateways": 2, "ssm_kms_key_arn": KMS_KEY})
    assert chars(created) < awsiam.ROLE_INLINE_CHARS / 2


def test_the_program_refuses_past_the_limit_before_any_resource() -> None:
    done = run_program(existing(most_that_fit() + 1), preview=True, stack=STACK)
    assert done.error is not None and "sites[0].route_table_ids:" in str(done.error)
    assert not done.resources


def test_validate_counts_what_the_program_attaches() -> None:
    """The size from awsiam.role_policies is the sum of the RolePolicy documents a gateway's role gets in a run (the
    mocks' ids are as long as the longest real ones; us-east-1, as the mocks' ARNs), for the richest role: live
    delivery, a KMS key, HA in an existing network."""
    raw = existing(3, ssm_kms_key_arn=KMS_KEY)
    done = run_program(copy.deepcopy(raw), preview=False, stack=STACK)
    assert done.error is None, done.error
    policies = {r.name: r.inputs["policy"] for r in done.of_type(ROLE_POLICY) if r.name.startswith("aws-use1-")}
    for letter in ("", "-b"):
        role = {k.removeprefix(f"aws-use1{letter}-"): v for k, v in policies.items() if k.count("-b-") == bool(letter)}
        assert sorted(role) == ["ha", "key", "ready", "stores"]
        attached = sum(awsiam.policy_chars(json.dumps(json.loads(p))) for p in role.values())
        assert attached == chars(raw)
