"""An HA gateway's agent (wg_mesh.gateway.agent with agent.json's `ha`): its config, standby start, role changes through
the document pipeline, the local health checks (a hung `wg`, forwarding off, wg0 down), /healthz over HTTP, and the
planned handover on SIGTERM of the real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.agent_fake import TRUST_JSON, FakeHost, Keys, base_plan
from tests.test_agent import Store, make
from tests.test_ha_machine import AWS
from wg_mesh.gateway.agent import load_config
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.ha_health import HealthServer, LocalChecks, TunnelProbe, latest_handshakes, run_command
from wg_mesh.gateway.wgconf import parse_wg_quick_conf

BASE = {"site": "aws-use1", "source": {"kind": "file", "document": "/d", "private_key": "/k"}, "trust": TRUST_JSON}


def test_agent_json_without_ha_is_a_single_gateway() -> None:
    assert load_config(json.dumps(BASE)).ha is None


def test_agent_json_ha_errors_name_the_field() -> None:
    config = load_config(json.dumps({**BASE, "ha": AWS}))
    assert config.ha is not None and config.ha.allocation_id == "eipalloc-0123"
    with pytest.raises(ValueError, match=r"^ha\.lease_table:"):
        load_config(json.dumps({**BASE, "ha": {**AWS, "lease_table": 3}}))
    with pytest.raises(ValueError, match=r"^ha:"):
        load_config(json.dumps({**BASE, "ha": "aws"}))


def test_an_ha_gateway_starts_standby_and_changes_role_through_the_applier(tmp_path: Path) -> None:
    keys, host, logs = Keys(), FakeHost(), []
    paths = Paths.under(str(tmp_path))
    store = Store("", keys.private)
    from tests.agent_fake import doc_text

    store.text = doc_text(base_plan(), keys)
    agent = make(store, host, paths, logs)
    agent.applier.role = "standby"  # what Agent.__init__ does for a config with `ha` (checked below)
    assert agent.cycle()
    peers = [body for name, body in parse_wg_quick_conf(Path(paths.wg_conf).read_text()) if name == "Peer"]
    assert peers and all("Endpoint" not in body for body in peers)  # the first boot's wg0.conf is standby
    host.up_from(Path(paths.wg_conf))
    assert agent.applied()
    agent.set_role("active")
    assert all(endpoint != "(none)" for _, _, endpoint in host.peers.values())
    assert any("wg0 active: " in line for line in logs)
    agent.set_role("standby")
    assert all(endpoint == "(none)" and keepalive == 0 for _, keepalive, endpoint in host.peers.values())


def test_agent_with_ha_config_starts_standby(tmp_path: Path) -> None:
    from wg_mesh.gateway.agent import Agent

    config = load_config(json.dumps({**BASE, "ha": AWS}))
    agent = Agent(config, Store("", ""), FakeHost(), Paths.under(str(tmp_path)), lambda _: None)
    assert agent.applier.role == "standby" and not agent.applied()
    assert agent.ha_controller() is not None


class Host:
    def __init__(self, link: tuple[int, str], wg: tuple[int, str]) -> None:
        self.link, self.wg = link, wg

    def __call__(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        if argv[:2] == ["ip", "-j"]:
            return self.link
        if argv[:2] == ["wg", "show"]:
            return self.wg
        raise AssertionError(argv)


UP = (0, '[{"ifname": "wg0", "flags": ["POINTOPOINT", "NOARP", "UP", "LOWER_UP"]}]')
DUMP = (0, "priv\tpub\t51820\toff\nK=\t(none)\t1.2.3.4:51820\t10.200.0.2/32\t1700000000\t10\t20\t25\n")


@pytest.mark.parametrize(
    ("link", "wg", "forward", "applied", "failed"),
    [
        (UP, DUMP, "1", True, ""),
        ((1, ""), DUMP, "1", True, "wg0 down"),
        ((0, '[{"ifname": "wg0", "flags": ["POINTOPOINT", "NOARP"]}]'), DUMP, "1", True, "wg0 down"),
        (UP, (124, ""), "1", True, "wg hung (no answer in 1 s)"),
        (UP, (1, ""), "1", True, "wg hung (exit 1)"),
        (UP, DUMP, "0", True, "forwarding off"),
        (UP, DUMP, "1", False, "document not applied"),
    ],
)
def test_local_checks(
    tmp_path: Path, link: tuple[int, str], wg: tuple[int, str], forward: str, applied: bool, failed: str
) -> None:
    (tmp_path / "ip_forward").write_text(forward + "\n")
    checks = LocalChecks(lambda: applied, run=Host(link, wg), forward_path=str(tmp_path / "ip_forward"))
    assert checks.sample() == failed


def test_a_command_that_hangs_is_cut_at_its_timeout() -> None:
    started = time.monotonic()
    assert run_command(["sleep", "5"], 0.3) == (124, "")
    assert time.monotonic() - started < 2


def test_tunnel_probe_needs_an_answer_within_10_s_and_a_fresh_handshake() -> None:
    clock, wall, answers = [100.0], [1_700_000_100.0], [0]

    def run(argv: Sequence[str], timeout: float) -> tuple[int, str]:
        assert argv[0] == "ping"
        return answers[0], ""

    probe = TunnelProbe(base_plan, lambda: DUMP[1], run, clock=lambda: clock[0], wall=lambda: wall[0])
    assert latest_handshakes(DUMP[1]) == [1700000000]
    assert not probe.ok()  # no answer yet
    probe.probe_once()
    assert probe.ok()
    answers[0] = 1
    clock[0] += 9
    probe.probe_once()
    assert probe.ok()
    clock[0] += 2
    assert not probe.ok()  # 11 s without an answer
    answers[0] = 0
    probe.probe_once()
    wall[0] += 200  # the handshake is 300 s old
    assert not probe.ok()


def test_healthz_over_http() -> None:
    state = [(503, "standby")]
    server = HealthServer(0, lambda: state[0], host="127.0.0.1")
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/healthz", timeout=5)
        assert refused.value.code == 503 and refused.value.read() == b"standby\n"
        state[0] = (200, "active")
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as answer:
            assert answer.status == 200 and answer.read() == b"active\n"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{url}/metrics", timeout=5)
        assert missing.value.code == 404
    finally:
        server.stop()


def test_sigterm_turns_healthz_off_and_exits_cleanly(tmp_path: Path) -> None:
    """The real agent process with an `ha` object: it serves /healthz (503: it has no document, so it is unhealthy
    and standby) and exits 0 on SIGTERM after writing its HA metrics (standby)."""
    keys = Keys()
    (tmp_path / "doc.json").write_text("")
    (tmp_path / "key").write_text(keys.private)
    port = 20000 + os.getpid() % 20000
    ha = {**AWS, "health_port": port}
    source = {"kind": "file", "document": str(tmp_path / "doc.json"), "private_key": str(tmp_path / "key")}
    config = {**BASE, "source": source, "interface": "wgmesh-absent", "pmtu_seconds": 0, "ha": ha}
    (tmp_path / "agent.json").write_text(json.dumps(config))
    env = {
        **os.environ,
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9/",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    }
    argv = [
        sys.executable,
        "-m",
        "wg_mesh.gateway.agent",
        "--config",
        str(tmp_path / "agent.json"),
        "--root",
        str(tmp_path / "root"),
    ]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, cwd=Path(__file__).parent.parent)
    try:
        deadline = time.monotonic() + 20
        answer = None
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            except urllib.error.HTTPError as exc:
                answer = (exc.code, exc.read().decode())
                if answer != (503, "unhealthy: not sampled yet\n"):  # served before the first local sample
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert answer == (503, "unhealthy: wgmesh-absent down\n")  # the configured interface, not wg0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read() if process.stderr else ""
    metrics = (tmp_path / "root" / Paths().ha_metrics.lstrip("/")).read_text()
    assert 'wgmesh_ha_role{site="aws-use1",gateway="a"} 0' in metrics, stderr
    assert keys.private not in stderr
