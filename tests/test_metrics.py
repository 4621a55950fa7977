"""The gateway metrics script (wg_mesh/gateway/wgmetrics.py) on captured outputs, and the cloud-init additions that
install it."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from wg_mesh.gateway import wgmetrics
from wg_mesh.plan import metrics, render, userdata, wgkey
from wg_mesh.plan.topology import PeerAddress, interface_plan
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import load, read_raw

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "gateway"
CAPTURED_AT = 1796205500.0
GCP_KEY = "DNxPllg1ZCUbL/MraFMj4KcDFl8ulKgUVdrcI5loXwk="
VPS_KEY = "k4SNuzME9lAJgwovViXU1HUKKZDzB4c/eOycHQ421FU="
AWS_KEY = "UijIUmfi4oDCyHDwUX2furO4T5REn0k/ugNfdIZ4kWM="
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (prometheus)")


def captured(name: str, private_key: str = "") -> str:
    return (DATA / name).read_text().replace("{PRIVATE_KEY}", private_key)


@pytest.fixture
def private_key() -> str:
    return wgkey.generate_private_key()


def prod_mapping() -> wgmetrics.Mapping:
    """The mapping of the captured gateway (prod's aws-use1), rendered by wg_mesh.plan.metrics."""
    cfg = load(REPO / "Pulumi.prod.yaml")
    directory = {
        "aws-use1": PeerAddress("192.0.2.1", AWS_KEY),
        "gcp-euw3": PeerAddress("192.0.2.2", GCP_KEY),
        "vps-fra": PeerAddress("192.0.2.3", VPS_KEY),
    }
    return wgmetrics.parse_mapping(metrics.peer_mapping(cfg, "aws-use1", directory))


def snapshot(private_key: str, **changes: object) -> wgmetrics.Snapshot:
    fields: dict[str, object] = {
        "now": CAPTURED_AT,
        "peers": tuple(wgmetrics.parse_dump(captured("wg-show-all-dump.txt", private_key))),
        "link": wgmetrics.parse_link(captured("ip-link-wg0.json")),
        "ip_forward": True,
        "routes": tuple(wgmetrics.parse_routes(captured("ip-route.json"))),
    }
    fields.update(changes)
    return wgmetrics.Snapshot(**fields)  # type: ignore[arg-type]


def samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value, for the sample lines of a textfile."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def peer_labels(peer_site: str, key: str) -> str:
    return f'{{site="aws-use1",interface="wg0",peer_site="{peer_site}",peer="{key}"}}'


# --- parsing -----------------------------------------------------------------------------------


def test_parse_all_dump_keeps_peers_and_drops_the_private_key(private_key: str) -> None:
    peers = wgmetrics.parse_dump(captured("wg-show-all-dump.txt", private_key))
    assert [p.public_key for p in peers] == [GCP_KEY, VPS_KEY]
    gcp, vps = peers
    assert gcp.interface == "wg0"
    assert gcp.endpoint == "192.0.2.2:51820"
    assert gcp.allowed_ips == ("10.200.0.2/32", "10.100.0.0/16")
    assert gcp.latest_handshake == 1796205492
    assert (gcp.rx_bytes, gcp.tx_bytes) == (1116, 1308)
    assert vps.latest_handshake == 0 and vps.rx_bytes == 0 and vps.tx_bytes == 7104
    assert private_key not in repr(peers)


def test_parse_interface_dump_equals_all_dump(private_key: str) -> None:
    per_interface = wgmetrics.parse_dump(captured("wg-show-wg0-dump.txt", private_key), interface="wg0")
    assert per_interface == wgmetrics.parse_dump(captured("wg-show-all-dump.txt", private_key))


def test_parse_dump_errors_never_quote_the_line(private_key: str) -> None:
    broken = f"wg0\t{private_key}\tsomething\n"
    with pytest.raises(ValueError, match="line 1: expected 5 or 9 fields, got 3") as err:
        wgmetrics.parse_dump(broken)
    assert private_key not in str(err.value)
    bad_numbers = f"wg0\t{GCP_KEY}\t(none)\t(none)\t(none)\tsoon\t0\t0\toff\n"
    with pytest.raises(ValueError, match="line 1: handshake and transfer"):
        wgmetrics.parse_dump(bad_numbers)


def test_parse_dump_of_a_peer_without_endpoint_or_allowed_ips() -> None:
    (peer,) = wgmetrics.parse_dump(f"wg0\t{GCP_KEY}\t(none)\t(none)\t(none)\t0\t0\t0\toff\n")
    assert peer.endpoint is None and peer.allowed_ips == ()


def test_parse_link() -> None:
    link = wgmetrics.parse_link(captured("ip-link-wg0.json"))
    assert link == wgmetrics.Link(name="wg0", up=True, mtu=1400)
    down = json.loads(captured("ip-link-wg0.json"))
    down[0]["flags"] = ["POINTOPOINT", "NOARP"]
    assert wgmetrics.parse_link(json.dumps(down)) == wgmetrics.Link(name="wg0", up=False, mtu=1400)
    assert wgmetrics.parse_link("[]") is None


def test_route_lookup_is_longest_prefix_over_the_whole_prefix() -> None:
    healthy = wgmetrics.parse_routes(captured("ip-route.json"))
    for prefix in ("10.200.0.2/32", "10.100.0.0/16", "10.200.0.3/32", "192.168.50.0/24"):
        assert wgmetrics.routes_into(healthy, prefix, "wg0"), prefix
    # 10.200.0.2/32 has no route of its own: the interface route 10.200.0.0/24 covers it (as wg-quick expects).
    assert wgmetrics.route_for(healthy, "10.200.0.2/32").dst.prefixlen == 24  # type: ignore[union-attr]
    assert wgmetrics.route_for(healthy, "172.16.0.0/12") is None

    broken = wgmetrics.parse_routes(captured("ip-route-broken.json"))
    # No wg0 route for 10.100.0.0/16: the default route (via the underlay NIC) would carry it, unencrypted.
    assert wgmetrics.route_for(broken, "10.100.0.0/16") == wgmetrics.Route(
        wgmetrics.parse_routes('[{"dst": "default"}]')[0].dst, "obs5v1", "unicast"
    )
    assert not wgmetrics.routes_into(broken, "10.100.0.0/16", "wg0")
    # A blackhole route is no route into wg0 either.
    assert wgmetrics.route_for(broken, "192.168.50.0/24").kind == "blackhole"  # type: ignore[union-attr]
    assert not wgmetrics.routes_into(broken, "192.168.50.0/24", "wg0")
    assert wgmetrics.routes_into(broken, "10.200.0.2/32", "wg0")
    # A route for a wider prefix than asked does not count as one for the narrower part of it.
    assert not wgmetrics.routes_into(healthy, "10.0.0.0/8", "wg0")


# --- formatting --------------------------------------------------------------------------------


def test_metrics_of_the_captured_gateway(private_key: str) -> None:
    text = wgmetrics.format_metrics(prod_mapping(), snapshot(private_key))
    got = samples(text)
    assert got == {
        'wgmesh_metrics_last_run_timestamp_seconds{site="aws-use1"}': CAPTURED_AT,
        'wgmesh_wg_show_success{site="aws-use1"}': 1,
        'wgmesh_interface_up{site="aws-use1",interface="wg0"}': 1,
        'wgmesh_interface_mtu_bytes{site="aws-use1",interface="wg0"}': 1400,
        'wgmesh_ip_forward_enabled{site="aws-use1"}': 1,
        'wgmesh_peers{site="aws-use1",interface="wg0"}': 2,
        'wgmesh_peers_expected{site="aws-use1"}': 2,
        "wgmesh_peer_latest_handshake_seconds" + peer_labels("gcp-euw3", GCP_KEY): 1796205492,
        "wgmesh_peer_receive_bytes_total" + peer_labels("gcp-euw3", GCP_KEY): 1116,
        "wgmesh_peer_transmit_bytes_total" + peer_labels("gcp-euw3", GCP_KEY): 1308,
        "wgmesh_peer_latest_handshake_seconds" + peer_labels("vps-fra", VPS_KEY): 0,
        "wgmesh_peer_receive_bytes_total" + peer_labels("vps-fra", VPS_KEY): 0,
        "wgmesh_peer_transmit_bytes_total" + peer_labels("vps-fra", VPS_KEY): 7104,
        # the mapping's kinds, and the endpoints WireGuard has now (no --state here: no roam series)
        "wgmesh_peer_info" + peer_labels("gcp-euw3", GCP_KEY)[:-1] + ',kind="configured"}': 1,
        "wgmesh_peer_info" + peer_labels("vps-fra", VPS_KEY)[:-1] + ',kind="configured"}': 1,
        "wgmesh_peer_endpoint_info" + peer_labels("gcp-euw3", GCP_KEY)[:-1] + ',endpoint="192.0.2.2:51820"}': 1,
        "wgmesh_peer_endpoint_info" + peer_labels("vps-fra", VPS_KEY)[:-1] + ',endpoint="192.0.2.3:51820"}': 1,
        **{
            f'wgmesh_route_present{{site="aws-use1",interface="wg0",peer_site="{site}",prefix="{prefix}"}}': 1
            for site, prefix in [
                ("gcp-euw3", "10.200.0.2/32"),
                ("gcp-euw3", "10.100.0.0/16"),
                ("vps-fra", "10.200.0.3/32"),
                ("vps-fra", "192.168.50.0/24"),
            ]
        },
    }
    assert private_key not in text
    # Every family once, HELP and TYPE right before its samples, all names from METRICS.
    families = re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE)
    assert [name for name, _ in families] == [m for m in wgmetrics.METRICS if "last_roam" not in m]
    assert all(wgmetrics.METRICS[name][0] == kind for name, kind in families)


