"""delivery: live on AWS: the stores a gateway's agent reads (wg_mesh.plan.live names them).

- The private key: an SSM Parameter Store `SecureString`, standard tier (free; 4 KB is plenty for 44 characters),
  encrypted with the AWS managed key aws/ssm, or with the site's `ssm_kms_key_arn` (a customer managed key, whose use
  the role gets for this parameter only: wg_mesh.plan.awsiam.kms_policy). Rotating the key (`key_epoch`) or changing
  the KMS key updates the parameter in place (terraform-provider-aws, internal/service/ssm/parameter.go: `key_id` is
  Optional and Computed, not ForceNew; computed, so it is always given, aws/ssm by name, for a removed key to go back
  to it).
- The peer document: a Secrets Manager secret (its value holds 64 KB; SSM's standard parameters stop at 4 KB and
  advanced ones at 8 KB, and a 64-site document is ~17 KB signed: `userdata.document_size` of bench.meshgen's 64
  sites, 12.2 KB before the envelope's base64 and signature). A changed document is a new secret version in place:
  the agent polls GetSecretValue and applies it; the instance is untouched.

- The agent's package: a second Secrets Manager secret (wg_mesh.gateway.bootstrap; EC2's 16 KB of user data hold only
  its bootstrap), a SecretBinary: bzip2 of the bundle, ~45 KB of the 65536 bytes a secret holds (a SecretString
  needed base64 of a gzip: ~59 KB). The input `secret_binary` is base64 and the provider stores the decoded bytes
  (wg_mesh.gateway.ship.bundle_base64). Its value is the same for every site and changes only with a new agent
  release, which also changes the SHA-256 pinned in the user data. Any change of it, and the move from
  `secret_string` to `secret_binary`, is a new SecretVersion (both inputs are force-new: wg_mesh.plan.forcenew; read
  again at terraform-provider-aws@0042e8ea0de293c6cd8b003f89f7f4d2fb5fcf31), created before the instances that
  depend on it: a replaced gateway's first boot finds the new value.

The gateway's role may read exactly these three ARNs (wg_mesh.plan.live.store_policy). The instance depends on all of
them, so that its first boot's bootstrap and `wg-mesh-agent --once` find the package, the document and the key.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from wg_mesh.config import AwsSite
from wg_mesh.gateway import ship
from wg_mesh.plan import awsiam, live

PARAMETER_TYPE = "SecureString"
PARAMETER_TIER = "Standard"
AWS_MANAGED_SSM_KEY = "alias/aws/ssm"


@dataclass(frozen=True)
class AwsStores:
    parameter: aws.ssm.Parameter
    secret: aws.secretsmanager.Secret
    version: aws.secretsmanager.SecretVersion
    bundle: aws.secretsmanager.Secret
    bundle_version: aws.secretsmanager.SecretVersion
    policy: pulumi.Output[str]  # the role policy naming exactly the parameter's and the two secrets' ARNs
    key_policy: pulumi.Output[str] | None = None  # ssm_kms_key_arn: kms:Decrypt for exactly this parameter

    @property
    def resources(self) -> list[pulumi.Resource]:
        """What the instance's first boot needs in place."""
        return [self.parameter, self.version, self.bundle_version]


def create_stores(
    name: str,
    site: AwsSite,
    private_key: pulumi.Output[str],
    document: pulumi.Output[str],
    opts: pulumi.ResourceOptions,
) -> AwsStores:
    """The site's key parameter and document secret; children of `opts.parent`, with its provider."""
    project, stack = pulumi.get_project(), pulumi.get_stack()
    parameter = aws.ssm.Parameter(
        f"{name}-private-key",
        name=live.aws_private_key_parameter(project, stack, site.name),
        description=f"wg-mesh {project}/{stack}: {site.name}'s WireGuard private key (read by its wg-mesh-agent)",
        type=PARAMETER_TYPE,
        tier=PARAMETER_TIER,
        key_id=site.ssm_kms_key_arn or AWS_MANAGED_SSM_KEY,
        value=private_key,  # secret (wg_mesh.keys)
        opts=opts,
    )
    secret = aws.secretsmanager.Secret(
        f"{name}-peers",
        name=live.aws_document_secret(project, stack, site.name),
        description=f"wg-mesh {project}/{stack}: {site.name}'s peer document (read by its wg-mesh-agent)",
        # Derived data (`pulumi up` writes it again): deleted at once, so a removed site can come back under its name
        # (a recovery window would hold the name for 7-30 days).
        recovery_window_in_days=0,
        opts=opts,
    )
    version = aws.secretsmanager.SecretVersion(
        f"{name}-peers-version",
        secret_id=secret.id,
        secret_string=document,
        # A document names its site's public key: written after the key it names, so an agent never holds a document
        # whose key it cannot fetch yet (it would refuse it with reason `key` and retry, but need not).
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[parameter])),
    )
    bundle = aws.secretsmanager.Secret(
        f"{name}-agent",
        name=live.aws_bundle_secret(project, stack, site.name),
        description=f"wg-mesh {project}/{stack}: the wg-mesh-agent package {site.name}'s user data installs",
        recovery_window_in_days=0,
        opts=opts,
    )
    bundle_version = aws.secretsmanager.SecretVersion(
        f"{name}-agent-version", secret_id=bundle.id, secret_binary=ship.bundle_base64("aws"), opts=opts
    )
    arns = {"parameter": parameter.arn, "secret": secret.arn, "bundle": bundle.arn}
    policy = pulumi.Output.all(**arns).apply(live.store_policy_of)
    key = site.ssm_kms_key_arn
    key_policy = None if key is None else parameter.arn.apply(lambda arn: awsiam.kms_policy(site.region, key, arn))
    return AwsStores(parameter, secret, version, bundle, bundle_version, policy, key_policy)
