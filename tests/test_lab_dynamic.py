"""The lab with dynamic-address sites (issue 24, `endpoint: dynamic`) and a relay, in both delivery modes: every pair
passes the lab's checks, the relayed pair (two dynamic sites, through aws-use1) included; the peers' `wg show` has
a dynamic site's address although no config ever gave it (learnt from its packets); in the live run only, the relayed
pair's iperf3 throughput and a direct path's from the same host, back to back, both offices on 50 Mbit/s lines (both
printed with their shares of the line, their ratio and issue 24's target: a figure, never a pass/fail here; the lines'
shaping is checked: no path faster than the line, each line's buckets in place and counting the runs; `python -m bench
relay` measures it properly, on lines and unshaped); in the user-data run
only (the watchdog is the same code in both), after a cloud gateway's WireGuard restarts while the office is idle, the
office's re-arm watchdog brings it back (the lab's dynamic check, wg_mesh/lab/checks/dynamiccheck.py: the outage is
measured and printed; the bound is generous). A dynamic site's address changing behind its NAT is the roam drill's
(tests/test_lab_roam_drill.py: idle, mid-transfer, a symmetric NAT, with the agents polling).

The stack is examples/edge/Pulumi.edge.yaml (one AWS, one GCP gateway, two offices on dynamic addresses, the AWS
gateway relaying between them), persistent_keepalive 10 (short, so the restart step is quick). Wall time here,
contended (load average 2 to 7 on 2 cores): about 46 s (user-data, with the restart) and 25-29 s (live, with the relay
step: 2.3-2.4 s of check 7 on the lines, 2.2 s unshaped); with the NAT rebinding step the roam drill now covers, 57 s
and 47 s."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from tests.stacks import REPO
from tests.test_lab import QUICK, assert_gone, needs_lab, no_own_lab_left_behind  # noqa: F401 (a fixture)
from wg_mesh.config import parse_mesh
from wg_mesh.lab.checks import dynamiccheck, relaycheck
from wg_mesh.lab.fabric import line
from wg_mesh.lab.fabric.plan import LabFaults, plan_lab
from wg_mesh.lab.run import run_lab
from wg_mesh.tools.stackfile import read_raw

KEEPALIVE = 10


EDGE = REPO / "examples" / "edge" / "Pulumi.edge.yaml"
RESTART_IN = "user-data"  # the delivery whose run restarts a gateway (the re-arm watchdog: ~30 s of the run)
RELAY_IN = "live"  # the delivery whose run measures the relayed pair's throughput against a direct path's (~5 s)
LINE_MBIT = 50.0  # ... with both offices on consumer lines of this rate (LabOptions.relay_line_mbit's default)


def edge_raw(delivery: str) -> dict[str, Any]:
    raw: dict[str, Any] = copy.deepcopy(read_raw(EDGE))
    raw["persistent_keepalive"], raw["delivery"] = KEEPALIVE, delivery
    return raw


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_own_lab_left_behind")
@pytest.mark.parametrize("delivery", ["user-data", "live"])
def test_a_dynamic_site_is_learnt_by_its_peers_and_the_relayed_pair_passes(delivery: str) -> None:
    cfg = parse_mesh(edge_raw(delivery))
    options = replace(QUICK, dynamic_restart=delivery == RESTART_IN, relay_throughput=delivery == RELAY_IN,
                      relay_line_mbit=LINE_MBIT)  # fmt: skip
    report = run_lab(cfg, f"dynamic-{delivery}", options=options)
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
    relay = check.data["relay"]  # both measured, back to back; the ratio against the target is printed, not checked
    if delivery == RELAY_IN:
        assert (relay["from"], relay["relayed_to"], relay["direct_to"]) == ("office", "home", "aws-use1"), relay
        assert relay["errors"] == [] and relay["direct_mbps"] > 0 and relay["relayed_mbps"] > 0, relay
        assert relay["ratio"] == round(relay["relayed_mbps"] / relay["direct_mbps"], 2), relay
        # on the offices' lines: no path faster than the line, and each line's shaper counted what went through it
        # (the office's uplink both runs, home's downlink the relayed one): the check fails otherwise
        assert relay["line_mbit"] == LINE_MBIT and relay["over_line"] == [], relay
        assert set(relay["lines"]) == {"office up", "office down", "home up", "home down"}, relay
        assert all(relay["lines"][end]["kind"] == "tbf" for end in relay["lines"]), relay
        share = relay["line_share"]
        measured = (f"on {LINE_MBIT:g} Mbit/s lines (TCP ceiling {relay['ceiling_mbps']}): relayed office -> home "
                    f"{relay['relayed_mbps']} Mbit/s ({share['relayed']} of the ceiling), direct office -> aws-use1 "
                    f"{relay['direct_mbps']} Mbit/s ({share['direct']}): ratio {relay['ratio']} (target >= "
                    f"{relay['target']}: {'met' if relay['met'] else 'not met'}; "
                    f"{'both' if relay['line_limited'] else 'not both'} line-limited; iperf3 {relay['seconds']:g} s "
                    "each)")  # fmt: skip
    else:
        assert relay.get("skipped"), relay
        measured = "relay throughput not measured (the live run does)"
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
    print(f"\n{delivery}: {measured}; gateway {restart['gateway']} {restarted} (persistent_keepalive {KEEPALIVE} s); "
          f"lab {report.duration_s:.1f} s (build {report.build_s}), checks "
          f"{ {c.key: c.seconds for c in report.checks} }")  # fmt: skip
    assert_gone(report.plan.prefix)


def test_the_lab_plan_marks_the_dynamic_sites() -> None:
    plan = plan_lab(parse_mesh(edge_raw("user-data")), "wgl0b0b", LabFaults())
    assert [s.name for s in plan.sites if s.dynamic] == ["office", "home"]


@pytest.mark.parametrize(
    ("direct", "relayed", "ratio", "met"),
    [(100.0, 80.0, 0.8, True), (100.0, 79.0, 0.79, False), (100.0, None, None, False), (0.0, 5.0, None, False)],
)
def test_the_relay_verdict_is_the_ratio_against_the_target(
    direct: float, relayed: float | None, ratio: float | None, met: bool
) -> None:
    assert relaycheck.relay_verdict(direct, relayed) == {"ratio": ratio, "target": 0.8, "met": met}


def test_a_consumer_line_is_a_token_bucket_each_way_at_the_internet_s_end_of_an_office_s_uplink() -> None:
    plan = plan_lab(parse_mesh(edge_raw("user-data")), "wgl0b0b", LabFaults())
    office = plan.site("office")
    uplink, ifb = office.internet_if, f"ifb-{office.internet_if}"
    bucket = ["tbf", "rate", "50mbit", "burst", "16384", "latency", "50ms"]
    assert line.shape_commands(office, 50) == [
        ["ip", "link", "add", ifb, "type", "ifb"], ["ip", "link", "set", ifb, "up"],
        ["tc", "qdisc", "replace", "dev", ifb, "root", *bucket],  # up: what the office sends, redirected to the ifb
        ["tc", "qdisc", "add", "dev", uplink, "handle", "ffff:", "ingress"],
        ["tc", "filter", "add", "dev", uplink, "parent", "ffff:", "protocol", "all", "u32", "match", "u32", "0", "0",
         "action", "mirred", "egress", "redirect", "dev", ifb],
        ["tc", "qdisc", "replace", "dev", uplink, "root", *bucket],  # down: what the internet sends to the office
    ]  # fmt: skip
    assert line.clear_commands(office) == [["tc", "qdisc", "del", "dev", uplink, "root"],
                                           ["tc", "qdisc", "del", "dev", uplink, "ingress"],
                                           ["ip", "link", "del", ifb]]  # fmt: skip
    up, down = line.line_ends(office)
    assert (up.name, up.device, down.name, down.device) == ("office up", ifb, "office down", uplink)
    assert line.tbf("x", 1000)[9:11] == ["burst", "250000"]  # 2 ms of the rate once past 16 KiB
    with pytest.raises(ValueError, match="above 0"):
        line.shape_commands(office, 0)
    with pytest.raises(ValueError, match="cloud site"):
        line.shape_commands(plan.site("aws-use1"), 50)


def test_a_full_line_carries_tcp_payload_less_the_tunnel_s_and_the_frames_headers() -> None:
    # a 1420-byte tunnel: 1368 bytes of payload (less IPv4, TCP, timestamps) in a 1494-byte frame on the line
    assert line.payload_share(1420) == 1368 / 1494
    assert line.ceiling_mbps(50, 1420) == 45.8


@pytest.mark.parametrize(
    ("direct", "relayed", "limited", "over"),
    [(44.0, 42.0, True, []), (44.0, 30.0, False, []), (60.0, 42.0, True, ["direct"]), (None, 42.0, False, [])],
)
def test_a_path_filled_its_line_at_nine_tenths_of_the_line_s_tcp_ceiling_and_none_is_faster_than_the_line(
    direct: float | None, relayed: float, limited: bool, over: list[str]
) -> None:
    verdict = relaycheck.line_verdict(50, 1420, {"direct": direct, "relayed": relayed})
    assert verdict["ceiling_mbps"] == 45.8 and verdict["line_limited"] is limited and verdict["over_line"] == over
    assert verdict["line_share"]["relayed"] == round(relayed / 45.8, 2)


def test_a_line_whose_shaper_is_gone_or_did_not_count_the_run_is_a_failure() -> None:
    payload = {"office up": 2_000_000.0, "home down": 1_000_000.0}
    counted = {"office up": {"kind": "tbf", "bytes": 2_100_000}, "home down": {"kind": "tbf", "bytes": 1_050_000}}
    assert relaycheck.lines_counted(counted, payload) == []
    gone = {**counted, "home down": {"kind": "noqueue", "bytes": 0}}  # the veth's default: nothing shaped it
    assert relaycheck.lines_counted(gone, payload) == ["line home down: root qdisc noqueue, not the line's tbf"]
    bypassed = {**counted, "office up": {"kind": "tbf", "bytes": 1000}}  # the runs went another way
    assert relaycheck.lines_counted(bypassed, payload) == [
        "line office up: counted 1000 bytes, the runs put 2000000 through it"
    ]
