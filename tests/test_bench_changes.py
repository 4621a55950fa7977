"""docs/benchmarks.md section 15's violations column (bench/report/changes.py): a rehearsal's step-by-step violations
summed up per kind and site, none lost, none repeated."""

from __future__ import annotations

from bench.report.changes import summary


def test_violations_are_counted_per_kind_and_site_with_each_route_once() -> None:
    seen = [
        "route on nothing: gcp-euw3's route to 10.200.0.0/24 goes nowhere",
        "route on nothing: gcp-euw3's route to 10.10.0.0/16 goes nowhere",
        "address on nothing: aws-use1's public address is on no gateway",
        "route on nothing: gcp-euw3's route to 10.200.0.0/24 goes nowhere",
        "address on nothing: aws-use1's public address is on no gateway",
    ]
    assert summary(seen) == (
        "route on nothing: gcp-euw3 (10.200.0.0/24; 10.10.0.0/16), seen 3 times; "
        "address on nothing: aws-use1, seen 2 times"
    )


def test_a_violation_of_another_form_is_kept_whole() -> None:
    assert summary(["traffic not back: vps-fra <-> aws-use1 after 30 s"]) == (
        "traffic not back: vps-fra <-> aws-use1 after 30 s"
    )
    assert (
        summary(["document refused: gcp-euw3 a (serial 7)"] * 2)
        == "document refused: gcp-euw3 a (serial 7), seen 2 times"
    )
