"""`wg-mesh cost --stack S`: what a stack's own gateways cost a month while idle, from the dated prices.

Per cloud site: its gateways (`gateways`: 1, or 2 for an HA pair) at the hourly price of its own instance type in its
own region, and one public IPv4 address per gateway (docs/ha.md: each gateway of a pair has one while the other holds
the site's address). The instance's price is the price file's (`--prices`: yours first, then wg_mesh/tools/prices.yaml)
under its regional key (`aws_c6i_2xlarge_eu_west_1`), else the bundled table's (wg_mesh.tools.instanceprices: every
commercial region its source covers). A static site is the user's own host: not priced. A price neither has (a region
the source leaves out, a type it does not list) is refused by name with the reason and the key that would give it,
never guessed: the caller prints the problems instead of a total. Traffic is not counted here (it depends on where it
flows): the built-in comparison (`wg-mesh cost` without --stack) prices internet egress per TB. Pure arithmetic
and text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wg_mesh.config import AwsSite, ConfigError, GcpSite, MeshConfig
from wg_mesh.config import relay as relaying
from wg_mesh.config.sites import DEFAULT_AWS_INSTANCE_TYPE, DEFAULT_GCP_INSTANCE_TYPE
from wg_mesh.tools import instanceprices
from wg_mesh.tools.prices import PriceFile, region_key, slug

ADDRESS_PRICE = {"aws": "aws_public_ipv4", "gcp": "gcp_external_ipv4"}
ADDRESS_LABEL = {"aws": "public IPv4 address", "gcp": "external IPv4 address"}
DEFAULT_TYPES = {"aws": DEFAULT_AWS_INSTANCE_TYPE, "gcp": DEFAULT_GCP_INSTANCE_TYPE}


def instance_price_key(cloud: str, instance_type: str, region: str) -> str:
    """The price file's name for an instance type in a region: aws_c6i_2xlarge_us_east_1."""
    return region_key(f"{cloud}_{slug(instance_type)}", region)


def is_instance_key(key: str) -> bool:
    """Whether `key` names an instance price in a commercial region (`aws_c6i_2xlarge_eu_west_1`): a price file of
    one's own may give one without its `region`."""
    table = instanceprices.load()
    return any(
        key.startswith(f"{cloud}_") and key.endswith(f"_{slug(region)}")
        for cloud, section in table.clouds.items()
        for region in section.regions
    )


def address_price_key(prices: PriceFile, cloud: str, region: str) -> str:
    """The region's own address price if the file has one, else the cloud's (no region: the same everywhere)."""
    own = region_key(ADDRESS_PRICE[cloud], region)
    return own if own in prices.prices else ADDRESS_PRICE[cloud]


@dataclass(frozen=True)
class Line:
    site: str
    label: str
    count: int
    price: str  # the price's key (the price file's, or the bundled table's for the same type and region)
    usd_per_hour: float
    source: str = ""  # where the price is from, when not the price file

    def monthly(self, hours_per_month: float) -> float:
        return self.count * self.usd_per_hour * hours_per_month


def _hourly(prices: PriceFile, key: str, needed: str, origin: str) -> tuple[float | None, str | None]:
    price = prices.prices.get(key)
    if price is None:
        return None, f"{origin} (as of {prices.as_of}) has no price {key} ({needed})"
    if price.unit != "USD/hour":
        return None, f"{origin}: prices.{key} is in {price.unit}, not USD/hour ({needed})"
    if price.value is None:
        return None, f"{origin}: prices.{key} was not found in the stored sources ({needed}): {price.not_found}"
    return price.value, None


def _instance(
    prices: PriceFile, cloud: str, kind: str, region: str, origin: str
) -> tuple[float | None, str, str | None]:
    """The hourly price of `kind` in `region`: (value, where from, problem)."""
    key = instance_price_key(cloud, kind, region)
    if key in prices.prices:
        value, problem = _hourly(prices, key, f"{cloud} {kind} in {region}", origin)
        return value, "", problem
    table = instanceprices.load()
    value = table.cloud(cloud).hourly(kind, region)
    if value is not None:
        return value, f"{instanceprices.TABLE_FILE.name} ({table.cloud(cloud).kind}, read {table.as_of})", None
    why = table.cloud(cloud).missing(kind, region)
    return (
        None,
        "",
        (
            f"no price for {cloud} {kind} in {region}: {why}; give it as prices.{key} (unit: USD/hour, value, source, "
            "read) in a price file of your own, passed with --prices"
        ),
    )


def site_lines(
    site: AwsSite | GcpSite, prices: PriceFile, origin: str, where: str, *, instance_type: str | None = None
) -> tuple[list[Line], list[str]]:
    """A cloud site's idle items, or the problems naming what the prices lack for it."""
    kind = instance_type or site.instance_type
    lines, problems = [], []
    value, source, problem = _instance(prices, site.cloud, kind, site.region, origin)
    if problem is not None:
        problems.append(f"{where}: {problem}")
    else:
        assert value is not None
        key = instance_price_key(site.cloud, kind, site.region)
        lines.append(Line(site.name, f"gateway {kind}", site.gateways, key, value, source))
    address = address_price_key(prices, site.cloud, site.region)
    value, problem = _hourly(prices, address, f"{site.cloud} {ADDRESS_LABEL[site.cloud]}", origin)
    if problem is not None:
        problems.append(f"{where}: {problem}")
    else:
        assert value is not None
        lines.append(Line(site.name, f"gateway's {ADDRESS_LABEL[site.cloud]}", site.gateways, address, value))
    return lines, problems


