"""The roam drill (wg_mesh/lab/drills/roamdrill.py, issue 24 item 5): its plan, judgement, NAT rules and report, pure;
one lab run (integration, root) on this file's stack: the dev topology, an office on a dynamic address and a branch
known by a DNS name (served by the lab's resolver, re-resolved every 2 s), persistent_keepalive 5, `delivery: live`
(the agents run and poll throughout: none may put a stale endpoint back). The run's changes: idle, dns (the branch
moves and its name is re-pointed), flowing, symmetric and a fifth, flowing, with a deliberately stale peer (its gateway
sets the office's old endpoint back, over and over): that one must be reported NOT met, the others must come back
(their numbers are printed; their targets are the drill's verdict, not this test's: no timed assertion). Wall time
here: 40-47 s (39 s before the branch and its dns change were added, on the same load)."""

from __future__ import annotations

import io
import time
from ipaddress import IPv4Address
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from rich.console import Console

from bench.lab.roam import edge_raw, edge_with_branch_raw
from bench.report import roam as roamsection
from tests import roamlab
from tests.lableft import lab_left
from tests.stacks import REPO
from tests.test_cli import run_mesh
from tests.test_lab import needs_lab, no_own_lab_left_behind  # noqa: F401 (a fixture)
from tests.test_lab_live_drill import pinger, stream
from wg_mesh.config import parse_mesh
from wg_mesh.gateway import reresolve
from wg_mesh.lab.drills import roamdrill, roamplan
from wg_mesh.lab.drills.drillreport import DrillReport
from wg_mesh.lab.fabric import resolver, roamnat
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.fabric.plan import LAB_PUBLIC_RANGE, LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.machines import cloudinit
from wg_mesh.plan import reresolveunit
from wg_mesh.tools.stackfile import read_raw

KEEPALIVE = 5
RERESOLVE = 2  # the config's minimum: below KEEPALIVE, so the re-resolve, not the branch's keepalive, is measured


def edge_with_branch() -> dict[str, Any]:
    return edge_with_branch_raw("live", KEEPALIVE, RERESOLVE)


EDGE = parse_mesh(edge_with_branch())  # the dev topology, an office on a dynamic address, a DNS-named branch
PLAN = plan_lab(EDGE, "wgl0b0b")


# --- the plan ------------------------------------------------------------------------------------------------------


def test_the_plan_picks_the_dynamic_site_and_a_fixed_peer_and_runs_idle_changes_first() -> None:
    roam = roamplan.plan_roam(PLAN, "edge", KEEPALIVE, ("flowing", "idle", "symmetric", "flowing"), stale=(3,))
    assert (roam.site.name, roam.peer.name) == ("office", "aws-use1")
    assert [s.name for s in roam.others(roam.site)] == ["aws-use1", "gcp-euw3", "branch"]  # P first
    assert all(c.site is roam.site for c in roam.changes)
    assert [(c.kind.name, c.stale_peer) for c in roam.changes] == [
        ("idle", False), ("flowing", False), ("symmetric", False), ("flowing", True)]  # fmt: skip
    assert [c.target_s for c in roam.changes] == [KEEPALIVE, 1.0, 1.0, 1.0]
    assert all(c.bound_s > c.target_s + roamplan.STEADY_S for c in roam.changes)  # a miss is measured, not only seen
    assert roam.changes[2].bound_s >= 2 * KEEPALIVE  # every peer learns from a keepalive of the site's
    addresses = [c.address for c in roam.changes]
    taken = {str(s.public_ip) for s in PLAN.sites}
    assert len(set(addresses)) == 4 and not set(addresses) & taken
    assert all(IPv4Address(a) in LAB_PUBLIC_RANGE for a in addresses)
    assert roam.changes[3].label == "flowing (fault: P keeps the old endpoint)"


