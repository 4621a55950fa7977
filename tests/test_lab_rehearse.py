"""`wg-mesh lab --before BEFORE --file AFTER` (wg_mesh/lab/rehearse) on real changes (integration, root): BEFORE brought
up in the lab, traffic between every pair, `pulumi up`'s steps carried out in the engine's order, judged.

Two changes, one per delivery: an AWS gateway's instance type in `dev` (user-data: a replacement beside the old, the
Elastic IP moved by the new association in one call, the routes, the old machine deleted last), and a site added to
`prod` (live: the stores written in place, the GCE VM's own metadata, the operator installing the new static site).
The bench (`python -m bench changes`) runs every row of the catalogue on every stack."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.conftest import REPO
from tests.lableft import lab_left
from wg_mesh.lab.fabric.netns import missing_requirements
from wg_mesh.lab.rehearse.catalogue import changes
from wg_mesh.lab.rehearse.run import rehearse_raw
from wg_mesh.tools.stackfile import read_raw

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(bool(missing_requirements()), reason="the lab's tools are missing"),
]


def _change(stack: str, name: str) -> Any:
    return next(c for c in changes(read_raw(REPO / stack)) if c.name == name)


def _steps(report: Any, resource: str) -> list[dict[str, Any]]:
    return [s for s in report.steps if s["resource"].endswith(f"::{resource}")]


def test_an_aws_gateway_replaced_moves_its_address_in_one_call_and_keeps_every_route() -> None:
    change = _change("Pulumi.dev.yaml", "instance type (aws)")
    report = rehearse_raw(change.before, change.after, "dev (bigger)", "dev", stack="dev")
    assert report.ok, (report.error, report.violations)
    (created,) = [s for s in _steps(report, "aws-use1-instance") if s["action"] == "create-replacement"]
    place = created["lab"].split("place ")[1].split()[0]
    (moved,) = [s for s in _steps(report, "aws-use1-eip-assoc") if s["action"] == "create-replacement"]
    assert moved["holders"]["aws-use1"] == place  # the new association moved it: never on nothing
    (stale,) = [s for s in _steps(report, "aws-use1-eip-assoc") if s["action"] == "delete-replaced"]
    assert "no effect" in stale["lab"] and stale["holders"]["aws-use1"] == place
    last = report.steps[-1]
    assert last["action"] == "delete-replaced" and last["machines"]["aws-use1"] == {place: "after:a"}
    assert all(p == place for p in last["routes"]["aws-use1"].values() if p is not None)
    assert report.end["back_s"] is not None and all(s["verified"] for s in report.streams.values())
    assert not lab_left(report.prefix)


def test_a_site_added_to_a_live_mesh_loses_no_ping() -> None:
    change = _change("Pulumi.prod.yaml", "site added")
    report = rehearse_raw(change.before, change.after, "prod (+vps-new)", "prod", stack="prod")
    assert report.ok, (report.error, report.violations)
    assert report.pings_lost_total == 0
    assert not [s for s in report.steps if "instance" in s["resource"] and s["action"] != "update"]  # no replacement
    installed = [s for s in report.steps if s["action"] == "operator: install"]
    assert [s["resource"] for s in installed] == ["static site vps-new"]
    assert not lab_left(report.prefix)
