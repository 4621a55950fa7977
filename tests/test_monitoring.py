"""Prometheus rules, scrape job and Grafana dashboard: rendered from the topology, committed, proven with promtool.

The committed files under monitoring/<stack>/ must equal a fresh `python -m wg_mesh monitoring` run; regenerate on
purpose with `WG_MESH_UPDATE_GOLDEN=1 python -m pytest tests/test_monitoring.py` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.stacks import STACK_NAMES
from wg_mesh.gateway import agent, fallback, ha_run, pmtu, wgmetrics
from wg_mesh.plan.topology import peer_names
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools import hagateways, monitoring
from wg_mesh.tools.stackfile import load, read_raw

REPO = Path(__file__).resolve().parent.parent
MONITORING = REPO / "monitoring"
STACKS = sorted(STACK_NAMES)
DASHBOARD = MONITORING / "grafana-dashboard.json"
UPDATE = os.environ.get("WG_MESH_UPDATE_GOLDEN") == "1"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (prometheus)")

# Series Prometheus itself makes: `up` for every target, `ALERTS` for our alerting rules.
PROMETHEUS_SERIES = {"up", "ALERTS"}


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, check=False, cwd=cwd)


# --- PromQL metric names, without a PromQL library ----------------------------------------------

_KEYWORDS = {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right", "offset"}
_KEYWORDS |= {"inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads: identifiers that are not functions, keywords, labels or durations."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    names = set()
    for match in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def test_metric_names_extractor() -> None:
    assert metric_names('time() - max by (site) (wgmesh_peer_latest_handshake_seconds{site=~"$site"})') == {
        "wgmesh_peer_latest_handshake_seconds"
    }
    assert metric_names('sum without (sender) (label_replace(a:b:c, "x", "$1", "site", "(.*)")) > 1e9') == {"a:b:c"}
    assert metric_names("rate(foo_total[5m]) and on (site) bar unless ignoring (x) baz offset 5m") == {
        "foo_total",
        "bar",
        "baz",
    }
    assert metric_names('ALERTS{alertname=~"WgMesh.*"}') == {"ALERTS"}


def known_metrics() -> set[str]:
    recorded = {rule["record"] for stack in STACKS for rule in all_rules(stack) if "record" in rule}
    exported = set(wgmetrics.METRICS) | set(agent.METRICS) | set(pmtu.METRICS) | set(ha_run.METRICS)
    exported |= set(fallback.METRICS)
    return exported | recorded | PROMETHEUS_SERIES


def all_rules(stack: str) -> Iterator[dict[str, Any]]:
    for group in monitoring.rules(load(REPO / f"Pulumi.{stack}.yaml"))["groups"]:
        yield from group["rules"]


# --- rendering ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_committed_output_matches_a_fresh_render(stack: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wg_mesh", "monitoring", "--stack", stack, "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"wrote {tmp_path / name}" for name in (monitoring.RULES_FILE, monitoring.SCRAPE_FILE)
    ]
    for name in (monitoring.RULES_FILE, monitoring.SCRAPE_FILE):
        committed = MONITORING / stack / name
        fresh = (tmp_path / name).read_text()
        if UPDATE:
            committed.parent.mkdir(parents=True, exist_ok=True)
            committed.write_text(fresh)
        assert committed.exists(), f"{committed} is missing: run with WG_MESH_UPDATE_GOLDEN=1 once and review it"
        assert fresh == committed.read_text(), f"{committed} is out of date: regenerate (WG_MESH_UPDATE_GOLDEN=1)"


def test_monitoring_cli_reports_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": {"overlay_cidr": "10.200.0.0/24", "sites": []}}}))
    result = subprocess.run(
        [sys.executable, "-m", "wg_mesh", "monitoring", "--file", str(bad), "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "sites: a mesh needs at least two sites, got 0" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stack", STACKS)
def test_rules_know_every_site_and_every_expected_peer(stack: str) -> None:
    cfg = load(REPO / f"Pulumi.{stack}.yaml")
    rules = list(all_rules(stack))
    sites = [r["labels"]["site"] for r in rules if r.get("record") == monitoring.EXPECTED_SITE]
    assert sites == [s.name for s in cfg.sites]
    pairs = [
        (r["labels"]["site"], r["labels"]["peer_site"]) for r in rules if r.get("record") == monitoring.EXPECTED_PEER
    ]
    assert pairs == [(s.name, p) for s in cfg.sites for p in peer_names(cfg, s.name)]
    assert len(pairs) == len(cfg.sites) * (len(cfg.sites) - 1)
    alerts = [r["alert"] for r in rules if "alert" in r]
    assert alerts == [a.name for a in monitoring.alerts()]
    assert {
        "WgMeshHandshakeStale",
        "WgMeshPeerMissing",
        "WgMeshForwardingDisabled",
        "WgMeshNoTrafficFromPeer",
        "WgMeshExporterDown",
    } <= set(alerts)


def test_stale_threshold_is_the_articles_three_minutes() -> None:
    stale = next(a for a in monitoring.alerts() if a.name == "WgMeshHandshakeStale")
    assert "> 180)" in stale.expr
    assert monitoring.HANDSHAKE_STALE_SECONDS == wgmetrics.HANDSHAKE_STALE_SECONDS == 180


@pytest.mark.parametrize("stack", STACKS)
def test_rules_read_only_metrics_we_export_or_record(stack: str) -> None:
    known = known_metrics()
    for rule in all_rules(stack):
        assert metric_names(rule["expr"]) <= known, (rule.get("alert") or rule.get("record"), rule["expr"])


def test_scrape_job_targets_every_gateway_on_the_exporter_port() -> None:
    raw = read_raw(REPO / "Pulumi.prod.yaml")
    cfg = load_mesh({**raw, "exporter_port": 9200})
    (job,) = monitoring.scrape_config(cfg)["scrape_configs"]
    assert job["job_name"] == monitoring.JOB and job["honor_labels"] is True
    assert job["static_configs"] == [
        {"targets": ["10.200.0.1:9200"], "labels": {"site": "aws-use1"}},
        {"targets": ["10.200.0.2:9200"], "labels": {"site": "gcp-euw3"}},
        {"targets": ["10.200.0.3:9200"], "labels": {"site": "vps-fra"}},
    ]


# --- promtool ------------------------------------------------------------------------------------


@needs_promtool
@pytest.mark.parametrize("stack", STACKS)
def test_promtool_check_rules(stack: str) -> None:
    result = promtool("check", "rules", str(MONITORING / stack / monitoring.RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
@pytest.mark.parametrize("stack", STACKS)
def test_promtool_check_config_with_the_scrape_job(stack: str, tmp_path: Path) -> None:
    scrape = yaml.safe_load((MONITORING / stack / monitoring.SCRAPE_FILE).read_text())
    config = {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": [str(MONITORING / stack / monitoring.RULES_FILE)],
        **scrape,
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def rule_tests() -> list[Path]:
    return sorted((MONITORING / "tests").glob("*.test.yml"))


@needs_promtool
@pytest.mark.parametrize("test_file", rule_tests(), ids=lambda p: p.name)
def test_promtool_test_rules(test_file: Path) -> None:
    result = promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "FAILED" not in result.stdout


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    stacks_tested = set()
    for path in rule_tests():
        doc = yaml.safe_load(path.read_text())
        stacks_tested |= {Path(f).parent.name for f in doc["rule_files"]}
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a.name for a in monitoring.alerts()}
    assert names <= fires, f"no unit test where these fire: {sorted(names - fires)}"
    assert names <= quiet, f"no unit test where these stay quiet: {sorted(names - quiet)}"
    assert stacks_tested == set(STACKS)


@needs_promtool
def test_unit_tests_can_fail(tmp_path: Path) -> None:
    """The same unit tests against rules with a broken threshold fail: they prove something."""
    broken = MONITORING / "dev" / monitoring.RULES_FILE
    (tmp_path / "dev").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "dev" / monitoring.RULES_FILE).write_text(broken.read_text().replace("> 180)", "> 300)"))
    shutil.copy(MONITORING / "tests" / "dev.test.yml", tmp_path / "tests" / "dev.test.yml")
    result = promtool("test", "rules", "dev.test.yml", cwd=tmp_path / "tests")
    assert result.returncode != 0
    assert "alertname: WgMeshHandshakeStale" in result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize(
    ("broken", "fails"),
    [
        (("for: 4m40s", "for: 9m"), "alertname: WgMeshDynamicSiteSilent"),  # later than the threshold
        (('and on (site, peer_site) wgmesh_peer_info{kind="dynamic"}', ""), "alertname: WgMeshDynamicSiteSilent"),
        (("  or wgmesh_peer_latest_handshake_seconds == 0\n", ""), "alertname: WgMeshDynamicSiteSilent"),
        ((f"{monitoring.NOT_DYNAMIC}\n", ""), "alertname: WgMeshHandshakeStale"),  # stale alerts for dynamic sites
    ],
)
def test_the_dynamic_site_cases_can_fail(broken: tuple[str, str], fails: str, tmp_path: Path) -> None:
    rules = (MONITORING / "dev" / monitoring.RULES_FILE).read_text()
    assert broken[0] in rules
    (tmp_path / "dev").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "dev" / monitoring.RULES_FILE).write_text(rules.replace(broken[0], broken[1]))
    shutil.copy(MONITORING / "tests" / "dev.test.yml", tmp_path / "tests" / "dev.test.yml")
    result = promtool("test", "rules", "dev.test.yml", cwd=tmp_path / "tests")
    assert result.returncode != 0
    assert fails in result.stdout + result.stderr


# --- the Grafana dashboard ---------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def dashboard_exprs() -> list[str]:
    doc = dashboard()
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    for variable in doc["templating"]["list"]:
        if variable["type"] == "query":
            query = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
            assert query is not None, variable["definition"]
            exprs.append(query.group(1))
    return exprs


def test_dashboard_is_valid_json_with_the_promised_panels() -> None:
    doc = dashboard()
    assert doc["uid"] == "wg-mesh" and doc["title"] == "wg-mesh"
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    matrix = [p for p in panels if any(t["id"] == "groupingToMatrix" for t in p.get("transformations", []))]
    assert len(matrix) == 1
    assert "wgmesh_peer_latest_handshake_seconds" in matrix[0]["targets"][0]["expr"]
    assert matrix[0]["transformations"][0]["options"]["rowField"] == "site"
    assert matrix[0]["transformations"][0]["options"]["columnField"] == "peer_site"
    throughput = {
        name for p in panels if p["type"] == "timeseries" for t in p["targets"] for name in metric_names(t["expr"])
    }
    assert {monitoring.RECEIVE_RATE, monitoring.TRANSMIT_RATE} <= throughput
    assert any("ALERTS" in metric_names(t["expr"]) for p in panels for t in p["targets"])
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])


def test_dashboard_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_dashboard_reads_only_metrics_we_export_or_record() -> None:
    known = known_metrics()
    used = set()
    for expr in dashboard_exprs():
        names = metric_names(expr)
        assert names, expr
        assert names <= known, (expr, names - known)
        used |= names
    # and it shows the core series
    assert {"wgmesh_peer_latest_handshake_seconds", "wgmesh_ip_forward_enabled", "up"} <= used


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every query (Grafana's variables replaced by what Grafana would send)."""
    rules = [
        {"record": f"dashboard:query{i}", "expr": expr.replace("$site", ".*").replace("$__rate_interval", "5m")}
        for i, expr in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_ha_gateways_are_scraped_by_their_vpc_addresses(tmp_path: Path) -> None:
    """gateways: 2: both gateways share the overlay address, so the scrape job takes the stack output ha_gateways
    and lists each by its VPC address with its letter; other sites keep their overlay target."""
    cfg = load(REPO / "Pulumi.ha.yaml")
    output = {"aws-use1": {"a": "10.10.0.10", "b": "10.10.1.10"}, "gcp-euw3": {"a": "10.100.0.2", "b": "10.100.0.3"}}
    (job,) = monitoring.scrape_config(cfg, hagateways.parse_ha_gateways(json.dumps(output), cfg))["scrape_configs"]
    assert job["static_configs"][:2] == [
        {"targets": ["10.10.0.10:9100"], "labels": {"site": "aws-use1", "gateway": "a"}},
        {"targets": ["10.10.1.10:9100"], "labels": {"site": "aws-use1", "gateway": "b"}},
    ]
    only_aws = hagateways.parse_ha_gateways(json.dumps({"aws-use1": output["aws-use1"]}), cfg)
    (job,) = monitoring.scrape_config(cfg, only_aws)["scrape_configs"]
    assert job["static_configs"][-1] == {"targets": ["10.200.0.2:9100"], "labels": {"site": "gcp-euw3"}}
    cases: list[tuple[object, str]] = [
        ({"nowhere": {"a": "10.0.0.1"}}, "ha_gateways.nowhere"),
        ({"aws-use1": {"a": "x"}}, "ha_gateways.aws-use1.a"),
        ([], "ha_gateways"),
    ]
    for bad, field in cases:
        with pytest.raises(ValueError, match=rf"^{re.escape(field)}"):
            hagateways.parse_ha_gateways(json.dumps(bad), cfg)
    path = tmp_path / "ha_gateways.json"
    path.write_text(json.dumps(output))
    argv = [sys.executable, "-m", "wg_mesh", "monitoring", "--stack", "ha", "--out", str(tmp_path / "out")]
    done = subprocess.run([*argv, "--ha-gateways", str(path)], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "10.10.1.10:9100" in (tmp_path / "out" / monitoring.SCRAPE_FILE).read_text()
    path.write_text("{")
    done = subprocess.run([*argv, "--ha-gateways", str(path)], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "ha_gateways: not JSON" in done.stderr
