"""`mesh doctor` on captured gateway outputs (tests/data/gateway): a verdict per check, a hint per failure."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.test_render import rendered, site_cases
from wg_mesh.gateway import doctor
from wg_mesh.gateway.doctor import FAIL, OK, SKIP, WARN, CommandResult
from wg_mesh.gateway.wgmetrics import STATE_PATH
from wg_mesh.plan import render, wgkey

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "gateway"
CONFIG = "/etc/wireguard/wg0.conf"
CAPTURED_AT = 1796205500.0  # the gcp-euw3 handshake in the capture is 8 s old at this time
GCP_KEY = "DNxPllg1ZCUbL/MraFMj4KcDFl8ulKgUVdrcI5loXwk="
VPS_KEY = "k4SNuzME9lAJgwovViXU1HUKKZDzB4c/eOycHQ421FU="
WG_DUMP = "wg show wg0 dump"
IP_LINK = "ip -j link show dev wg0"
IP_ROUTE = "ip -j -4 route show table main"
SYSCTL = "sysctl -n net.ipv4.ip_forward"
FILTER = "iptables -t filter -S FORWARD"
MANGLE = "iptables -t mangle -S FORWARD"


class FakeHost:
    """Captured outputs instead of commands; any command doctor did not announce fails the test."""

    def __init__(self, outputs: dict[str, CommandResult], files: dict[str, str], now: float = CAPTURED_AT):
        self.outputs = outputs
        self.files = files
        self.clock = now
        self.ran: list[str] = []
        # The paths the DF pings take: overlay address -> largest IP packet that comes back (0: no answer);
        # every other address answers any size. ping_installed False: ping exits 127 like a missing command.
        self.paths: dict[str, int] = {}
        self.ping_installed = True

    def run(self, argv: Sequence[str]) -> CommandResult:
        command = " ".join(argv)
        self.ran.append(command)
        if argv[0] == "ping":
            assert list(argv[1:-3]) == ["-n", "-q", "-c", "1", "-W", "1", "-M", "do"], command  # DF, one try
            packet = int(argv[-2]) + 28  # -s is the ICMP payload: + IPv4 (20) and ICMP (8) headers
            if not self.ping_installed:
                return CommandResult(127, "", "ping: command not found")
            return CommandResult(0 if packet <= self.paths.get(argv[-1], 65535) else 1, "")
        assert command in self.outputs, f"doctor ran an unexpected command: {command}"
        return self.outputs[command]

    def read(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.files[path]

    def now(self) -> float:
        return self.clock


def captured(name: str, private_key: str = "") -> str:
    return (DATA / name).read_text().replace("{PRIVATE_KEY}", private_key)


@pytest.fixture
def private_key() -> str:
    return wgkey.generate_private_key()


def gateway(private_key: str, **changes: CommandResult | str | None) -> FakeHost:
    """The captured prod aws-use1 gateway; keyword arguments replace one command's output (None: remove it)."""
    outputs: dict[str, CommandResult] = {
        IP_LINK: CommandResult(0, captured("ip-link-wg0.json")),
        SYSCTL: CommandResult(0, "1\n"),
        FILTER: CommandResult(0, captured("iptables-filter-forward.txt")),
        MANGLE: CommandResult(0, captured("iptables-mangle-forward.txt")),
        WG_DUMP: CommandResult(0, captured("wg-show-wg0-dump.txt", private_key)),
        IP_ROUTE: CommandResult(0, captured("ip-route.json")),
    }
    names = {"ip_link": IP_LINK, "sysctl": SYSCTL, "filter": FILTER, "mangle": MANGLE, "dump": WG_DUMP}
    names["routes"] = IP_ROUTE
    files = {CONFIG: captured("wg0.conf", private_key)}
    for key, value in changes.items():
        if key == "config":
            if value is None:
                files.pop(CONFIG)
            else:
                assert isinstance(value, str)
                files[CONFIG] = value
        elif isinstance(value, CommandResult):
            outputs[names[key]] = value
        else:
            assert isinstance(value, str)
            outputs[names[key]] = CommandResult(0, value)
    return FakeHost(outputs, files)