def test_metrics_name_the_failures(private_key: str) -> None:
    broken = snapshot(
        private_key,
        ip_forward=False,
        routes=tuple(wgmetrics.parse_routes(captured("ip-route-broken.json"))),
    )
    got = samples(wgmetrics.format_metrics(prod_mapping(), broken))
    assert got['wgmesh_ip_forward_enabled{site="aws-use1"}'] == 0
    route = 'wgmesh_route_present{{site="aws-use1",interface="wg0",peer_site="{}",prefix="{}"}}'
    assert got[route.format("gcp-euw3", "10.100.0.0/16")] == 0
    assert got[route.format("vps-fra", "192.168.50.0/24")] == 0
    assert got[route.format("gcp-euw3", "10.200.0.2/32")] == 1


def test_metrics_without_wireguard() -> None:
    """wg0 gone (wg-quick stopped): the file still says so, with no peer series (the peer-missing alert's cue)."""
    gone = wgmetrics.Snapshot(now=CAPTURED_AT, peers=(), link=None, ip_forward=True, routes=())
    text = wgmetrics.format_metrics(prod_mapping(), gone)
    got = samples(text)
    assert got['wgmesh_interface_up{site="aws-use1",interface="wg0"}'] == 0
    assert got['wgmesh_peers{site="aws-use1",interface="wg0"}'] == 0
    assert got['wgmesh_peers_expected{site="aws-use1"}'] == 2
    assert "wgmesh_interface_mtu_bytes" not in text
    assert "wgmesh_peer_latest_handshake_seconds" not in text
    # No route into wg0 (there is no wg0): every expected prefix is reported missing.
    assert [v for k, v in got.items() if k.startswith("wgmesh_route_present")] == [0, 0, 0, 0]

    failed = wgmetrics.Snapshot(now=CAPTURED_AT, peers=None, link=None, ip_forward=None, routes=None)
    got = samples(wgmetrics.format_metrics(prod_mapping(), failed))
    assert got['wgmesh_wg_show_success{site="aws-use1"}'] == 0
    assert not any(k.startswith(("wgmesh_ip_forward_enabled", "wgmesh_route_present")) for k in got)


