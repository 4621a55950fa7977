"""`wg-mesh cost --stack S`: the stack's own regions, instance types and sites, priced from the dated price file, or
refused by name where the file lacks a price (issue 23). Pure, on base() moved to the file's regions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.stacks import REPO, STACK_FILES, example_stack_files
from tests.test_config import base
from wg_mesh.__main__ import main
from wg_mesh.config import ConfigError
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools import instanceprices, stackcost, stackfile
from wg_mesh.tools.prices import load

EDGE = REPO / "examples" / "edge" / "Pulumi.edge.yaml"

PRICES = load()
ORIGIN = "wg_mesh/prices.yaml"


def priced_stack() -> dict[str, Any]:
    """base() (aws us-east-1, gcp, a static site) with its GCP site in the price file's GCP region."""
    raw = base()
    raw["sites"][1].update(region=PRICES.regions.gcp, zone=f"{PRICES.regions.gcp}-a")
    return raw


def test_the_stacks_own_sites_are_priced_idle() -> None:
    cfg = load_mesh(priced_stack())
    lines = stackcost.stack_lines(cfg, PRICES, ORIGIN)
    assert [(li.site, li.price, li.count) for li in lines] == [
        ("aws-use1", "aws_c6i_2xlarge_us_east_1", 1),
        ("aws-use1", "aws_public_ipv4", 1),
        ("gcp-euw3", "gcp_n2_standard_8_us_east4", 1),
        ("gcp-euw3", "gcp_external_ipv4", 1),
    ]
    total = sum(li.monthly(PRICES.hours_per_month) for li in lines)
    assert round(total, 2) == round(730 * (0.34 + 0.005 + 0.43751 + 0.005), 2) == 574.88
    text = stackcost.render(cfg, "corp", PRICES, ORIGIN)
    assert "| vps-fra | your own host: not priced | | | 0.00 |" in text and "**574.88**" in text
    assert (
        "Defaults, one gateway idle for a month: aws c6i.2xlarge in us-east-1 + its address: $251.85; "
        "gcp n2-standard-8 in us-east4 + its address: $323.03." in text
    )


def test_an_ha_pair_is_two_gateways_and_two_addresses() -> None:
    raw = priced_stack()
    raw["delivery"] = "live"
    raw["sites"][0]["gateways"] = 2
    lines = stackcost.stack_lines(load_mesh(raw), PRICES, ORIGIN)
    counts = {li.price: li.count for li in lines if li.site == "aws-use1"}
    assert counts == {"aws_c6i_2xlarge_us_east_1": 2, "aws_public_ipv4": 2}


def test_what_the_prices_lack_is_named_not_guessed() -> None:
    raw = priced_stack()
    raw["sites"][0]["region"] = "sa-east-1"  # a commercial region the bundled source leaves out
    raw["sites"][1]["instance_type"] = "n2-standard-4"  # a type the bundled table does not price
    with pytest.raises(ConfigError) as caught:
        stackcost.stack_lines(load_mesh(raw), PRICES, ORIGIN)
    assert caught.value.problems == [
        "sites[0] (aws-use1): no price for aws c6i.2xlarge in sa-east-1: the source has no prices for sa-east-1 (its "
        "catalogue leaves that region out); give it as prices.aws_c6i_2xlarge_sa_east_1 (unit: USD/hour, value, "
        "source, read) in a price file of your own, passed with --prices",
        "sites[1] (gcp-euw3): no price for gcp n2-standard-4 in us-east4: n2-standard-4 is not among the types priced "
        "(n2-standard-8); give it as prices.gcp_n2_standard_4_us_east4 (unit: USD/hour, value, source, read) in a "
        "price file of your own, passed with --prices",
    ]


def test_the_bundled_table_prices_the_defaults_beyond_the_comparisons_regions() -> None:
    """Any two commercial regions the source covers: here AWS eu-west-1 and GCP europe-west4 (issue 34's user)."""
    raw = priced_stack()
    raw["sites"][0]["region"] = "eu-west-1"
    raw["sites"][1].update(region="europe-west4", zone="europe-west4-a")
    lines = stackcost.stack_lines(load_mesh(raw), PRICES, ORIGIN)
    rates = {li.price: li.usd_per_hour for li in lines}
    assert rates["aws_c6i_2xlarge_eu_west_1"] == 0.3648 and rates["gcp_n2_standard_8_europe_west4"] == 0.42766
    assert all(li.source.startswith("instance_prices.yaml") for li in lines if "gateway " in li.label)
    text = stackcost.render(load_mesh(raw), "corp", PRICES, ORIGIN)
    assert "from the bundled table (wg_mesh/tools/instance_prices.yaml, as of 2026-12-07): aws-use1 (https://" in text


def test_every_priced_region_is_a_commercial_one_and_every_figure_has_its_source() -> None:
    table = instanceprices.load()
    for cloud, section in table.clouds.items():
        assert section.source.startswith("https://") and section.provider_page.startswith("https://")
        assert section.read >= table.as_of  # as_of is the oldest section's day
        for kind, by_region in section.prices.items():
            assert kind in section.types, (cloud, kind)
            assert set(by_region) <= set(section.regions), (cloud, kind, set(by_region) - set(section.regions))
            assert all(0 < value < 10 for value in by_region.values()), (cloud, kind)
        assert stackcost.DEFAULT_TYPES[cloud] in section.prices
    assert len(table.clouds["aws"].regions) >= 30 and len(table.clouds["gcp"].regions) >= 40


def test_a_price_the_sources_did_not_give_is_refused() -> None:
    missing = PRICES.prices["aws_public_ipv4"].model_copy(update={"value": None, "not_found": "not on the page"})
    prices = PRICES.model_copy(update={"prices": {**PRICES.prices, "aws_public_ipv4": missing}})
    with pytest.raises(ConfigError, match=r"prices.aws_public_ipv4 was not found .*: not on the page"):
        stackcost.stack_lines(load_mesh(priced_stack()), prices, ORIGIN)


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "Pulumi.corp.yaml"
    stack.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": priced_stack()}}))
    assert main(["cost", "--file", str(stack), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stack"] == "corp" and out["total_usd_per_month"] == 574.88 and out["static_sites"] == ["vps-fra"]
    raw = priced_stack()
    raw["sites"][1].update(region="europe-north2", zone="europe-north2-a")
    stack.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
    assert (
        main(["cost", "--file", str(stack)]) == 1
    )  # the price file cannot price this stack: a problem of a file the command reads (clihelp), not of usage
    captured = capsys.readouterr()
    assert captured.out == "" and "no price for gcp n2-standard-8 in europe-north2: the source has no" in captured.err


@pytest.mark.parametrize("path", [*STACK_FILES, *example_stack_files()], ids=lambda p: p.name)
def test_every_stack_and_example_of_the_repository_is_priced(path: Path) -> None:
    """`cost --stack dev`, `prod`, `ha` and the examples' stacks: every region and instance type is in the file."""
    lines = stackcost.stack_lines(stackfile.load(path), PRICES, ORIGIN)
    assert lines and all(li.usd_per_hour > 0 for li in lines)


def test_a_relayed_pair_is_named_as_the_relays_egress() -> None:
    text = stackcost.render(stackfile.load(EDGE), "edge", PRICES, ORIGIN)
    assert "Relayed through aws-use1 (office ↔ home): that traffic is aws-use1's internet egress once" in text
    assert "Relayed" not in stackcost.render(stackfile.load(STACK_FILES[0]), "dev", PRICES, ORIGIN)