def with_vps_handshake(dump: str, when: int) -> str:
    lines = []
    for line in dump.splitlines():
        fields = line.split("\t")
        if fields[0] == VPS_KEY:
            fields[4:6] = [str(when), "4242"]
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n"


def verdicts(diagnosis: doctor.Diagnosis) -> list[tuple[str, str | None, str]]:
    return [(c.check, c.peer_site, c.status) for c in diagnosis.checks]


def failures(diagnosis: doctor.Diagnosis) -> dict[tuple[str, str | None], doctor.Check]:
    return {(c.check, c.peer_site): c for c in diagnosis.checks if c.status == FAIL}


def test_captured_gateway_fails_only_on_the_unreachable_site(private_key: str) -> None:
    host = gateway(private_key)
    result = doctor.diagnose(host)
    assert result.site == "aws-use1"
    assert verdicts(result) == [
        ("interface", None, OK),
        ("config", None, OK),
        ("mtu", None, OK),
        ("forwarding", None, OK),
        ("forward-accept", None, OK),
        ("mss-clamp", None, OK),
        ("peers", None, OK),
        ("endpoint", "gcp-euw3", OK),
        ("handshake", "gcp-euw3", OK),
        ("route", "gcp-euw3", OK),
        ("endpoint", "vps-fra", OK),
        ("handshake", "vps-fra", FAIL),
        ("route", "vps-fra", OK),
        ("path-mtu", "gcp-euw3", OK),  # only peers with a working tunnel are probed
    ]
    vps = failures(result)[("handshake", "vps-fra")]
    assert vps.detail.startswith("endpoint unreachable: never completed a handshake with vps-fra")
    assert "192.0.2.3:51820" in vps.detail
    assert "firewall admit UDP" in vps.hint
    assert not result.ok
    assert "TCP MSS clamped to 1360" in result.checks[5].detail
    assert "gcp-euw3: last handshake 8 s ago" in result.checks[8].detail
    assert result.checks[7].detail == (  # no mapping or metrics state in the capture: the config says the kind
        f"gcp-euw3: configured, endpoint 192.0.2.2:51820, last roam unknown (no {STATE_PATH}: wg-mesh-metrics keeps it)"
    )
    assert private_key not in repr(result)


def test_healthy_gateway_passes(private_key: str) -> None:
    dump = with_vps_handshake(captured("wg-show-wg0-dump.txt", private_key), int(CAPTURED_AT) - 100)
    result = doctor.diagnose(gateway(private_key, dump=dump))
    assert result.ok
    assert {c.status for c in result.checks} == {OK}
    assert doctor.report_text(result).endswith("all 15 checks passed\n")
    assert [c.detail for c in result.checks if c.check == "path-mtu"] == [
        "gcp-euw3: 1400-byte packets with DF set reach 10.200.0.2",
        "vps-fra: 1400-byte packets with DF set reach 10.200.0.3",
    ]


def healthy(private_key: str) -> FakeHost:
    return gateway(private_key, dump=with_vps_handshake(captured("wg-show-wg0-dump.txt", private_key), 1796205400))


def test_path_mtu_black_hole_is_found_and_sized(private_key: str) -> None:
    """The internet path toward vps-fra lost 48 bytes and its ICMP: small DF pings pass, 1400-byte ones vanish."""
    host = healthy(private_key)
    host.paths["10.200.0.3"] = 1352
    result = doctor.diagnose(host)
    black_hole = failures(result)[("path-mtu", "vps-fra")]
    assert black_hole.detail == (
        "path-MTU black hole to vps-fra: 84-byte pings with DF set pass, 1400-byte ones vanish; "
        "the largest that passes is 1352 bytes"
    )
    assert "carries fewer than 1460 bytes" in black_hole.hint
    assert "mtu lock 1352" in black_hole.hint and "but 10.200.0.3/32" in black_hole.hint
    assert "set the mesh's `mtu` to 1352 or less" in black_hole.hint
    assert [k for k in failures(result)] == [("path-mtu", "vps-fra")]  # gcp-euw3's path is fine
    probes = [c for c in host.ran if c.startswith("ping") and c.endswith("10.200.0.3")]
    assert len(probes) == 2 + 4  # small, full, then a binary search over 1280..1392 (15 sizes: 4 probes)


