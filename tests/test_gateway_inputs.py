"""Doctor and the metrics script on inputs a gateway can really produce: IPv6 peers, non-UTF-8 names,
rule sets that drop INVALID packets. A report every time: no traceback, no false FAIL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_doctor import GCP_KEY, VPS_KEY, captured, gateway, with_vps_handshake
from tests.test_metrics import prod_mapping, samples, snapshot
from wg_mesh.gateway import doctor, wgmetrics
from wg_mesh.gateway.doctor import FAIL, OK, CommandResult
from wg_mesh.plan import metrics, wgkey

CAPTURED_AT = 1796205500


@pytest.fixture
def private_key() -> str:
    return wgkey.generate_private_key()


IP_ROUTE6 = "ip -j -6 route show table main"
V6_ROUTES = json.dumps(
    [
        {"dst": "fd00:100::/64", "dev": "wg0", "protocol": "static"},
        {"dst": "ff00::/8", "dev": "ens5", "type": "multicast"},
    ]
)


def ipv6_dump(private_key: str) -> str:
    """The capture with an IPv6 endpoint and an IPv6 AllowedIPs prefix on gcp-euw3 (added by hand)."""
    dump = with_vps_handshake(captured("wg-show-wg0-dump.txt", private_key), CAPTURED_AT - 100)
    return dump.replace(
        "192.0.2.2:51820\t10.200.0.2/32,10.100.0.0/16", "[2001:db8::2]:51820\t10.200.0.2/32,10.100.0.0/16,fd00:100::/64"
    )


def test_doctor_on_ipv6_allowed_ips_and_endpoints(private_key: str) -> None:
    host = gateway(private_key, dump=ipv6_dump(private_key))
    host.outputs[IP_ROUTE6] = CommandResult(0, V6_ROUTES)
    result = doctor.diagnose(host)
    assert result.ok, [c for c in result.checks if c.status == FAIL]
    route = next(c for c in result.checks if c.check == "route" and c.peer_site == "gcp-euw3")
    assert "fd00:100::/64" in route.detail and route.status == OK
    handshake = next(c for c in result.checks if c.check == "handshake" and c.peer_site == "gcp-euw3")
    assert handshake.status == OK


def test_doctor_names_a_missing_ipv6_route(private_key: str) -> None:
    host = gateway(private_key, dump=ipv6_dump(private_key))
    host.outputs[IP_ROUTE6] = CommandResult(0, "[]")
    failed = {(c.check, c.peer_site): c for c in doctor.diagnose(host).checks if c.status == FAIL}
    assert "fd00:100::/64 has no route at all" in failed[("route", "gcp-euw3")].detail


def test_doctor_accepts_an_invalid_state_drop_before_our_rules(private_key: str) -> None:
    rules = (
        "-P FORWARD DROP\n"
        "-A FORWARD -m conntrack --ctstate INVALID -j DROP\n"
        '-A FORWARD -m comment --comment "drop spoofed" -s 10.66.0.0/16 -j DROP\n'
        "-A FORWARD -i ens5 -o ens5 -j REJECT --reject-with icmp-port-unreachable\n"
        + "\n".join(captured("iptables-filter-forward.txt").splitlines()[1:])
    )
    check = next(c for c in doctor.diagnose(gateway(private_key, filter=rules)).checks if c.check == "forward-accept")
    assert check.status == OK, check


def test_doctor_still_fails_an_unconditional_drop_first(private_key: str) -> None:
    for drop in (
        "-A FORWARD -j DROP",
        '-A FORWARD -m comment --comment "lockdown now" -j DROP',
        "-A FORWARD -i wg0 -j REJECT",
    ):
        rules = "-P FORWARD DROP\n" + drop + "\n" + "\n".join(captured("iptables-filter-forward.txt").splitlines()[1:])
        check = next(
            c for c in doctor.diagnose(gateway(private_key, filter=rules)).checks if c.check == "forward-accept"
        )
        assert check.status == FAIL, drop


def test_local_commands_with_non_utf8_output_do_not_crash(tmp_path: Path) -> None:
    script = tmp_path / "bytes.sh"
    script.write_text("#!/bin/sh\nprintf 'wg\\377\\376x\\n'\n")
    script.chmod(0o755)
    result = doctor.LocalHost().run([str(script)])
    assert result.returncode == 0 and result.stdout.startswith("wg")
    assert (wgmetrics.run_command([str(script)]) or "").startswith("wg")
    conf = tmp_path / "wg0.conf"
    conf.write_bytes(b"# wg-mesh site caf\xe9\n[Interface]\nMTU = 1400\n")
    assert "[Interface]" in doctor.LocalHost().read(str(conf))


def test_doctor_on_a_non_utf8_interface_name(private_key: str) -> None:
    link = json.dumps([{"ifname": "wg\ufffd", "flags": ["UP"], "mtu": 1400}])
    result = doctor.diagnose(gateway(private_key, ip_link=link))
    assert result.checks[0].status == OK


def test_metrics_on_ipv6_prefixes(private_key: str) -> None:
    mapping = prod_mapping()
    gcp = mapping.peers[0]
    v6 = wgmetrics.ExpectedPeer(gcp.site, gcp.public_key, (*gcp.allowed_ips, "fd00:100::/64", "not-a-prefix"))
    mapping = wgmetrics.Mapping(mapping.site, mapping.interface, (v6, *mapping.peers[1:]))
    route = 'wgmesh_route_present{{site="aws-use1",interface="wg0",peer_site="gcp-euw3",prefix="{}"}}'
    without = samples(wgmetrics.format_metrics(mapping, snapshot(private_key)))
    assert without[route.format("fd00:100::/64")] == 0 and without[route.format("10.100.0.0/16")] == 1
    routes = (*(snapshot(private_key).routes or ()), *wgmetrics.parse_routes(V6_ROUTES, family=6))
    with_v6 = samples(wgmetrics.format_metrics(mapping, snapshot(private_key, routes=routes)))
    assert with_v6[route.format("fd00:100::/64")] == 1


def test_metrics_collect_asks_for_ipv6_routes_only_when_needed(private_key: str) -> None:
    asked: list[str] = []

    def run(argv: object) -> str | None:
        command = " ".join(argv)  # type: ignore[call-overload]
        asked.append(command)
        return {
            "wg show all dump": "".join(f"wg0\t{line}\n" for line in ipv6_dump(private_key).splitlines()),
            IP_ROUTE6: V6_ROUTES,
        }.get(command, "[]")

    wgmetrics.collect(prod_mapping(), run=run, now=lambda: 0.0)
    assert IP_ROUTE6 not in asked
    mapping = prod_mapping()
    v6 = wgmetrics.ExpectedPeer("gcp-euw3", GCP_KEY, ("fd00:100::/64",))
    snap = wgmetrics.collect(wgmetrics.Mapping(mapping.site, mapping.interface, (v6,)), run=run, now=lambda: 0.0)
    assert IP_ROUTE6 in asked and any(r.dst.version == 6 for r in snap.routes or ())
    assert VPS_KEY  # the capture's second peer stays untouched


def test_metrics_script_on_a_gateway_with_a_non_utf8_interface(tmp_path: Path) -> None:
    """The shipped script end to end with fake `wg` and `ip` printing a non-UTF-8 name: it writes its file, exit 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "wg").write_text("#!/bin/sh\nprintf 'wg\\377\\tpriv\\tpub\\t51820\\toff\\n'\n")
    (bin_dir / "ip").write_text('#!/bin/sh\nprintf \'[{"ifname": "wg0", "flags": ["UP"], "mtu": 1400}]\'\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    mapping = tmp_path / "peers.json"
    mapping.write_text(json.dumps({"site": "a", "interface": "wg0", "peers": []}))
    out, script = tmp_path / "wg_mesh.prom", tmp_path / "wg-mesh-metrics"
    script.write_text(metrics.shipped_source())  # files.py inlined, as on a gateway
    result = subprocess.run(
        [sys.executable, str(script), "--mapping", str(mapping), "--out", str(out)],
        capture_output=True, text=True, check=False, env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert 'wgmesh_interface_up{site="a",interface="wg0"} 1' in out.read_text()
