"""`python -m wg_mesh cost` and its price file: the arithmetic (by hand), the sources, the docs' table, bad input."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from wg_mesh.config import ConfigError
from wg_mesh.tools import cost, instanceprices
from wg_mesh.tools.instanceprices import STALE_AFTER_DAYS
from wg_mesh.tools.prices import PRICE_FILE, PriceFile, load, overlay, parse, tiered

REPO = Path(__file__).resolve().parent.parent
COST_PAGE = REPO / "docs" / "concepts" / "comparison.md"  # once the README's section
BEGIN, END = "<!-- BEGIN python -m wg_mesh cost (generated: do not edit) -->", "<!-- END python -m wg_mesh cost -->"
GIB_PER_TB = 10**12 / 2**30  # 931.3225746154785

# A price file with round numbers, so every expected figure below is worked out by hand.
SYNTHETIC: dict[str, Any] = {
    "as_of": dt.date(2026, 12, 3),
    "currency": "USD",
    "regions": {"aws": "us-east-1", "gcp": "us-east4"},
    "hours_per_month": 730,
    "prices": {},
}
_SOURCE = {"source": "https://example.com/pricing", "kind": "provider", "read": dt.date(2026, 12, 3)}


def hourly(value: float | None) -> dict[str, Any]:
    if value is None:
        return {"what": "x", "unit": "USD/hour", "not_found": "not in the stored sources", **_SOURCE}
    return {"what": "x", "unit": "USD/hour", "value": value, **_SOURCE}


AWS_EGRESS = {
    "what": "AWS internet egress",
    "unit": "USD/GB",
    "free": 100,
    "tiers": [
        {"up_to": 10000, "price": 0.09},
        {"up_to": 50000, "price": 0.085},
        {"up_to": 150000, "price": 0.07},
        {"up_to": None, "price": 0.05},
    ],
    **_SOURCE,
}
GCP_EGRESS = {
    "what": "GCP Premium Tier egress",
    "unit": "USD/GiB",
    "tiers": [
        {"up_to": 1, "price": 0},
        {"up_to": 1024, "price": 0.12},
        {"up_to": 10240, "price": 0.11},
        {"up_to": None, "price": 0.08},
    ],
    **_SOURCE,
}


def synthetic(**overrides: Any) -> PriceFile:
    raw = copy.deepcopy(SYNTHETIC)
    raw["prices"] = {
        "aws_c6i_2xlarge_us_east_1": hourly(0.34),
        "aws_public_ipv4": hourly(0.005),
        "gcp_n2_standard_8_us_east4": hourly(0.4),
        "gcp_external_ipv4": hourly(0.005),
        "aws_internet_egress": AWS_EGRESS,
        "gcp_internet_egress_premium": GCP_EGRESS,
        "aws_s2s_vpn_connection": hourly(0.05),
        "gcp_ha_vpn_tunnel": hourly(0.1),
        "aws_interconnect_link": hourly(None),
        "gcp_partner_cci_transport": hourly(None),
        "gcp_partner_cci_egress": {"what": "x", "unit": "USD/GiB", "not_found": "not in the stored sources", **_SOURCE},
    }
    raw["prices"].update(overrides)
    return parse(raw, "synthetic")


def option(key: str) -> cost.Option:
    return next(o for o in cost.OPTIONS if o.key == key)


# --- arithmetic, by hand -------------------------------------------------------------------------------------------


def test_tiers_charge_each_band_at_its_own_price() -> None:
    tiers = synthetic().prices["aws_internet_egress"].tiers
    assert tiers is not None
    assert tiered(0, tiers) == 0
    assert tiered(10000, tiers) == pytest.approx(900.0)  # 10,000 GB x 0.09, the first band exactly
    assert tiered(10001, tiers) == pytest.approx(900.0 + 0.085)
    assert tiered(200000, tiers) == pytest.approx(900 + 40000 * 0.085 + 100000 * 0.07 + 50000 * 0.05)  # 13,800


def test_aws_egress_subtracts_the_free_100_gb_before_the_tiers() -> None:
    egress = synthetic().prices["aws_internet_egress"]
    assert egress.per_volume(50) == 0  # inside the free 100 GB
    assert egress.per_volume(500) == pytest.approx(400 * 0.09)  # AWS's own example: 500 GB out, pay for 400
    # 100 TB = 100,000 GB: 99,900 billable = 10,000 x 0.09 + 40,000 x 0.085 + 49,900 x 0.07
    assert egress.per_volume(100000) == pytest.approx(900 + 3400 + 3493)


def test_gcp_egress_is_counted_in_gib() -> None:
    prices = synthetic()
    traffic = cost.Traffic("gcp_internet_egress_premium", "gcp", "GCP -> AWS")
    gib = 10 * GIB_PER_TB  # 10 TB = 9,313.2 GiB: the first GiB free, 1,023 GiB at 0.12, the rest at 0.11
    expected = 1023 * 0.12 + (gib - 1024) * 0.11
    assert cost.item_cost(traffic, prices, 10, ("aws", "gcp")).known == pytest.approx(expected)
    assert expected == pytest.approx(1034.57, abs=0.005)


def test_hourly_items_are_count_times_730_hours_times_the_rate() -> None:
    prices = synthetic()
    assert cost.item_cost(cost.Hours("aws_s2s_vpn_connection", 2, "x"), prices, 1, ("aws",)).known == pytest.approx(
        2 * 730 * 0.05
    )
    vpn = cost.option_cost(option("vpn"), prices, 1, ("aws", "gcp"))
    # 2 connections + 4 tunnels, 730 h; then 900 GB x 0.09 out of AWS and 930.32 GiB x 0.12 out of GCP
    assert vpn.known == pytest.approx(73.0 + 4 * 730 * 0.1 + 81.0 + (GIB_PER_TB - 1) * 0.12)
    assert vpn.complete


def test_wg_mesh_over_the_internet_is_two_gateways_two_addresses_and_the_egress() -> None:
    prices = synthetic()
    fixed = 730 * (0.34 + 0.005 + 0.4 + 0.005)  # 547.5
    aws_100 = 900 + 3400 + 3493  # 100 TB out of AWS
    gcp_100 = 1023 * 0.12 + 9216 * 0.11 + (100 * GIB_PER_TB - 10240) * 0.08
    both = cost.option_cost(option("wg-mesh-internet"), prices, 100, cost.DIRECTIONS["both"])
    assert both.known == pytest.approx(fixed + aws_100 + gcp_100)
    one_way = cost.option_cost(option("wg-mesh-internet"), prices, 100, cost.DIRECTIONS["aws-to-gcp"])
    assert one_way.known == pytest.approx(fixed + aws_100)


def test_a_price_not_found_is_never_counted_but_always_named() -> None:
    prices = synthetic()
    private = cost.option_cost(option("wg-mesh-private"), prices, 10, ("aws", "gcp"))
    assert private.known == pytest.approx(730 * (0.34 + 0.005 + 0.4 + 0.005))
    assert private.missing == ("aws_interconnect_link", "gcp_partner_cci_transport", "gcp_partner_cci_egress")
    assert cost._amount(private) == "547.50 + ?"
    assert cost._amount(cost.option_cost(option("interconnect"), prices, 10, ("aws", "gcp"))) == "?"


def test_set_fills_in_a_missing_price_and_marks_it() -> None:
    prices = cost.apply_overrides(
        synthetic(),
        ["aws_interconnect_link=1.5", "gcp_partner_cci_transport=2", "gcp_partner_cci_egress=0.01"],
    )
    link = cost.option_cost(option("interconnect"), prices, 10, ("aws", "gcp"))
    assert link.complete
    assert link.known == pytest.approx(730 * 1.5 + 730 * 2 + 10 * GIB_PER_TB * 0.01)
    assert prices.prices["aws_interconnect_link"].kind == "command line"
    assert "‡ given with --set: `aws_interconnect_link`" in cost.render(prices, [10], "both", "x")


def test_average_rate() -> None:
    # 100 TB x 8 bits / (730 h x 3,600 s) = 304.414 Mbit/s
    assert cost.average_mbit_s(100, 730) == pytest.approx(8e14 / 2_628_000 / 1e6)


# --- the shipped price file -----------------------------------------------------------------------------------------


def test_every_price_names_its_source_and_the_day_it_was_read() -> None:
    prices = load()
    assert prices.hours_per_month == 730
    assert set(cost.PRICE_KEYS) <= set(prices.prices)
    for key, price in prices.prices.items():
        assert price.source.startswith("https://"), key
        assert price.read <= prices.as_of, key
        if price.kind == "third-party":
            assert price.provider_page and price.provider_page.startswith("https://"), key
        if price.found:
            assert price.value is not None or price.tiers, key
        else:
            assert price.value is None and price.tiers is None, key
            assert "not in the stored sources" in (price.not_found or ""), key


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda p: p.pop("source"), "prices.aws_c6i_2xlarge_us_east_1.source: required"),
        (lambda p: p.pop("read"), "prices.aws_c6i_2xlarge_us_east_1.read: required"),
        (lambda p: p.update(source="http://example.com"), "is not an https:// address"),
        (lambda p: p.update(source="javascript:alert(1)"), "is not an https:// address"),
        (lambda p: p.update(source="line one\nline two"), "one line of plain text"),
        (lambda p: p.update(kind="third-party"), "names the provider page it stands for in provider_page"),
        (lambda p: p.pop("value"), "needs a not_found reason"),
        (lambda p: p.update(tiers=[{"up_to": None, "price": 1}]), "give either value or tiers, not both"),
        (lambda p: p.update(value=-1), "prices.aws_c6i_2xlarge_us_east_1.value: -1 is below the minimum 0"),
    ],
)
def test_a_broken_price_is_refused_by_its_field_path(change: Any, problem: str) -> None:
    price = hourly(0.34)
    change(price)
    with pytest.raises(ConfigError) as exc:
        synthetic(aws_c6i_2xlarge_us_east_1=price)
    assert any(problem in line for line in exc.value.problems), exc.value.problems


def test_tiers_must_rise_and_end_open() -> None:
    tiers = [{"up_to": 10, "price": 1}, {"up_to": 5, "price": 1}, {"up_to": None, "price": 1}]
    with pytest.raises(ConfigError, match="up_to must increase"):
        synthetic(aws_internet_egress={**AWS_EGRESS, "tiers": tiers})
    with pytest.raises(ConfigError, match="the last one has up_to: null"):
        synthetic(aws_internet_egress={**AWS_EGRESS, "tiers": [{"up_to": 10, "price": 1}]})


# --- the cost table (docs/concepts/comparison.md) is the command's output ------------------------------------------


def test_readme_table_is_the_commands_output() -> None:
    """Golden: after changing prices or the model, regenerate on purpose with WG_MESH_UPDATE_GOLDEN=1."""
    text = COST_PAGE.read_text()
    match = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    assert match, f"{COST_PAGE.name} has no {BEGIN} ... {END} block"
    output = cost.render(load(), cost.DEFAULT_TB, "both", cost.DEFAULT_SOURCE)
    if os.environ.get("WG_MESH_UPDATE_GOLDEN") == "1":
        COST_PAGE.write_text(text[: match.start(1)] + output + text[match.end(1) :])
        return
    assert match.group(1) == output, "the docs' cost table differs from `python -m wg_mesh cost`: regenerate and review"


# --- the command line ---------------------------------------------------------------------------------------------


def run_cost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wg_mesh", "cost", *args], cwd=REPO, capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_the_command_prints_the_table() -> None:
    result = run_cost()
    assert result.returncode == 0, result.stderr
    assert result.stdout == cost.render(load(), cost.DEFAULT_TB, "both", cost.DEFAULT_SOURCE)


def test_json_carries_the_figures_and_their_sources() -> None:
    result = run_cost("--json", "--tb", "1", "100")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["hours_per_month"], doc["tb_per_month"], doc["direction"]) == (730, [1.0, 100.0], "both")
    options = {o["key"]: o for o in doc["options"]}
    prices = load()
    internet = cost.option_cost(option("wg-mesh-internet"), prices, 100, ("aws", "gcp"))
    assert options["wg-mesh-internet"]["costs"][1]["known_usd"] == round(internet.known, 2)
    assert options["wg-mesh-internet"]["costs"][1]["complete"] is True
    assert "gcp_ha_vpn_tunnel" in options["vpn"]["costs"][0]["missing"]
    assert doc["prices"]["aws_internet_egress"]["source"].startswith("https://")
    assert doc["prices"]["aws_interconnect_link"]["not_found"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tb", "abc"], "argument --tb: 'abc' is not a number of TB"),
        (["--tb", "-1"], "argument --tb: '-1': a volume is a number of TB above 0"),
        (["--tb", "nan"], "argument --tb: 'nan': a volume is a number of TB above 0"),
        (["--tb", "inf"], "argument --tb: 'inf': a volume is a number of TB above 0"),
        (["--tb", "2e6"], "argument --tb: '2e6' is above the maximum 1e+06 TB a month"),
        (["--direction", "sideways"], "argument --direction: invalid choice: 'sideways'"),
        (["--tb", "1", "1"], "--tb: 1 is given more than once"),
        (["--set", "aws_interconnect_link"], "--set aws_interconnect_link: expected NAME=USD"),
        (["--set", "aws_interconnect_link=x"], "'x' is not a price in USD/hour (a number from 0 to 1e+06)"),
        (["--set", "aws_interconnect_link=1e307"], "'1e307' is not a price in USD/hour (a number from 0 to 1e+06)"),
        (["--set", "nope=1"], "--set nope=1: no price named 'nope'"),
        (["--set", "aws_internet_egress=1"], "aws_internet_egress is tiered; edit a copy of the price file"),
    ],
)
def test_bad_input_is_refused_with_exit_2(args: list[str], message: str) -> None:
    result = run_cost(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_largest_prices_and_volumes_still_give_json_numbers(tmp_path: Path) -> None:
    """Every price at its maximum and the largest volume: finite figures (`--json` printed Infinity before, which is no
    JSON), and a price file above the bound is refused naming the field."""
    result = run_cost("--json", "--set", "aws_interconnect_link=1e6", "--tb", "1000000")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"--json printed {c}"))
    raw = yaml.safe_load(PRICE_FILE.read_text())
    raw["prices"]["aws_c6i_2xlarge_us_east_1"]["value"] = 1e307
    big = tmp_path / "prices.yaml"
    big.write_text(yaml.safe_dump(raw))
    result = run_cost("--prices", str(big), "--json")
    assert result.returncode == 1
    assert result.stderr == f"{big}: prices.aws_c6i_2xlarge_us_east_1.value: 1e+307 is above the maximum 1000000.0\n"


def test_a_broken_price_file_is_refused_naming_every_problem(tmp_path: Path) -> None:
    raw = yaml.safe_load(PRICE_FILE.read_text())
    del raw["prices"]["aws_c6i_2xlarge_us_east_1"]["source"]
    raw["prices"]["gcp_n2_standard_8_us_east4"]["value"] = "cheap"
    broken = tmp_path / "prices.yaml"
    broken.write_text(yaml.safe_dump(raw))
    result = run_cost("--prices", str(broken))
    assert result.returncode == 1  # a file's problem; a flag's exits 2
    assert result.stderr.splitlines() == [
        f"{broken}: prices.aws_c6i_2xlarge_us_east_1.source: required",
        f"{broken}: prices.gcp_n2_standard_8_us_east4.value: expected a number, got str 'cheap'",
    ]
    absent = tmp_path / "absent.yaml"
    assert run_cost("--prices", str(absent)).stderr == f"{absent}: no such price file\n"


# --- a price file of one's own (issue 34: refused twice before it worked) -------------------------------------------

OWN = """\
prices:
  aws_c6i_2xlarge_eu_west_1:
    unit: USD/hour
    value: 0.31
    source: quote from our AWS account team, 2026-11-30
    read: 2026-12-01
