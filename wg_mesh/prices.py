"""The dated price file behind `python -m wg_mesh cost` (wg_mesh/prices.yaml): its model and loader.

Every price names the page it was read from and the day; a price the stored sources do not give is null with a
`not_found` reason, and stays null: the cost table prints "?" for it rather than a guess. Pure: no Pulumi.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from wg_mesh.config import ConfigError

PRICE_FILE = Path(__file__).with_name("prices.yaml")

Unit = Literal["USD/hour", "USD/GB", "USD/GiB"]
BYTES_PER_UNIT = {"USD/GB": 10**9, "USD/GiB": 2**30}  # per-volume units: how many bytes one unit is
MAX_HOURS_PER_MONTH = 744  # 31 days


class Tier(BaseModel):
    """One band of a tiered per-volume price: `price` for the volume from the previous band's end to `up_to`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    up_to: float | None = Field(default=..., gt=0, allow_inf_nan=False)  # cumulative, in the price's unit
    price: float = Field(ge=0, allow_inf_nan=False)


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    what: str = Field(min_length=1)
    unit: Unit
    value: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    tiers: tuple[Tier, ...] | None = None
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
    model_config = ConfigDict(extra="forbid", frozen=True)

    aws: str
    gcp: str


class PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

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
        return self


def _problems(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors():
        path = ".".join(str(part) for part in err["loc"] if not str(part).startswith("function-")) or "(top level)"
        msg = str(err["msg"]).removeprefix("Value error, ")
        problems.append(f"{path}: {msg}")
    return problems


def parse(raw: Any, origin: str) -> PriceFile:
    """Validate a loaded price file; raise ConfigError naming every problem by its field path."""
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{origin}: expected a mapping with as_of, currency, regions, hours_per_month, prices"])
    try:
        return PriceFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([f"{origin}: {problem}" for problem in _problems(exc)]) from None


def load(path: Path = PRICE_FILE) -> PriceFile:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: {exc.strerror or exc}"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not YAML: {exc}"]) from None
    return parse(raw, str(path))
