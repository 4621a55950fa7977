"""delivery: live on GCP: the gateway's own service account, its private key in Secret Manager, its peer document in
a custom instance metadata key (wg_mesh.plan.live names them).

- The document: instance metadata `wg-mesh-peers`. `metadata` is updated in place (setMetadata, no restart): only the
  separate `metadata_startup_script` argument forces a new instance (pulumi-gcp 10.2.0, compute.Instance,
  metadata_startup_script: "the only distinction is that this separate attribute will cause a recreate on
  modification"), so wg_mesh.gcp.instance's replace_on_changes names `metadata["user-data"]` alone. The agent watches
  the key with `wait_for_change=true` (push, ETag).
- The private key: a Secret Manager secret; a rotated key is a new version (the agent reads `latest`).
- Who reads it: the gateway runs as a service account of its own (not the project's default compute account, which
  every other VM of the project may share), and `roles/secretmanager.secretAccessor` is bound on that one secret to
  that one account.
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
    secret: gcp.secretmanager.Secret
    version: gcp.secretmanager.SecretVersion
    accessor: gcp.secretmanager.SecretIamMember

    @property
    def resources(self) -> list[pulumi.Resource]:
        """What the instance's first boot needs in place: the key and the right to read it."""
        return [self.version, self.accessor]

    def service_account(self) -> gcp.compute.InstanceServiceAccountArgs:
        return gcp.compute.InstanceServiceAccountArgs(email=self.account.email, scopes=SCOPES)


@dataclass(frozen=True)
class StandbyReader:
    """gateways: 2: gateway b's own service account, which may read the site's one key secret too (docs/ha.md 3)."""

    account: gcp.serviceaccount.Account
    accessor: gcp.secretmanager.SecretIamMember

    def service_account(self) -> gcp.compute.InstanceServiceAccountArgs:
        return gcp.compute.InstanceServiceAccountArgs(email=self.account.email, scopes=SCOPES)


def standby_reader(prefix: str, site: GcpSite, stores: GcpStores, opts: pulumi.ResourceOptions) -> StandbyReader:
    """Gateway b's account (`prefix` = its child names' prefix), bound to the key secret like gateway a's.

    Its account id hashes `<site>/b`: a site name has no `/`, so it never collides with another site's account."""
    project, stack = pulumi.get_project(), pulumi.get_stack()
    account = gcp.serviceaccount.Account(
        f"{prefix}-sa",
        account_id=live.gcp_service_account_id(project, stack, f"{site.name}/b"),
        display_name=f"wg-mesh gateway {site.name} b",
        description=f"wg-mesh {project}/{stack}: the {site.name} standby gateway's identity (reads the site's key)",
        opts=opts,
    )
    accessor = gcp.secretmanager.SecretIamMember(
        f"{prefix}-key-accessor",
        secret_id=stores.secret.id,
        role=ACCESSOR_ROLE,
        member=account.member,
        opts=opts,
    )
    return StandbyReader(account, accessor)


def create_stores(name: str, site: GcpSite, private_key: pulumi.Output[str], opts: pulumi.ResourceOptions) -> GcpStores:
    """The gateway's service account and key secret; children of `opts.parent`, with its provider."""
    project, stack = pulumi.get_project(), pulumi.get_stack()
    account = gcp.serviceaccount.Account(
        f"{name}-sa",
        account_id=live.gcp_service_account_id(project, stack, site.name),
        display_name=f"wg-mesh gateway {site.name}",
        description=f"wg-mesh {project}/{stack}: the {site.name} gateway's identity (reads its own private key)",
        opts=opts,
    )
    secret = gcp.secretmanager.Secret(
        f"{name}-key-secret",
        secret_id=live.gcp_key_secret_id(project, stack, site.name),
        replication=gcp.secretmanager.SecretReplicationArgs(auto=gcp.secretmanager.SecretReplicationAutoArgs()),
        labels={"managed-by": "wg-mesh"},
        opts=opts,
    )
    version = gcp.secretmanager.SecretVersion(
        f"{name}-key-version",
        secret=secret.id,
        secret_data=private_key,  # secret (wg_mesh.keys)
        opts=opts,
    )
    accessor = gcp.secretmanager.SecretIamMember(
        f"{name}-key-accessor",
        secret_id=secret.id,
        role=ACCESSOR_ROLE,
        member=account.member,  # serviceAccount:EMAIL
        opts=opts,
    )
    return GcpStores(account, secret, version, accessor)
