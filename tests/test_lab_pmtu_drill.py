"""The path-MTU drill (wg_mesh/lab/drills/pmtudrill.py, issue 14): its judgement and the fault's commands, pure; the
drill on the prod stack (integration, root): a black hole between two sites mid-transfer, detected, healed and alerted
within two minutes by the agents as shipped, the stream resuming, the other paths untouched; its docs/benchmarks.md
section (bench/report/pathmtu.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.report.pathmtu import section
from tests.lableft import lab_left
from tests.test_lab_live_drill import CANNOT_RUN, PROD, pinger, stream
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.drills import pmtudrill
from wg_mesh.lab.drills.drillreport import DrillReport
from wg_mesh.lab.drills.drillrun import run_drill
from wg_mesh.lab.fabric.plan import plan_lab

UNTOUCHED = {"aws-use1->vps-fra": True, "gcp-euw3->vps-fra": True, "vps-fra->aws-use1": True, "vps-fra->gcp-euw3": True}


def shrink(filtered: bool, **changes: Any) -> dict[str, Any]:
    step = {
        "step": f"shrink to 1400, ICMP {'filtered' if filtered else 'allowed'}", "start": 100.0, "end": 100.5,
        "icmp_filtered": filtered, "first_failing_probe_s": 14.9, "black_hole_declared_s": 45.2, "healed_s": 45.2,
        "healed_route_mtu": 1328.0, "alert_fires_s": 74.9, "alert_within_2m": True, "peer_side_healed": True,
        "stream_resumed": True, "other_paths_untouched": dict(UNTOUCHED),
    }  # fmt: skip
    return {**step, **changes}


def grow(**changes: Any) -> dict[str, Any]:
    step = {"step": "grow back", "start": 100.5, "end": 101.0, "restored_s": 44.0, "other_paths_untouched": UNTOUCHED}
    return {**step, **changes}


REPLIES = [(100 + i * 0.01, i) for i in range(100)]


def test_judge_needs_the_heal_on_both_sides_the_alert_the_stream_and_untouched_paths() -> None:
    ok_steps = [shrink(True), grow(), shrink(False, healed_s=None, alert_fires_s=None, alert_within_2m=False), grow()]
    assert pmtudrill.judge(ok_steps, pinger(REPLIES), stream([]))
    assert ok_steps[0]["pings_lost"] == 0 and ok_steps[0]["longest_stall_ms"] == 0.0
    for bad in (
        [shrink(True, healed_s=None)],
        [shrink(True, peer_side_healed=False)],
        [shrink(True, alert_within_2m=False)],
        [shrink(True, stream_resumed=False)],
        [shrink(False, stream_resumed=False)],
        [shrink(True, other_paths_untouched={**UNTOUCHED, "vps-fra->aws-use1": False})],
        [grow(restored_s=None)],
    ):
        assert not pmtudrill.judge(bad, pinger(REPLIES), stream([])), bad
    assert not pmtudrill.judge([shrink(True)], pinger(REPLIES), stream([], verified=False))


def test_the_fault_is_the_pair_s_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Policy routes with `mtu lock` for the two gateways' (post-NAT) addresses in the internet namespace, both
    directions, and the router's own ICMP 'fragmentation needed' dropped when asked; restore undoes all of it."""
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(pmtudrill, "ip", lambda netns, *args: ran.append(("ip", netns, *map(str, args))))
    monkeypatch.setattr(pmtudrill, "iptables", lambda netns, *args: ran.append(("iptables", netns, *args)))
    plan = plan_lab(PROD, "wgl0000")
    a, b, c = (plan.site(n) for n in ("aws-use1", "gcp-euw3", "vps-fra"))
    fault = pmtudrill.PathFault(plan, a, b, 1400)
    fault.shrink(drop_icmp=True)
    a_ip, b_ip = str(a.gateway_ip.ip), str(b.gateway_ip.ip)
    assert ran == [
        ("iptables", "wgl0000-internet", "-I", *pmtudrill.ICMP_DROP),  # first: no ICMP may slip through
        ("ip", "wgl0000-internet", "route", "replace", f"{b_ip}/32", "via", str(b.transit_site.ip), "dev",  # type: ignore[union-attr]
         b.internet_if, "mtu", "lock", "1400", "table", "4242"),
        ("ip", "wgl0000-internet", "rule", "add", "from", a_ip, "to", b_ip, "lookup", "4242", "priority", "4242"),
        ("ip", "wgl0000-internet", "route", "replace", f"{a_ip}/32", "via", str(a.transit_site.ip), "dev",  # type: ignore[union-attr]
         a.internet_if, "mtu", "lock", "1400", "table", "4242"),
        ("ip", "wgl0000-internet", "rule", "add", "from", b_ip, "to", a_ip, "lookup", "4242", "priority", "4243"),
    ]  # fmt: skip
    assert pmtudrill.route_target(c) == (str(c.public_ip), ["dev", c.internet_if])  # a static site: no NAT
    ran.clear()
    fault.restore()
    assert ran[-1] == ("iptables", "wgl0000-internet", "-D", *pmtudrill.ICMP_DROP) and len(ran) == 4


def test_the_benchmarks_section_shows_every_step() -> None:
    report = DrillReport("prod", "pmtu", ok=True, duration_s=200.0)
    report.sites = {
        r: {"name": n, "cloud": c, "store": c}
        for r, n, c in (("A", "aws-use1", "aws"), ("B", "gcp-euw3", "gcp"), ("C", "vps-fra", "file"))
    }
    report.steps = [shrink(True), grow(), shrink(False, healed_s=None, alert_fires_s=None, alert_within_2m=False)]
    pmtudrill.judge(report.steps, pinger(REPLIES), stream([[102.6, 2.5]]))  # began at 100.1: the first step
    report.stream = {"ok": True, "verified": True, "bytes": 180 << 20}
    text = section(report.to_json())
    assert "## 9. Path-MTU black hole" in text
    assert (
        "| shrink to 1400, ICMP filtered | 0 | 2500 ms | first failing probe 14.9 s, black hole declared 45.2 s, "
        "healed after 45.2 s (route MTU 1328; peer side too); alert at 74.9 s (+ ≤ 30 s scrape/eval: within 2 min) "
        "| yes | ok |" in text
    )
    assert "alert none (the failures did not last its 1m)" in text
    assert "180 MiB, SHA-256 match" in text


@pytest.mark.integration
@pytest.mark.skipif(bool(CANNOT_RUN), reason="; ".join(CANNOT_RUN))
def test_the_pmtu_drill_on_the_prod_stack() -> None:
    # The black hole (ICMP filtered) and its grow-back; the ICMP-allowed shrink, where the kernel's own path-MTU
    # discovery must do and the agent must not step in, is the benchmark's (docs/benchmarks.md 9): ~60 s more.
    short = LabOptions(pmtu_icmp_allowed=False)
    report = run_drill(PROD, "prod", kind="pmtu", options=short)
    assert report.error is None, report.error
    failed = [s for s in report.steps if not s["ok"]]
    assert report.ok and not failed, failed
    filtered = report.steps[0]
    assert filtered["icmp_filtered"] and filtered["healed_route_mtu"] == 1328  # WireGuard's 16-byte padding
    assert filtered["alert_fires_s"] is not None and filtered["alert_fires_s"] + 30 <= 120
    assert [s["step"] for s in report.steps] == ["shrink to 1400, ICMP filtered", "grow back"]
    assert lab_left(report.prefix) == []  # torn down
