"""doctor and roaming peers (issue 24 item 4): per peer its kind, the endpoint WireGuard has now and its last roam (from
the metrics mapping and wg-mesh-metrics' state file), the sites behind a relay, and a dynamic site silent for longer
than its threshold. On the captured prod gateway (aws-use1), with vps-fra made dynamic: its config has no Endpoint."""

from __future__ import annotations

import argparse
import json

import pytest

from tests.test_doctor import CAPTURED_AT, CONFIG, GCP_KEY, VPS_KEY, captured, gateway
from wg_mesh.config import alerting
from wg_mesh.gateway import doctor
from wg_mesh.gateway.doctor import FAIL, OK, WARN
from wg_mesh.gateway.doctor.roam import default_silence
from wg_mesh.gateway.wgmetrics import MAPPING_PATH, STATE_PATH
from wg_mesh.plan import wgkey

NOW = int(CAPTURED_AT)


@pytest.fixture
def private_key() -> str:
    return wgkey.generate_private_key()


def dynamic_vps(private_key: str, handshake: int, endpoint: str = "203.0.113.99:40000") -> dict[str, str]:
    """The capture with vps-fra as a dynamic peer (no Endpoint in wg0.conf) that last shook hands at `handshake`."""
    conf = captured("wg0.conf", private_key).replace("Endpoint = 192.0.2.3:51820\n", "")
    assert "192.0.2.3" not in conf
    lines = []
    for line in captured("wg-show-wg0-dump.txt", private_key).splitlines():
        fields = line.split("\t")
        if fields[0] == VPS_KEY:
            fields[2], fields[4], fields[5] = endpoint, str(handshake), "4242" if handshake else "0"
        lines.append("\t".join(fields))
    return {"config": conf, "dump": "\n".join(lines) + "\n"}


def mapping_text(*relayed: dict[str, object]) -> str:
    peers = [
        {"site": "gcp-euw3", "public_key": GCP_KEY, "allowed_ips": ["10.200.0.2/32"], "kind": "configured"},
        {"site": "vps-fra", "public_key": VPS_KEY, "allowed_ips": ["10.200.0.3/32"], "kind": "dynamic"},
        *relayed,
    ]
    return json.dumps({"site": "aws-use1", "interface": "wg0", "peers": peers})


def checks_of(result: doctor.Diagnosis, name: str) -> dict[str | None, doctor.Check]:
    return {c.peer_site: c for c in result.checks if c.check == name}


def test_each_peer_shows_its_kind_endpoint_and_last_roam(private_key: str) -> None:
    host = gateway(private_key, **dynamic_vps(private_key, NOW - 30))
    home = {
        "site": "home",
        "public_key": GCP_KEY,
        "allowed_ips": ["10.60.0.0/24"],
        "kind": "relayed",
        "via": "gcp-euw3",
    }
    host.files[MAPPING_PATH] = mapping_text(home)
    host.files[STATE_PATH] = f"{VPS_KEY} 203.0.113.99:40000 {NOW - 754}.0\n{GCP_KEY} 192.0.2.2:51820 0.0\n"
    result = doctor.diagnose(host)
    endpoints = checks_of(result, "endpoint")
    assert {site: c.detail for site, c in endpoints.items()} == {
        "gcp-euw3": "gcp-euw3: configured, endpoint 192.0.2.2:51820, no roam seen",
        "vps-fra": "vps-fra: dynamic, endpoint 203.0.113.99:40000 (learnt from its packets), last roamed 12m34s ago",
        "home": "home: relayed through gcp-euw3 (its prefixes ride gcp-euw3's peer entry)",
    }
    assert all(c.status == OK for c in endpoints.values())
    text = doctor.report_text(result)
    assert "ok    endpoint vps-fra" in text and "last roamed 12m34s ago" in text


