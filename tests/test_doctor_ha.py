"""Doctor's HA check (wg_mesh.gateway.doctor.ha) on captured files and outputs: active, healthy standby, unhealthy
standby, an active that fails its checks, a silent /healthz; a standby's handshake failures are skips, an active's are
not."""

from __future__ import annotations

import json

from tests.test_doctor import FakeHost
from tests.test_ha_machine import AWS
from wg_mesh.gateway.doctor import FAIL, OK, SKIP, WARN, Check, CommandResult
from wg_mesh.gateway.doctor import agent as doctor_agent
from wg_mesh.gateway.doctor import ha as doctor_ha

CONFIG = {doctor_agent.AGENT_CONFIG: json.dumps({"site": "aws-use1", "source": {"kind": "aws"}, "ha": AWS})}
CURL = "curl -sS --max-time 2 -w \n%{http_code} http://127.0.0.1:9181/healthz"


def prom(role: int, healthy: int, epoch: int = 4, **claims: int) -> str:
    labels = 'site="aws-use1",gateway="a"'
    lines = [
        f"wgmesh_ha_role{{{labels}}} {role}",
        f"wgmesh_ha_healthy{{{labels}}} {healthy}",
        f"wgmesh_ha_lease_epoch{{{labels}}} {epoch}",
        *(f'wgmesh_ha_failovers_total{{{labels},reason="{r}"}} {n}' for r, n in claims.items()),
    ]
    return "\n".join(lines) + "\n"


def check(metrics: str | None, healthz: CommandResult) -> tuple[str, str]:
    files = dict(CONFIG) if metrics is None else {**CONFIG, doctor_ha.HA_METRICS: metrics}
    (found,) = doctor_ha.ha_checks(FakeHost({CURL: healthz}, files))
    return found.status, found.detail + " | " + found.hint


def test_no_ha_object_no_check() -> None:
    files = {doctor_agent.AGENT_CONFIG: '{"site": "aws-use1", "source": {"kind": "aws"}}'}
    assert doctor_ha.ha_checks(FakeHost({}, files)) == []
    assert doctor_ha.role(FakeHost({}, files)) is None


def test_active_and_healthy() -> None:
    status, text = check(prom(1, 1, initial=1, lease_expired=2), CommandResult(0, "active\n200"))
    assert status == OK and "gateway a is the active gateway and healthy" in text
    assert "lease epoch 4; claims: initial 1, lease_expired 2; /healthz 200 active" in text


def test_healthy_standby() -> None:
    status, text = check(prom(0, 1), CommandResult(0, "standby\n503"))
    assert status == OK and "is the standby, healthy" in text


def test_unhealthy_standby_fails() -> None:
    status, text = check(prom(0, 0), CommandResult(0, "unhealthy: forwarding off\n503"))
    assert status == FAIL and "cannot take over" in text and "unhealthy: forwarding off" in text
    assert "WgMeshHaNoHealthyStandby" in text


def test_active_but_unhealthy_fails() -> None:
    status, text = check(prom(1, 0), CommandResult(0, "unhealthy: wg hung (no answer in 1 s)\n503"))
    assert status == FAIL and "active but not healthy" in text and "describe-addresses" in text


def test_silent_healthz_and_missing_metrics() -> None:
    status, text = check(prom(0, 1), CommandResult(7, "", "curl: (7) Failed to connect"))
    assert status == FAIL and "does not answer" in text and "Failed to connect" in text
    status, text = check(None, CommandResult(0, ""))
    assert status == FAIL and "no HA metrics" in text


def test_a_standbys_handshake_failures_are_skips() -> None:
    checks = [
        Check("handshake", FAIL, "endpoint unreachable"),
        Check("handshake", WARN, "w"),
        Check("peers", FAIL, "x"),
    ]
    standby = FakeHost({}, {**CONFIG, doctor_ha.HA_METRICS: prom(0, 1)})
    assert [c.status for c in doctor_ha.standby_peer_checks(checks, standby)] == [SKIP, SKIP, FAIL]
    active = FakeHost({}, {**CONFIG, doctor_ha.HA_METRICS: prom(1, 1)})
    assert doctor_ha.standby_peer_checks(checks, active) == checks


def test_aws_api_path_private_dns_or_a_warning() -> None:
    getent = "getent ahostsv4 ec2.us-east-1.amazonaws.com"
    private = CommandResult(0, "10.10.0.37      STREAM ec2.us-east-1.amazonaws.com\n10.10.1.9       STREAM\n")
    public = CommandResult(0, "52.94.236.248   STREAM ec2.us-east-1.amazonaws.com\n")
    (ok,) = doctor_ha.api_path_checks(FakeHost({getent: private}, CONFIG))
    assert ok.status == OK and "10.10.0.37, 10.10.1.9" in ok.detail
    (warn,) = doctor_ha.api_path_checks(FakeHost({getent: public}, CONFIG))
    assert warn.status == WARN and "EC2 interface endpoint" in warn.hint
    (unresolved,) = doctor_ha.api_path_checks(FakeHost({getent: CommandResult(2, "", "")}, CONFIG))
    assert unresolved.status == WARN
    gcp = {doctor_agent.AGENT_CONFIG: json.dumps({"site": "s", "ha": {**AWS, "cloud": "gcp"}})}
    assert doctor_ha.api_path_checks(FakeHost({}, gcp)) == []