def stack_lines(cfg: MeshConfig, prices: PriceFile, origin: str) -> list[Line]:
    """Every cloud site's idle items; ConfigError listing everything the price file lacks for this stack."""
    lines: list[Line] = []
    problems: list[str] = []
    for i, site in enumerate(cfg.sites):
        if isinstance(site, AwsSite | GcpSite):
            got, missing = site_lines(site, prices, origin, f"sites[{i}] ({site.name})")
            lines += got
            problems += missing
    if problems:
        raise ConfigError(problems)
    return lines


def default_idle(prices: PriceFile, origin: str, regions: dict[str, list[str]]) -> dict[str, float | str]:
    """The idle month of one gateway at its cloud's default instance type with its address, in each of `regions`
    (per cloud), or why not."""
    out: dict[str, float | str] = {}
    for cloud, kind in DEFAULT_TYPES.items():
        for region in regions.get(cloud, []):
            value, _, problem = _instance(prices, cloud, kind, region, origin)
            address, problem2 = _hourly(prices, address_price_key(prices, cloud, region), f"{cloud} address", origin)
            problems = [p for p in (problem, problem2) if p]
            total = ((value or 0.0) + (address or 0.0)) * prices.hours_per_month
            out[f"{cloud} {kind} in {region}"] = "; ".join(problems) if problems else round(total, 2)
    return out


def _stack_regions(cfg: MeshConfig) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for site in cfg.sites:
        if isinstance(site, AwsSite | GcpSite) and site.region not in out.get(site.cloud, []):
            out.setdefault(site.cloud, []).append(site.region)
    return {cloud: sorted(regions) for cloud, regions in out.items()}


def site_cloud(cfg: MeshConfig, name: str) -> str:
    return next(site.cloud for site in cfg.sites if site.name == name)


def _source(table: instanceprices.InstanceTable, cloud: str) -> str:
    section = table.cloud(cloud)
    kind = "a third party's copy of the provider's list" if section.kind == "third-party" else "the provider's list"
    return f"{section.source}, {kind}, read {section.read}"


def render(cfg: MeshConfig, stack: str, prices: PriceFile, origin: str) -> str:
    lines = stack_lines(cfg, prices, origin)
    hours = prices.hours_per_month
    out = [
        f"Idle monthly cost in USD of stack {stack}'s gateways: {hours:g} h a month, list prices as of {prices.as_of} "
        f"({origin}).",
        "",
        "| site | item | count | rate | USD/month |",
        "|---|---|---:|---|---:|",
    ]
    for line in lines:
        out.append(
            f"| {line.site} | {line.label} | {line.count} | {line.count} × {hours:g} h × ${line.usd_per_hour:g} "
            f"| {line.monthly(hours):,.2f} |"
        )
    static = [site.name for site in cfg.sites if site.cloud == "static"]
    if static:
        out.append(f"| {', '.join(static)} | your own host{'s' if len(static) > 1 else ''}: not priced | | | 0.00 |")
    out.append(f"| **total** | | | | **{sum(line.monthly(hours) for line in lines):,.2f}** |")
    defaults = "; ".join(
        f"{name} + its address: {value if isinstance(value, str) else f'${value:,.2f}'}"
        for name, value in default_idle(prices, origin, _stack_regions(cfg)).items()
    )
    table = instanceprices.load()
    bundled = sorted({(line.site, site_cloud(cfg, line.site)) for line in lines if line.source})
    if bundled:
        out += ["", "Instance prices the price file does not give, from the bundled table (wg_mesh/tools/"
                f"{instanceprices.TABLE_FILE.name}, as of {table.as_of}): "
                + "; ".join(f"{site} ({_source(table, cloud)})" for site, cloud in bundled) + "."]  # fmt: skip
    out += [
        "",
        f"Defaults, one gateway idle for a month: {defaults}.",
        "Not counted: traffic (internet egress per TB; `wg-mesh cost` prices it for "
        f"{prices.regions.aws} ↔ {prices.regions.gcp}), disks, cross-zone traffic, the clouds' stores and logs, "
        "support plans, taxes, commitments, discounts.",
    ]
    relay = relaying.relay_name(cfg.sites, cfg.relay)
    if relay is not None:
        pairs = ", ".join(f"{a} ↔ {b}" for a, b in relaying.relayed_pairs(cfg.sites))
        out.append(
            f"Relayed through {relay} ({pairs}): that traffic is {relay}'s internet egress once and takes twice its "
            f"volume of {relay}'s bandwidth (docs/how-to/static-sites.md, relays)."
        )
    return "\n".join(out) + "\n"


def as_json(cfg: MeshConfig, stack: str, prices: PriceFile, origin: str) -> dict[str, Any]:
    lines = stack_lines(cfg, prices, origin)
    hours = prices.hours_per_month
    return {
        "stack": stack,
        "as_of": prices.as_of.isoformat(),
        "currency": prices.currency,
        "hours_per_month": hours,
        "items": [
            {
                "site": li.site,
                "label": li.label,
                "count": li.count,
                "price": li.price,
                "usd_per_hour": li.usd_per_hour,
                "usd_per_month": round(li.monthly(hours), 2),
                "source": li.source or origin,
            }
            for li in lines
        ],
        "static_sites": [site.name for site in cfg.sites if site.cloud == "static"],
        "total_usd_per_month": round(sum(li.monthly(hours) for li in lines), 2),
        "defaults_idle_usd_per_month": default_idle(prices, origin, _stack_regions(cfg)),
    }
