"""Lab drills: the dev mesh in namespaces, each gateway with our metrics script and a real node-exporter, a real
Prometheus with the shipped rules; break a gateway and measure the time until the alert fires.

What cloud-init does with `wg_mesh.plan.metrics.metrics_extras` is carried out in each gateway's namespaces: the mapping
in its private /etc, the script (decoded from the user data's gz+b64) and the textfile directory in its private /run
(the lab shares /usr and /var with the host, so /usr/local/sbin and /var/lib/prometheus move there), node-exporter
with the shipped ARGS (only the textfile collector, to keep the lab light), and a 1 s loop instead of the 15 s timer.
Prometheus runs in its own namespace behind the lab's internet and scrapes the gateways' public addresses, as a
Prometheus in `monitoring_cidrs` would; scrape and evaluation intervals are 1 s. The rules are the committed
monitoring/dev/wg-mesh.rules.yml, unchanged (thresholds and `for:` included).

Drills (integration; they need root, the lab's tools, prometheus and prometheus-node-exporter):
1. forwarding off on a gateway while its handshakes stay fresh -> WgMeshForwardingDisabled; doctor says so;
2. WireGuard stopped on a gateway -> WgMeshPeerMissing there, WgMeshHandshakeStale on its peer (after the 180 s
   threshold); doctor on the peer names the stopped site.
The measured times are printed (run pytest with -s) and attached to the test report as properties.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from wg_mesh.lab.fabric.netns import Node, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.fabric.session import new_prefix, signals_end_the_run
from wg_mesh.lab.fabric.teardown import teardown
from wg_mesh.lab.machines.build import BuiltLab, build, ip, veth, wg_quick
from wg_mesh.plan import metrics
from wg_mesh.tools import monitoring
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent
STACK = "dev"
RULES = REPO / "monitoring" / STACK / monitoring.RULES_FILE
MON_NS_SUFFIX = "mon"
MON_TRANSIT = ("198.19.255.253/30", "198.19.255.254/30")  # internet side, Prometheus side (past the sites' /30s)
PROMETHEUS = "127.0.0.1:9090"  # inside the monitoring namespace
RUN_DIR = "/run/wg-mesh"  # the gateway's private /run
TEXTFILE_DIR = f"{RUN_DIR}/textfile"
SCRIPT = f"{RUN_DIR}/wg-mesh-metrics"
STATE = f"{RUN_DIR}/state/endpoints"
PYTHON = "/usr/bin/python3"

CANNOT_RUN = missing_requirements() + [
    f"{tool} not installed" for tool in ("prometheus", "prometheus-node-exporter") if shutil.which(tool) is None
]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(bool(CANNOT_RUN), reason="the monitoring drills cannot run here: " + "; ".join(CANNOT_RUN)),
]

_GET = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"


@dataclass
class MonitoredLab:
    lab: BuiltLab
    prometheus: Node
    times: dict[str, float] = field(default_factory=dict)

    def api(self, path: str) -> Any:
        result = self.prometheus.run([PYTHON, "-c", _GET, f"http://{PROMETHEUS}{path}"], timeout=10)
        doc = json.loads(result.stdout)
        assert doc["status"] == "success", doc
        return doc["data"]

    def ready(self) -> bool:
        """Prometheus answers 503 until its storage is up; /-/ready says when."""
        ready = self.prometheus.run([PYTHON, "-c", _GET, f"http://{PROMETHEUS}/-/ready"], check=False, timeout=10)
        return ready.returncode == 0

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api(f"/api/v1/query?query={quote(expr)}")
        assert isinstance(data["result"], list)
        return data["result"]

    def firing(self) -> list[dict[str, str]]:
        return [a["labels"] for a in self.api("/api/v1/alerts")["alerts"] if a["state"] == "firing"]

    def is_firing(self, alertname: str, **labels: str) -> bool:
        return any(a["alertname"] == alertname and all(a.get(k) == v for k, v in labels.items()) for a in self.firing())

    def doctor(self, site: str) -> tuple[int, dict[str, Any]]:
        node = self.lab.gateways[site]
        result = node.run(
            [sys.executable, "-m", "wg_mesh", "doctor", "--json"], check=False, env={"PYTHONPATH": str(REPO)}
        )
        return result.returncode, json.loads(result.stdout)


def wait_for(what: str, condition: Callable[[], bool], timeout: float, started: float) -> float:
    """Seconds from `started` until `condition()` holds; fails the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic() - started
        time.sleep(0.5)
    pytest.fail(f"{what}: not within {timeout:.0f} s")