def test_unknown_peer_and_label_escaping() -> None:
    mapping = wgmetrics.Mapping(site='odd"site\\', interface="wg0", peers=())
    peers = tuple(wgmetrics.parse_dump(f"wg0\t{GCP_KEY}\t(none)\t(none)\t(none)\t0\t0\t0\toff\n"))
    snap = wgmetrics.Snapshot(now=1.5, peers=peers, link=None, ip_forward=None, routes=None)
    text = wgmetrics.format_metrics(mapping, snap)
    assert 'site="odd\\"site\\\\"' in text
    assert f'peer_site="unknown",peer="{GCP_KEY}"' in text
    assert 'wgmesh_metrics_last_run_timestamp_seconds{site="odd\\"site\\\\"} 1.5' in text


def test_peers_on_other_interfaces_are_not_counted(private_key: str) -> None:
    dump = captured("wg-show-all-dump.txt", private_key) + f"wg1\t{AWS_KEY}\t(none)\t(none)\t(none)\t0\t0\t0\toff\n"
    snap = snapshot(private_key, peers=tuple(wgmetrics.parse_dump(dump)))
    got = samples(wgmetrics.format_metrics(prod_mapping(), snap))
    assert got['wgmesh_peers{site="aws-use1",interface="wg0"}'] == 2
    assert not any(AWS_KEY in key for key in got)


