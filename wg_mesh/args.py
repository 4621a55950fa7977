"""The component's typed inputs and outputs: what a Pulumi program passes to `Mesh` and reads back from it.

`MeshArgs` has the keys of the stack file's `wg-mesh:mesh` (README, "Config reference"), so a stack file's value
is a `MeshArgs` as it is, and a program builds one the same way. The existing-network keys (vpc_id, subnet_id,
standby_subnet_id, route_table_ids' items, network, subnetwork) and a static site's endpoint also take a
`pulumi.Input[str]`: an output of the program's own VPC, subnet, route table, network or address (the endpoint is
checked when its value is known: wg_mesh.static). Everything else must be known when the program runs (it decides
which resources exist, what they are named and what is rendered): an Output there is one readable problem.
`to_config` validates the args with the config model (wg_mesh.config: the same messages as for a stack file) before
any resource is declared. The fields' docstrings are their descriptions (IDEs, the schema: wg_mesh.provider);
docs/how-to/component-inputs.md is the table of what takes an Output.

No `from __future__ import annotations` here: Pulumi's schema inference (pulumi.provider.experimental, wg_mesh.provider)
reads these annotations at run time.
"""

import inspect
import re
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

import pulumi

from wg_mesh.config import ConfigError, Deferred, MeshConfig
from wg_mesh.plan.validate import load_mesh

# The keys whose value may come from the user's own resources, known only at deploy time
# (docs/how-to/component-inputs.md).
INPUT_KEYS = ("vpc_id", "subnet_id", "standby_subnet_id", "network", "subnetwork", "endpoint")
INPUT_LIST_KEYS = ("route_table_ids",)

# The fixed choices, as the config model has them (tests/test_args_ide.py holds them equal).
Cloud = Literal["aws", "gcp", "static"]
Delivery = Literal["user-data", "live"]
OperatorAccess = Literal["none", "cloud"]
PathKind = Literal["interconnect", "peering", "vpn", "wan"]
WorkloadScope = Literal["network"]


