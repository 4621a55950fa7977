"""SkyPilot's catalogue (github.com/skypilot-org/skypilot-catalog, catalogs/v7/{aws,gcp}/vms.csv): a third party's
table of on-demand prices, one row per instance type and zone, that its fetchers build from the same two price lists
(AWS's Price List API, Google's Cloud Billing Catalog). Columns used: InstanceType, Region, AvailabilityZone, Price
(USD per hour, on-demand). A region's zones must agree on the price; a row without a price is not a price.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from pricegen.aws import FormatError

COLUMNS = {"InstanceType", "Region", "Price"}


def hourly_prices(text: str, types: Iterable[str]) -> dict[str, dict[str, float]]:
    """{type: {region: USD per hour}} for `types`."""
    wanted = set(types)
    rows = csv.DictReader(io.StringIO(text))
    missing = COLUMNS - set(rows.fieldnames or ())
    if missing:
        raise FormatError(f"catalogue CSV: no column {', '.join(sorted(missing))}")
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        kind, region, price = row["InstanceType"], row["Region"], row["Price"]
        if kind not in wanted or not price:
            continue
        value = float(price)
        seen = out.setdefault(kind, {}).setdefault(region, value)
        if seen != value:
            raise FormatError(f"{kind} in {region}: its zones disagree ({seen} and {value})")
    return out
