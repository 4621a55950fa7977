"""The AWS Price List bulk API's offer files for Amazon EC2: the region index and one region's offer file.

Formats (AWS Price List bulk API, "Reading the offer files": docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/
reading-an-offer.html): https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/region_index.json
is {"regions": {"eu-west-1": {"regionCode": ..., "currentVersionUrl": "/offers/v1.0/aws/AmazonEC2/<version>/eu-west-1/
index.json"}}}; a region's offer file is {"publicationDate", "products": {SKU: {"productFamily", "attributes"}},
"terms": {"OnDemand": {SKU: {OFFER: {"priceDimensions": {RATE: {"unit", "pricePerUnit": {"USD"}}}}}}}}. The price of a
gateway is the product that is a Linux instance on shared tenancy with no pre-installed software or licence, its
capacity "Used" (the on-demand instance itself, not a reservation), billed per hour ("Hrs").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

BASE = "https://pricing.us-east-1.amazonaws.com"
REGION_INDEX = f"{BASE}/offers/v1.0/aws/AmazonEC2/current/region_index.json"
GATEWAY = {  # the attributes of the product a gateway is billed as
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "licenseModel": "No License required",
}


class FormatError(ValueError):
    """A document that is not of the documented format: the generator stops rather than write a guess."""


def region_urls(index: Mapping[str, Any], regions: Iterable[str]) -> dict[str, str]:
    """The offer file's address for each of `regions` the index lists (a region it does not list is left out)."""
    listed = index.get("regions")
    if not isinstance(listed, Mapping):
        raise FormatError("region_index.json: no `regions` mapping")
    out = {}
    for region in regions:
        entry = listed.get(region)
        if isinstance(entry, Mapping) and isinstance(entry.get("currentVersionUrl"), str):
            out[region] = BASE + entry["currentVersionUrl"]
    return out


def _usd_per_hour(term: Mapping[str, Any], sku: str) -> Decimal:
    dimensions = [d for offer in term.values() for d in offer.get("priceDimensions", {}).values()]
    if len(dimensions) != 1 or dimensions[0].get("unit") != "Hrs":
        raise FormatError(f"SKU {sku}: expected one hourly price dimension, got {len(dimensions)}")
    return Decimal(dimensions[0]["pricePerUnit"]["USD"])


def hourly_prices(offer: Mapping[str, Any], types: Iterable[str]) -> dict[str, dict[str, float]]:
    """{type: {region: USD per hour}} for `types` from one region's offer file (or a whole one)."""
    wanted = set(types)
    products, terms = offer.get("products"), offer.get("terms", {}).get("OnDemand")
    if not isinstance(products, Mapping) or not isinstance(terms, Mapping):
        raise FormatError("offer file: no `products` or no `terms.OnDemand`")
    out: dict[str, dict[str, float]] = {}
    for sku, product in products.items():
        attrs = product.get("attributes", {})
        if product.get("productFamily") != "Compute Instance" or attrs.get("instanceType") not in wanted:
            continue
        if any(attrs.get(key) != value for key, value in GATEWAY.items()) or sku not in terms:
            continue
        region, kind = attrs.get("regionCode"), attrs["instanceType"]
        price = float(_usd_per_hour(terms[sku], sku))
        seen = out.setdefault(kind, {}).get(region)
        if seen is not None and seen != price:
            raise FormatError(f"{kind} in {region}: two gateway products priced {seen} and {price}")
        out[kind][region] = price
    return out
