"""`delivery: live`, the pure part: where each site's peer document and private key live, what its agent is told,
and the document itself. No Pulumi here: the cloud components (wg_mesh.aws.live, wg_mesh.gcp.live, wg_mesh.static)
create the stores from these names, the user data (wg_mesh.plan.userdata) tells the agent the same names, the lab uses
both.

Every name depends on the Pulumi project and stack and the site's name only: never on the peers, the MTU or a key,
so that the user data, which holds them, stays the same when the mesh changes (nothing replaces a gateway).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite
from wg_mesh.gateway import document, ship
from wg_mesh.plan import relay, signing, topology
from wg_mesh.plan.topology import PeerAddress

# Where an operator puts a static site's document and key (0600); NOT wgmetrics.MAPPING_PATH (peers.json).
STATIC_DOCUMENT_PATH = ship.DOCUMENT_PATH
STATIC_PRIVATE_KEY_PATH = ship.PRIVATE_KEY_PATH
# Stores' limits on one value: Secrets Manager's SecretString (Secrets Manager API reference, SecretValueEntry:
# SecretString "Maximum length of 65536"), a Secret Manager version's payload (64 KiB: "Quotas and limits",
# https://cloud.google.com/secret-manager/quotas).
DOCUMENT_LIMITS = {"aws": 65536, "gcp": 65536}
GCP_SA_PREFIX = "wg-mesh-"
GCP_SA_HASH_CHARS = 16  # account_id: 6-30 characters, [a-z]([-a-z0-9]*[a-z0-9]); 8 + 16 = 24
SCOPE_CHARS = 8


def scope(project: str, stack: str) -> str:
    """A short, stable id of the Pulumi project and stack (the same as wg_mesh.gcp.gateway.stack_scope)."""
    return hashlib.sha256(f"{project}/{stack}".encode()).hexdigest()[:SCOPE_CHARS]


def aws_document_secret(project: str, stack: str, site: str) -> str:
    """The Secrets Manager secret holding the site's document (SSM standard parameters stop at 4 KB, advanced
    ones at 8 KB: a 64-site document is ~17 KB signed; a secret holds 64 KB)."""
    return f"wg-mesh/{project}/{stack}/{site}/peers"


def aws_bundle_secret(project: str, stack: str, site: str) -> str:
    """The Secrets Manager secret holding the agent's package (wg_mesh.gateway.bootstrap): ~45 KB of bzip2 (a
    SecretBinary), past SSM's 8 KB; not secret, but the same store, role and API as the document, so no bucket and no
    second permission model."""
    return f"wg-mesh/{project}/{stack}/{site}/agent"


def aws_private_key_parameter(project: str, stack: str, site: str) -> str:
    """The SSM Parameter Store SecureString holding the site's private key (standard tier: free, 4 KB)."""
    return f"/wg-mesh/{project}/{stack}/{site}/private-key"


def gcp_key_secret_id(project: str, stack: str, site: str) -> str:
    return f"wg-mesh-{scope(project, stack)}-{site}-key"


def gcp_document_secret_id(project: str, stack: str, site: str) -> str:
    """The Secret Manager secret holding the site's document: one store that every VM of the site reads (the
    serving one, its replacement, an HA pair), unlike instance metadata, which `pulumi up` sets on one VM resource
    and never on the old VM it replaces (docs/concepts/delivery.md)."""
    return f"wg-mesh-{scope(project, stack)}-{site}-peers"


def gcp_service_account_id(project: str, stack: str, site: str) -> str:
    """The gateway's own service account: unique per project, stack and site, within GCP's 30 characters."""
    digest = hashlib.sha256(f"{project}/{stack}/{site}".encode()).hexdigest()[:GCP_SA_HASH_CHARS]
    return GCP_SA_PREFIX + digest


def agent_source(site: AwsSite | GcpSite | StaticSite, project: str, stack: str) -> dict[str, Any]:
    """The `source` of the site's /etc/wg-mesh/agent.json (LIVE.md): where its agent reads the document and key."""
    if isinstance(site, AwsSite):
        return ship.aws_source(
            site.region,
            aws_document_secret(project, stack, site.name),
            aws_private_key_parameter(project, stack, site.name),
            aws_bundle_secret(project, stack, site.name),
        )
    if isinstance(site, GcpSite):
        secrets = [gcp_document_secret_id(project, stack, site.name), gcp_key_secret_id(project, stack, site.name)]
        document, key = (f"projects/{site.project}/secrets/{s}/versions/latest" for s in secrets)
        return ship.gcp_source(document, key, bundle_file=ship.BUNDLE_FILE)  # the package: in the user data
    return ship.file_source()