def test_a_dns_change_moves_the_named_site_behind_its_static_nat_within_one_reresolve_interval() -> None:
    branch = PLAN.site("branch")
    assert branch.dns_name == "branch.wg-mesh-lab.test" and PLAN.reresolve_s == RERESOLVE
    roam = roamplan.plan_roam(PLAN, "edge", KEEPALIVE, ("flowing", "dns", "idle", "dns"))
    assert [(c.kind.name, c.site.name) for c in roam.changes] == [
        ("dns", "branch"), ("idle", "office"), ("dns", "branch"), ("flowing", "office")]  # fmt: skip
    dns = [c for c in roam.changes if c.kind.name == "dns"]
    assert [c.target_s for c in dns] == [RERESOLVE, RERESOLVE] and all(c.kind.nat == "static" for c in dns)
    # the branch's next addresses after the one the lab starts it at, all in TEST-NET-3: an answer the shipped
    # re-resolver accepts (the lab's 198.18.0.0/15 it refuses, and must: see the next test)
    assert [c.address for c in dns] == [str(resolver.dns_address(branch, k)) for k in (1, 2)]
    assert all(IPv4Address(c.address) in resolver.DNS_POOL and reresolve.answer_problem(c.address) is None
               for c in dns)  # fmt: skip
    assert [c.address for c in roam.changes if c.kind.name != "dns"] == [roamplan.roam_address(PLAN, k)
                                                                          for k in (0, 1)]  # fmt: skip
    assert roamplan.default_changes(PLAN) == ("idle", "flowing", "symmetric", "dns")
    # a stack whose only moving site is DNS-named: the dns change alone, no keepalive needed
    raw = edge_with_branch()
    raw["sites"] = [s for s in raw["sites"] if s["name"] != "office"]
    named_only = plan_lab(parse_mesh(raw), "wgl0b0b")
    alone = roamplan.plan_roam(named_only, "named", 0)
    assert [(c.kind.name, c.site.name) for c in alone.changes] == [("dns", "branch")]
    assert (alone.site.name, alone.peer.name) == ("branch", "aws-use1")
    with pytest.raises(LabError, match="named: no site with `endpoint: dynamic`"):
        roamplan.plan_roam(named_only, "named", 5, ("dns", "idle"))
    with pytest.raises(LabError, match="edge: no site with a DNS name as its endpoint"):
        roamplan.plan_roam(plan_lab(parse_mesh(edge_raw("live", KEEPALIVE)), "wgl0b0b"), "edge", 5, ("dns",))


def test_the_lab_s_public_range_is_refused_by_the_shipped_re_resolver_and_its_dns_range_is_not() -> None:
    """Production is not weakened for the lab: its 198.18.0.0/15 stays refused; the lab serves TEST-NET-3 instead."""
    assert reresolve.answer_problem(str(PLAN.site("branch").public_ip)) == (
        "198.18.0.4 is in 198.18.0.0/15: not a public endpoint"
    )
    assert reresolve.answer_problem(str(resolver.RESOLVER_IP)) is None


def test_a_static_nat_makes_the_site_reachable_at_its_address_before_it_sends() -> None:
    text = roamnat.nat_rules("198.18.0.4", roamnat.NatState("203.0.113.50", "static"), 40301, 3)
    assert text == (
        "*nat\n:wgroam3 - [0:0]\n:wgroamin3 - [0:0]\n-A wgroam3 -s 198.18.0.4/32 -j SNAT --to-source 203.0.113.50\n"
        "-A wgroamin3 -d 203.0.113.50/32 -j DNAT --to-destination 198.18.0.4\nCOMMIT\n"
        "*raw\n:wgroam3 - [0:0]\n-A wgroam3 -s 198.18.0.4/32 -j CT --zone 40301\n"
        "-A wgroam3 -d 203.0.113.50/32 -j CT --zone 40301\nCOMMIT\n"
    )
    assert ("-t", "nat", "-I", "PREROUTING", "1", "-j", "wgroamin3") in roamnat.setup_rules("198.18.0.4", 3)


