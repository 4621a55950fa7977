"""Smoke tests of the benchmarks (bench/): tiny runs that keep the scripts working. Benchmarks are not tests:
nothing here asserts a duration or a throughput, only that the scripts run, agree with the program and
render their results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import meshgen
from bench.lab.ipsec import ESP_UDP_FIXED_OVERHEAD, esp_inner_mtu, strongswan_conf, swanctl_conf, tunnel_range
from bench.lab.mtu import MtuOptions, config_at, sweep_points
from bench.report import document
from bench.report.format import mbit
from bench.scale import run_scale
from bench.stats import median, parse_pid_cpu, parse_proc_stat, percentile
from wg_mesh.config import AwsSite, GcpSite, StaticSite
from wg_mesh.lab.fabric.teardown import find_labs
from wg_mesh.plan import topology, userdata
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw

REPO = Path(__file__).resolve().parent.parent
DEV = REPO / "Pulumi.dev.yaml"


# --- pure parts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 8, 64, 260])
def test_generated_meshes_are_valid_and_mixed(n: int) -> None:
    cfg = load_mesh(meshgen.generate_mesh(n), check_limits=n <= 8)  # 64 sites pass AWS's default quotas
    if n <= 64:  # 260 sites pass EC2's user data limit
        assert userdata.size_problems(cfg) == []
    assert len(cfg.sites) == n
    kinds = {type(s) for s in cfg.sites}
    assert kinds == ({AwsSite, GcpSite} if n == 2 else {AwsSite, GcpSite, StaticSite})


def test_quota_usage_follows_the_topology() -> None:
    cfg = load_mesh(meshgen.generate_mesh(10))
    usage = meshgen.quota_usage(cfg)
    aws = next(s for s in cfg.sites if isinstance(s, AwsSite))
    gcp = next(s for s in cfg.sites if isinstance(s, GcpSite))
    # one route per remote range (+ the internet gateway's default route in the table wg-mesh creates)
    assert usage["aws_routes_per_table"] == len(topology.remote_ranges(cfg, aws.name)) + 1
    assert usage["gcp_routes_per_network"] == len(topology.remote_ranges(cfg, gcp.name))
    assert usage["aws_sg_inbound_entries"] == len(cfg.sites) - 1 + len(aws.cidrs)


def test_first_crossing() -> None:
    curve = [{"n": n, "x": 2 * n} for n in range(2, 10)]
    assert meshgen.first_crossing(curve, "x", 10) == 6
    assert meshgen.first_crossing(curve, "x", 100) is None


def test_statistics() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert median(values) == 3.0
    assert median([1.0, 2.0]) == 1.5
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 50) == median(values)
    assert 4.0 < percentile(values, 95) < 5.0


def test_proc_parsers() -> None:
    stat = parse_proc_stat("cpu  10 1 20 300 4 0 5 0 0 0\ncpu0 5 0 10 150 2 0 2 0 0 0\n")
    assert stat["user"] == 10 and stat["softirq"] == 5 and stat["idle"] == 300
    line = "1234 (wireguard go) S 1 1234 1234 0 -1 4194560 100 0 0 0 77 33 0 0 20 0 9 0 555 0 0"
    assert parse_pid_cpu(line) == (77, 33)


@pytest.mark.parametrize("path_mtu", range(1280, 1501, 7))
def test_esp_inner_mtu_is_the_largest_that_fits(path_mtu: int) -> None:
    def outer(inner: int) -> int:
        return ESP_UDP_FIXED_OVERHEAD + -(-(inner + 2) // 4) * 4

    inner = esp_inner_mtu(path_mtu)
    assert outer(inner) <= path_mtu < outer(inner + 1)


def test_strongswan_configs() -> None:
    cfg = load_mesh(read_raw(DEV))
    net = tunnel_range(cfg)
    assert not any(net.overlaps(c) for s in cfg.sites for c in s.cidrs) and not net.overlaps(cfg.overlay_cidr)
    assert "kernel-libipsec" in strongswan_conf(userspace=True)
    assert "kernel-libipsec" not in strongswan_conf(userspace=False)
    conf = swanctl_conf(
        local_id="a", remote_id="b", remote_addr="198.18.0.2", local_ts="10.201.0.1/32", remote_ts="10.201.0.2/32",
        initiate=True, psk=b"\x01" * 32,
    )  # fmt: skip
    assert "aes256gcm16" in conf and "start_action = start" in conf and "version = 2" in conf


def test_mtu_sweep_points_and_configs() -> None:
    raw = read_raw(DEV)
    base = load_mesh(raw)
    auto = topology.tunnel_mtu(base)
    points = sweep_points(base, MtuOptions())
    assert points[0] == 1280 and auto in points and max(points) > auto
    cfg, faults, lying = config_at(raw, max(points))
    assert topology.tunnel_mtu(cfg) == max(points)
    # the real path keeps its MTU: the sites that had to declare more are the lab's link_mtu faults
    assert dict(faults.link_mtu) == lying and lying
    assert all(lying[s.name] == s.underlay_mtu for s in base.sites if s.name in lying)
    assert config_at(raw, auto)[2] == {}


# --- program scale (a tiny run, as the bench does it) ------------------------------------------------------


@pytest.fixture(scope="module")
def scale_result() -> dict[str, Any]:
    return run_scale((2, 4), 1, lambda line: None, curve_max_n=12)


def test_scale_smoke(scale_result: dict[str, Any]) -> None:
    points = {p["n"]: p for p in scale_result["points"]}
    assert set(points) == {2, 4}
    assert points[4]["resources"] > points[2]["resources"] > 0
    assert points[4]["routes_declared"] > points[2]["routes_declared"]
    assert all(p["peak_rss_mb"] > 0 and p["program_s"] > 0 for p in points.values())
    # the quota curve (pure topology) agrees with what the program declared under mocks
    assert all(check["agrees"] for check in scale_result["curve_matches_program"])


def test_report_renders_from_results(scale_result: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "scale.json").write_text(json.dumps(scale_result))
    text = document.render(tmp_path, tmp_path / "benchmarks.md", plots=False, log=lambda line: None)
    assert (tmp_path / "benchmarks.md").read_text() == text
    for p in scale_result["points"]:
        assert f"| {p['n']} | {p['resources']} | {p['routes_declared']} |" in text
    assert "none up to N=12" in text  # no quota is crossed by 12 sites
    assert "AWS user data, bytes before base64" in text and "| 12 |" in text


def test_the_committed_benchmarks_doc_is_its_results_rendered() -> None:
    """docs/benchmarks.md is what `python -m bench doc` makes of the committed docs/bench/*.json and plots: every
    section there, in its order, and nothing typed by hand. Pure: nothing is measured, no matplotlib."""
    images = {name: f"bench/{name}.png" for name in ("dataplane", "mtu", "recovery", "scale")}
    text = document.markdown(document.load(REPO / "docs" / "bench"), images)
    assert text == (REPO / "docs" / "benchmarks.md").read_text()


def test_plots_render(scale_result: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="bench-only dependency (bench/requirements.txt)")
    from bench.report import plots

    made = plots.make_all({"scale": scale_result}, tmp_path)
    assert made["scale"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- one short data-plane run in the lab (root) -----------------------------------------------------------


@pytest.mark.integration
def test_lab_bench_smoke(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces)")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "lab", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lab = json.loads((tmp_path / "lab.json").read_text())
    paths = lab["throughput"]["paths"]
    assert paths["wireguard"]["1"]["mbps"] > 0 and paths["end_to_end"]["1"]["mbps"] > 0
    assert lab["recovery"]["wireguard_host_to_host"]["failed"] == 0
    assert "ipsec" in lab  # measured, or the reason it was skipped
    # the lab was torn down: no lab left behind by that process
    assert not [state for state in find_labs().values() if state.label == "bench" and not state.owner_alive()]
    text = document.render(tmp_path, tmp_path / "benchmarks.md", plots=False, log=lambda line: None)
    assert f"**{mbit(paths['wireguard']['1']['mbps'])}**" in text


def test_boot_section_renders_every_gateway_and_the_reboot() -> None:
    from bench.report.boot import section

    gateways = {"aws-use1": {"boot_to_cloud_init_done_s": 17.3, "boot_to_handshake_s": 14.4}}
    reboot = {"gateway": "aws-use1", "shutdown_ms": 600.0, "pid1_ms": 780.0, "wg_active_ms": 5200.0}
    stack = {
        "namespace_lab_s": 14.0,
        "boot_lab_s": 60.0,
        "boot_lab_build_s": 25.0,
        "boot_to_namespace": 4.3,
        "gateways": gateways,
        "reboot": {**reboot, "traffic_outage_ms": 4900.0},
        "wg_quick_restart_outage_ms": 200.0,
        "reboot_to_restart_outage": 24.5,
    }
    text = section({"image": {"size_mb": 255, "built_s": 93.0}, "stacks": {"dev": stack}})
    assert "| dev | aws-use1 | 17.3 s | 14.4 s |" in text
    assert "| dev | aws-use1 | 600 ms | 780 ms | 5200 ms | 4900 ms | 200 ms (24.5×) |" in text
    assert "built in 93 s" in text and "4.3×" in text


def test_the_relay_bench_alternates_its_paths_and_reports_a_target_not_met_as_not_met() -> None:
    from bench.lab.relay import RELAY_GROUP, order, summarise
    from bench.report.relay import section
    from wg_mesh.lab.checks.relaycheck import line_verdict

    assert [order(i) for i in range(3)] == [("direct", "relayed"), ("relayed", "direct"), ("direct", "relayed")]

    def run(i: int, path: str, mbps: float, busy: float = 2.0) -> dict[str, Any]:
        cpu = {"busy": busy, "wireguard-go": 1.2, RELAY_GROUP: 0.3 if path == "relayed" else 0.1}
        return {"round": i, "path": path, "mbps": mbps, "retransmits": 0, "cpu": cpu}

    runs = [run(1, "direct", 150.0), run(1, "relayed", 90.0), run(2, "relayed", 60.0), run(2, "direct", 100.0),
            run(3, "direct", 120.0), run(3, "relayed", 84.0)]  # fmt: skip
    s = summarise(runs)
    assert (s["direct"]["mbps"], s["relayed"]["mbps"], s["ratio"], s["met"]) == (120.0, 84.0, 0.7, False)
    assert s["round_ratios"] == [0.6, 0.6, 0.7] and s["round_ratio_median"] == 0.6
    assert s["relayed"]["wireguard_go_core_s_per_gbit"] == round(1.2 / 0.084, 2)
    assert s["relayed"]["relay_core_s_per_gbit"] == round(0.3 / 0.084, 2)
    # on 50 Mbit/s lines: the direct path fills its line, the relayed one does not (the CPU, not the line, held it)
    lined = summarise([run(1, "direct", 44.0, 0.9), run(1, "relayed", 35.0, 1.1)])
    line = {"line_mbit": 50.0, "tunnel_mtu": 1420, **line_verdict(50.0, 1420, {"direct": 44.0, "relayed": 35.0})}
    modes = {"line": {**line, "load_before": [3.0] * 3, "load_after": [3.5] * 3, "summary": lined},
             "cpu": {"line_mbit": None, "load_before": [7.0] * 3, "load_after": [8.0] * 3, "summary": s}}  # fmt: skip
    data = {"stack": "examples/edge/Pulumi.edge.yaml", "from": "office", "relayed_to": "home", "direct_to": "aws-use1",
            "relay": "aws-use1", "rounds": 3, "seconds": 5, "omit": 1, "streams": 1, "nproc": 2, "modes": modes,
            "runs": runs}  # fmt: skip
    text = section(data)
    assert "**Relayed / direct = 0.70** unshaped (the medians; target ≥ 0.8: **not met**)" in text
    assert "| relayed (two tunnels, through the relay's gateway) | host office → host home | **84 Mbit/s** |" in text
    assert "**Relayed / direct = 0.80** on 50 Mbit/s lines (the medians; target ≥ 0.8: met)" in text
    assert "| host office → host home | **35 Mbit/s** | 35 | 0.76 | 1.10 |" in text  # 35 of the 45.8 ceiling
    assert "Not both paths filled the line (relayed below 0.9 of its TCP ceiling" in text


def test_ha_claim_bench_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """bench.ha_claim on a tiny run (moto in server mode on loopback): one claim and reconcile with 2 routes."""
    from bench import ha_claim

    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "bench")  # restored after the test: the bench sets them for its own run
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    assert ha_claim.main(["--routes", "2", "--runs", "1"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["routes"] == 2 and line["claim_ms"] > 0 and line["reconcile_ms"] > 0
