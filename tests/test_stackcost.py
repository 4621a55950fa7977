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
from wg_mesh.tools import stackcost, stackfile
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
        "aws c6i.2xlarge in us-east-1 + its address: $251.85; gcp n2-standard-8 in europe-west3 + its address: "
        "$369.01; gcp n2-standard-8 in us-east4 + its address: $323.03." in text
    )


def test_an_ha_pair_is_two_gateways_and_two_addresses() -> None:
    raw = priced_stack()
    raw["delivery"] = "live"
    raw["sites"][0]["gateways"] = 2
    lines = stackcost.stack_lines(load_mesh(raw), PRICES, ORIGIN)
    counts = {li.price: li.count for li in lines if li.site == "aws-use1"}
    assert counts == {"aws_c6i_2xlarge_us_east_1": 2, "aws_public_ipv4": 2}


def test_what_the_file_lacks_is_named_not_guessed() -> None:
    raw = priced_stack()
    raw["sites"][0]["instance_type"] = "c6i.xlarge"
    raw["sites"][1].update(region="asia-east1", zone="asia-east1-a")
    with pytest.raises(ConfigError) as caught:
        stackcost.stack_lines(load_mesh(raw), PRICES, ORIGIN)
    assert caught.value.problems == [
        "sites[0] (aws-use1): wg_mesh/prices.yaml (as of 2026-12-04) has no price aws_c6i_xlarge_us_east_1 "
        "(aws c6i.xlarge in us-east-1)",
        "sites[1] (gcp-euw3): gcp region asia-east1: wg_mesh/prices.yaml (as of 2026-12-04) prices gcp in "
        "europe-west3, us-east4 only; add that region's prices to a copy of the file and pass it with --prices",
    ]


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
    raw["sites"][1].update(region="asia-east1", zone="asia-east1-a")
    stack.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
    assert (
        main(["cost", "--file", str(stack)]) == 1
    )  # the price file cannot price this stack: a problem of a file the command reads (clihelp), not of usage
    captured = capsys.readouterr()
    assert captured.out == "" and "prices gcp in europe-west3, us-east4 only" in captured.err


@pytest.mark.parametrize("path", [*STACK_FILES, *example_stack_files()], ids=lambda p: p.name)
def test_every_stack_and_example_of_the_repository_is_priced(path: Path) -> None:
    """`cost --stack dev`, `prod`, `ha` and the examples' stacks: every region and instance type is in the file."""
    lines = stackcost.stack_lines(stackfile.load(path), PRICES, ORIGIN)
    assert lines and all(li.usd_per_hour > 0 for li in lines)


def test_a_relayed_pair_is_named_as_the_relays_egress() -> None:
    text = stackcost.render(stackfile.load(EDGE), "edge", PRICES, ORIGIN)
    assert "Relayed through aws-use1 (office ↔ home): that traffic is aws-use1's internet egress once" in text
    assert "Relayed" not in stackcost.render(stackfile.load(STACK_FILES[0]), "dev", PRICES, ORIGIN)