def test_the_lab_s_gateways_run_the_re_resolver_s_timer_by_hand_at_its_interval() -> None:
    user_data = parse_mesh(dict(edge_with_branch(), delivery="user-data"))
    artifacts = render_artifacts(user_data, plan_lab(user_data, "wgl0b0b"), LabKeys.generate(user_data))
    setup = cloudinit.interpret(artifacts["aws-use1"].user_data)
    timers = [s for s in setup.steps if s.kind == "timer"]
    assert [(s.argv, s.every) for s in timers] == [
        (("/usr/bin/python3", reresolveunit.SCRIPT_PATH, reresolveunit.CONFIG_PATH, reresolveunit.STATE_PATH),
         RERESOLVE)]  # fmt: skip
    # its memory's directory, as systemd makes it (StateDirectory=): without it no answer is remembered, and a
    # changed name was followed only once the session went stale (the user-data dns change, bench roam)
    assert timers[0].unit is not None and timers[0].unit.directories == (
        PurePosixPath(reresolveunit.STATE_PATH).parent,
    )
    # the enable and the first start: both carried out (the units-active check stays a note, as for every unit)
    assert [n for n in setup.notes if "reresolve" in n and ("systemctl start" in n or "enable" in n)] == []
    assert not [s for s in cloudinit.interpret(artifacts["branch"].user_data).steps if s.kind == "timer"]


def test_a_stack_without_a_dynamic_site_or_with_a_bad_plan_is_refused_before_anything_is_built() -> None:
    dev = parse_mesh(read_raw(REPO / "Pulumi.dev.yaml"))
    with pytest.raises(LabError, match=r"dev: no site with `endpoint: dynamic`"):
        roamplan.plan_roam(plan_lab(dev, "wgl0b0b"), "dev", 25)
    with pytest.raises(LabError, match="no site with `endpoint: dynamic`"):
        roamdrill.run_roam_drill(dev, "dev")  # raises at its plan: no root needed, nothing created
    with pytest.raises(LabError, match="no roam change teleport: idle, flowing, symmetric, dns"):
        roamplan.plan_roam(PLAN, "edge", KEEPALIVE, ("idle", "teleport"))
    with pytest.raises(LabError, match=r"stale: \[2\] are not indexes of the 2 changes"):
        roamplan.plan_roam(PLAN, "edge", KEEPALIVE, ("idle", "flowing"), stale=(2,))
    with pytest.raises(LabError, match="no persistent_keepalive"):
        roamplan.plan_roam(PLAN, "edge", 0)


def test_the_cli_says_why_a_stack_cannot_be_drilled(tmp_path: Path) -> None:
    result = run_mesh("lab", "--drill", "roam", "--stack", "dev")
    assert result.returncode == 2 and "dev: no site with `endpoint: dynamic`" in result.stderr, result.stderr


def test_traffic_is_back_at_the_first_reply_of_a_second_without_a_lost_ping() -> None:
    steady = [(100 + i * 0.01, i) for i in range(300)]
    assert roamplan.back_at(steady, 99.0) == 100.0  # never broken: the first reply after the change
    holed = [r for r in steady if not 50 <= r[1] < 120]  # 0.7 s of silence after 100.49
    assert roamplan.back_at(holed, 100.2) == pytest.approx(101.2)
    flapping = [r for r in steady if r[1] % 7]  # one ping in seven lost: never a steady second
    assert roamplan.back_at(flapping, 99.0) is None
    assert roamplan.back_at(steady[:100], 99.0) is None  # 0.99 s of replies: not yet a second
    assert roamplan.back_at([], 99.0) is None
    assert roamplan.met(999.0, 1.0) and not roamplan.met(1000.1, 1.0) and not roamplan.met(None, 1.0)


# --- the NAT -------------------------------------------------------------------------------------------------------