def test_path_mtu_below_the_floor_and_unanswered_peers(private_key: str) -> None:
    host = healthy(private_key)
    host.paths.update({"10.200.0.3": 1200, "10.200.0.2": 0})
    result = doctor.diagnose(host)
    checks = {(c.check, c.peer_site): c for c in result.checks}
    assert "not even 1280 bytes pass" in checks[("path-mtu", "vps-fra")].detail
    assert checks[("path-mtu", "vps-fra")].status == FAIL
    silent = checks[("path-mtu", "gcp-euw3")]
    assert silent.status == WARN  # a peer that drops ICMP is not a black hole
    assert silent.detail.startswith("gcp-euw3: 10.200.0.2 answers no ping, neither 84 nor 1400 bytes")


def test_path_mtu_without_ping_is_skipped(private_key: str) -> None:
    host = healthy(private_key)
    host.ping_installed = False
    result = doctor.diagnose(host)
    skipped = [c for c in result.checks if c.check == "path-mtu"]
    assert {c.status for c in skipped} == {SKIP} and "iputils-ping" in skipped[0].hint
    assert result.ok


def test_stale_handshake_names_the_site(private_key: str) -> None:
    host = gateway(private_key)
    host.clock = 1796205492 + 408
    found = failures(doctor.diagnose(host))
    stale = found[("handshake", "gcp-euw3")]
    assert stale.detail.startswith("stale handshake with gcp-euw3: last one 6m48s ago (> 180 s)")
    assert "Run doctor on gcp-euw3's gateway" in stale.hint
    # 180 s is still fresh (the threshold is "older than 3 minutes").
    host.clock = 1796205492 + 180
    assert ("handshake", "gcp-euw3") not in failures(doctor.diagnose(host))


def test_mtu_mismatch(private_key: str) -> None:
    link = json.loads(captured("ip-link-wg0.json"))
    link[0]["mtu"] = 1420
    found = failures(doctor.diagnose(gateway(private_key, ip_link=json.dumps(link))))
    assert found[("mtu", None)].detail == "wg0 has MTU 1420, the config says 1400"
    assert "ip link set dev wg0 mtu 1400" in found[("mtu", None)].hint


def test_forwarding_off_with_fresh_handshakes(private_key: str) -> None:
    result = doctor.diagnose(gateway(private_key, sysctl="0\n"))
    found = failures(result)
    assert set(found) == {("forwarding", None), ("handshake", "vps-fra")}
    assert "net.ipv4.ip_forward is 0" in found[("forwarding", None)].detail
    assert "sysctl -w net.ipv4.ip_forward=1" in found[("forwarding", None)].hint
    assert ("handshake", "gcp-euw3", OK) in verdicts(result)


def test_missing_and_blackholed_routes(private_key: str) -> None:
    found = failures(doctor.diagnose(gateway(private_key, routes=captured("ip-route-broken.json"))))
    gcp = found[("route", "gcp-euw3")]
    assert gcp.detail == "gcp-euw3: not routed into wg0: 10.100.0.0/16 goes via obs5v1 (0.0.0.0/0)"
    assert "ip route replace 10.100.0.0/16 dev wg0" in gcp.hint
    vps = found[("route", "vps-fra")]
    assert vps.detail == "vps-fra: not routed into wg0: 192.168.50.0/24 hits a blackhole route (192.168.50.0/24)"
    none = failures(doctor.diagnose(gateway(private_key, routes="[]")))
    assert none[("route", "gcp-euw3")].detail.endswith(
        "10.200.0.2/32 has no route at all; 10.100.0.0/16 has no route at all"
    )


