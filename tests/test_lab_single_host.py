"""The lab with a single host (issue 23): prod's static site without its LAN, delivered live (the agent applies the
host's plan from its trust). Every site's workload and the host reach each other (check 2), and the host forwards
nothing (check 8: ip_forward 0, a packet routed to it for another site's workload is refused, not forwarded)."""

from __future__ import annotations

import pytest

from tests.test_lab import QUICK, assert_gone, needs_lab, raw_mesh
from tests.test_lab import no_own_lab_left_behind as no_own_lab_left_behind  # the fixture, by name
from wg_mesh.config import MeshConfig
from wg_mesh.gateway import wgconf
from wg_mesh.lab.checks.report import LabReport
from wg_mesh.lab.run import run_lab
from wg_mesh.plan.validate import load_mesh

HOST = "vps-fra"


def single_host_mesh() -> MeshConfig:
    raw = raw_mesh("prod")
    for site in raw["sites"]:
        if site["name"] == HOST:
            del site["cidrs"]
    return load_mesh(raw)


def host_pairs(report: LabReport) -> dict[tuple[str, str], bool]:
    return {(p["from"], p["to"]): p["ok"] for p in report.to_json()["pairs"] if HOST in (p["from"], p["to"])}


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_own_lab_left_behind")
def test_a_single_host_is_reached_and_forwards_nothing() -> None:
    cfg = single_host_mesh()
    report = run_lab(cfg, "single-host", options=QUICK)
    assert report.error is None and report.ok, [(c.key, c.summary) for c in report.checks if not c.ok]
    others = [s.name for s in cfg.sites if s.name != HOST]
    assert host_pairs(report) == {pair: True for o in others for pair in ((o, HOST), (HOST, o))}
    check = report.check("single_hosts")
    assert check is not None and check.ok
    (probe,) = check.data["hosts"]
    assert probe["ip_forward"] == "0" and probe["IpForwDatagrams"] == 0 and probe["IpInAddrErrors"] >= 3
    assert_gone(report.plan.prefix)


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_own_lab_left_behind")
def test_a_single_host_rendered_as_a_router_fails_the_single_host_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """wg0.conf with a gateway's sysctls again (user-data delivery: wg-quick runs them): the host reaches and is
    reached as before, and check 8 alone goes red."""
    monkeypatch.setattr(wgconf, "sysctl_settings", lambda plan: dict(wgconf.SYSCTL_SETTINGS))
    report = run_lab(single_host_mesh().model_copy(update={"delivery": "user-data"}), "host-router", options=QUICK)
    assert report.error is None and not report.ok
    assert {c.key for c in report.checks if not c.ok} == {"single_hosts"}
    check = report.check("single_hosts")
    assert check is not None
    (probe,) = check.data["hosts"]
    assert probe["ip_forward"] == "1" and probe["IpForwDatagrams"] > 0
    assert_gone(report.plan.prefix)