def document_scope(project: str, stack: str) -> str:
    """What a document's `scope` and agent.json's `trust.scope` name: the Pulumi project and stack, in full (a
    document written for another stack is refused even under the same signing key)."""
    return f"{project}/{stack}"


# A cloud gateway's document expires (docs/security.md, "Freshness"): valid VALIDITY_S from the start of the RENEWAL_S
# period in which it was signed, so that the first `pulumi up` of every period signs every cloud document again and a
# document always has VALIDITY_S - RENEWAL_S ahead of it when it is made. A stolen superseded document dies on its own.
DAY_S = 86400
VALIDITY_S = 90 * DAY_S
RENEWAL_S = 30 * DAY_S


def expires(site: AwsSite | GcpSite | StaticSite, now: float) -> int | None:
    """The `not_after` of a document signed at `now` for this site: the end of its validity on a cloud gateway, None on
    a static site (its store is its own disk: whoever can write it is root there; an expiry would only make its
    operator copy a document every month)."""
    if isinstance(site, StaticSite):
        return None
    return int(now) // RENEWAL_S * RENEWAL_S + VALIDITY_S


def trust(
    cfg: MeshConfig,
    site: AwsSite | GcpSite | StaticSite,
    project: str,
    stack: str,
    signing_key: str,
    floor: int = 0,
) -> dict[str, Any]:
    """agent.json's `trust` (docs/security.md section 3): what the agent checks every document against. The mesh's
    verify key and the site's own configured facts only, never a peer or a key of another site, so that the user data
    stays the same when the mesh changes; `masquerade` is the only place it can be turned on (a document cannot).
    `floor`: the serial of the site's document when the gateway was made (wg_mesh.tools.serial.floor_pin), below which
    it applies nothing; `expiring`: whether every document must carry a `not_after` (a cloud gateway: `expires`)."""
    out: dict[str, Any] = {
        "signing_key": signing_key,
        "scope": document_scope(project, stack),
        "site": site.name,
        "cidrs": [str(cidr) for cidr in site.cidrs],
        "overlay": str(cfg.overlay_cidr),
        "address": f"{site.overlay_ip}/{cfg.overlay_cidr.prefixlen}",
        "masquerade": cfg.masquerades(site),
        "floor": floor,
        "expiring": not isinstance(site, StaticSite),
        "cloud": site.cloud,  # what the site is: a cloud gateway never gets a host filter (listen_sources)
    }
    pinned = relay.trust_relay(cfg, site.name)  # a relayed site's relay and partners (its config, not a peer's key)
    return out if pinned is None else {**out, "relay": pinned}


def peer_document(
    cfg: MeshConfig,
    site_name: str,
    directory: Mapping[str, PeerAddress],
    public_key: str,
    *,
    scope: str,
    serial: int,
    key_at: int | None = None,
    not_after: int | None = None,
) -> str:
    """The payload of the site's peer document (wg_mesh.gateway.document, v2): its interface plan, its own public
    key, its scope and serial, its key_at (wg_mesh.announce), its expiry (`expires`) and, for a cloud site with one
    gateway, `gateways` (`single_gateway`); unsigned."""
    plan = topology.interface_plan(cfg, site_name, directory)
    gateways = document.SINGLE if single_gateway(cfg.site(site_name)) else None
    return document.encode_body(
        plan, public_key, scope=scope, serial=serial, key_at=key_at, not_after=not_after, gateways=gateways
    )


def single_gateway(site: AwsSite | GcpSite | StaticSite) -> bool:
    """Whether the site's document says `gateways: 1`: every AWS and GCP site with one gateway, so that a pair whose
    site went from `gateways: 2` to 1 reads, in the same `up`, that it must stand down (the program cannot know
    which single sites were pairs before; wg_mesh.gateway.ha). Never a pair's (an agent of before this field reads
    its pair's documents as before) and never a static site's (never a pair)."""
    return isinstance(site, AwsSite | GcpSite) and site.gateways == 1


