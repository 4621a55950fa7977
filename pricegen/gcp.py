"""The Cloud Billing Catalog API's SKUs of Compute Engine, and machine types priced from them.

Format (Cloud Billing Catalog API, `services.skus.list`: cloud.google.com/billing/docs/reference/rest/v1/
services.skus/list): GET https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus?key=KEY&pageToken=...
answers {"skus": [SKU...], "nextPageToken"}; a SKU has "description" ("N2 Instance Core running in Frankfurt"),
"category" {"resourceFamily": "Compute", "usageType": "OnDemand"}, "serviceRegions" ["europe-west3"] and
"pricingInfo" [{"pricingExpression": {"usageUnit": "h" or "GiBy.h", "tieredRates": [{"startUsageAmount",
"unitPrice": {"currencyCode": "USD", "units", "nanos"}}]}}]. Google does not price a predefined machine type by
itself: its on-demand price is vCPUs x the family's core-hour + GiB x its RAM GiB-hour, in the region
(https://cloud.google.com/compute/vm-instance-pricing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from pricegen.aws import FormatError
from pricegen.catalogue import GCP_SKU_FAMILY, Shape

COMPUTE_ENGINE = "6F81-5844-456A"
SKUS = f"https://cloudbilling.googleapis.com/v1/services/{COMPUTE_ENGINE}/skus"
UNITS = {"Core": "h", "Ram": "GiBy.h"}


def _rate(sku: Mapping[str, Any]) -> Decimal:
    expression = sku["pricingInfo"][-1]["pricingExpression"]  # the last one is the current one
    tiers = expression["tieredRates"]
    paid = [t for t in tiers if Decimal(str(t.get("startUsageAmount", 0))) == 0]
    if len(paid) != 1:
        raise FormatError(f"SKU {sku.get('skuId')}: expected one rate from usage 0, got {len(paid)}")
    price = paid[0]["unitPrice"]
    if price.get("currencyCode") != "USD":
        raise FormatError(f"SKU {sku.get('skuId')}: priced in {price.get('currencyCode')}, not USD")
    return Decimal(str(price.get("units") or 0)) + Decimal(price.get("nanos", 0)) / Decimal(10**9)


def component_rates(pages: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Decimal]:
    """{(family, "Core" or "Ram", region): USD per vCPU-hour or per GiB-hour} from the on-demand SKUs."""
    out: dict[tuple[str, str, str], Decimal] = {}
    for page in pages:
        for sku in page.get("skus", []):
            category = sku.get("category", {})
            if category.get("resourceFamily") != "Compute" or category.get("usageType") != "OnDemand":
                continue
            for family, name in GCP_SKU_FAMILY.items():
                for part, unit in UNITS.items():
                    if not str(sku.get("description", "")).startswith(f"{name} Instance {part} running in "):
                        continue
                    if sku["pricingInfo"][-1]["pricingExpression"].get("usageUnit") != unit:
                        raise FormatError(f"SKU {sku.get('skuId')}: {part} not priced per {unit}")
                    for region in sku.get("serviceRegions", []):
                        out[(family, part, region)] = _rate(sku)
    return out


def machine_prices(
    rates: Mapping[tuple[str, str, str], Decimal], types: Mapping[str, Shape], regions: Iterable[str]
) -> dict[str, dict[str, float]]:
    """{type: {region: USD per hour}}: vCPUs x core-hour + GiB x RAM GiB-hour, where the region has both rates."""
    out: dict[str, dict[str, float]] = {}
    for kind, shape in types.items():
        family = kind.split("-")[0]
        for region in regions:
            core, ram = rates.get((family, "Core", region)), rates.get((family, "Ram", region))
            if core is not None and ram is not None:
                price = shape.vcpus * core + Decimal(str(shape.memory_gib)) * ram
                out.setdefault(kind, {})[region] = float(round(price, 6))
    return out