def test_a_cone_nat_keeps_the_port_and_each_change_gets_its_own_conntrack_zone() -> None:
    text = roamnat.nat_rules("198.18.0.3", roamnat.NatState("198.18.255.251"), 40201, 2)
    assert text == (
        "*nat\n:wgroam2 - [0:0]\n:wgroamin2 - [0:0]\n-A wgroam2 -s 198.18.0.3/32 -j SNAT --to-source 198.18.255.251\n"
        "COMMIT\n"
        "*raw\n:wgroam2 - [0:0]\n-A wgroam2 -s 198.18.0.3/32 -j CT --zone 40201\n"
        "-A wgroam2 -d 198.18.255.251/32 -j CT --zone 40201\nCOMMIT\n"
    )  # nat before raw: the new zone's first packet finds the new mapping
    assert roamnat.zone(2, 1) == 40201 and roamnat.zone(2, 2) != roamnat.zone(2, 1)
    assert ("-t", "raw", "-I", "PREROUTING", "1", "-d", "198.18.0.3/32", "-j", "DROP") in roamnat.setup_rules(
        "198.18.0.3", 2
    )  # the site's own address is behind the NAT: unreachable


def test_a_symmetric_nat_maps_each_destination_into_its_own_port_range() -> None:
    ports = roamnat.symmetric_ports(["198.18.0.1", "198.18.0.2"])
    assert ports == {"198.18.0.1": (20000, 20999), "198.18.0.2": (21000, 21999)}  # disjoint by construction
    text = roamnat.nat_rules("198.18.0.3", roamnat.NatState("198.18.255.249", "symmetric", ports), 40203, 2)
    nat = text.split("COMMIT")[0].splitlines()
    assert nat[3:] == [
        "-A wgroam2 -s 198.18.0.3/32 -p udp -m conntrack --ctorigdst 198.18.0.1/32 -j SNAT --to-source "
        "198.18.255.249:20000-20999 --random-fully",
        "-A wgroam2 -s 198.18.0.3/32 -p udp -m conntrack --ctorigdst 198.18.0.2/32 -j SNAT --to-source "
        "198.18.255.249:21000-21999 --random-fully",
        "-A wgroam2 -s 198.18.0.3/32 -j SNAT --to-source 198.18.255.249",
    ]
    with pytest.raises(ValueError, match="no NAT kind 'full-cone'"):
        roamnat.nat_rules("198.18.0.3", roamnat.NatState("198.18.255.249", "full-cone"), 1, 2)


def test_an_endpoint_is_read_by_the_peer_s_key() -> None:
    out = "AAAA=\t198.18.255.249:20430\nBBBB=\t(none)\n"
    assert roamdrill.endpoint_of(out, "AAAA=") == "198.18.255.249:20430"
    assert roamdrill.endpoint_of(out, "BBBB=") is None and roamdrill.endpoint_of(out, "CCCC=") is None


# --- judgement and report ------------------------------------------------------------------------------------------


def change(kind: str, outage_ms: float | None, target_s: float = 1.0, **extra: Any) -> dict[str, Any]:
    nat = {"symmetric": "symmetric", "dns": "static"}.get(kind, "cone")
    step = {"step": kind, "kind": kind, "site": "office", "nat": nat,
            "traffic": kind != "idle", "own_pinger": kind == "idle", "from": "198.18.0.3", "to": "198.18.255.251",
            "start": 100.0, "end": 101.5,
            "target_s": target_s, "bound_s": 5.0, "outage_ms": outage_ms, "met": roamplan.met(outage_ms, target_s),
            "endpoints": {"aws-use1": "198.18.255.251:51820", "gcp-euw3": None},
            "learnt": {"aws-use1": True, "gcp-euw3": False}}  # fmt: skip
    if kind in ("idle", "dns"):
        step |= {"pings_lost": 480, "longest_ping_gap_ms": 10.1}
    if kind == "dns":
        step |= {"traffic": False, "own_pinger": True, "learnt": {"aws-use1": True, "gcp-euw3": True},
                 "all_learnt_s": 1.9}  # fmt: skip
    if kind == "symmetric":
        step |= {"learnt": {"aws-use1": True, "gcp-euw3": True}, "ports_distinct": True,
                 "hosts_reach_site": {"gcp-euw3": True}, "all_learnt_s": 3.2}  # fmt: skip
    return step | extra


REPLIES = [(100 + i * 0.01, i) for i in range(200)]