@needs_promtool
def test_promtool_lints_the_textfile(private_key: str) -> None:
    text = wgmetrics.format_metrics(prod_mapping(), snapshot(private_key))
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""


# --- the shell: collect, atomic write, main ----------------------------------------------------


def test_collect_runs_the_commands_and_reads_forwarding(private_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = {
        "wg show all dump": captured("wg-show-all-dump.txt", private_key),
        "ip -j link show dev wg0": captured("ip-link-wg0.json"),
        "ip -j -4 route show table main": captured("ip-route.json"),
    }
    seen: list[str] = []

    def run(argv: Sequence[str]) -> str | None:
        seen.append(" ".join(argv))
        return outputs.get(" ".join(argv))

    monkeypatch.setattr(wgmetrics, "read_ip_forward", lambda: True)
    snap = wgmetrics.collect(prod_mapping(), run=run, now=lambda: CAPTURED_AT)
    assert sorted(seen) == sorted(outputs)
    assert snap == snapshot(private_key)

    snap = wgmetrics.collect(prod_mapping(), run=lambda argv: None, now=lambda: CAPTURED_AT)
    assert snap.peers is None and snap.link is None and snap.routes is None


def test_read_ip_forward(tmp_path: Path) -> None:
    (tmp_path / "on").write_text("1\n")
    (tmp_path / "off").write_text("0\n")
    assert wgmetrics.read_ip_forward(str(tmp_path / "on")) is True
    assert wgmetrics.read_ip_forward(str(tmp_path / "off")) is False
    assert wgmetrics.read_ip_forward(str(tmp_path / "missing")) is None


def test_run_command_returns_none_on_failure() -> None:
    assert wgmetrics.run_command([sys.executable, "-c", "print('hi')"]) == "hi\n"
    assert wgmetrics.run_command([sys.executable, "-c", "import sys; sys.exit(3)"]) is None
    assert wgmetrics.run_command(["/nonexistent/wg"]) is None


def test_write_atomically_replaces_and_never_leaves_a_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "wg_mesh.prom"
    wgmetrics.write_atomically(str(target), "old 1\n")
    assert target.read_text() == "old 1\n"
    assert target.stat().st_mode & 0o777 == 0o644

    def crash(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        wgmetrics.write_atomically(str(target), "new 2\n")
    assert target.read_text() == "old 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wg_mesh.prom"]  # the temp file is gone too
    monkeypatch.undo()

    wgmetrics.write_atomically(str(target), "new 2\n")
    assert target.read_text() == "new 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wg_mesh.prom"]


def test_write_atomically_temp_file_is_invisible_to_node_exporter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str, **dir_fds: int) -> None:
        names.append(Path(src).name)
        # one directory (a descriptor of it, names without a '/'): rename(2) is atomic
        assert dir_fds["src_dir_fd"] == dir_fds["dst_dir_fd"] and "/" not in src + dst
        real_replace(src, dst, **dir_fds)

    monkeypatch.setattr(os, "replace", spy)
    wgmetrics.write_atomically(str(tmp_path / "wg_mesh.prom"), "x 1\n")
    assert len(names) == 1 and not names[0].endswith(".prom")


