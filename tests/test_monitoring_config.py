"""`monitoring_cidrs` and `exporter_port`: who may scrape the gateways, and where."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import pytest

from wg_mesh.config import ConfigError, alerting
from wg_mesh.gateway import wgmetrics
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools import monitoring
from wg_mesh.tools.stackfile import read_raw

REPO = Path(__file__).resolve().parent.parent


def dev(**changes: Any) -> dict[str, Any]:
    raw = read_raw(REPO / "Pulumi.dev.yaml")
    return {**raw, **changes}


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_mesh(raw)
    return err.value.problems


def test_defaults_open_nothing() -> None:
    cfg = load_mesh(dev())
    assert cfg.monitoring_cidrs == []
    assert cfg.exporter_port == 9100


def test_monitoring_cidrs_and_port_parse() -> None:
    cfg = load_mesh(dev(monitoring_cidrs=["10.10.5.0/24", "203.0.113.10/32"], exporter_port=9200))
    assert cfg.monitoring_cidrs == [IPv4Network("10.10.5.0/24"), IPv4Network("203.0.113.10/32")]
    assert cfg.exporter_port == 9200


def test_bad_monitoring_settings_name_their_field() -> None:
    found = problems(dev(monitoring_cidrs=["10.10.5.0/24", "0.0.0.0/0", "10.1.1.1/8"], exporter_port=70000))
    assert found == [
        "monitoring_cidrs[1]: 0.0.0.0/0 would open node-exporter (no authentication, no TLS) to the whole internet; "
        "list the networks of your Prometheus servers instead",
        "monitoring_cidrs[2]: 10.1.1.1/8 has host bits set (did you mean 10.0.0.0/8?)",
        "exporter_port: 70000 is above the maximum 65535",
    ]


def test_monitoring_typo_is_caught() -> None:
    assert problems(dev(monitoring_cidr=["10.10.5.0/24"])) == [
        "monitoring_cidr: unknown key (did you mean 'monitoring_cidrs'?)"
    ]


# --- dynamic_silence_alert_seconds: the WgMeshDynamicSiteSilent threshold (issue 24) ------------------------------


def silent_alert(cfg: Any) -> dict[str, Any]:
    rules = [r for g in monitoring.rules(cfg)["groups"] for r in g["rules"]]
    return next(r for r in rules if r.get("alert") == "WgMeshDynamicSiteSilent")


def test_the_dynamic_silence_defaults_to_two_sessions_and_four_keepalives() -> None:
    assert alerting.SESSION_SECONDS == wgmetrics.HANDSHAKE_STALE_SECONDS == monitoring.HANDSHAKE_STALE_SECONDS
    cfg = load_mesh(dev())
    assert cfg.dynamic_silence_alert_seconds is None and cfg.dynamic_silence() == 2 * 180 + 4 * 25
    assert silent_alert(cfg)["for"] == "4m40s"  # stale (> 180 s) for the rest of 460 s
    assert "for over 7m40s" in silent_alert(cfg)["annotations"]["summary"]
    short = load_mesh(dev(persistent_keepalive=10))
    assert short.dynamic_silence() == 400 and silent_alert(short)["for"] == "3m40s"


def test_a_configured_dynamic_silence_sets_the_alert() -> None:
    cfg = load_mesh(dev(dynamic_silence_alert_seconds=3600))
    assert cfg.dynamic_silence() == 3600
    alert = silent_alert(cfg)
    assert alert["for"] == "57m" and "for over 1h" in alert["annotations"]["summary"]
    assert alert["expr"].startswith("(\n  time() - wgmesh_peer_latest_handshake_seconds > 180\n")


def test_every_default_is_a_valid_setting() -> None:
    for keepalive in range(0, 65536, 97):
        default = alerting.default_silence(keepalive)
        assert alerting.silence_problems(min(default, alerting.MAX_SILENCE_S), keepalive) == []
        assert default >= alerting.MIN_SILENCE_S


def test_bad_dynamic_silences_name_their_field() -> None:
    assert problems(dev(dynamic_silence_alert_seconds=60)) == [
        "dynamic_silence_alert_seconds: 60 is below the minimum 240"
    ]
    assert problems(dev(dynamic_silence_alert_seconds=10**7)) == [
        "dynamic_silence_alert_seconds: 10000000 is above the maximum 604800"
    ]
    assert problems(dev(dynamic_silence_alert_seconds="1h")) == [
        "dynamic_silence_alert_seconds: expected an integer, got str '1h'"
    ]
    below = "dynamic_silence_alert_seconds: 250 is below 180 + persistent_keepalive (90) = 270: a dynamic site that is "
    assert problems(dev(dynamic_silence_alert_seconds=250, persistent_keepalive=90)) == [
        below + "up would be alerted on between its keepalives"
    ]
    # reported with another field's problem too (every problem at once)
    found = problems(dev(dynamic_silence_alert_seconds=250, persistent_keepalive=90, listen_port="x"))
    assert found == [
        "listen_port: expected an integer, got str 'x'",
        below + "up would be alerted on between its keepalives",
    ]
