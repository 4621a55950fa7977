"""`python -m wg_mesh cost`: what joining us-east-1 and us-east4 costs a month, four ways, from
wg_mesh/tools/prices.yaml.

The options: AWS Interconnect - multicloud with Google's Partner Cross-Cloud Interconnect for AWS; AWS
Site-to-Site VPN to GCP HA VPN; wg-mesh over the internet (the dev stack's two gateways); wg-mesh over the
interconnect as a private path. Each is a list of items: hours of something at an hourly price, or the month's
traffic through a (tiered) per-volume price. A price the stored sources do not give makes its item "?" and the
total "known part + ?": the table never guesses. Pure arithmetic and text; the CLI wiring is at the bottom.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wg_mesh.config import ConfigError
from wg_mesh.tools import instanceprices, stackcost
from wg_mesh.tools.prices import BYTES_PER_UNIT, PRICE_FILE, Price, PriceFile, apply_overrides, load, overlay
from wg_mesh.tools.stackfile import load as load_stack
from wg_mesh.tools.stackfile import stack_file

BYTES_PER_TB = 10**12
DEFAULT_TB = (1.0, 10.0, 100.0)
MAX_TB = 1_000_000.0  # an exabyte a month: past any price list's last tier
DEFAULT_SOURCE = (
    f"wg_mesh/{PRICE_FILE.parent.name}/{PRICE_FILE.name}"  # as the table names it: wg_mesh/tools/prices.yaml
)
Side = Literal["aws", "gcp"]  # the cloud the traffic leaves: aws = AWS -> GCP, gcp = GCP -> AWS
DIRECTIONS: dict[str, tuple[Side, ...]] = {"both": ("aws", "gcp"), "aws-to-gcp": ("aws",), "gcp-to-aws": ("gcp",)}
THIRD_PARTY, MISSING, GIVEN = "†", "?", "‡"


@dataclass(frozen=True)
class Hours:
    """`count` of something billed every hour of the month."""

    price: str
    count: int
    label: str


@dataclass(frozen=True)
class Traffic:
    """The month's traffic leaving `side`'s cloud, through a per-volume price."""

    price: str
    side: Side
    label: str


@dataclass(frozen=True)
class Free:
    """An item the provider says is not charged (shown, so a reader sees it was not forgotten)."""

    label: str


Item = Hours | Traffic | Free


@dataclass(frozen=True)
class Option:
    key: str
    title: str
    items: tuple[Item, ...]


_INTERCONNECT = (
    Hours("aws_interconnect_link", 1, "AWS Interconnect – multicloud, 1 interconnect"),
    Hours("gcp_partner_cci_transport", 1, "Partner Cross-Cloud Interconnect for AWS, 1 transport"),
    Free('AWS → GCP data: no charge (AWS: "no separate charges for the data transferred")'),
    Traffic("gcp_partner_cci_egress", "gcp", "GCP → AWS data over the interconnect"),
)
_GATEWAYS = (
    Hours("aws_c6i_2xlarge_us_east_1", 1, "AWS gateway c6i.2xlarge"),
    Hours("aws_public_ipv4", 1, "AWS gateway's public IPv4 address"),
    Hours("gcp_n2_standard_8_us_east4", 1, "GCP gateway n2-standard-8"),
    Hours("gcp_external_ipv4", 1, "GCP gateway's external IPv4 address"),
)
_INTERNET = (
    Traffic("aws_internet_egress", "aws", "AWS → GCP data, internet egress"),
    Traffic("gcp_internet_egress_premium", "gcp", "GCP → AWS data, Premium Tier internet egress"),
)
OPTIONS = (
    Option("interconnect", "AWS Interconnect – multicloud + Partner Cross-Cloud Interconnect", _INTERCONNECT),
    Option(
        "vpn",
        "AWS Site-to-Site VPN ↔ GCP HA VPN (2 connections, 4 tunnels)",
        (
            Hours("aws_s2s_vpn_connection", 2, "AWS Site-to-Site VPN connections"),
            Hours("gcp_ha_vpn_tunnel", 4, "GCP HA VPN tunnels"),
            *_INTERNET,
        ),
    ),
    Option("wg-mesh-internet", "wg-mesh over the internet (c6i.2xlarge + n2-standard-8)", _GATEWAYS + _INTERNET),
    Option("wg-mesh-private", "wg-mesh over the interconnect (private path)", _GATEWAYS + _INTERCONNECT),
)
PRICE_KEYS = tuple(dict.fromkeys(i.price for o in OPTIONS for i in o.items if not isinstance(i, Free)))


@dataclass(frozen=True)
class Amount:
    """An item's or an option's monthly USD: the part whose prices are known, and the prices that are not."""

    known: float
    missing: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.missing


def item_cost(item: Item, prices: PriceFile, tb: float, sides: Sequence[Side]) -> Amount:
    if isinstance(item, Free):
        return Amount(0.0)
    price = prices.prices[item.price]
    if not price.found:
        return Amount(0.0, (item.price,))
    if isinstance(item, Hours):
        assert price.value is not None
        return Amount(item.count * prices.hours_per_month * price.value)
    if item.side not in sides:
        return Amount(0.0)
    return Amount(price.per_volume(tb * BYTES_PER_TB / BYTES_PER_UNIT[price.unit]))


def option_cost(option: Option, prices: PriceFile, tb: float, sides: Sequence[Side]) -> Amount:
    parts = [item_cost(item, prices, tb, sides) for item in option.items]
    missing = tuple(dict.fromkeys(key for part in parts for key in part.missing))
    return Amount(sum(part.known for part in parts), missing)


def average_mbit_s(tb: float, hours_per_month: float) -> float:
    return tb * BYTES_PER_TB * 8 / (hours_per_month * 3600) / 1e6


# --- text ------------------------------------------------------------------------------------------------------


def _usd(value: float) -> str:
    return f"{value:,.2f}"


def _tb(tb: float) -> str:
    return f"{tb:g} TB"


def _amount(amount: Amount) -> str:
    if amount.complete:
        return _usd(amount.known)
    return MISSING if amount.known == 0 else f"{_usd(amount.known)} + {MISSING}"


def _mark(price: Price) -> str:
    if not price.found:
        return MISSING
    return {"third-party": THIRD_PARTY, "command line": GIVEN}.get(price.kind, "")


def _rate(item: Item, prices: PriceFile) -> str:
    if isinstance(item, Free):
        return ""
    price = prices.prices[item.price]
    if isinstance(item, Hours):
        value = MISSING if price.value is None else f"${price.value:g}"
        return f"{item.count} × {prices.hours_per_month:g} h × {value}{_mark(price) if price.found else ''}"
    if not price.found:
        return f"{MISSING} {price.unit}"
    if price.tiers is None:
        return f"${price.value:g}/{price.unit.removeprefix('USD/')}{_mark(price)}"
    unit = price.unit.removeprefix("USD/")
    paid = [tier.price for tier in price.tiers if tier.price > 0] or [0.0]
    free = f", first {price.free:g} {unit} free" if price.free else ""
    return f"tiered, ${paid[0]:g} … ${paid[-1]:g}/{unit}{free}{_mark(price)}"


def _items() -> list[tuple[Item, list[int]]]:
    """Every distinct item once, with the numbers (1-based) of the options that include it."""
    used: dict[Item, list[int]] = {}
    for number, option in enumerate(OPTIONS, 1):
        for item in option.items:
            used.setdefault(item, []).append(number)
    return list(used.items())


def render(prices: PriceFile, tbs: Sequence[float], direction: str, source: str) -> str:
    sides = DIRECTIONS[direction]
    way = {"both": "each way, AWS → GCP and GCP → AWS", "aws-to-gcp": "AWS → GCP only", "gcp-to-aws": "GCP → AWS only"}
    volumes = ", ".join(f"{tb:g}" for tb in tbs)
    rates = " / ".join(f"{average_mbit_s(tb, prices.hours_per_month):,.1f}" for tb in tbs)
    cols = " | ".join(_tb(tb) for tb in tbs)
    align = "|".join("---:" for _ in tbs)
    lines = [
        f"Monthly cost in USD, AWS {prices.regions.aws} ↔ GCP {prices.regions.gcp}, {prices.hours_per_month:g} h a "
        f"month, list prices as of {prices.as_of} ({source}).",
        f"Traffic: {volumes} TB (10^12 bytes) a month, {way[direction]}: {rates} Mbit/s on average.",
        f"{MISSING}: a price not found in the stored sources (not counted); {THIRD_PARTY}: a third party's copy of "
        "the provider's price.",
        "",
        f"| # | option | {cols} |",
        f"|---|---|{align}|",
    ]
    for number, option in enumerate(OPTIONS, 1):
        cells = " | ".join(_amount(option_cost(option, prices, tb, sides)) for tb in tbs)
        lines.append(f"| {number} | **{option.title}** | {cells} |")
    lines += ["", f"| item | rate | in | {cols} |", f"|---|---|---|{align}|"]
    for item, numbers in _items():
        cells = " | ".join(_amount(item_cost(item, prices, tb, sides)) for tb in tbs)
        lines.append(f"| {item.label} | {_rate(item, prices)} | {', '.join(map(str, numbers))} | {cells} |")
    lines += ["", *_footnotes(prices)]
    return "\n".join(lines) + "\n"


def _used(prices: PriceFile) -> list[str]:
    return [key for key in PRICE_KEYS if key in prices.prices]


_HOURLY = {i.price for o in OPTIONS for i in o.items if isinstance(i, Hours)}


def check_keys(prices: PriceFile, origin: str) -> None:
    """A price file must price every item of every option (a missing price is `value: null`, not absent), name no
    price no option uses (a typo would leave the intended one absent) but the regional prices `cost --stack` reads
    (those with a `region`), and give each in a unit its items can use:
    an hourly item's price per hour, a traffic item's per volume. Every problem at once."""
    problems = [
        f"{origin}: prices.{key}: required (an option uses it)" for key in PRICE_KEYS if key not in prices.prices
    ]
    for key, price in prices.prices.items():
        if key not in PRICE_KEYS and (price.region is not None or stackcost.is_instance_key(key)):
            continue  # another region's price, for `cost --stack` (its key ends in its region: the model checks it)
        if key not in PRICE_KEYS:
            hint = difflib.get_close_matches(key, PRICE_KEYS, n=1)
            problems.append(
                f"{origin}: prices.{key}: unknown price" + (f" (did you mean {hint[0]!r}?)" if hint else "")
            )
        elif (key in _HOURLY) != (price.unit == "USD/hour"):
            wanted = "USD/hour" if key in _HOURLY else "USD/GB or USD/GiB"
            problems.append(f"{origin}: prices.{key}.unit: {price.unit} cannot price this item: expected {wanted}")
    if problems:
        raise ConfigError(problems)


def _footnotes(prices: PriceFile) -> list[str]:
    used = [(key, prices.prices[key]) for key in _used(prices)]
    notes = [f"{MISSING} not found in the stored sources:"]
    notes += [f"- `{key}` ({price.what or key}): {price.not_found}" for key, price in used if not price.found]
    third = [f"`{key}`" for key, price in used if price.found and price.kind == "third-party"]
    if third:
        notes += ["", f"{THIRD_PARTY} a third party's copy or catalogue of the provider's price: {', '.join(third)}."]
    given = [f"`{key}`" for key, price in used if price.kind == "command line"]
    if given:
        notes += ["", f"{GIVEN} given with --set: {', '.join(given)}."]
    notes += [
        "",
        "Not counted: tunnel overhead (WireGuard adds 60 bytes per packet over IPv4, about 4 % at 1,400-byte "
        "packets; IPsec ESP is similar), disks, cross-zone traffic, support plans, taxes, commitments, discounts.",
    ]
    return notes


def as_json(prices: PriceFile, tbs: Sequence[float], direction: str) -> dict[str, Any]:
    sides = DIRECTIONS[direction]

    def amount(a: Amount) -> dict[str, Any]:
        return {"known_usd": round(a.known, 2), "complete": a.complete, "missing": list(a.missing)}

    options = []
    for option in OPTIONS:
        costs = []
        for tb in tbs:
            items = [
                {
                    "label": item.label,
                    "price": getattr(item, "price", None),
                    **amount(item_cost(item, prices, tb, sides)),
                }
                for item in option.items
            ]
            costs.append({"tb": tb, **amount(option_cost(option, prices, tb, sides)), "items": items})
        options.append({"key": option.key, "title": option.title, "costs": costs})
    return {
        "as_of": prices.as_of.isoformat(),
        "currency": prices.currency,
        "regions": prices.regions.model_dump(),
        "hours_per_month": prices.hours_per_month,
        "direction": direction,
        "tb_per_month": list(tbs),
        "options": options,
        "prices": {key: prices.prices[key].model_dump(mode="json", exclude_none=True) for key in _used(prices)},
    }


# --- command line ----------------------------------------------------------------------------------------------


def _tb_arg(text: str) -> float:
    try:
        tb = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of TB") from None
    if not math.isfinite(tb) or tb <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a volume is a number of TB above 0")
    if tb > MAX_TB:
        raise argparse.ArgumentTypeError(f"{text!r} is above the maximum {MAX_TB:g} TB a month")
    return tb


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tb", type=_tb_arg, nargs="+", default=list(DEFAULT_TB), metavar="TB",
        help="monthly volumes in TB (10^12 bytes) to price (default: 1 10 100)",
    )  # fmt: skip
    parser.add_argument(
        "--direction", choices=sorted(DIRECTIONS), default="both",
        help="both: each volume AWS -> GCP and again GCP -> AWS (default); or one way only",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures and their sources as JSON")
    stack = parser.add_mutually_exclusive_group()
    stack.add_argument("--stack", help="price this stack's own gateways (Pulumi.STACK.yaml here), idle, by site")
    stack.add_argument("--file", type=Path, help="price the gateways of this stack file, idle, by site")
    parser.add_argument(
        "--prices", type=Path, default=PRICE_FILE,
        help="your own prices (the bundled file's shape; only the prices you give are needed): they add to or replace "
        "the bundled ones",
    )  # fmt: skip
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=USD", dest="overrides",
        help="fill in or replace a price that is one value, from a quote (e.g. aws_interconnect_link=1.5); marked ‡",
    )  # fmt: skip


def _duplicates(tbs: Sequence[float]) -> list[str]:
    return [f"--tb: {tb:g} is given more than once" for tb in dict.fromkeys(tbs) if tbs.count(tb) > 1]


def stale_warnings(
    stack: bool, own: tuple[Path, dt.date] | None, today: dt.date, bundled: dt.date | None = None
) -> list[str]:
    """One line per set of prices older than instanceprices.STALE_AFTER_DAYS on `today`: the bundled file's, the
    bundled instance table's (for --stack), the user's own file's."""
    dated = [(f"the bundled prices ({DEFAULT_SOURCE})", bundled or load().as_of)]
    if stack:
        dated.append((f"the bundled instance prices (wg_mesh/tools/{instanceprices.TABLE_FILE.name})",
                      instanceprices.load().as_of))  # fmt: skip
    if own is not None:
        dated.append((f"the prices in {own[0]}", own[1]))
    return [line for what, as_of in dated if (line := instanceprices.staleness(what, as_of, today))]