def test_without_mapping_or_state_the_config_says_the_kind(private_key: str) -> None:
    host = gateway(private_key, **dynamic_vps(private_key, NOW - 30))
    host.files[STATE_PATH] = "\xff\xfe not a state file\n"  # unreadable lines: no roam known, nothing fails
    endpoints = checks_of(doctor.diagnose(host), "endpoint")
    assert endpoints["vps-fra"].detail.startswith("vps-fra: dynamic, endpoint 203.0.113.99:40000 (learnt")
    assert endpoints["vps-fra"].detail.endswith("no roam seen")
    host.files[MAPPING_PATH] = "{not json"
    assert checks_of(doctor.diagnose(host), "endpoint")["gcp-euw3"].detail.startswith("gcp-euw3: configured")


def test_a_configured_peer_seen_elsewhere_says_so(private_key: str) -> None:
    dump = captured("wg-show-wg0-dump.txt", private_key).replace("192.0.2.2:51820", "[2001:DB8::2]:51820")
    endpoints = checks_of(doctor.diagnose(gateway(private_key, dump=dump)), "endpoint")
    assert endpoints["gcp-euw3"].detail.startswith(
        "gcp-euw3: configured, endpoint [2001:db8::2]:51820 (configured 192.0.2.2:51820: it came from there"
    )


def test_a_dynamic_site_that_has_not_dialled_yet(private_key: str) -> None:
    host = gateway(private_key, **dynamic_vps(private_key, 0, endpoint="(none)"))
    result = doctor.diagnose(host)
    assert checks_of(result, "endpoint")["vps-fra"].detail.startswith("vps-fra: dynamic, no endpoint yet")
    assert checks_of(result, "handshake")["vps-fra"].detail.startswith("nothing received yet from vps-fra")


@pytest.mark.parametrize(
    ("silent_s", "flag", "status", "start"),
    [
        (100, None, OK, "vps-fra: last handshake 100 s ago"),
        (300, None, WARN, "no session with vps-fra, a dynamic site, for 5m00s (> 180 s)"),  # threshold 460 s
        (470, None, FAIL, "vps-fra, a dynamic site, silent for 7m50s: longer than its threshold 7m40s"),
        (470, 3600, WARN, "no session with vps-fra, a dynamic site, for 7m50s"),  # the stack's threshold
        (3700, 3600, FAIL, "vps-fra, a dynamic site, silent for 61m40s: longer than its threshold 60m00s"),
    ],
)
def test_a_dynamic_site_is_failed_once_silent_past_its_threshold(
    private_key: str, silent_s: int, flag: int | None, status: str, start: str
) -> None:
    host = gateway(private_key, **dynamic_vps(private_key, NOW - silent_s))
    check = checks_of(doctor.diagnose(host, dynamic_silence=flag), "handshake")["vps-fra"]
    assert (check.status, check.detail[: len(start)]) == (status, start), check.detail


def test_a_configured_peer_is_stale_at_180_s_as_before(private_key: str) -> None:
    dump = captured("wg-show-wg0-dump.txt", private_key).replace("\t0\t0\t7104", f"\t{NOW - 300}\t10\t7104")
    check = checks_of(doctor.diagnose(gateway(private_key, dump=dump)), "handshake")["vps-fra"]
    assert check.status == FAIL and check.detail.startswith("stale handshake with vps-fra: last one 5m00s ago")


def test_the_doctors_default_is_the_configs() -> None:
    """The gateway cannot import the config model (pydantic): the two copies of the formula are held equal here."""
    assert all(default_silence(k) == alerting.default_silence(k) for k in range(0, 65536, 37))


def test_the_cli_takes_the_threshold(private_key: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    doctor.add_arguments(parser)
    args = parser.parse_args(["--json", "--dynamic-silence", "3600"])
    host = gateway(private_key, **dynamic_vps(private_key, NOW - 470))
    assert host.files[CONFIG]
    doctor.run(args, host)
    report = json.loads(capsys.readouterr().out)
    (vps,) = [c for c in report["checks"] if c["check"] == "handshake" and c["peer_site"] == "vps-fra"]
    assert vps["status"] == WARN