def test_main_without_a_readable_mapping_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "wg_mesh.prom"
    assert wgmetrics.main(["--mapping", str(tmp_path / "missing.json"), "--out", str(out)]) == 1
    assert not out.exists()
    assert "cannot read the mapping" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"site": "x"}')
    assert wgmetrics.main(["--mapping", str(tmp_path / "bad.json"), "--out", str(out)]) == 1
    assert not out.exists()


def test_main_writes_the_textfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_key: str) -> None:
    mapping = tmp_path / "peers.json"
    mapping.write_text(json.dumps({"site": "aws-use1", "interface": "wg0", "peers": []}))
    monkeypatch.setattr(wgmetrics, "collect", lambda m: snapshot(private_key))
    out = tmp_path / "wg_mesh.prom"
    assert wgmetrics.main(["--mapping", str(mapping), "--out", str(out)]) == 0
    assert 'wgmesh_peers{site="aws-use1",interface="wg0"} 2' in out.read_text()


def test_script_is_standalone(tmp_path: Path) -> None:
    """The installed script runs with a bare python3 (no venv, no mesh package): stdlib imports only."""
    script = tmp_path / "wg-mesh-metrics"
    script.write_text(metrics.shipped_source())
    result = subprocess.run(
        ["/usr/bin/python3", "-I", str(script), "--help"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "usage: wg-mesh-metrics" in result.stdout
    assert metrics.script_source().startswith("#!/usr/bin/env python3\n")


@pytest.mark.skipif(shutil.which("prometheus-node-exporter") is None, reason="prometheus-node-exporter not installed")
def test_node_exporter_serves_the_textfile(tmp_path: Path, private_key: str) -> None:
    """The Debian node-exporter's textfile collector reads our file without error (on loopback only)."""
    wgmetrics.write_atomically(
        str(tmp_path / "wg_mesh.prom"), wgmetrics.format_metrics(prod_mapping(), snapshot(private_key))
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            "prometheus-node-exporter",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={tmp_path}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = ""
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    body = response.read().decode()
                break
            except OSError:
                time.sleep(0.05)
        assert "node_textfile_scrape_error 0" in body
        assert f'wgmesh_peer_transmit_bytes_total{{interface="wg0",peer="{VPS_KEY}"' in body
        assert private_key not in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- cloud-init additions ----------------------------------------------------------------------


def directory_of(stack: str) -> dict[str, PeerAddress]:
    cfg = load(REPO / f"Pulumi.{stack}.yaml")
    return {s.name: PeerAddress(f"198.51.100.{i + 1}", f"{s.name}-public-key") for i, s in enumerate(cfg.sites)}


def test_extras_install_node_exporter_script_mapping_and_timer() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    extras = metrics.metrics_extras(cfg, "gcp-euw3", directory_of("prod"))
    assert extras.packages == ("prometheus-node-exporter",)
    files = {f.path: f for f in extras.files}
    assert set(files) == {
        "/etc/default/prometheus-node-exporter",
        metrics.NODE_EXPORTER_DROP_IN_PATH,
        "/usr/local/sbin/wg-mesh-metrics",
        "/etc/wg-mesh/peers.json",
        "/etc/systemd/system/wg-mesh-metrics.service",
        "/etc/systemd/system/wg-mesh-metrics.timer",
    }
    script = files["/usr/local/sbin/wg-mesh-metrics"]
    assert script.encoding == "gz+b64"
    assert metrics.unpack(script.content) == metrics.shipped_source()
    assert script.permissions == "0755"
    assert all(f.owner == "root:root" for f in extras.files)

    mapping = wgmetrics.parse_mapping(files["/etc/wg-mesh/peers.json"].content)
    assert mapping.site == "gcp-euw3" and mapping.interface == "wg0"
    assert mapping.peers == (
        wgmetrics.ExpectedPeer("aws-use1", "aws-use1-public-key", ("10.200.0.1/32", "10.10.0.0/16")),
        wgmetrics.ExpectedPeer("vps-fra", "vps-fra-public-key", ("10.200.0.3/32", "192.168.50.0/24")),
    )
    assert ('ARGS="--web.listen-address=:9100 --collector.textfile.directory=/var/lib/prometheus/node-exporter"') in (
        files["/etc/default/prometheus-node-exporter"].content
    )
    service = files["/etc/systemd/system/wg-mesh-metrics.service"].content
    assert (
        "ExecStart=/usr/bin/python3 /usr/local/sbin/wg-mesh-metrics --mapping /etc/wg-mesh/peers.json "
        "--out /var/lib/prometheus/node-exporter/wg_mesh.prom"
    ) in service
    assert "Type=oneshot" in service
    timer = files["/etc/systemd/system/wg-mesh-metrics.timer"].content
    assert "OnUnitActiveSec=15s" in timer and "WantedBy=timers.target" in timer
    # before wg-quick@wg0 (a gateway whose tunnel fails still exports its metrics), node-exporter's restart after it
    assert list(extras.setup) == [
        ("systemctl", "daemon-reload"),
        ("systemctl", "enable", "--now", "wg-mesh-metrics.timer"),
        ("systemctl", "start", "wg-mesh-metrics.service"),
    ]
    assert list(extras.commands) == [("systemctl", "restart", "prometheus-node-exporter.service")]


def test_exporter_port_comes_from_the_config() -> None:
    raw = read_raw(REPO / "Pulumi.dev.yaml")
    cfg = load_mesh({**raw, "exporter_port": 9200})
    extras = metrics.metrics_extras(cfg, "aws-use1", directory_of("dev"))
    defaults = next(f for f in extras.files if f.path == metrics.NODE_EXPORTER_DEFAULTS_PATH)
    assert "--web.listen-address=:9200 " in defaults.content


def test_user_data_with_metrics_keeps_the_private_key_only_in_wg0_conf(private_key: str) -> None:
    cfg = load(REPO / "Pulumi.dev.yaml")
    directory = directory_of("dev")
    conf = render.wg_quick_conf(interface_plan(cfg, "aws-use1", directory), private_key)
    doc = yaml.safe_load(render.cloud_config(conf, metrics.metrics_extras(cfg, "aws-use1", directory)))
    holders = [f["path"] for f in doc["write_files"] if private_key in f["content"]]
    assert holders == [render.WG_CONF_PATH]
    assert "prometheus-node-exporter" in doc["packages"]
    runcmd = doc["runcmd"]
    # The metrics timer before WireGuard: runcmd stops at its first failure, and a gateway whose tunnel does not
    # come up must still export wgmesh_interface_up 0; node-exporter's restart after it (a static site's binds wg0).
    assert runcmd.index(["systemctl", "enable", "--now", "wg-mesh-metrics.timer"]) < runcmd.index(
        ["systemctl", "enable", "--now", "wg-quick@wg0"]
    )
    assert runcmd.index(["systemctl", "enable", "--now", "wg-quick@wg0"]) < runcmd.index(
        ["systemctl", "restart", metrics.NODE_EXPORTER_SERVICE]
    )


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init not installed")
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_user_data_with_metrics_passes_cloud_init_schema(stack: str, tmp_path: Path, private_key: str) -> None:
    cfg = load(REPO / f"Pulumi.{stack}.yaml")
    directory = directory_of(stack)
    for site in cfg.sites:
        conf = render.wg_quick_conf(interface_plan(cfg, site.name, directory), private_key)
        path = tmp_path / f"{site.name}.yaml"
        path.write_text(render.cloud_config(conf, metrics.metrics_extras(cfg, site.name, directory)))
        result = subprocess.run(
            ["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("prometheus-node-exporter") is None, reason="prometheus-node-exporter not installed")
def test_paths_match_the_debian_node_exporter_package() -> None:
    """The textfile directory is the package's default, and its unit reads ARGS from the defaults file we write."""
    shown = subprocess.run(["prometheus-node-exporter", "--help"], capture_output=True, text=True, check=False)
    help_text = shown.stdout + shown.stderr
    default_dir = re.search(r'--collector\.textfile\.directory="([^"]+)"', help_text)
    assert default_dir is not None, help_text
    assert Path(metrics.TEXTFILE_PATH).parent == Path(default_dir.group(1))
    unit = Path("/lib/systemd/system/prometheus-node-exporter.service")
    if unit.exists():
        text = unit.read_text()
        assert f"EnvironmentFile={metrics.NODE_EXPORTER_DEFAULTS_PATH}" in text
        assert "$ARGS" in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_units_verify(tmp_path: Path) -> None:
    (tmp_path / "wg-mesh-metrics.service").write_text(metrics.service_unit())
    (tmp_path / "wg-mesh-metrics.timer").write_text(metrics.timer_unit())
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "wg-mesh-metrics.service", "wg-mesh-metrics.timer"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "wg-mesh-metrics" not in result.stderr  # no warnings about our units


# --- the packed script and the user-data budget -------------------------------------------------

AWS_USER_DATA_LIMIT = 16384  # bytes, before base64: EC2 refuses more


def test_committed_packed_script_is_the_source() -> None:
    """wg_mesh/gateway/wgmetrics.py.gz.b64 is what ships; regenerate it with WG_MESH_UPDATE_GOLDEN=1 after editing the
    script."""
    packed = REPO / "wg_mesh" / "gateway" / metrics.PACKED_SCRIPT
    if (
        os.environ.get("WG_MESH_UPDATE_GOLDEN") == "1"
        and metrics.unpack(packed.read_text()) != metrics.shipped_source()
    ):
        packed.write_text(metrics.pack(metrics.shipped_source()))
    assert metrics.unpack(metrics.packed_script()) == metrics.shipped_source(), (
        f"{packed} is stale: regenerate with WG_MESH_UPDATE_GOLDEN=1 and commit it"
    )
    assert all(len(line) <= 76 for line in metrics.packed_script().splitlines())


@pytest.mark.skipif(not Path("/usr/lib/python3/dist-packages/cloudinit").is_dir(), reason="cloud-init not installed")
def test_cloud_init_decodes_the_packed_script(tmp_path: Path) -> None:
    """cloud-init's own write_files decoder turns the user data entry back into the script."""
    cfg = load(REPO / "Pulumi.dev.yaml")
    user_data = render.cloud_config("[Interface]\n", metrics.metrics_extras(cfg, "aws-use1", directory_of("dev")))
    entry = next(f for f in yaml.safe_load(user_data)["write_files"] if f["path"] == metrics.SCRIPT_PATH)
    (tmp_path / "entry.json").write_text(json.dumps(entry))
    decode = (
        "import json, sys; from cloudinit.config import cc_write_files as w; "
        "e = json.load(open(sys.argv[1])); "
        "sys.stdout.buffer.write(w.extract_contents(e['content'].encode(), w.canonicalize_extraction(e['encoding'])))"
    )
    result = subprocess.run(
        ["/usr/bin/python3", "-c", decode, str(tmp_path / "entry.json")], capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == metrics.shipped_source()


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_user_data_with_metrics_fits_aws(stack: str, private_key: str) -> None:
    cfg = load(REPO / f"Pulumi.{stack}.yaml")
    directory = {
        s.name: PeerAddress(f"198.51.100.{i + 1}", wgkey.public_key(wgkey.generate_private_key()))
        for i, s in enumerate(cfg.sites)
    }
    for site in cfg.sites:
        conf = render.wg_quick_conf(interface_plan(cfg, site.name, directory), private_key)
        text = userdata.render_user_data(cfg, site.name, conf, directory)
        size = userdata.delivered_size("aws", text, exact=True)  # what EC2 counts: the gzip'd bytes
        assert size < AWS_USER_DATA_LIMIT * 3 // 4, (site.name, size)  # and room for more sites


def test_the_compacted_script_the_live_user_data_ships_runs(tmp_path: Path) -> None:
    """ship.compact drops docstrings: the live user data's wg-mesh-metrics crashed on `__doc__.splitlines()` at every
    run (booted prod: wg-mesh-metrics.service failed on every gateway, no metrics file). It must start. (Both delivery
    modes ship it compacted now: metrics.shipped_source.)"""
    script = tmp_path / "wg-mesh-metrics"
    script.write_text(metrics.shipped_source())
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "WireGuard peers and forwarding state" in result.stdout
