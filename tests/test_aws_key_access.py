"""Who may read an AWS gateway's private key (issue 20 item 6): the SSM read deny in every mode that attaches the SSM
managed policy, and the customer managed KMS key option (`ssm_kms_key_arn`), config and program (Pulumi mocks)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.conftest import STACK_FILES, ProgramRun, run_program, with_delivery
from wg_mesh.config import ConfigError
from wg_mesh.plan import awsiam as aws_iam
from wg_mesh.plan import live
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw

ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
IAM_ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
SSM_PARAMETER = "aws:ssm/parameter:Parameter"
KEY = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def raw_of(stack: str, delivery: str, access: str = "cloud") -> dict[str, Any]:
    raw = with_delivery(copy.deepcopy(read_raw(next(p for p in STACK_FILES if p.name == f"Pulumi.{stack}.yaml"))),
                        delivery)  # fmt: skip
    assert isinstance(raw, dict)
    raw["operator_access"] = access
    return raw


def aws_site(raw: dict[str, Any]) -> dict[str, Any]:
    site: dict[str, Any] = next(s for s in raw["sites"] if s["cloud"] == "aws")
    return site


def run_ok(raw: dict[str, Any]) -> ProgramRun:
    run = run_program(raw, preview=False)
    assert run.error is None, run.error
    return run


def denies(run: ProgramRun, site: str) -> list[dict[str, Any]]:
    """Every Deny statement of the site's role policies."""
    out = []
    for policy in run.of_type(ROLE_POLICY):
        if policy.name.startswith(site):
            out += [st for st in json.loads(policy.inputs["policy"])["Statement"] if st["Effect"] == "Deny"]
    return out


@pytest.mark.parametrize("delivery", ["user-data", "live"])
def test_with_session_manager_no_gateway_reads_another_parameter_in_either_mode(delivery: str) -> None:
    run = run_ok(raw_of("dev", delivery))
    (attachment,) = run.of_type(IAM_ATTACH)
    assert attachment.inputs["policyArn"].endswith("/AmazonSSMManagedInstanceCore")
    (deny,) = denies(run, "aws-use1")
    assert deny["Action"] == live.PARAMETER_READS
    if delivery == "live":
        assert deny["NotResource"] == run.named(SSM_PARAMETER, "aws-use1-private-key").outputs["arn"]
    else:
        assert deny["Resource"] == "*"
        # The profile waits for the deny: the instance never boots with the managed policy alone.
        assert run.depends_on("aws:iam/instanceProfile:InstanceProfile", "aws-use1-profile", ROLE_POLICY,
                              "aws-use1-no-parameters")  # fmt: skip


def test_without_session_manager_there_is_nothing_to_deny_in_user_data_mode() -> None:
    run = run_ok(raw_of("dev", "user-data", access="none"))
    assert run.of_type(IAM_ATTACH) == [] and denies(run, "aws-use1") == []


def test_every_ha_gateway_has_the_deny_too() -> None:
    run = run_ok(raw_of("ha", "live"))
    for letter in ("a", "b"):
        prefix = "aws-use1" if letter == "a" else "aws-use1-b"
        policy = json.loads(run.named(ROLE_POLICY, f"{prefix}-stores").inputs["policy"])
        assert any(st["Effect"] == "Deny" and st["Sid"] == "NoOtherParameter" for st in policy["Statement"])


def test_a_customer_managed_key_encrypts_the_parameter_and_only_its_use_for_that_parameter_is_granted() -> None:
    raw = raw_of("prod", "live", access="none")
    aws_site(raw)["ssm_kms_key_arn"] = KEY
    run = run_ok(raw)
    parameter = run.named(SSM_PARAMETER, "aws-use1-private-key")
    assert parameter.inputs["keyId"] == KEY
    (statement,) = json.loads(run.named(ROLE_POLICY, "aws-use1-key").inputs["policy"])["Statement"]
    assert statement == {
        "Sid": "DecryptOwnPrivateKey",
        "Effect": "Allow",
        "Action": "kms:Decrypt",
        "Resource": KEY,
        "Condition": {
            "StringEquals": {
                "kms:ViaService": "ssm.us-east-1.amazonaws.com",
                "kms:EncryptionContext:PARAMETER_ARN": parameter.outputs["arn"],
            }
        },
    }
    assert run.depends_on("aws:iam/instanceProfile:InstanceProfile", "aws-use1-profile", ROLE_POLICY, "aws-use1-key")


def test_without_a_key_the_parameter_names_aws_ssm_and_no_kms_grant_exists() -> None:
    """key_id is Optional+Computed in the provider: naming aws/ssm explicitly is what takes a removed CMK back."""
    run = run_ok(raw_of("prod", "live", access="none"))
    assert run.named(SSM_PARAMETER, "aws-use1-private-key").inputs["keyId"] == "alias/aws/ssm"
    assert not any(p.name.endswith("-key") for p in run.of_type(ROLE_POLICY))


def test_the_kms_service_name_follows_the_partition() -> None:
    arn = "arn:aws-cn:kms:cn-north-1:111122223333:key/mrk-1234abcd12ab34cd56ef1234567890ab"
    (statement,) = json.loads(aws_iam.kms_policy("cn-north-1", arn, "arn:p"))["Statement"]
    assert statement["Condition"]["StringEquals"]["kms:ViaService"] == "ssm.cn-north-1.amazonaws.com.cn"


@pytest.mark.parametrize(
    ("value", "delivery", "problem"),
    [
        ("alias/wg-mesh", "live", "sites[0].ssm_kms_key_arn: 'alias/wg-mesh' is not a KMS key ARN"),
        ("arn:aws:kms:us-east-1:111122223333:alias/wg-mesh", "live", "is not a KMS key ARN"),
        (KEY.replace("us-east-1", "eu-west-1"), "live",
         "sites[0].ssm_kms_key_arn: the key is in aws eu-west-1, the site in aws us-east-1"),
        (KEY.replace("arn:aws:", "arn:aws-cn:"), "live", "the key is in aws-cn us-east-1"),
        (KEY, "user-data", "sites[0].ssm_kms_key_arn: only with delivery: live"),
        (42, "live", "sites[0].ssm_kms_key_arn: "),
    ],
)  # fmt: skip
def test_a_bad_key_is_refused_with_its_field_path(value: Any, delivery: str, problem: str) -> None:
    raw = raw_of("prod", delivery, access="none")
    aws_site(raw)["ssm_kms_key_arn"] = value
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_a_gcp_site_has_no_such_key() -> None:
    raw = raw_of("prod", "live", access="none")
    next(s for s in raw["sites"] if s["cloud"] == "gcp")["ssm_kms_key_arn"] = KEY
    with pytest.raises(ConfigError, match=r"ssm_kms_key_arn: unknown key"):
        load_mesh(raw)
