"""docs/reference/config.md: every key of `wg-mesh:mesh`, from the config model's fields and their descriptions.

A field without a description is an error (`MissingDescription`): every key a user can write is documented."""

from __future__ import annotations

import types
import typing
from ipaddress import IPv4Address, IPv4Network
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from refdocs import md
from wg_mesh.config import AwsSite, Deferred, GcpSite, MeshConfig, StaticSite
from wg_mesh.config.quotas import AwsQuotas
from wg_mesh.config.sites import SiteBase
from wg_mesh.config.underlay import PrivatePath
from wg_mesh.tools import cost, instanceprices, prices, stackcost

SOURCE = "the config model (wg_mesh/config/: each field's `description`)"
KINDS: tuple[tuple[str, type[SiteBase]], ...] = (("aws", AwsSite), ("gcp", GcpSite), ("static", StaticSite))
# Nested models: where their table is.
ANCHORS: dict[type[BaseModel], str] = {
    AwsSite: "aws-sites",
    GcpSite: "gcp-sites",
    StaticSite: "static-sites",
    PrivatePath: "private-paths",
    AwsQuotas: "aws-quotas",
}
NAMES = {bool: "boolean", int: "integer", str: "string", IPv4Network: "IPv4 CIDR", IPv4Address: "IPv4 address"}


class MissingDescription(ValueError):
    pass


def _bounds(metadata: typing.Iterable[Any]) -> str:
    parts = {}
    for item in metadata:
        for cls, key in (
            (annotated_types.Ge, "ge"),
            (annotated_types.Le, "le"),
            (annotated_types.MinLen, "min_length"),
            (annotated_types.Gt, "gt"),
            (annotated_types.Lt, "lt"),
        ):
            if isinstance(item, cls):
                parts[key] = getattr(item, key)
        if isinstance(item, FieldInfo):  # Annotated[int, Field(ge=..., le=...)]
            parts.update(_bounds_dict(item.metadata))
    if "ge" in parts and "le" in parts:
        return f" {parts['ge']}..{parts['le']}"
    if "ge" in parts:
        return f" ≥ {parts['ge']}"
    if "min_length" in parts:
        return f" (at least {parts['min_length']})"
    return ""


def _bounds_dict(metadata: typing.Iterable[Any]) -> dict[str, Any]:
    out = {}
    for item in metadata:
        for key in ("ge", "le", "min_length"):
            if hasattr(item, key):
                out[key] = getattr(item, key)
    return out


def type_text(annotation: Any, metadata: typing.Iterable[Any] = ()) -> str:
    """A readable type: `integer 1..65535`, `list of IPv4 CIDR`, `` `auto` or integer 1280..1440 ``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0], [*args[1:], *metadata])
    if origin in (Union, types.UnionType):
        parts = [type_text(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + _bounds(metadata)
    if origin is Literal:
        return " or ".join(md.code(str(a)) for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}" + _bounds(metadata)
    if annotation is Deferred:
        return "an Output (`MeshArgs` only)"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{ANCHORS[annotation]})" if annotation in ANCHORS else annotation.__name__
    return NAMES.get(annotation, getattr(annotation, "__name__", str(annotation))) + _bounds(metadata)


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return f"[AWS's defaults](#{ANCHORS.get(type(value), '')})"
    else:
        value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return md.code("true" if value else "false")
    if isinstance(value, list):
        return md.code("[]") if not value else md.code(str(value))
    return md.code(str(value))


def rows(model: type[BaseModel], names: typing.Iterable[str] | None = None) -> list[list[str]]:
    """key, type, default, description: one row per field (raises MissingDescription for a field without one)."""
    out = []
    for name in names if names is not None else model.model_fields:
        info = model.model_fields[name]
        if not (info.description or "").strip():
            raise MissingDescription(
                f"{model.__name__}.{name} has no description: give it Field(description=...) in wg_mesh/config/ "
                f"(every config key is documented in docs/reference/config.md)"
            )
        out.append(
            [md.code(name), type_text(info.annotation, info.metadata), default_text(info), info.description or ""]
        )
    return out


COLUMNS = ("key", "type", "default", "description")


def _differs(kind: type[SiteBase], name: str) -> bool:
    return name not in SiteBase.model_fields or repr(kind.model_fields[name]) != repr(SiteBase.model_fields[name])


def idle_cost() -> list[str]:
    """The defaults' idle month in every commercial region (wg_mesh.tools.stackcost.default_idle), or why not."""
    priced, table = prices.load(), instanceprices.load()
    lines = [
        "## What the default instance types cost idle",
        "",
        f"One gateway at its cloud's default `instance_type` and its public address, running a month "
        f"({priced.hours_per_month:g} h) with no traffic, at list prices (instances: wg_mesh/tools/"
        f"{instanceprices.TABLE_FILE.name}, as of {table.as_of}; addresses: {cost.DEFAULT_SOURCE}, as of "
        f"{priced.as_of}); an HA pair (`gateways: 2`) costs twice that. `wg-mesh cost --stack NAME` prices a stack's "
        "own sites and types; where the bundled prices have none it says why, and a price file of your own "
        "(`--prices`) fills it in.",
        "",
    ]
    for cloud, section in table.clouds.items():
        idle = stackcost.default_idle(priced, cost.DEFAULT_SOURCE, {cloud: list(section.regions)})
        kind = stackcost.DEFAULT_TYPES[cloud]
        rows = [
            [name.rsplit(" in ", 1)[1], "no price: " + section.missing(kind, name.rsplit(" in ", 1)[1])
             if isinstance(value, str) else f"{value:,.2f}"]
            for name, value in idle.items()
        ]  # fmt: skip
        lines += [
            f"{cloud.upper()} `{kind}` ({len(section.covered())} of {len(section.regions)} regions priced; source: "
            f"{section.source}, {section.kind}, read {section.read}; regions: {section.regions_source}):",
            "",
            *md.table(["region", "USD a month, idle"], rows),
        ]
    return lines


def render() -> str:
    common = [n for n in SiteBase.model_fields if not any(_differs(kind, n) for _, kind in KINDS)]
    lines = md.header("Configuration keys", SOURCE)
    lines += [
        "The keys of a stack file's `wg-mesh:mesh` value (`Pulumi.<stack>.yaml`), which are also the keys of",
        "`MeshArgs` for the component. `wg-mesh validate --stack NAME` checks a stack file against them.",
        "",
        "## Mesh",
        "",
        *md.table(COLUMNS, rows(MeshConfig)),
        "## Every site",
        "",
        "Each item of `sites` has these keys, and those of its `cloud` below.",
        "",
        *md.table(COLUMNS, rows(SiteBase, common)),
    ]
    titles = {"aws": "AWS sites", "gcp": "GCP sites", "static": "Static sites"}
    for tag, kind in KINDS:
        # its own keys, and a shared key some other kind redefines (static sites' optional `cidrs`)
        own = sorted((n for n in kind.model_fields if n not in common), key=lambda n: n != "cloud")
        lines += [f"## {titles[tag]}", "", f"`cloud: {tag}`.", "", *md.table(COLUMNS, rows(kind, own))]
    lines += idle_cost()
    lines += [
        "## Private paths",
        "",
        "Each item of `private_paths`.",
        "",
        *md.table(COLUMNS, rows(PrivatePath)),
        "## AWS quotas",
        "",
        "An AWS site's `quotas`: the account's VPC quotas in the site's region, where they differ from AWS's defaults.",
        "",
        *md.table(COLUMNS, rows(AwsQuotas)),
    ]
    return md.page(lines)