def test_missing_mss_clamp(private_key: str) -> None:
    found = failures(doctor.diagnose(gateway(private_key, mangle="-P FORWARD ACCEPT\n")))
    clamp = found[("mss-clamp", None)]
    assert clamp.detail == "no MSS clamp for TCP into wg0; no MSS clamp for TCP out of wg0"
    assert "9001" in clamp.hint
    one_way = "\n".join(captured("iptables-mangle-forward.txt").splitlines()[:2])
    found = failures(doctor.diagnose(gateway(private_key, mangle=one_way)))
    assert found[("mss-clamp", None)].detail == "no MSS clamp for TCP out of wg0"


def test_mss_clamp_too_large_for_the_tunnel(private_key: str) -> None:
    too_big = captured("iptables-mangle-forward.txt").replace("--set-mss 1360", "--set-mss 1380")
    found = failures(doctor.diagnose(gateway(private_key, mangle=too_big)))
    assert found[("mss-clamp", None)].detail.startswith("TCP into wg0 is clamped to 1380, above 1360 (MTU 1400 - 40)")
    to_pmtu = "-P FORWARD ACCEPT\n" + "".join(
        f"-A FORWARD {flag} wg0 -p tcp -m tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu\n"
        for flag in ("-o", "-i")
    )
    assert ("mss-clamp", None) not in failures(doctor.diagnose(gateway(private_key, mangle=to_pmtu)))


def test_forward_chain_verdicts(private_key: str) -> None:
    dropped = failures(doctor.diagnose(gateway(private_key, filter="-P FORWARD DROP\n")))
    assert "policy DROP" in dropped[("forward-accept", None)].detail
    assert "iptables -I FORWARD -i wg0 -j ACCEPT" in dropped[("forward-accept", None)].hint

    shadowed = "-P FORWARD ACCEPT\n-A FORWARD -j DROP\n" + "\n".join(
        captured("iptables-filter-forward.txt").splitlines()[1:]
    )
    assert ("forward-accept", None) in failures(doctor.diagnose(gateway(private_key, filter=shadowed)))

    open_policy = doctor.diagnose(gateway(private_key, filter="-P FORWARD ACCEPT\n"))
    (accept,) = [c for c in open_policy.checks if c.check == "forward-accept"]
    assert accept.status == WARN and "policy is ACCEPT" in accept.detail

    denied = CommandResult(
        4, "", "iptables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied"
    )
    found = failures(doctor.diagnose(gateway(private_key, filter=denied)))
    assert found[("forward-accept", None)].detail.startswith("cannot read the FORWARD chain: iptables v1.8.9")


def test_without_wg0_says_so_and_fails(private_key: str) -> None:
    host = gateway(private_key, ip_link=CommandResult(1, "", 'Device "wg0" does not exist.\n'), config=None)
    result = doctor.diagnose(host)
    first = result.checks[0]
    assert (first.check, first.status) == ("interface", FAIL)
    assert first.detail == "wg0 does not exist on this host: WireGuard is not running here"
    assert "systemctl start wg-quick@wg0" in first.hint
    assert not result.ok
    assert WG_DUMP not in host.ran and FILTER not in host.ran  # nothing to ask WireGuard or iptables about
    assert verdicts(result)[-1] == ("peers", None, SKIP)
    text = doctor.report_text(result)
    assert text.splitlines()[1].startswith("FAIL  interface")


def test_config_unreadable_names_peers_by_key(private_key: str) -> None:
    result = doctor.diagnose(gateway(private_key, config=None))
    found = failures(result)
    assert found[("config", None)].detail == f"cannot read {CONFIG}: No such file or directory"
    assert ("mtu", None, SKIP) in verdicts(result)
    assert ("peers", None, SKIP) in verdicts(result)
    unreachable = found[("handshake", None)]
    assert unreachable.detail.startswith(f"endpoint unreachable: never completed a handshake with peer {VPS_KEY[:8]}…")


def test_peer_in_config_but_not_loaded(private_key: str) -> None:
    dump = "\n".join(line for line in captured("wg-show-wg0-dump.txt", private_key).splitlines() if GCP_KEY not in line)
    found = failures(doctor.diagnose(gateway(private_key, dump=dump)))
    assert found[("peers", None)].detail == "in the config but not on wg0: gcp-euw3"
    assert "wg syncconf wg0" in found[("peers", None)].hint