"""


def test_a_well_formed_file_of_ones_own_is_taken_the_first_time(tmp_path: Path) -> None:
    """Only the prices it gives; its source in words; a `read` later than the bundled file's as_of: all fine."""
    own = tmp_path / "mine.yaml"
    own.write_text(OWN)
    stack = tmp_path / "Pulumi.euw1.yaml"
    site = {"name": "aws-euw1", "cloud": "aws", "region": "eu-west-1", "overlay_ip": "10.200.0.1",
            "cidrs": ["10.10.0.0/16"]}  # fmt: skip
    office = {"name": "office", "cloud": "static", "endpoint": "203.0.113.7", "overlay_ip": "10.200.0.2",
              "cidrs": ["10.50.0.0/24"]}  # fmt: skip
    stack.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": {"overlay_cidr": "10.200.0.0/24",
                                                                 "sites": [site, office]}}}))  # fmt: skip
    result = run_cost("--file", str(stack), "--prices", str(own), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    gateway = next(item for item in doc["items"] if item["price"] == "aws_c6i_2xlarge_eu_west_1")
    assert gateway["usd_per_hour"] == 0.31  # the user's quote, not the bundled 0.3648
    assert round(doc["total_usd_per_month"], 2) == round(730 * (0.31 + 0.005), 2)
    # the comparison takes the same file: the bundled prices fill in the rest
    assert run_cost("--prices", str(own), "--tb", "1").returncode == 0


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (lambda t: t.replace("value: 0.31", "value: '0.31'"),
         "prices.aws_c6i_2xlarge_eu_west_1.value: expected a number, got str '0.31'"),
        (lambda t: re.sub(r"source: .*", "source: http://example.com/quote", t),
         "prices.aws_c6i_2xlarge_eu_west_1.source: 'http://example.com/quote' is not an https:// address"),
        (lambda t: t.replace("read: 2026-12-01", "read: 2062-12-01"),
         "prices.aws_c6i_2xlarge_eu_west_1.read: 2062-12-01 is in the future"),
        (lambda t: t.replace("    unit: USD/hour\n", ""), "prices.aws_c6i_2xlarge_eu_west_1.unit: required"),
        (lambda t: t.replace("    read: 2026-12-01\n", ""), "prices.aws_c6i_2xlarge_eu_west_1.read: required"),
        (lambda t: t + "  aws_c6i_2xlarge_eu_west_1x: {unit: USD/hour, value: 1, source: x, read: 2026-12-01, "
         "region: eu-west-1}\n", "(top level): a regional price's key ends in its region: aws_c6i_2xlarge_eu_west_1x"),
    ],
)  # fmt: skip
def test_a_file_of_ones_own_is_refused_by_the_field_in_one_line(tmp_path: Path, edit: Any, line: str) -> None:
    own = tmp_path / "mine.yaml"
    own.write_text(edit(OWN))
    with pytest.raises(ConfigError) as err:
        overlay(load(), own, dt.date(2026, 12, 7))
    assert any(p.startswith(f"{own}: {line}") for p in err.value.problems), err.value.problems
    assert all("\n" not in p for p in err.value.problems)


def test_stale_prices_are_said_on_stderr_not_in_the_table() -> None:
    fresh = max(load().as_of, instanceprices.load().as_of)
    assert cost.stale_warnings(True, None, fresh) == []
    late = fresh + dt.timedelta(days=STALE_AFTER_DAYS + 1)
    lines = cost.stale_warnings(True, (Path("mine.yaml"), fresh), late)
    assert len(lines) == 3 and all(line.startswith("warning: ") and "days old" in line for line in lines)
    assert f"the prices in mine.yaml are {STALE_AFTER_DAYS + 1} days old (as of {fresh}" in lines[2]
    assert len(cost.stale_warnings(False, None, late)) == 1  # the comparison reads no instance table


def test_the_bundled_prices_say_when_they_are_from() -> None:
    """The staleness check needs a date on both bundled files; neither may claim to be from the future."""
    table = instanceprices.load()
    assert load().as_of and table.as_of
    assert table.as_of <= dt.date.today() and load().as_of <= dt.date.today()
    assert table.as_of == min(section.read for section in table.clouds.values())
