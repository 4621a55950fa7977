"""The dated price file behind `python -m wg_mesh cost` (wg_mesh/tools/prices.yaml): its model and loader, and a
price file of one's own (`--prices FILE`), laid over it.

Every price names where it was read (a page, or in words a quote or a contract) and the day; a price the stored sources
do not give is null with a `not_found` reason, and stays null: the cost table prints "?" for it rather than a guess.
A file of one's own needs only the prices it gives (each with `unit`, `value` or `tiers`, `source`, `read`); the
rest are the bundled file's. What protects its reader stays: no unknown key, no coercion, a web address only over
https, one line of plain text, no date in the future. Pure: no Pulumi.
"""

from __future__ import annotations

import datetime as dt
import difflib
import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from wg_mesh.config import ConfigError
from wg_mesh.config.messages import describe, quote
from wg_mesh.tools import stackfile

PRICE_FILE = Path(__file__).with_name("prices.yaml")

Unit = Literal["USD/hour", "USD/GB", "USD/GiB"]
BYTES_PER_UNIT = {"USD/GB": 10**9, "USD/GiB": 2**30}  # per-volume units: how many bytes one unit is
MAX_HOURS_PER_MONTH = 744  # 31 days
# The largest price per unit accepted (an hour of the largest instance is a few hundred USD, a GB of any transfer less
# than one): with the largest volume `--tb` takes, every cost stays a finite number, so `--json` never prints Infinity
MAX_PRICE_USD = 1e6
# As strict as the mesh config (wg_mesh.config.sites.Strict): no unknown keys, and no coercion: "0.34" is not a price,
# `yes` is not a number, a quoted "2026-12-03" is not a date (YAML reads the unquoted one as a date).
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(//|[^ ])")  # http://, file:, javascript:..., not "Quote: ..."


class Tier(BaseModel):
    """One band of a tiered per-volume price: `price` for the volume from the previous band's end to `up_to`."""

    model_config = _STRICT

    up_to: float | None = Field(default=..., gt=0, allow_inf_nan=False)  # cumulative, in the price's unit
    price: float = Field(ge=0, le=MAX_PRICE_USD, allow_inf_nan=False)


class Price(BaseModel):
    model_config = _STRICT

    what: str | None = Field(default=None, min_length=1)  # unset: the price's key says it
    # The one region the price holds in (its key ends in it: region_key); None: the same in every region of its cloud
    # as far as its source says.
    region: str | None = Field(default=None, pattern=r"^[a-z]+(-[a-z0-9]+)+$")
    unit: Unit
    value: float | None = Field(default=None, ge=0, le=MAX_PRICE_USD, allow_inf_nan=False)
    tiers: tuple[Tier, ...] | None = Field(default=None, strict=False)  # a YAML list; each Tier is strict itself
    free: float = Field(default=0, ge=0, allow_inf_nan=False)  # per month, in the unit, subtracted before tiers
    not_found: str | None = None
    source: str
    provider_page: str | None = None
    # provider: the provider's own page; third-party: a copy of it; own: a figure of the user's (a quote, an invoice,
    # a contract: the default in a file of one's own); command line: given with --set
    kind: Literal["provider", "third-party", "own", "command line"] = "own"
    read: dt.date
    page_date: dt.date | None = None
    note: str | None = None

    @field_validator("source", "provider_page", "what", "note")
    @classmethod
    def _text(cls, text: str | None) -> str | None:
        """One line of plain text; an address only over https (a page, or in words: "quote from our account team")."""
        if text is None:
            return text
        if not text.strip() or any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise ValueError(f"{text!r}: one line of plain text, not empty")
        if _SCHEME.match(text) and not text.startswith("https://"):
            raise ValueError(
                f"{text!r} is not an https:// address (a page over https, or the source in words, e.g. "
                "'quote from our AWS account team, 2026-11-02')"
            )
        return text

    @model_validator(mode="after")
    def _one_way_to_price(self) -> Price:
        given = [name for name in ("value", "tiers") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError("give either value or tiers, not both")
        if not given and not self.not_found:
            raise ValueError("no value, no tiers: a price the sources do not give needs a not_found reason")
        if given and self.not_found:
            raise ValueError("not_found is only for a price without value or tiers")
        if self.kind == "third-party" and not self.provider_page:
            raise ValueError("a third-party figure names the provider page it stands for in provider_page")
        if self.unit == "USD/hour" and (self.tiers is not None or self.free):
            raise ValueError("an hourly price is one value: tiers and free are for per-volume units")
        if self.tiers is not None:
            ends = [t.up_to for t in self.tiers]
            if not ends or ends[-1] is not None or None in ends[:-1]:
                raise ValueError("tiers: every tier but the last needs up_to; the last one has up_to: null")
            bounded = [end for end in ends[:-1] if end is not None]
            if any(b <= a for a, b in itertools.pairwise(bounded)):
                raise ValueError(f"tiers: up_to must increase, got {bounded}")
        return self

    @property
    def found(self) -> bool:
        return self.not_found is None

    def per_volume(self, quantity: float) -> float:
        """This price for `quantity` units a month (free part first, then the tiers in order)."""
        if self.unit == "USD/hour" or not self.found:
            raise ValueError(f"{self.what or 'this price'}: not a found per-volume price")
        if self.tiers is None:
            assert self.value is not None  # found, no tiers: the model guarantees a value
            return max(0.0, quantity - self.free) * self.value
        return tiered(max(0.0, quantity - self.free), self.tiers)


def slug(text: str) -> str:
    """A key's spelling of an instance type or region: c6i.2xlarge -> c6i_2xlarge, europe-west3 -> europe_west3."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower())


def region_key(name: str, region: str) -> str:
    """A price's key in one region: gcp_n2_standard_8, europe-west3 -> gcp_n2_standard_8_europe_west3."""
    return f"{name}_{slug(region)}"


def tiered(quantity: float, tiers: Iterable[Tier]) -> float:
    """The cost of `quantity` units through cumulative tiers: each band's part at that band's price."""
    total, start = 0.0, 0.0
    for tier in tiers:
        if quantity <= start:
            break
        end = math.inf if tier.up_to is None else tier.up_to
        total += (min(quantity, end) - start) * tier.price
        start = end
    return total


class Regions(BaseModel):
    model_config = _STRICT

    aws: str
    gcp: str


class PriceFile(BaseModel):
    model_config = _STRICT

    as_of: dt.date
    currency: Literal["USD"]
    regions: Regions
    hours_per_month: float = Field(gt=0, le=MAX_HOURS_PER_MONTH, allow_inf_nan=False)
    prices: dict[str, Price]

    @model_validator(mode="after")
    def _regional_keys(self) -> PriceFile:
        # `as_of` is the day the file as a whole was last checked; a price re-read since (`read` later) is not a
        # contradiction, and was refused before for no gain (issue 34)
        misnamed = [k for k, p in self.prices.items() if p.region is not None and not k.endswith(f"_{slug(p.region)}")]
        if misnamed:
            raise ValueError(f"a regional price's key ends in its region: {', '.join(misnamed)}")
        return self


_EXPECTED = {
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "date_type": "a date (YYYY-MM-DD, unquoted)",
    "date_parsing": "a date (YYYY-MM-DD, unquoted)",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
}
_MODELS: dict[str, type[BaseModel]] = {"regions": Regions}


def _path(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith("function-"):
            out += f".{part}" if out else part
    return out or "(top level)"


def _known(parent: tuple[int | str, ...]) -> Iterable[str]:
    """The keys the model at `parent` (where an unknown key was found) knows, for a "did you mean"."""
    if not parent:
        return PriceFile.model_fields
    if parent[0] == "prices" and "tiers" in parent:
        return Tier.model_fields
    if parent[0] == "prices" and len(parent) == 2:
        return Price.model_fields
    model = _MODELS.get(str(parent[0])) if len(parent) == 1 else None
    return model.model_fields if model is not None else ()


def _problem(err: Mapping[str, Any]) -> str:
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    path, ctx = _path(loc), err.get("ctx") or {}
    if kind == "missing":
        return f"{path}: required"
    if kind == "extra_forbidden":
        hint = difflib.get_close_matches(str(loc[-1]), list(_known(loc[:-1])), n=1)
        return f"{path}: unknown key" + (f" (did you mean {hint[0]!r}?)" if hint else "")
    if kind in _EXPECTED:
        return f"{path}: expected {_EXPECTED[kind]}, got {describe(value)}"
    if kind == "literal_error":
        return f"{path}: {quote(value)} is not {ctx.get('expected')}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal"):
        bound = ctx.get("ge", ctx.get("gt", ctx.get("le")))
        side = {
            "greater_than_equal": "below the minimum",
            "greater_than": "not above",
            "less_than_equal": "above the maximum",
        }
        return f"{path}: {value} is {side[kind]} {bound}"
    return f"{path}: {str(err['msg']).removeprefix('Value error, ')}"


def field_problems(exc: ValidationError) -> list[str]:
    return list(dict.fromkeys(_problem(err) for err in exc.errors()))


def parse(raw: Any, origin: str) -> PriceFile:
    """Validate a loaded price file; raise ConfigError naming every problem by its field path."""
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{origin}: expected a mapping with as_of, currency, regions, hours_per_month, prices"])
    try:
        return PriceFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([f"{origin}: {problem}" for problem in field_problems(exc)]) from None


def load(path: Path = PRICE_FILE) -> PriceFile:
    """The price file at `path`, read as strictly as a stack file (wg_mesh.tools.stackfile: UTF-8, no duplicate keys, no
    alias bombs, one line naming the line for broken YAML), then validated; ConfigError otherwise."""
    return parse(stackfile.read_document(path, "price file"), str(path))


class OwnPrices(BaseModel):
    """A price file of one's own: only `prices` is needed; what it leaves out is the bundled file's."""

    model_config = _STRICT

    as_of: dt.date | None = None  # unset: the oldest `read` of its prices
    currency: Literal["USD"] = "USD"
    regions: Regions | None = None
    hours_per_month: float | None = Field(default=None, gt=0, le=MAX_HOURS_PER_MONTH, allow_inf_nan=False)
    prices: dict[str, Price] = Field(min_length=1)


def future_dates(raw: OwnPrices | PriceFile, today: dt.date) -> list[str]:
    """A date after today is a typo, and would hide the file's age: refused, by its field."""
    dated = [("as_of", raw.as_of)] + [(f"prices.{k}.read", p.read) for k, p in raw.prices.items()]
    return [f"{field}: {day} is in the future (today is {today})" for field, day in dated if day and day > today]


def overlay(base: PriceFile, path: Path, today: dt.date) -> tuple[PriceFile, dt.date]:
    """`base` with the prices of the user's file at `path` added or replacing base's, and the day the user's file is
    as of (its `as_of`, else its oldest `read`); ConfigError naming every problem by its field (one line each)."""
    raw = stackfile.read_document(path, "price file")
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{path}: expected a mapping with prices (and, if you like, as_of, hours_per_month)"])
    try:
        own = OwnPrices.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([f"{path}: {problem}" for problem in field_problems(exc)]) from None
    problems = future_dates(own, today)
    if problems:
        raise ConfigError([f"{path}: {problem}" for problem in problems])
    as_of = own.as_of or min(price.read for price in own.prices.values())
    merged = {
        "as_of": min(as_of, base.as_of),  # what the table heads "list prices as of": its oldest part
        "currency": own.currency,
        "regions": own.regions or base.regions,
        "hours_per_month": own.hours_per_month or base.hours_per_month,
        "prices": {**base.prices, **own.prices},
    }
    try:
        return PriceFile.model_validate(merged), as_of
    except ValidationError as exc:
        raise ConfigError([f"{path}: {problem}" for problem in field_problems(exc)]) from None


def apply_overrides(prices: PriceFile, overrides: Sequence[str]) -> PriceFile:
    """Prices given on the command line replace the file's; every problem is reported, none half-applied."""
    problems: list[str] = []
    changed: dict[str, Price] = {}
    for text in overrides:
        name, sep, value_text = text.partition("=")
        price = prices.prices.get(name)
        try:
            value = float(value_text)
        except ValueError:
            value = math.nan
        if not sep:
            problems.append(f"--set {text}: expected NAME=USD")
        elif price is None:
            problems.append(f"--set {text}: no price named {name!r} (known: {', '.join(sorted(prices.prices))})")
        elif price.tiers is not None:
            problems.append(f"--set {text}: {name} is tiered; edit a copy of the price file and pass it with --prices")
        elif not math.isfinite(value) or not 0 <= value <= MAX_PRICE_USD:
            problems.append(
                f"--set {text}: {value_text!r} is not a price in {price.unit} (a number from 0 to {MAX_PRICE_USD:g})"
            )
        elif name in changed:
            problems.append(f"--set {text}: {name} is set twice")
        else:
            changed[name] = price.model_copy(update={"value": value, "not_found": None, "kind": "command line"})
    if problems:
        raise ConfigError(problems)
    return prices.model_copy(update={"prices": {**prices.prices, **changed}})