def test_handshake_never_but_traffic_in_points_at_keys(private_key: str) -> None:
    dump = with_vps_handshake(captured("wg-show-wg0-dump.txt", private_key), 0)
    found = failures(doctor.diagnose(gateway(private_key, dump=dump)))
    assert found[("handshake", "vps-fra")].detail.startswith("no handshake with vps-fra")
    assert "keys do not match" in found[("handshake", "vps-fra")].hint


def test_wg_show_refused(private_key: str) -> None:
    refused = CommandResult(1, "", "Unable to access interface: Operation not permitted\n")
    found = failures(doctor.diagnose(gateway(private_key, dump=refused)))
    assert (
        found[("peers", None)].detail
        == "`wg show wg0 dump` failed: Unable to access interface: Operation not permitted"
    )


def test_reports_text_and_json(private_key: str) -> None:
    result = doctor.diagnose(gateway(private_key, sysctl="0\n"))
    text = doctor.report_text(result)
    assert text.startswith("wg-mesh doctor: wg0 on aws-use1\n")
    lines = text.splitlines()
    fail_line = next(i for i, line in enumerate(lines) if line.startswith("FAIL  forwarding"))
    assert lines[fail_line + 1].strip().startswith("hint: `sudo sysctl -w net.ipv4.ip_forward=1`")
    assert not any("hint" in line for line in lines if line.startswith("ok "))
    assert lines[-1] == "2 of 14 checks failed"
    doc = json.loads(doctor.report_json(result))
    assert doc["ok"] is False and doc["site"] == "aws-use1" and doc["interface"] == "wg0"
    assert {"check": "forwarding", "status": "fail"}.items() <= doc["checks"][3].items()
    assert private_key not in text and private_key not in doctor.report_json(result)