class SiteArgs(TypedDict):
    """One site of the mesh: an AWS VPC, a GCP network or a static host. `cloud` says which other keys apply."""

    name: str
    """The site's name: a DNS label (lowercase letters, digits, '-'), at most 32 characters, unique in the mesh. It
    names the site's resources: changing it replaces them unless the old name is listed in `previous_names`."""
    cloud: Cloud
    """Where the site is: 'aws' (a VPC), 'gcp' (a VPC network) or 'static' (a host you run, e.g. bare metal)."""
    overlay_ip: str
    """The site's gateway address on the mesh (wg0): inside `overlay_cidr`, unique, e.g. '10.255.0.1'."""
    cidrs: NotRequired[list[str]]
    """The networks behind the site, routed through its gateway: IPv4 CIDRs, no host bits, no overlap with another
    site's or the overlay, no special-purpose range. Required for 'aws' and 'gcp' sites; a 'static' site without any
    is a single host, reached at its overlay address."""
    masquerade: NotRequired[bool]
    """SNAT what the gateway forwards to its own address (unset: the mesh's `masquerade`)."""
    key_epoch: NotRequired[int]
    """Bump (0, 1, 2, ...) to rotate the site's WireGuard key. Default 0."""
    underlay_mtu: NotRequired[int]
    """The MTU of the path the tunnel runs over. Default: aws 1500, gcp 1460 (the network it creates), static 1500."""
    previous_names: NotRequired[list[str]]
    """Names the site had before: a rename keeps its address, key and network (Pulumi aliases) and replaces its gateway
    (docs/how-to/rename.md)."""
    private_ip: NotRequired[str]
    """The gateway's address on a private path (`private_paths`). Required for a static site on one; a cloud
    gateway's default is the 10th address of the gateway subnet wg-mesh creates."""
    gateways: NotRequired[int]
    """aws, gcp: 1 (default) or 2, an active gateway and a standby sharing the site's identity (needs
    `delivery: 'live'`). A static site is one host."""
    standby_zone: NotRequired[str]
    """aws, gcp with `gateways: 2`: the standby's zone in `region` (AWS: not `zone`). Default: AWS another zone
    offering `instance_type`, GCP the next zone letter after `zone`."""
    region: NotRequired[str]
    """aws, gcp (required): the site's region, e.g. 'us-east-1', 'europe-west3'."""
    zone: NotRequired[str]
    """aws (optional): a zone name ('us-east-1a') or zone ID ('use1-az1'); unset, the first zone offering
    `instance_type`. gcp (required): e.g. 'europe-west3-a'."""
    instance_type: NotRequired[str]
    """aws, gcp: the gateway's size. Default 'c6i.2xlarge' (aws), 'n2-standard-8' (gcp)."""
    image: NotRequired[str]
    """aws: an AMI id or an Ubuntu serial; gcp: a boot image. Unset: the newest Ubuntu 24.04 when the gateway is
    created, then kept (changing it replaces the gateway)."""
    vpc_id: NotRequired[pulumi.Input[str]]
    """aws, an existing network: the VPC's id (with `subnet_id` and `route_table_ids`; unset: wg-mesh creates the
    VPC). May be an Output of your program's own VPC."""
    subnet_id: NotRequired[pulumi.Input[str]]
    """aws, an existing network: the subnet the gateway goes into (public: routed to an internet gateway). May be
    an Output."""
    route_table_ids: NotRequired[list[pulumi.Input[str]]]
    """aws, an existing network: the route tables that get a route to the gateway for every other site's range.
    Each id may be an Output; how many there are must be known when the program runs."""
    standby_subnet_id: NotRequired[pulumi.Input[str]]
    """aws, an existing network with `gateways: 2`: the standby's subnet (best in another zone). May be an Output."""
    profile: NotRequired[str]
    """aws: the named AWS profile to deploy this site with (unset: the environment's credentials)."""
    assume_role_arn: NotRequired[str]
    """aws: a role to assume for this site (in the partition of `region`)."""
    account_id: NotRequired[str]
    """aws: the 12-digit account the site's credentials must be in (a guard against the wrong account)."""
    ssm_kms_key_arn: NotRequired[str]
    """aws, `delivery: 'live'`: a customer managed KMS key (in `region`) for the private-key parameter instead of
    aws/ssm (docs/security.md)."""
    quotas: NotRequired[dict[str, int]]
    """aws: this account's VPC quotas in `region` where they are not AWS's defaults: rules_per_security_group,
    routes_per_route_table, elastic_ips_per_region, vpcs_per_region."""
    project: NotRequired[str]
    """gcp (required): the GCP project id."""
    network: NotRequired[pulumi.Input[str]]
    """gcp, an existing network: its name or self link (with `subnetwork`; unset: wg-mesh creates one). May be an
    Output of your program's own network."""
    subnetwork: NotRequired[pulumi.Input[str]]
    """gcp, an existing network: the subnetwork the gateway goes into, name or self link. May be an Output."""
    impersonate_service_account: NotRequired[str]
    """gcp: deploy this site as that service account (an email)."""
    workload_tags: NotRequired[list[str]]
    """gcp: network tags of the instances that accept the other sites' traffic (a firewall rule targets them)."""
    workload_service_accounts: NotRequired[list[str]]
    """gcp: or the service accounts of those instances (not with `workload_tags`)."""
    workload_scope: NotRequired[WorkloadScope]
    """gcp: 'network': every instance of the network accepts the other sites' traffic."""
    endpoint: NotRequired[pulumi.Input[str]]
    """static (required): the host's public IPv4 address, where the other sites send to, or 'dynamic': no fixed
    address (a dynamic IP, behind a NAT): the site initiates, keeps the path open with `persistent_keepalive`, and
    the gateways learn its address from its packets; or a DNS name (e.g. 'vpn.example.com', a plain value: its peers'
    gateways resolve it every `reresolve_seconds`). May be an Output (e.g. an address your program allocates):
    checked when its value is known, during `pulumi up`. (A plain string, not a Literal: the schema keeps it a
    string input.)"""
    endpoint_ranges: NotRequired[list[str]]
    """static with `endpoint: 'dynamic'` or a DNS name only: the public IPv4 ranges its packets may come from (e.g. its
    provider's); the WireGuard port of the gateways that peer with it admits these. Unset: any address."""


class PrivatePathArgs(TypedDict):
    """Sites that reach each other over a private path (interconnect, peering, VPN, WAN) instead of the internet."""

    name: str
    """The path's name (a label in docs and metrics)."""
    sites: list[str]
    """The names of two or more sites on the path (one path per pair of sites)."""
    mtu: NotRequired[int]
    """The path's MTU, 1340..9001. Default 1500."""
    kind: NotRequired[PathKind]
    """What the path is: 'interconnect' (default), 'peering', 'vpn' or 'wan'. A label only."""