def test_a_change_passes_on_its_target_and_a_symmetric_one_on_every_gateway_at_its_own_port() -> None:
    steps = [change("idle", 4800.0, KEEPALIVE), change("dns", 1900.0, RERESOLVE), change("flowing", 12.0),
             change("symmetric", 30.0)]  # fmt: skip
    assert roamdrill.judge(steps, (pinger(REPLIES), stream([[100.5, 0.3]])))
    assert steps[2]["pings_lost"] == 0 and steps[2]["longest_stall_ms"] == 300.0  # the stall began at 100.2
    assert steps[0]["pings_lost"] == 480  # the idle change's own pinger, counted when it ran
    for bad in (
        change("flowing", 1200.0),
        change("flowing", None),
        change("idle", 5100.0, KEEPALIVE),
        change("symmetric", 30.0, ports_distinct=False),
        change("symmetric", 30.0, hosts_reach_site={"gcp-euw3": False}),
        change("symmetric", 30.0, learnt={"aws-use1": True, "gcp-euw3": False}),
        change("dns", 2100.0, RERESOLVE),
        change("dns", 1900.0, RERESOLVE, learnt={"aws-use1": True, "gcp-euw3": False}),  # a gateway did not follow
    ):
        assert not roamdrill.judge([bad], (pinger(REPLIES), stream([]))), bad
    assert not roamdrill.judge([change("flowing", 12.0)], (pinger(REPLIES), stream([], verified=False)))
    assert not roamdrill.judge([], None)


def test_the_report_gives_per_change_the_outage_stall_lost_pings_target_and_verdict() -> None:
    report = DrillReport("edge", "roam", ok=False, duration_s=20.0)
    report.sites = {"D": {"name": "office", "cloud": "static", "role": "d"},
                    "P": {"name": "aws-use1", "cloud": "aws", "role": "p"}}  # fmt: skip
    report.summary = {"persistent_keepalive_s": KEEPALIVE, "delivery": "user-data", "inside": "198.18.0.3"}
    report.steps = [change("idle", 4800.0, KEEPALIVE), change("symmetric", 30.0),
                    change("flowing", None, step="flowing (fault: P keeps the old endpoint)")]  # fmt: skip
    roamdrill.judge(report.steps, (pinger(REPLIES), stream([])))
    report.stream = {"ok": True, "verified": True, "bytes": 4 << 20}
    assert roamdrill.rows(report) == [
        ["idle", "cone", "4800", "-", "480", "<= 5 s (keepalive)", "met", "ok"],
        ["symmetric", "symmetric", "30", "0", "0", "<= 1 s", "met", "ok"],
        ["flowing (fault: P keeps the old endpoint)", "cone", "-", "0", "0", "<= 1 s",
         "NOT met (not back in 5 s)", "FAIL"],
    ]  # fmt: skip
    out = io.StringIO()
    roamdrill.print_roam(report, Console(file=out, width=200))
    text = out.getvalue()
    assert "symmetric: D 198.18.0.3 -> 198.18.255.251; the gateways' endpoint for D: aws-use1 " in text
    assert "each at its own port: yes (all within 3.2 s); other hosts reach D's host: gcp-euw3 yes" in text
    assert "stream: 4 MiB, sha256 match" in text and "drill FAILED" in text
    data = report.to_json()
    assert data["drill"] == "roam" and "start" not in data["steps"][0] and data["steps"][2]["met"] is False


