"""delivery: live on GCP: the gateway's own service account, its private key and its peer document in Secret Manager
(wg_mesh.plan.live names them).

- The private key: a Secret Manager secret; a rotated key is a new version (the agent reads `latest`).
- The document: a second secret, `<scope>-<site>-peers`; a changed document is a new version, the old one destroyed
  (SecretVersion's `secret_data` forces a new version: wg_mesh.plan.forcenew). The agent polls `latest` every
  `poll_seconds` (10 s). Before, the document was the instance metadata key `wg-mesh-peers` (pushed with
  `wait_for_change`): but metadata belongs to one VM resource, and when one `pulumi up` replaces the VM and changes
  the document, Pulumi gives the new document to the new VM only; the old VM, serving until the readiness gate moves
  the address, kept the old one (with a key rotation in that `up`, the old key while every other party switched at
  key_at), and an HA pair being retired (`gateways: 2` -> 1) never saw the document that stands it down
  (wg_mesh.gateway.ha). A secret is one store for every VM of the site, old and new, a and b. Cost: an access is
  $0.03 per 10,000 (https://cloud.google.com/secret-manager/pricing): a poll every 10 s is ~263,000 a month, ~$0.79
  per gateway, plus $0.06 a month for the active version; the quota is 90,000 accesses a minute per project
  (https://cloud.google.com/secret-manager/quotas), six a minute per gateway. The payload limit, 64 KiB (same page),
  is Secrets Manager's on AWS (wg_mesh.plan.live.DOCUMENT_LIMITS).
- Who reads them: the gateway runs as a service account of its own (not the project's default compute account,
  which every other VM of the project may share), and `roles/secretmanager.secretAccessor` is bound on those two
  secrets to that account (with `gateways: 2`, to gateway b's own account too: StandbyReader).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from wg_mesh.config import GcpSite
from wg_mesh.plan import live

ACCESSOR_ROLE = "roles/secretmanager.secretAccessor"
# The agent's token from the metadata server carries the instance's scopes; IAM (the binding below) decides.
SCOPES = ["cloud-platform"]


@dataclass(frozen=True)
class GcpStores:
    account: gcp.serviceaccount.Account
    secret: gcp.secretmanager.Secret  # the private key
    version: gcp.secretmanager.SecretVersion
    accessor: gcp.secretmanager.SecretIamMember
    document_secret: gcp.secretmanager.Secret
    document_version: gcp.secretmanager.SecretVersion
    document_accessor: gcp.secretmanager.SecretIamMember

    @property
    def resources(self) -> list[pulumi.Resource]:
        """What the instance's first boot needs in place: the key, the document and the right to read them."""
        return [self.version, self.accessor, self.document_version, self.document_accessor]

    def service_account(self) -> gcp.compute.InstanceServiceAccountArgs:
        return gcp.compute.InstanceServiceAccountArgs(email=self.account.email, scopes=SCOPES)


@dataclass(frozen=True)
class StandbyReader:
    """gateways: 2: gateway b's own service account, which may read the site's key and document secrets too
    (docs/ha.md 3)."""

    account: gcp.serviceaccount.Account
    accessor: gcp.secretmanager.SecretIamMember
    document_accessor: gcp.secretmanager.SecretIamMember

    @property
    def resources(self) -> list[pulumi.Resource]:
        """What gateway b's first boot needs in place besides the stores' versions: its rights to read them."""
        return [self.accessor, self.document_accessor]

    def service_account(self) -> gcp.compute.InstanceServiceAccountArgs:
        return gcp.compute.InstanceServiceAccountArgs(email=self.account.email, scopes=SCOPES)


def _accessor(
    name: str, secret: gcp.secretmanager.Secret, member: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> gcp.secretmanager.SecretIamMember:
    """`member` (serviceAccount:EMAIL) may read `secret`'s versions, that secret only."""
    return gcp.secretmanager.SecretIamMember(name, secret_id=secret.id, role=ACCESSOR_ROLE, member=member, opts=opts)


def _secret(
    name: str,
    secret_id: str,
    data: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    after: pulumi.Resource | None = None,
) -> tuple[gcp.secretmanager.Secret, gcp.secretmanager.SecretVersion]:
    """A secret (replicated by Google) and its version holding `data`, written after `after`."""
    secret = gcp.secretmanager.Secret(
        f"{name}-secret",
        secret_id=secret_id,
        replication=gcp.secretmanager.SecretReplicationArgs(auto=gcp.secretmanager.SecretReplicationAutoArgs()),
        labels={"managed-by": "wg-mesh"},
        opts=opts,
    )
    written = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[after] if after else None))
    return secret, gcp.secretmanager.SecretVersion(f"{name}-version", secret=secret.id, secret_data=data, opts=written)


def standby_reader(prefix: str, site: GcpSite, stores: GcpStores, opts: pulumi.ResourceOptions) -> StandbyReader:
    """Gateway b's account (`prefix` = its child names' prefix), bound to the key and document secrets like gateway
    a's.

    Its account id hashes `<site>/b`: a site name has no `/`, so it never collides with another site's account."""
    project, stack = pulumi.get_project(), pulumi.get_stack()
    account = gcp.serviceaccount.Account(
        f"{prefix}-sa",
        account_id=live.gcp_service_account_id(project, stack, f"{site.name}/b"),
        display_name=f"wg-mesh gateway {site.name} b",
        description=f"wg-mesh {project}/{stack}: the {site.name} standby gateway's identity (reads the site's key)",
        opts=opts,
    )
    key = _accessor(f"{prefix}-key-accessor", stores.secret, account.member, opts)
    document = _accessor(f"{prefix}-peers-accessor", stores.document_secret, account.member, opts)
    return StandbyReader(account, key, document)


def create_stores(
    name: str,
    site: GcpSite,
    private_key: pulumi.Output[str],
    document: pulumi.Output[str],
    opts: pulumi.ResourceOptions,
) -> GcpStores:
    """The gateway's service account, its key secret and its document secret; children of `opts.parent`, with its
    provider."""
    project, stack = pulumi.get_project(), pulumi.get_stack()
    account = gcp.serviceaccount.Account(
        f"{name}-sa",
        account_id=live.gcp_service_account_id(project, stack, site.name),
        display_name=f"wg-mesh gateway {site.name}",
        description=f"wg-mesh {project}/{stack}: the {site.name} gateway's identity (reads its own private key)",
        opts=opts,
    )
    # secret (wg_mesh.keys)
    secret, version = _secret(f"{name}-key", live.gcp_key_secret_id(project, stack, site.name), private_key, opts)
    # A document names its site's public key: written after the key it names (as on AWS, wg_mesh.aws.live)
    document_id = live.gcp_document_secret_id(project, stack, site.name)
    peers, peers_version = _secret(f"{name}-peers", document_id, document, opts, after=version)
    return GcpStores(
        account,
        secret,
        version,
        _accessor(f"{name}-key-accessor", secret, account.member, opts),  # serviceAccount:EMAIL
        peers,
        peers_version,
        _accessor(f"{name}-peers-accessor", peers, account.member, opts),
    )