class MeshArgs(TypedDict):
    """The whole mesh: the keys of the stack file's `wg-mesh:mesh`."""

    overlay_cidr: str
    """The mesh's own network (each gateway's wg0 address is in it), e.g. '10.255.0.0/24'."""
    sites: list[SiteArgs]
    """The sites: two or more."""
    listen_port: NotRequired[int]
    """The WireGuard UDP port on every gateway. Default 51820."""
    mtu: NotRequired[Literal["auto"] | int]
    """The internet tunnel MTU: 'auto' (default: the smallest `underlay_mtu`, at most 1500, less 60) or 1280..1440."""
    persistent_keepalive: NotRequired[int]
    """Seconds between keepalives, which keep NAT and conntrack state open. Default 25; 0: none."""
    reresolve_seconds: NotRequired[int]
    """How often the gateways that peer with a DNS-named static site resolve its name again (2..3600). Default 30."""
    masquerade: NotRequired[bool]
    """SNAT forwarded traffic to the gateway's address. Default false: source addresses are kept (routes are
    wired)."""
    monitoring_cidrs: NotRequired[list[str]]
    """Networks allowed to scrape the gateways' node-exporter on `exporter_port` (TCP). Default none."""
    exporter_port: NotRequired[int]
    """node-exporter's port on every gateway. Default 9100."""
    dynamic_silence_alert_seconds: NotRequired[int]
    """How long a site with `endpoint: 'dynamic'` may go without a handshake before WgMeshDynamicSiteSilent fires
    (240..604800, and at least 180 + persistent_keepalive). Default 2 x 180 + 4 x persistent_keepalive. Monitoring
    only: `wg-mesh monitoring` renders it into the rules."""
    operator_access: NotRequired[OperatorAccess]
    """'none' (default) or 'cloud': reach the gateways through AWS Session Manager and GCP IAP, no open SSH port."""
    protect: NotRequired[bool]
    """Protect the public addresses and keys from `destroy` or a removed site. Default false."""
    rotation_lead_seconds: NotRequired[int]
    """`delivery: 'live'`: a rotated key becomes valid this long after `pulumi up` made it, on every gateway at
    once (60..86400). Default 120."""
    delivery: NotRequired[Delivery]
    """How gateways get their peers and key: 'user-data' (default; read at first boot, so a change replaces the
    cloud gateways) or 'live' (signed documents applied in place by the gateway agent)."""
    signing_key_epoch: NotRequired[int]
    """`delivery: 'live'`: bump to replace the mesh's document signing key (replaces every cloud gateway)."""
    private_paths: NotRequired[list[PrivatePathArgs]]
    """Sites that reach each other over private paths (needs `delivery: 'live'`). Default none."""
    relay: NotRequired[str]
    """The cloud site whose gateway relays the pairs with no direct path (two `endpoint: 'dynamic'` sites), source
    addresses kept. Default: the first cloud site in `sites` order."""


class SiteOutputs(TypedDict):
    """What a program needs of one site to wire the rest of itself (Mesh.site_outputs)."""

    cloud: Cloud
    """The site's cloud: 'aws', 'gcp' or 'static'."""
    public_ip: str
    """The site's public address: the Elastic IP, the GCP static address or a static site's endpoint."""
    overlay_ip: str
    """The site's gateway address on the mesh."""
    public_key: str
    """The site's WireGuard public key."""
    cidrs: list[str]
    """The networks behind the site."""
    security_group_id: NotRequired[str]
    """aws: the gateways' security group (allow your workloads' traffic from it)."""
    network_interface_id: NotRequired[str]
    """aws: gateway a's primary network interface (a route target)."""
    instance_self_link: NotRequired[str]
    """gcp: gateway a's instance."""
    network_tag: NotRequired[str]
    """gcp: the gateways' network tag (the target of the mesh's firewall rules)."""


class MeshConfigError(ConfigError, pulumi.RunError):
    """An invalid MeshArgs: every problem, field path first. A RunError, so `pulumi up` prints it without a
    traceback; a ConfigError (ValueError), so a program can catch it as the stack file's errors."""


def _is_input(value: object) -> bool:
    return isinstance(value, pulumi.Output) or inspect.isawaitable(value)


def _carried(value: Any, path: str, refused: dict[str, str]) -> Any:
    """`value` with every Input (an Output or an awaitable) in it as the model carries one (Deferred, whose repr says
    what it is: an Output's str() is a warning, not a value); each at a key that does not take one, in `refused`."""
    if _is_input(value):
        if not _TAKES_INPUT.fullmatch(path):
            refused[path] = (
                f"{path}: given an Output, but it must be known when the program runs (it decides which resources "
                "exist, what they are named and what is rendered); docs/how-to/component-inputs.md lists the keys "
                "that take one"
            )
        return Deferred(value)
    if isinstance(value, Mapping):
        return {key: _carried(item, f"{path}.{key}" if path else str(key), refused) for key, item in value.items()}
    if isinstance(value, list):
        return [_carried(item, f"{path}[{i}]", refused) for i, item in enumerate(value)]
    return value


# The paths at which an Input is carried to the resources: INPUT_KEYS, and INPUT_LIST_KEYS' items.
_TAKES_INPUT = re.compile(rf"sites\[\d+\]\.(?:{'|'.join(INPUT_KEYS)}|(?:{'|'.join(INPUT_LIST_KEYS)})\[\d+\])")


def to_config(args: MeshArgs | Mapping[str, Any], scope: tuple[str, str] | None = None) -> MeshConfig:
    """The validated mesh of `args` (a MeshArgs or a stack file's value), or MeshConfigError listing every problem.
    An Output where the mesh cannot take one is one problem naming its key (the model's own message about the same
    key, which could only say that it is not a string, is left out). scope: the Pulumi project and stack (limits that
    depend on them are checked for these; None: an estimate)."""
    refused: dict[str, str] = {}
    raw = _carried(args, "", refused) if isinstance(args, Mapping) else args
    try:
        config = load_mesh(raw) if scope is None else load_mesh(raw, project=scope[0], stack=scope[1])
    except ConfigError as exc:
        rest = [p for p in exc.problems if not any(p.startswith(tuple(f"{k}{c}" for c in ":.[")) for k in refused)]
        raise MeshConfigError([*refused.values(), *rest]) from None
    if refused:
        raise MeshConfigError(list(refused.values()))
    return config
