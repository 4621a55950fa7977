"""The lab with dynamic-address sites (issue 24, `endpoint: dynamic`) and a relay, in both delivery modes: every pair
passes the lab's checks, the relayed pair (two dynamic sites, through aws-use1) included; the peers' `wg show` has
a dynamic site's address although no config ever gave it (learnt from its packets), and after its address moves
traffic comes back with no action of ours; in user-data mode only (the watchdog is the same code in both), after a
cloud gateway's WireGuard restarts while the office is idle, the office's re-arm watchdog brings it back (the lab's
dynamic check, wg_mesh/lab/checks/dynamiccheck.py: the outages are measured and printed; the bounds are generous).

The stack is examples/edge/Pulumi.edge.yaml (one AWS, one GCP gateway, two offices on dynamic addresses, the AWS
gateway relaying between them), persistent_keepalive 10 (short, so the roam is quick). Wall time here, contended:
about 55 s (user-data, with the restart) and 40 s (live)."""

from __future__ import annotations

import copy
from dataclasses import replace
from ipaddress import IPv4Address
from typing import Any

import pytest

from tests.stacks import REPO
from tests.test_lab import QUICK, assert_gone, needs_lab, no_own_lab_left_behind  # noqa: F401 (a fixture)
from wg_mesh.config import parse_mesh
from wg_mesh.lab.checks import dynamiccheck
from wg_mesh.lab.fabric.plan import LAB_PUBLIC_RANGE, LabFaults, plan_lab
from wg_mesh.lab.run import run_lab
from wg_mesh.tools.stackfile import read_raw

KEEPALIVE = 10


EDGE = REPO / "examples" / "edge" / "Pulumi.edge.yaml"
RESTART_IN = "user-data"  # the delivery whose run restarts a gateway (the re-arm watchdog: ~30 s of the run)


def edge_raw(delivery: str) -> dict[str, Any]:
    raw: dict[str, Any] = copy.deepcopy(read_raw(EDGE))
    raw["persistent_keepalive"], raw["delivery"] = KEEPALIVE, delivery
    return raw


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_own_lab_left_behind")
@pytest.mark.parametrize("delivery", ["user-data", "live"])
def test_a_dynamic_site_is_learnt_by_its_peers_and_followed_when_it_roams(delivery: str) -> None:
    cfg = parse_mesh(edge_raw(delivery))
    report = run_lab(cfg, f"dynamic-{delivery}", options=replace(QUICK, dynamic_restart=delivery == RESTART_IN))
    assert report.error is None, report.error
    assert all(p["ok"] for p in report.to_json()["pairs"]), [p for p in report.to_json()["pairs"] if not p["ok"]]
    failed = [c.key for c in report.checks if not c.ok]
    assert failed == [], failed
    check = report.check(dynamiccheck.KEY)
    assert check is not None and check.ok, check and check.summary
    assert [s.name for s in report.plan.sites if s.dynamic] == ["office", "home"]
    pairs = {(p["from"], p["to"]): p for p in report.to_json()["pairs"]}
    assert pairs[("office", "home")]["ok"] and pairs[("home", "office")]["ok"]  # relayed, through aws-use1
    handshakes = {(p["a"], p["b"]) for p in report.check("handshakes").data["pairs"]}  # type: ignore[union-attr]
    assert ("office", "home") not in handshakes and ("aws-use1", "home") in handshakes  # the pair never peers
    learnt = check.data["learnt"]
    assert {(r["gateway"], r["peer"]) for r in learnt} == {(g, s) for g in ("aws-use1", "gcp-euw3")
                                                          for s in ("office", "home")}  # fmt: skip
    public = {s.name: s.public_ip for s in report.plan.sites}
    for row in learnt:  # never configured; WireGuard has the address the site's packets came from
        assert row["configured"] is None and row["endpoint"] == f"{public[row['peer']]}:{cfg.listen_port}", row
    roam = check.data["roam"]
    assert roam["error"] is None and roam["outage_ms"] is not None
    assert roam["outage_ms"] <= 3 * KEEPALIVE * 1000, roam  # generous: the measured value is printed below
    assert all(r["endpoint"] == f"{roam['to']}:{cfg.listen_port}" for r in roam["learnt_after"]), roam
    restart = check.data["restart"]  # the office's re-arm watchdog brought the restarted gateway back
    if delivery == RESTART_IN:
        assert restart["outage_s"] is not None and restart["outage_s"] <= 2 * KEEPALIVE + 20, restart  # generous
    else:
        assert restart.get("skipped"), restart
    restarted = (
        "not restarted (the user-data run does)"
        if restart.get("skipped")
        else f"restarted: the office reached again after {restart['outage_s']} s"
    )
    print(f"\n{delivery}: roam outage {roam['outage_ms']} ms, every peer learnt the new address within "
          f"{roam['all_learnt_s']} s; gateway {restart['gateway']} {restarted} (persistent_keepalive {KEEPALIVE} s); "
          f"lab {report.duration_s:.1f} s (build {report.build_s}), checks "
          f"{ {c.key: c.seconds for c in report.checks} }")  # fmt: skip
    assert_gone(report.plan.prefix)


def test_the_lab_plan_marks_the_dynamic_site_and_its_roam_takes_a_free_address() -> None:
    plan = plan_lab(parse_mesh(edge_raw("user-data")), "wgl0b0b", LabFaults())
    assert [s.name for s in plan.sites if s.dynamic] == ["office", "home"]
    roamed = {dynamiccheck.roamed_address(s) for s in plan.sites}
    assert len(roamed) == len(plan.sites) and not roamed & {str(s.public_ip) for s in plan.sites}
    assert all(IPv4Address(a) in LAB_PUBLIC_RANGE for a in roamed)
