"""The component's typed inputs and outputs: what a Pulumi program passes to `Mesh` and reads back from it.

`MeshArgs` has the keys of the stack file's `wg-mesh:mesh` (README, "Config reference"), so a stack file's value
is a `MeshArgs` as it is, and a program builds one the same way. The existing-network keys (vpc_id, subnet_id,
standby_subnet_id, route_table_ids' items, network, subnetwork) also take a `pulumi.Input[str]`: an output of the
program's own VPC, subnet, route table or network. Everything else must be known when the program runs (it decides
which resources exist and what they are named); `to_config` validates it with the config model (wg_mesh.config: the
same messages as for a stack file) before any resource is declared.

No `from __future__ import annotations` here: Pulumi's schema inference (pulumi.provider.experimental, wg_mesh.provider)
reads these annotations at run time.
"""

import inspect
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi

from wg_mesh.config import ConfigError, Deferred, MeshConfig
from wg_mesh.plan.validate import load_mesh

# The keys whose value may come from the user's own resources (known only at deploy time).
INPUT_KEYS = ("vpc_id", "subnet_id", "standby_subnet_id", "network", "subnetwork")
INPUT_LIST_KEYS = ("route_table_ids",)


class SiteArgs(TypedDict):
    """One site of the mesh. `cloud` (aws, gcp or static) says which other keys apply (README, "Config reference")."""

    name: str
    cloud: str
    overlay_ip: str
    cidrs: list[str]
    masquerade: NotRequired[bool]
    key_epoch: NotRequired[int]
    underlay_mtu: NotRequired[int]
    previous_names: NotRequired[list[str]]
    private_ip: NotRequired[str]  # on a private path (README, "Private paths")
    gateways: NotRequired[int]
    standby_zone: NotRequired[str]
    # aws and gcp
    region: NotRequired[str]
    zone: NotRequired[str]
    instance_type: NotRequired[str]
    image: NotRequired[str]
    # aws
    vpc_id: NotRequired[pulumi.Input[str]]
    subnet_id: NotRequired[pulumi.Input[str]]
    route_table_ids: NotRequired[list[pulumi.Input[str]]]
    standby_subnet_id: NotRequired[pulumi.Input[str]]
    profile: NotRequired[str]
    assume_role_arn: NotRequired[str]
    account_id: NotRequired[str]
    ssm_kms_key_arn: NotRequired[str]  # delivery: live (docs/security.md)
    quotas: NotRequired[dict[str, int]]  # rules_per_security_group, routes_per_route_table (wg_mesh.config.quotas)
    # gcp
    project: NotRequired[str]
    network: NotRequired[pulumi.Input[str]]
    subnetwork: NotRequired[pulumi.Input[str]]
    impersonate_service_account: NotRequired[str]
    workload_tags: NotRequired[list[str]]
    workload_service_accounts: NotRequired[list[str]]
    workload_scope: NotRequired[str]
    # static
    endpoint: NotRequired[str]


class PrivatePathArgs(TypedDict):
    """Sites that reach each other over a private path (README, "Private paths")."""

    name: str
    sites: list[str]
    mtu: NotRequired[int]
    kind: NotRequired[str]  # interconnect, peering, vpn or wan


class MeshArgs(TypedDict):
    """The whole mesh: the keys of the stack file's `wg-mesh:mesh`."""

    overlay_cidr: str
    sites: list[SiteArgs]
    listen_port: NotRequired[int]
    mtu: NotRequired[Any]  # 'auto' or an integer
    persistent_keepalive: NotRequired[int]
    masquerade: NotRequired[bool]
    monitoring_cidrs: NotRequired[list[str]]
    exporter_port: NotRequired[int]
    operator_access: NotRequired[str]
    protect: NotRequired[bool]
    rotation_lead_seconds: NotRequired[int]
    delivery: NotRequired[str]
    signing_key_epoch: NotRequired[int]
    private_paths: NotRequired[list[PrivatePathArgs]]


class SiteOutputs(TypedDict):
    """What a program needs of one site to wire the rest of itself (Mesh.site_outputs)."""

    cloud: str
    public_ip: str
    overlay_ip: str
    public_key: str
    cidrs: list[str]
    security_group_id: NotRequired[str]  # aws: the gateways' security group
    network_interface_id: NotRequired[str]  # aws: gateway a's primary network interface
    instance_self_link: NotRequired[str]  # gcp: gateway a's instance
    network_tag: NotRequired[str]  # gcp: the gateways' network tag (the target of the mesh's firewall rules)


class MeshConfigError(ConfigError, pulumi.RunError):
    """An invalid MeshArgs: every problem, field path first. A RunError, so `pulumi up` prints it without a
    traceback; a ConfigError (ValueError), so a program can catch it as the stack file's errors."""


def _deferred(value: object) -> object:
    """A user's Input (an Output or an awaitable) as the model carries it; anything else as it is, to be checked."""
    return Deferred(value) if isinstance(value, pulumi.Output) or inspect.isawaitable(value) else value


def raw_site(site: Mapping[str, Any]) -> Any:
    if not isinstance(site, Mapping):
        return site  # the model says what is wrong with it
    raw = dict(site)
    for key in INPUT_KEYS:
        if key in raw:
            raw[key] = _deferred(raw[key])
    for key in INPUT_LIST_KEYS:
        if isinstance(raw.get(key), list):
            raw[key] = [_deferred(item) for item in raw[key]]
    return raw


def to_config(args: MeshArgs | Mapping[str, Any]) -> MeshConfig:
    """The validated mesh of `args` (a MeshArgs or a stack file's value), or MeshConfigError listing every problem."""
    raw: Any = args
    if isinstance(args, Mapping):
        raw = dict(args)
        if isinstance(raw.get("sites"), list):
            raw["sites"] = [raw_site(site) for site in raw["sites"]]
    try:
        return load_mesh(raw)
    except ConfigError as exc:
        raise MeshConfigError(exc.problems) from None
