"""Hostile price files and flags for `python -m wg_mesh cost` (issue 21 item 6): as strict as the config. Every
problem at once, one line each naming the file and the field, never a traceback. Pure except the two command runs
that prove the CLI prints the lines and exits 2."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from wg_mesh.config import ConfigError
from wg_mesh.tools import cost, prices

REPO = Path(__file__).resolve().parent.parent
RAW = yaml.safe_load(prices.PRICE_FILE.read_text())


def problems_of(raw: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        cost.check_keys(prices.parse(raw, "p.yaml"), "p.yaml")
    for line in err.value.problems:
        assert "\n" not in line and line.startswith("p.yaml: "), line
    return err.value.problems


def edited(edit: Any) -> dict[str, Any]:
    raw = copy.deepcopy(RAW)
    edit(raw)
    return raw


def test_the_shipped_file_passes() -> None:
    cost.check_keys(prices.parse(copy.deepcopy(RAW), "p.yaml"), "p.yaml")


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        # wrong types: no coercion (the old model read "0.34" as 0.34 and `true` as 1.0)
        (lambda r: r["prices"]["aws_c6i_2xlarge_us_east_1"].update(value="0.34"),
         "prices.aws_c6i_2xlarge_us_east_1.value: expected a number, got str '0.34'"),
        (lambda r: r["prices"]["aws_c6i_2xlarge_us_east_1"].update(value=True),
         "prices.aws_c6i_2xlarge_us_east_1.value: expected a number, got the boolean true"),
        (lambda r: r.update(hours_per_month="730"), "hours_per_month: expected a number, got str '730'"),
        (lambda r: r.update(as_of="2026-12-03"), "as_of: expected a date (YYYY-MM-DD, unquoted), got str"),
        (lambda r: r["prices"]["aws_internet_egress"]["tiers"][1].update(price="0.09"),
         "prices.aws_internet_egress.tiers[1].price: expected a number, got str '0.09'"),
        (lambda r: r.update(currency="EUR"), "currency: 'EUR' is not 'USD'"),
        # unknown keys, with a hint from the right model
        (lambda r: r["prices"]["aws_c6i_2xlarge_us_east_1"].update(valeu=1),
         "prices.aws_c6i_2xlarge_us_east_1.valeu: unknown key (did you mean 'value'?)"),
        (lambda r: r["regions"].update(azure="eastus"), "regions.azure: unknown key"),
        (lambda r: r.update(hours_per_mnth=730), "hours_per_mnth: unknown key (did you mean 'hours_per_month'?)"),
        # negative and out-of-range figures
        (lambda r: r["prices"]["aws_c6i_2xlarge_us_east_1"].update(value=-0.01),
         "prices.aws_c6i_2xlarge_us_east_1.value: -0.01 is below the minimum 0"),
        (lambda r: r["prices"]["aws_internet_egress"]["tiers"][0].update(price=-1),
         "prices.aws_internet_egress.tiers[0].price: -1 is below the minimum 0"),
        (lambda r: r.update(hours_per_month=745), "hours_per_month: 745 is above the maximum 744"),
        (lambda r: r.update(hours_per_month=0), "hours_per_month: 0 is not above 0"),
        (lambda r: r["prices"]["aws_c6i_2xlarge_us_east_1"].update(value=float("nan")),
         "prices.aws_c6i_2xlarge_us_east_1.value: expected a finite number"),
    ],
)  # fmt: skip
def test_a_hostile_field_is_one_line_naming_it(edit: Any, line: str) -> None:
    assert any(p.startswith(f"p.yaml: {line}") for p in problems_of(edited(edit))), problems_of(edited(edit))


def test_a_price_name_no_option_uses_is_refused_with_a_hint() -> None:
    def rename(r: dict[str, Any]) -> None:
        price = r["prices"].pop("aws_c6i_2xlarge_us_east_1")
        del price["region"]  # with its region it would have to end in it (test_a_regional_key_ends_in_its_region)
        r["prices"]["aws_c6i_2xlarg"] = price

    assert problems_of(edited(rename)) == [
        "p.yaml: prices.aws_c6i_2xlarge_us_east_1: required (an option uses it)",
        "p.yaml: prices.aws_c6i_2xlarg: unknown price (did you mean 'aws_c6i_2xlarge_us_east_1'?)",
    ]


def test_a_regional_key_ends_in_its_region() -> None:
    def misname(r: dict[str, Any]) -> None:
        r["prices"]["aws_c6i_2xlarge_eu_west_9"] = {**r["prices"]["aws_c6i_2xlarge_us_east_1"], "region": "eu-west-1"}

    assert problems_of(edited(misname)) == [
        "p.yaml: (top level): a regional price's key ends in its region: aws_c6i_2xlarge_eu_west_9"
    ]


def test_a_unit_its_item_cannot_use_is_refused_both_ways() -> None:
    def per_volume(r: dict[str, Any]) -> None:
        r["prices"]["aws_c6i_2xlarge_us_east_1"]["unit"] = "USD/GB"

    def hourly(r: dict[str, Any]) -> None:
        r["prices"]["gcp_partner_cci_egress"].update(unit="USD/hour", tiers=None, free=0)

    assert problems_of(edited(per_volume)) == [
        "p.yaml: prices.aws_c6i_2xlarge_us_east_1.unit: USD/GB cannot price this item: expected USD/hour"
    ]
    assert "unit: USD/hour cannot price this item: expected USD/GB or USD/GiB" in problems_of(edited(hourly))[0]


def test_every_problem_of_a_file_at_once() -> None:
    def many(r: dict[str, Any]) -> None:
        r["prices"]["aws_c6i_2xlarge_us_east_1"]["value"] = "x"
        r["prices"]["gcp_n2_standard_8_us_east4"]["value"] = -1
        r["regions"]["aws"] = 5

    assert [p.split(":")[1].strip() for p in problems_of(edited(many))] == [
        "regions.aws", "prices.aws_c6i_2xlarge_us_east_1.value", "prices.gcp_n2_standard_8_us_east4.value",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("as_of: [2026\n", "not valid YAML in prices.yaml (line 2)"),  # broken YAML: one line, not a traceback
        ("as_of: 2026-12-03\nas_of: 2026-12-04\n", "as_of: "),  # duplicate keys: refused, not the last one wins
        ("- a list\n", "expected a mapping"),
        ("", "expected a mapping"),
    ],
)
def test_a_broken_file_is_one_line(tmp_path: Path, text: str, line: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        prices.load(path)
    assert len(err.value.problems) == 1 and line in err.value.problems[0], err.value.problems


def test_the_command_refuses_a_binary_file_with_one_line_and_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_bytes(b"as_of: \xff\xfe\n")
    done = subprocess.run(
        [sys.executable, "-m", "wg_mesh", "cost", "--prices", str(path), "--tb", "1"],
        cwd=REPO, capture_output=True, text=True, check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"{path}: not UTF-8 (byte 0xff on line 1); price files are UTF-8\n"


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["aws_c6i_2xlarge_us_east_1=0.34", "aws_c6i_2xlarge_us_east_1=0.35"],
            "--set aws_c6i_2xlarge_us_east_1=0.35: aws_c6i_2xlarge_us_east_1 is set twice",
        ),
        (["aws_c6i_2xlarge_us_east_1=-1"], "'-1' is not a price in USD/hour"),
        (["aws_c6i_2xlarge_us_east_1=1e400"], "'1e400' is not a price in USD/hour"),
        (["aws_c6i_2xlarge_us_east_1="], "'' is not a price in USD/hour"),
    ],
)
def test_set_flags_are_checked_like_the_file(overrides: list[str], line: str) -> None:
    with pytest.raises(ConfigError) as err:
        cost.apply_overrides(prices.load(), overrides)
    assert any(line in p for p in err.value.problems), err.value.problems
    changed = cost.apply_overrides(prices.load(), ["aws_c6i_2xlarge_us_east_1=0"])
    assert changed.prices["aws_c6i_2xlarge_us_east_1"].value == 0