def start_metrics(lab: BuiltLab, cfg: Any, keys: LabKeys, site: str) -> None:
    """What cloud-init does with the metrics extras, in the gateway's own namespaces (see the module doc)."""
    extras = metrics.metrics_extras(cfg, site, lab.plan.directory(keys.public))
    files = {f.path: f for f in extras.files}
    node = lab.gateways[site]
    script = files[metrics.SCRIPT_PATH]
    assert script.encoding == "gz+b64"
    for inside, content, mode in (
        (metrics.MAPPING_PATH, files[metrics.MAPPING_PATH].content, 0o644),
        (SCRIPT, metrics.unpack(script.content), 0o755),
    ):
        path = node.path(inside)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)
    node.path(TEXTFILE_DIR).mkdir(parents=True, exist_ok=True)

    defaults = files[metrics.NODE_EXPORTER_DEFAULTS_PATH].content
    args_line = next(line for line in defaults.splitlines() if line.startswith("ARGS="))
    # systemd's `ExecStart=... $ARGS` splits the unquoted variable into words
    (value,) = shlex.split(args_line.removeprefix("ARGS="))
    args = [a for a in value.split() if not a.startswith("--collector.textfile.directory=")]
    assert args == [f"--web.listen-address=:{cfg.exporter_port}"]
    log = (lab.state.log_dir / f"{site}.monitoring.log").open("a")
    exporter = node.popen(
        [
            "prometheus-node-exporter",
            *args,
            f"--collector.textfile.directory={TEXTFILE_DIR}",
            "--collector.disable-defaults",
            "--collector.textfile",
        ],
        stdout=log,
    )
    lab.state.track(exporter.pid, node.netns, "node-exporter")
    # the unit's ExecStart, with the state (the peers' last known endpoints) in the private /run too
    run_once = f"{PYTHON} {SCRIPT} --mapping {metrics.MAPPING_PATH} --out {TEXTFILE_DIR}/wg_mesh.prom --state {STATE}"
    loop = f"while :; do {run_once}; sleep 1; done"
    timer = node.popen(["sh", "-c", loop], stdout=log)
    lab.state.track(timer.pid, node.netns, "wg-mesh-metrics loop")


def start_prometheus(lab: BuiltLab, cfg: Any, workdir: Path) -> Node:
    """Prometheus in its own namespace, routed through the lab's internet to the gateways' public addresses."""
    mon_ns = f"{lab.plan.prefix}-{MON_NS_SUFFIX}"
    lab.state.namespaces.append(mon_ns)
    lab.state.save()  # teardown knows it before it exists
    subprocess.run(["ip", "netns", "add", mon_ns], check=True)
    ip(mon_ns, "link", "set", "lo", "up")
    veth(lab.plan.internet_ns, "mon0", mon_ns, "eth0", 1500)
    ip(lab.plan.internet_ns, "address", "add", MON_TRANSIT[0], "dev", "mon0")
    ip(mon_ns, "address", "add", MON_TRANSIT[1], "dev", "eth0")
    ip(mon_ns, "route", "add", "default", "via", MON_TRANSIT[0].split("/")[0])

    scrape = monitoring.scrape_config(cfg)
    for target in scrape["scrape_configs"][0]["static_configs"]:
        site = lab.plan.site(target["labels"]["site"])
        target["targets"] = [f"{site.public_ip}:{cfg.exporter_port}"]  # the overlay address -> the public one
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        **scrape,
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    node = Node(mon_ns)
    log = (lab.state.log_dir / "prometheus.log").open("a")
    proc = node.popen(
        [
            "prometheus",
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={PROMETHEUS}",
        ],
        stdout=log,
    )
    lab.state.track(proc.pid, mon_ns, "prometheus")
    return node


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MonitoredLab]:
    cfg = load(REPO / f"Pulumi.{STACK}.yaml")
    plan = plan_lab(cfg, new_prefix())
    keys = LabKeys.generate(cfg)
    state = new_state(plan.prefix, "monitoring drills")
    state.save()
    # scripts/check runs this module in a pytest beside the lab's and ends it with SIGTERM when it is interrupted
    with signals_end_the_run():
        try:
            lab = build(plan, render_artifacts(cfg, plan, keys), state, lambda step: None)
            for site in plan.sites:
                start_metrics(lab, cfg, keys, site.name)
            monitored = MonitoredLab(lab, start_prometheus(lab, cfg, tmp_path_factory.mktemp("prometheus")))
            wait_for("Prometheus ready", monitored.ready, 60, time.monotonic())
            yield monitored
        finally:
            problems = teardown(state, lambda line: None)
            assert problems == [], problems


def fresh_handshakes(mon: MonitoredLab) -> bool:
    ages = mon.query("time() - wgmesh_peer_latest_handshake_seconds")
    return len(ages) == 2 and all(float(s["value"][1]) < monitoring.HANDSHAKE_STALE_SECONDS for s in ages)


def test_baseline_every_gateway_scraped_and_quiet(monitored: MonitoredLab, record_property: Any) -> None:
    started = time.monotonic()
    took = wait_for(
        "both gateways scraped with fresh handshakes",
        lambda: len([s for s in monitored.query('up{job="wg-mesh"} == 1')]) == 2 and fresh_handshakes(monitored),
        60,
        started,
    )
    record_property("baseline_s", round(took, 1))
    time.sleep(3)  # a few evaluations
    assert [a for a in monitored.firing() if a["alertname"].startswith("WgMesh")] == []
    peers = {
        (s["metric"]["site"], s["metric"]["peer_site"]) for s in monitored.query("wgmesh_peer_receive_bytes_total")
    }
    assert peers == {("aws-use1", "gcp-euw3"), ("gcp-euw3", "aws-use1")}
    # issue 24: each peer's kind and current endpoint, and no roam in a lab where nothing moved
    kinds = {(s["metric"]["site"], s["metric"]["kind"]) for s in monitored.query("wgmesh_peer_info")}
    assert kinds == {("aws-use1", "configured"), ("gcp-euw3", "configured")}
    assert len(monitored.query("wgmesh_peer_endpoint_info")) == 2
    assert len(monitored.query("wgmesh_peer_last_roam_timestamp_seconds == 0")) == 2
    for site in ("aws-use1", "gcp-euw3"):
        code, report = monitored.doctor(site)
        assert code == 0, report


