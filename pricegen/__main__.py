"""python -m pricegen {aws,gcp,skypilot}: regenerate one cloud's section of wg_mesh/tools/instance_prices.yaml."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pricegen import aws, gcp, skypilot, table
from pricegen.catalogue import AWS_REGIONS_SOURCE, GCP_REGIONS, GCP_REGIONS_SOURCE, TYPES, aws_regions
from wg_mesh.tools.instanceprices import TABLE_FILE

PAGES = {
    "aws": "https://aws.amazon.com/ec2/pricing/on-demand/",
    "gcp": "https://cloud.google.com/compute/vm-instance-pricing",
}
WHAT = {
    "aws": "EC2 on-demand, Linux, shared tenancy, USD per hour",
    "gcp": "Compute Engine on-demand (vCPUs x core-hour + GiB x RAM GiB-hour), USD per hour",
}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=300) as answer:
        return json.load(answer)


def aws_prices(base: str, regions: Sequence[str]) -> tuple[dict[str, dict[str, float]], str]:
    """Every region's offer file, from the index at `base` (AWS's address, or a file: URL of a saved copy)."""
    index = _get(base + "/offers/v1.0/aws/AmazonEC2/current/region_index.json")
    prices: dict[str, dict[str, float]] = {}
    dates = set()
    for url in aws.region_urls(index, regions).values():
        offer = _get(url.replace(aws.BASE, base))
        dates.add(str(offer.get("publicationDate", "")))
        for kind, by_region in aws.hourly_prices(offer, TYPES["aws"]).items():
            prices.setdefault(kind, {}).update(by_region)
    return prices, ", ".join(sorted(dates))


def gcp_pages(key: str) -> Iterator[dict[str, Any]]:
    token = ""
    while True:
        page = _get(f"{gcp.SKUS}?key={key}&pageSize=5000" + (f"&pageToken={token}" if token else ""))
        yield page
        token = page.get("nextPageToken", "")
        if not token:
            return


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pricegen", description=__doc__)
    parser.add_argument("--out", type=Path, default=TABLE_FILE)
    parser.add_argument("--read", type=dt.date.fromisoformat, default=dt.date.today(), help="the day it was read")
    sub = parser.add_subparsers(dest="reader", required=True)
    a = sub.add_parser("aws", help="AWS's Price List bulk API offer files (every commercial region's)")
    a.add_argument("--base", default=aws.BASE, help="the price list's address, or file:DIR of a saved copy")
    g = sub.add_parser("gcp", help="the Cloud Billing Catalog API's Compute Engine SKUs")
    g.add_argument("--skus", type=Path, nargs="*", help="saved services.skus.list pages (JSON)")
    g.add_argument("--key-env", default="GCP_API_KEY", help="the API key's variable, to fetch the pages")
    s = sub.add_parser("skypilot", help="SkyPilot's catalogue CSV (third party), one cloud")
    s.add_argument("cloud", choices=sorted(TYPES))
    s.add_argument("csv", type=Path)
    s.add_argument("--source", required=True, help="the https address the CSV was read from, at its commit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cloud = args.cloud if args.reader == "skypilot" else args.reader
    regions = aws_regions() if cloud == "aws" else GCP_REGIONS
    meta: dict[str, Any] = {"what": WHAT[cloud]}
    if args.reader == "aws":
        prices, published = aws_prices(args.base, regions)
        meta |= {"source": aws.REGION_INDEX, "kind": "provider", "note": f"offer files published {published}"}
    elif args.reader == "gcp":
        pages = [json.loads(p.read_text()) for p in args.skus] if args.skus else gcp_pages(os.environ[args.key_env])
        prices = gcp.machine_prices(gcp.component_rates(pages), TYPES["gcp"], regions)
        meta |= {"source": gcp.SKUS, "kind": "provider", "note": "services.skus.list, on-demand Core and Ram SKUs"}
    else:
        if not args.source.startswith("https://"):
            parser.error("--source: the https address the CSV was read from")
        prices = skypilot.hourly_prices(args.csv.read_text(), TYPES[cloud])
        meta |= {
            "source": args.source,
            "kind": "third-party",
            "note": "SkyPilot's catalogue of the provider's price list (its Price column: on-demand, per zone; "
            "a region's zones agree)",
        }
    meta |= {
        "provider_page": PAGES[cloud],
        "read": args.read,
        "regions_source": AWS_REGIONS_SOURCE if cloud == "aws" else GCP_REGIONS_SOURCE,
    }
    given = list(argv if argv is not None else sys.argv[1:])
    if "--out" in given:  # where it was written is not how it was made
        del given[given.index("--out") : given.index("--out") + 2]
    meta["command"] = shlex.join(["python", "-m", "pricegen", *given])
    body = table.section(cloud, prices, regions, meta)
    table.write(args.out, cloud, body, args.read)
    covered = sorted({r for by_region in body["prices"].values() for r in by_region})
    print(f"{args.out}: {cloud}, {len(body['prices'])} types in {len(covered)} of {len(regions)} regions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
