"""The dated price file behind `python -m wg_mesh cost` (wg_mesh/tools/prices.yaml): its model and loader.

Every price names the page it was read from and the day; a price the stored sources do not give is null with a
`not_found` reason, and stays null: the cost table prints "?" for it rather than a guess. Pure: no Pulumi.
"""

from __future__ import annotations

import datetime as dt
import difflib
import itertools
import math
import re
from collections.abc import Iterable, Mapping
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
# As strict as the mesh config (wg_mesh.config.sites.Strict): no unknown keys, and no coercion: "0.34" is not a price,
# `yes` is not a number, a quoted "2026-12-03" is not a date (YAML reads the unquoted one as a date).
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class Tier(BaseModel):
    """One band of a tiered per-volume price: `price` for the volume from the previous band's end to `up_to`."""

    model_config = _STRICT

    up_to: float | None = Field(default=..., gt=0, allow_inf_nan=False)  # cumulative, in the price's unit
    price: float = Field(ge=0, allow_inf_nan=False)


class Price(BaseModel):
    model_config = _STRICT

    what: str = Field(min_length=1)
    # The one region the price holds in (its key ends in it: region_key); None: the same in every region of its cloud
    # as far as its source says.
    region: str | None = Field(default=None, pattern=r"^[a-z]+(-[a-z0-9]+)+$")
    unit: Unit
    value: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    tiers: tuple[Tier, ...] | None = Field(default=None, strict=False)  # a YAML list; each Tier is strict itself
    free: float = Field(default=0, ge=0, allow_inf_nan=False)  # per month, in the unit, subtracted before tiers
    not_found: str | None = None
    source: str
    provider_page: str | None = None
    kind: Literal["provider", "third-party", "command line"]
    read: dt.date
    page_date: dt.date | None = None
    note: str | None = None

    @field_validator("source", "provider_page")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith("https://"):
            raise ValueError(f"{url!r} is not an https:// address")
        return url

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
            raise ValueError(f"{self.what}: not a found per-volume price")
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
    def _read_by_as_of(self) -> PriceFile:
        late = [key for key, price in self.prices.items() if price.read > self.as_of]
        if late:
            raise ValueError(f"as_of {self.as_of} is before the read date of {', '.join(late)}")
        misnamed = [k for k, p in self.prices.items() if p.region is not None and not k.endswith(f"_{slug(p.region)}")]
        if misnamed:
            raise ValueError(f"a regional price's key ends in its region: {', '.join(misnamed)}")
        return self

    def regions_priced(self, cloud: str) -> list[str]:
        """The regions of `cloud` whose instances the file prices (its hourly regional prices)."""
        return sorted(
            {
                p.region
                for k, p in self.prices.items()
                if p.region and k.startswith(f"{cloud}_") and p.unit == "USD/hour"
            }
        )


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


def _problems(exc: ValidationError) -> list[str]:
    return list(dict.fromkeys(_problem(err) for err in exc.errors()))


def parse(raw: Any, origin: str) -> PriceFile:
    """Validate a loaded price file; raise ConfigError naming every problem by its field path."""
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{origin}: expected a mapping with as_of, currency, regions, hours_per_month, prices"])
    try:
        return PriceFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([f"{origin}: {problem}" for problem in _problems(exc)]) from None


def load(path: Path = PRICE_FILE) -> PriceFile:
    """The price file at `path`, read as strictly as a stack file (wg_mesh.tools.stackfile: UTF-8, no duplicate keys, no
    alias bombs, one line naming the line for broken YAML), then validated; ConfigError otherwise."""
    return parse(stackfile.read_document(path, "price file"), str(path))