def run(args: argparse.Namespace, today: dt.date | None = None) -> int:
    problems = _duplicates(args.tb)
    if problems:
        raise ConfigError(problems)
    today = today or dt.date.today()
    prices, own = load(), None
    bundled = prices.as_of
    source = DEFAULT_SOURCE
    if args.prices != PRICE_FILE:
        prices, own_as_of = overlay(prices, args.prices, today)
        own, source = (args.prices, own_as_of), f"{DEFAULT_SOURCE} + {args.prices}"
    stack = getattr(args, "stack", None) is not None or getattr(args, "file", None) is not None
    for line in stale_warnings(stack, own, today, bundled):
        print(line, file=sys.stderr)
    if stack:
        return _run_stack(args, apply_overrides(prices, args.overrides), source)
    check_keys(prices, str(args.prices))
    prices = apply_overrides(prices, args.overrides)
    if args.json:
        print(json.dumps(as_json(prices, args.tb, args.direction), indent=2, ensure_ascii=False, allow_nan=False))
    else:
        sys.stdout.write(render(prices, args.tb, args.direction, source))
    return 0


def _run_stack(args: argparse.Namespace, prices: PriceFile, source: str) -> int:
    path = args.file if args.file is not None else stack_file(args.stack)
    name = args.stack if args.stack is not None else path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    cfg = load_stack(path)
    if args.json:
        print(json.dumps(stackcost.as_json(cfg, name, prices, source), indent=2, ensure_ascii=False, allow_nan=False))
    else:
        sys.stdout.write(stackcost.render(cfg, name, prices, source))
    return 0
