"""`monitoring_cidrs` and `exporter_port`: who may scrape the gateways, and where."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import pytest

from wg_mesh.config import ConfigError
from wg_mesh.plan.validate import load_mesh
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