def test_run_exit_status_and_output(private_key: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(interface="wg0", config=None, json=True, dynamic_silence=None)
    healthy = with_vps_handshake(captured("wg-show-wg0-dump.txt", private_key), int(CAPTURED_AT))
    assert doctor.run(args, gateway(private_key, dump=healthy)) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert doctor.run(args, gateway(private_key)) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_config_path_option(private_key: str) -> None:
    host = gateway(private_key)
    host.files = {"/run/lab/gw/wg0.conf": host.files.pop(CONFIG)}
    assert doctor.diagnose(host, config_path="/run/lab/gw/wg0.conf").site == "aws-use1"


# --- wg0.conf ----------------------------------------------------------------------------------


def test_parse_conf_names_peers_from_comments(private_key: str) -> None:
    conf = doctor.parse_conf(captured("wg0.conf", private_key))
    assert conf.site == "aws-use1"
    assert conf.mtu == 1400
    assert [(p.name, p.public_key) for p in conf.peers] == [("gcp-euw3", GCP_KEY), ("vps-fra", VPS_KEY)]
    assert conf.peers[0].allowed_ips == ("10.200.0.2/32", "10.100.0.0/16")
    assert conf.peers[0].endpoint == "192.0.2.2:51820"
    assert private_key not in repr(conf)


@pytest.mark.parametrize(("stack", "site"), site_cases(), ids=lambda v: getattr(v, "stem", v))
def test_parse_conf_agrees_with_the_renderer(stack: Path, site: str) -> None:
    from wg_mesh.tools.stackfile import load

    cfg = load(stack)
    text = rendered(cfg, site, "KEY")
    conf = doctor.parse_conf(text)
    (_, iface), *sections = render.parse_wg_quick_conf(text)
    assert conf.site == site
    assert conf.mtu == int(iface["MTU"][0])
    assert [p.name for p in conf.peers] == [s.name for s in cfg.sites if s.name != site]
    assert [p.public_key for p in conf.peers] == [s["PublicKey"][0] for _, s in sections]
    assert [", ".join(p.allowed_ips) for p in conf.peers] == [s["AllowedIPs"][0] for _, s in sections]


def test_parse_conf_without_comments_and_bad_input(private_key: str) -> None:
    plain = f"[Interface]\nPrivateKey = {private_key}\n[Peer]\nPublicKey = {GCP_KEY}\nAllowedIPs = 10.0.0.0/8\n"
    conf = doctor.parse_conf(plain)
    assert conf.site is None and conf.mtu is None
    assert conf.peers == (doctor.ConfPeer(None, GCP_KEY, ("10.0.0.0/8",), None),)
    with pytest.raises(ValueError, match="line 1") as err:
        doctor.parse_conf(f"PrivateKey = {private_key}\n")
    assert private_key not in str(err.value)
    with pytest.raises(ValueError, match="without exactly one PublicKey"):
        doctor.parse_conf("[Peer]\nAllowedIPs = 10.0.0.0/8\n")


# --- the real thing, on this machine -----------------------------------------------------------


def test_local_host_runs_commands() -> None:
    host = doctor.LocalHost()
    assert host.run([sys.executable, "-c", "print('x')"]) == CommandResult(0, "x\n", "")
    assert host.run(["/nonexistent/wg", "show"]).returncode == 127


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 not installed")
def test_cli_on_a_host_without_the_interface(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wg_mesh", "doctor", "--interface", "wgmeshnone0", "--config", str(tmp_path / "none")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL  interface                wgmeshnone0 does not exist on this host" in result.stdout
    assert "Traceback" not in result.stderr


def test_doctor_runs_with_a_bare_python3(tmp_path: Path) -> None:
    """On a gateway there is no venv: wg_mesh/__init__.py, the doctor modules, wgmetrics.py (with the files.py it
    imports) and the agent's probes (wg_mesh/gateway/pmtu_probe.py) are all it needs."""
    package = tmp_path / "wg_mesh"
    package.mkdir()
    (package / "gateway" / "doctor").mkdir(parents=True)
    for name in ("__init__.py", "gateway/__init__.py", "gateway/wgmetrics.py", "gateway/files.py",
                 "gateway/pmtu_probe.py", "gateway/doctor/__init__.py", "gateway/doctor/__main__.py",
                 "gateway/doctor/base.py", "gateway/doctor/agent.py", "gateway/doctor/path.py", "gateway/doctor/ha.py",
                 "gateway/doctor/interface.py", "gateway/doctor/roam.py"):  # fmt: skip
        shutil.copy(REPO / "wg_mesh" / name, package / name)
    result = subprocess.run(
        ["/usr/bin/python3", "-I", "-c", "import sys; sys.path.insert(0, '.'); import runpy; "
         "sys.argv = ['doctor', '--help']; runpy.run_module('wg_mesh.gateway.doctor', run_name='__main__')"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--interface" in result.stdout and "--json" in result.stdout


def test_a_single_hosts_config_skips_the_forwarding_checks(private_key: str) -> None:
    """A single host's wg0.conf (a static site without cidrs) turns on no forwarding: ip_forward 0 is as it should be,
    and doctor neither reads it nor the FORWARD chains; the same config with the ip_forward PostUp is a gateway's."""
    conf = captured("wg0.conf", private_key)
    assert "PostUp = sysctl -q -w net.ipv4.ip_forward=1\n" in conf
    host_conf = "".join(line for line in conf.splitlines(True) if "FORWARD" not in line and "sysctl" not in line)
    host = gateway(private_key, config=host_conf, sysctl="0\n")
    result = doctor.diagnose(host)
    assert [(c, s) for c, _, s in verdicts(result) if c in ("forwarding", "forward-accept", "mss-clamp")] == [
        ("forwarding", SKIP),
        ("forward-accept", SKIP),
        ("mss-clamp", SKIP),
    ]
    assert not {SYSCTL, FILTER, MANGLE} & set(host.ran) and ("forwarding", None) not in failures(result)
    assert ("forwarding", None) in failures(doctor.diagnose(gateway(private_key, sysctl="0\n")))