def switch_floor(
    cfg: MeshConfig, site_name: str, directory: Mapping[str, PeerAddress], key_at: int | None
) -> int | None:
    """When a new gateway of the site may take traffic at the earliest (its readiness gate holds until then:
    wg_mesh.tools.gatepoll.hold_until): the latest announced switch among the site's own key (`key_at`) and its
    document's peers' keys, of the keys rotated at least once (key_epoch > 0; a first key replaces none that anybody
    runs, so a new mesh's first `up` waits for nothing). A new gateway's agent runs the new keys from its first boot
    (wg_mesh.gateway.rotation holds only keys it already runs), so the address must not reach it before the other
    parties switch; None when no such key is announced. The gate's `update` leaves it out: only a new instance waits."""
    plan = topology.interface_plan(cfg, site_name, directory)
    rotated = [key_at if cfg.site(site_name).key_epoch > 0 else None]
    rotated += [p.key_at for p in plan.peers if cfg.site(p.name).key_epoch > 0]
    moments = [at for at in rotated if at is not None]
    return max(moments) if moments else None


def unsigned_digest(cfg: MeshConfig, site_name: str, scope: str, values: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of the site's document content with serial 0, over Output.all(directory=..., public_key=...,
    key_at=..., not_after=...)'s values: what its serial counts (wg_mesh.tools.serial: it changes when, and only
    when, this does)."""
    body = peer_document(
        cfg,
        site_name,
        values["directory"],
        values["public_key"],
        scope=scope,
        serial=0,
        key_at=values.get("key_at"),
        not_after=values.get("not_after"),
    )
    return hashlib.sha256(body.encode()).hexdigest()


def signed_document(cfg: MeshConfig, site_name: str, scope: str, values: Mapping[str, Any]) -> str:
    """The site's signed document (a DSSE envelope, wg_mesh.plan.signing) over Output.all(directory=..., public_key=...,
    serial=..., seed=...)'s values; `seed`: the SigningKey's base64 seed."""
    body = peer_document(
        cfg,
        site_name,
        values["directory"],
        values["public_key"],
        scope=scope,
        serial=values["serial"],
        key_at=values.get("key_at"),
        not_after=values.get("not_after"),
    )
    return signing.sign(body, signing.seed_from_random(values["seed"]))


# Every Parameter Store action that returns a parameter's value (Service Authorization Reference, AWS Systems Manager).
PARAMETER_READS = ["ssm:GetParameter", "ssm:GetParameterHistory", "ssm:GetParameters", "ssm:GetParametersByPath"]


def store_policy(parameter_arn: str, secret_arn: str, bundle_arn: str) -> str:
    """The AWS gateway's read access: its own key parameter, its own document secret and its own agent bundle, by
    exact ARN, nothing else.

    No kms:Decrypt statement: both are encrypted with the AWS managed keys (aws/ssm, aws/secretsmanager), whose key
    policies allow their use through the service to every principal of the account ("The AWS managed key for
    Parameter Store (aws/ssm) grants Decrypt permission to all IAM principals in the AWS account": AWS Systems Manager
    user guide, "Restricting decryption of SecureString parameter values",
    https://docs.aws.amazon.com/systems-manager/latest/userguide/ps-restrict-decryption.html).

    That same key is why one statement denies reading any other parameter: with `operator_access: cloud` the role
    also has AWS's managed AmazonSSMManagedInstanceCore, which allows ssm:GetParameter(s) on every resource, and every
    principal of the account may decrypt with aws/ssm, so without the deny a gateway could read the other gateways'
    keys in its account. An explicit deny wins over any allow."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ReadOwnPrivateKey",
                    "Effect": "Allow",
                    "Action": "ssm:GetParameter",
                    "Resource": parameter_arn,
                },
                {
                    "Sid": "NoOtherParameter",
                    "Effect": "Deny",
                    "Action": PARAMETER_READS,
                    "NotResource": parameter_arn,
                },
                {
                    "Sid": "ReadOwnPeerDocumentAndAgent",
                    "Effect": "Allow",
                    "Action": "secretsmanager:GetSecretValue",
                    "Resource": [secret_arn, bundle_arn],
                },
            ],
        },
        sort_keys=True,
    )


def store_policy_of(values: Mapping[str, str]) -> str:
    return store_policy(values["parameter"], values["secret"], values["bundle"])