def test_the_benchmarks_section_gives_each_delivery_s_changes_and_the_load() -> None:
    steps = [change("idle", 24780.0, 25.0), change("flowing", 36.0), change("symmetric", 83.0),
             change("flowing", None, step="flowing (fault: P keeps the old endpoint)")]  # fmt: skip
    roamdrill.judge(steps, (pinger(REPLIES), stream([])))
    report = {"ok": False, "error": None, "duration_s": 54.3, "steps": steps,
              "stream": {"ok": True, "verified": True, "bytes": 24 << 20}}  # fmt: skip
    data = {"keepalive_s": 25, "nproc": 2,
            "runs": [{"delivery": "user-data", "load_before": [6.84, 4.4, 3.0], "load_after": [8.55, 5.2, 3.3],
                      "report": report}]}  # fmt: skip
    text = roamsection.section(data)
    assert text.startswith("## 13. A dynamic-address site roams behind a NAT (`endpoint: dynamic`)")
    assert ("| user-data | idle | cone | 24780 ms | – (no stream yet) | 480 | ≤ 25 s (persistent_keepalive) | met | "
            "aws-use1 `198.18.255.251:51820`, gcp-euw3 `none` |") in text  # fmt: skip
    assert "| user-data | flowing (fault: P keeps the old endpoint) | cone | – | 0 ms | 0 | ≤ 1 s | **not met** " in (
        text
    )
    assert "drill **failed** in 54 s; stream 24 MiB, SHA-256 match; symmetric NAT: every gateway at its own" in text
    assert "load average (1 min) 6.84 before, 8.55 after, on 2 cores" in text and "contended" in text


# --- the lab -------------------------------------------------------------------------------------------------------


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_own_lab_left_behind")
def test_the_roam_drill_follows_the_site_behind_a_cone_and_a_symmetric_nat_and_catches_a_stale_peer() -> None:
    began = time.monotonic()
    changes = ("idle", "flowing", "symmetric", "flowing", "dns")
    report = roamdrill.run_roam_drill(EDGE, "edge", changes=changes, stale=(3,))
    wall_s = time.monotonic() - began
    assert report.error is None, report.error  # the teardown's too: every process it tracked stopped (by pid)
    idle, dns, flowing, symmetric, stale = report.steps
    assert [s["kind"] for s in report.steps] == ["idle", "dns", "flowing", "symmetric", "flowing"]
    for s in (idle, dns, flowing, symmetric):  # back within the change's bound (2 x target + 3 s): printed below
        assert s["outage_ms"] is not None and s["endpoints"]["aws-use1"].startswith(s["to"] + ":"), s
    # the branch: served by the lab's resolver, every gateway followed its re-pointed name (P's pings came back)
    assert dns["site"] == "branch" and dns["from"] != dns["to"] and all(dns["learnt"].values()), dns
    # the symmetric NAT: every gateway learnt the office's new address, each at a port of its own range
    now = {"aws-use1": str(PLAN.site("aws-use1").public_ip), "gcp-euw3": str(PLAN.site("gcp-euw3").public_ip),
           "branch": dns["to"]}  # fmt: skip
    ranges = roamnat.symmetric_ports(list(now.values()))
    for name, endpoint in symmetric["endpoints"].items():
        host, _, port = endpoint.rpartition(":")
        low, high = ranges[now[name]]
        assert host == symmetric["to"] and low <= int(port) <= high, (name, endpoint)
    assert symmetric["ports_distinct"] and symmetric["hosts_reach_site"] == {"gcp-euw3": True, "branch": True}
    # the roaming-peer metrics of each cloud gateway see it as one roam (wg-mesh-metrics' code on what wg showed)
    moved = roamlab.drill_data(symmetric)
    assert {r["gateway"] for r in moved["roam"]["learnt_after"]} >= {"aws-use1", "gcp-euw3"}, moved
    roamlab.assert_the_metrics_follow_the_roam(EDGE, moved)
    # the broken lab: the peer keeps the old endpoint, so the traffic never steadies: reported, and the drill fails
    assert stale["stale_peer"] and not stale["met"] and not stale["ok"], stale
    assert stale["outage_ms"] is None or stale["outage_ms"] > 1000, stale
    assert stale["pings_lost"] > 0
    assert report.stream["verified"], report.stream  # the stream's bytes arrived intact through every change
    assert not report.ok
    assert lab_left(report.prefix) == []  # torn down by name (its namespaces, its state) and by pids
    out = io.StringIO()
    roamdrill.print_roam(report, Console(file=out, width=160))
    print(f"\n{out.getvalue()}wall {wall_s:.1f} s (drill {report.duration_s:.1f} s)")
