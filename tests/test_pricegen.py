"""`python -m pricegen` (issue 34 item 2): the bundled instance prices from the providers' published price lists.

The fixtures (tests/data/prices/) are small made-up excerpts in the documented formats: the AWS Price List bulk API's
region index and per-region EC2 offer files (laid out as under https://pricing.us-east-1.amazonaws.com, read here
through file: URLs, the same code path as the real fetch), two pages of the Cloud Billing Catalog API's
`services.skus.list` answer for Compute Engine, and SkyPilot's catalogue CSV. Their prices are not anyone's.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from pricegen import aws, gcp, skypilot
from pricegen.__main__ import main
from pricegen.catalogue import GCP_REGIONS, TYPES, Shape, aws_regions
from wg_mesh.tools import instanceprices

DATA = Path(__file__).parent / "data" / "prices"
SKYPILOT = "https://github.com/skypilot-org/skypilot-catalog/blob/0000000/catalogs/v7/aws/vms.csv"


def offer(region: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (DATA / f"offers/v1.0/aws/AmazonEC2/20261201180000/{region}/index.json").read_text()
    )
    return loaded


def test_aws_prices_the_linux_on_demand_shared_product_only() -> None:
    """Windows, dedicated tenancy and an unused reservation of the same type are other products: not the gateway."""
    assert aws.hourly_prices(offer("eu-west-1"), ["c6i.2xlarge"]) == {"c6i.2xlarge": {"eu-west-1": 0.4}}


def test_aws_refuses_a_product_it_cannot_read_rather_than_guess() -> None:
    broken = offer("us-east-1")
    dims = broken["terms"]["OnDemand"]["SKU1"]["SKU1.JRTCKXETXF"]["priceDimensions"]
    dims["extra"] = {**next(iter(dims.values())), "unit": "Quantity"}
    with pytest.raises(aws.FormatError, match=r"SKU SKU1: expected one hourly price dimension, got 2"):
        aws.hourly_prices(broken, ["c6i.2xlarge"])
    with pytest.raises(aws.FormatError, match="no `products`"):
        aws.hourly_prices({"terms": {}}, ["c6i.2xlarge"])


def test_the_aws_command_reads_every_commercial_regions_offer_file(tmp_path: Path) -> None:
    out = tmp_path / "table.yaml"
    assert main(["--out", str(out), "--read", "2026-12-07", "aws", "--base", DATA.as_uri()]) == 0
    section = instanceprices.load.__wrapped__(out).clouds["aws"]
    assert section.prices == {"c6i.2xlarge": {"eu-west-1": 0.4, "us-east-1": 0.3}}
    assert (
        list(section.regions) == aws_regions()
        and "sa-east-1" in section.regions
        and "cn-north-1" not in section.regions
    )
    assert section.kind == "provider" and section.source == aws.REGION_INDEX
    assert section.missing("c6i.2xlarge", "sa-east-1").startswith("the source has no prices for sa-east-1")
    assert section.command.startswith("python -m pricegen --read 2026-12-07 aws --base file:")  # --out left out


def test_gcp_prices_a_machine_type_from_its_core_and_ram_skus() -> None:
    pages = [json.loads((DATA / name).read_text()) for name in ("skus-page1.json", "skus-page2.json")]
    rates = gcp.component_rates(pages)
    assert rates[("n2", "Core", "europe-west3")] == Decimal("0.038")  # the spot SKU of the same family is not it
    prices = gcp.machine_prices(rates, {"n2-standard-8": Shape(8, 32, "x86_64")}, GCP_REGIONS)
    # 8 x 0.038 + 32 x 0.005; 8 x 0.031611 + 32 x 0.004237; us-central1 has a core rate but no RAM rate: no price
    assert prices == {"n2-standard-8": {"europe-west3": 0.464, "us-east4": 0.388472}}


def test_gcp_refuses_another_currency_and_another_unit() -> None:
    page = json.loads((DATA / "skus-page1.json").read_text())
    page["skus"][0]["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]["currencyCode"] = "EUR"
    with pytest.raises(aws.FormatError, match="priced in EUR, not USD"):
        gcp.component_rates([page])
    page = json.loads((DATA / "skus-page1.json").read_text())
    page["skus"][1]["pricingInfo"][0]["pricingExpression"]["usageUnit"] = "GBy.h"
    with pytest.raises(aws.FormatError, match=r"Ram not priced per GiBy\.h"):
        gcp.component_rates([page])


def test_the_gcp_command_from_saved_pages_keeps_the_aws_section(tmp_path: Path) -> None:
    out = tmp_path / "table.yaml"
    main(["--out", str(out), "--read", "2026-12-05", "aws", "--base", DATA.as_uri()])
    pages = [str(DATA / "skus-page1.json"), str(DATA / "skus-page2.json")]
    assert main(["--out", str(out), "--read", "2026-12-07", "gcp", "--skus", *pages]) == 0
    table = instanceprices.load.__wrapped__(out)
    assert set(table.clouds) == {"aws", "gcp"} and table.as_of == dt.date(2026, 12, 5)  # the oldest section
    assert table.clouds["gcp"].prices == {"n2-standard-8": {"europe-west3": 0.464, "us-east4": 0.388472}}
    assert table.clouds["gcp"].missing("n2-standard-8", "us-central1").startswith("the source has no prices")
    assert "&id" not in out.read_text() and "*id" not in out.read_text()  # no YAML aliases: the loader refuses them


def test_skypilot_zones_must_agree_and_an_empty_price_is_no_price(tmp_path: Path) -> None:
    text = (DATA / "skypilot-vms.csv").read_text()
    assert skypilot.hourly_prices(text, ["c6i.2xlarge"]) == {"c6i.2xlarge": {"eu-west-1": 0.4, "us-east-1": 0.3}}
    with pytest.raises(aws.FormatError, match=r"c6i\.2xlarge in eu-west-1: its zones disagree"):
        skypilot.hourly_prices(text.replace("0.4,0.16", "0.41,0.16"), ["c6i.2xlarge"])
    with pytest.raises(aws.FormatError, match="no column Price"):
        skypilot.hourly_prices("InstanceType,Region\n", ["c6i.2xlarge"])
    out = tmp_path / "table.yaml"
    main(["--out", str(out), "skypilot", "aws", str(DATA / "skypilot-vms.csv"), "--source", SKYPILOT])
    section = yaml.safe_load(out.read_text())["clouds"]["aws"]
    assert (section["kind"], section["source"]) == ("third-party", SKYPILOT)
    with pytest.raises(SystemExit):
        main(["--out", str(out), "skypilot", "aws", str(DATA / "skypilot-vms.csv"), "--source", "http://x"])


def test_the_bundled_table_is_what_pricegen_writes() -> None:
    """Every type pricegen.catalogue names is in the shipped table, with the shape it gives."""
    table = instanceprices.load()
    for cloud, types in TYPES.items():
        shapes = table.clouds[cloud].types  # type: ignore[index]
        assert {k: (s.vcpus, s.memory_gib, s.arch) for k, s in shapes.items()} == {
            k: (s.vcpus, s.memory_gib, s.arch) for k, s in types.items()
        }