def test_drill_forwarding_off_with_fresh_handshakes(monitored: MonitoredLab, record_property: Any) -> None:
    site, peer = "gcp-euw3", "aws-use1"
    gateway = monitored.lab.gateways[site]
    aws_host, gcp_host = monitored.lab.hosts[peer], monitored.lab.plan.site(site).host_ip.ip
    assert aws_host.run(["ping", "-c", "1", "-W", "2", str(gcp_host)], check=False).returncode == 0

    started = time.monotonic()
    gateway.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"])
    try:
        took = wait_for(
            "WgMeshForwardingDisabled",
            lambda: monitored.is_firing("WgMeshForwardingDisabled", site=site),
            90,
            started,
        )
        monitored.times["forwarding_off_to_alert_s"] = took
        record_property("forwarding_off_to_alert_s", round(took, 1))
        print(f"\nforwarding off on {site} -> WgMeshForwardingDisabled firing after {took:.1f} s")

        # The failure that looks healthy: handshakes fresh, no stale alert, but traffic does not cross.
        assert fresh_handshakes(monitored)
        assert not monitored.is_firing("WgMeshHandshakeStale")
        assert aws_host.run(["ping", "-c", "2", "-W", "1", str(gcp_host)], check=False).returncode != 0

        code, report = monitored.doctor(site)
        assert code == 1
        checks = {(c["check"], c["peer_site"]): c for c in report["checks"]}
        assert checks[("forwarding", None)]["status"] == "fail"
        assert "net.ipv4.ip_forward is 0" in checks[("forwarding", None)]["detail"]
        assert checks[("handshake", peer)]["status"] == "ok"
    finally:
        gateway.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
    cleared = wait_for(
        "WgMeshForwardingDisabled resolved",
        lambda: not monitored.is_firing("WgMeshForwardingDisabled"),
        30,
        time.monotonic(),
    )
    record_property("forwarding_alert_resolved_s", round(cleared, 1))


def test_drill_wireguard_stopped(monitored: MonitoredLab, record_property: Any) -> None:
    stopped, peer = "gcp-euw3", "aws-use1"
    started = time.monotonic()
    wg_quick(monitored.lab, stopped, "down", "wg0")
    try:
        missing = wait_for(
            "WgMeshPeerMissing on the stopped gateway",
            lambda: monitored.is_firing("WgMeshPeerMissing", site=stopped, peer_site=peer),
            150,
            started,
        )
        print(f"\nwg-quick down on {stopped} -> WgMeshPeerMissing ({stopped} lacks {peer}) after {missing:.1f} s")
        record_property("wg_down_to_peer_missing_s", round(missing, 1))
        assert monitored.is_firing("WgMeshInterfaceDown", site=stopped)
        assert not monitored.is_firing("WgMeshRouteMissing")  # the interface alert covers it

        code, report = monitored.doctor(stopped)
        assert code == 1
        assert report["checks"][0]["check"] == "interface" and report["checks"][0]["status"] == "fail"
        assert "wg0 does not exist" in report["checks"][0]["detail"]

        # The peer cannot know before the last handshake is 180 s old: WireGuard has no "goodbye".
        last = float(monitored.query(f'wgmesh_peer_latest_handshake_seconds{{site="{peer}"}}')[0]["value"][1])
        stale = wait_for(
            "WgMeshHandshakeStale on the peer",
            lambda: monitored.is_firing("WgMeshHandshakeStale", site=peer, peer_site=stopped),
            monitoring.HANDSHAKE_STALE_SECONDS + 90,
            started,
        )
        age = time.time() - last
        print(
            f"wg-quick down on {stopped} -> WgMeshHandshakeStale on {peer} after {stale:.1f} s "
            f"(handshake {age:.0f} s old)"
        )
        record_property("wg_down_to_handshake_stale_s", round(stale, 1))

        code, report = monitored.doctor(peer)
        assert code == 1
        failed = [c for c in report["checks"] if c["status"] == "fail"]
        assert [(c["check"], c["peer_site"]) for c in failed] == [("handshake", stopped)]
        assert failed[0]["detail"].startswith(f"stale handshake with {stopped}: last one")
    finally:
        wg_quick(monitored.lab, stopped, "up", "wg0")
    recovered = wait_for(
        "alerts resolved after wg-quick up",
        lambda: not [a for a in monitored.firing() if a["alertname"].startswith("WgMesh")],
        60,
        time.monotonic(),
    )
    record_property("recovered_alerts_resolved_s", round(recovered, 1))
