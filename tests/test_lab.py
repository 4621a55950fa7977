"""The lab: its plan (pure, no root) and, as root, the mesh built for real in network namespaces.

Integration tests are marked `integration` and skip with the reason when this machine cannot run the lab
(not root, tools missing). Every integration test leaves nothing behind, even when it fails: the
`no_lab_left_behind` fixture removes any lab it started and the tests assert the cleanup themselves.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from ipaddress import IPv4Address
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.stacks import STACK_FILES
from wg_mesh.__main__ import main
from wg_mesh.config import MeshConfig
from wg_mesh.gateway import wgconf
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.fabric.netns import (
    STATE_DIR,
    LabState,
    list_netns,
    missing_requirements,
    new_state,
    pids_in_netns,
    proc_start_time,
)
from wg_mesh.lab.fabric.plan import (
    LAB_PROJECT,
    LAB_PUBLIC_RANGE,
    NETNS_PATTERN,
    LabFaults,
    LabKeys,
    LabPlanError,
    plan_lab,
    render_artifacts,
)
from wg_mesh.lab.fabric.teardown import find_labs, teardown
from wg_mesh.lab.machines import cloudinit
from wg_mesh.lab.machines.build import redact_keys
from wg_mesh.lab.run import run_lab
from wg_mesh.plan import inputpolicy, live, metrics, render, topology, userdata, wgkey
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent
PREFIX = "wgl0a1b"
IFNAMSIZ = 15

CANNOT_RUN = missing_requirements()
needs_lab = pytest.mark.skipif(bool(CANNOT_RUN), reason="the lab cannot run here: " + "; ".join(CANNOT_RUN))
QUICK = LabOptions(handshake_timeout=4, iperf_seconds=1, bulk_bytes=4 * 1024 * 1024)


def stack(name: str) -> MeshConfig:
    return load(REPO / f"Pulumi.{name}.yaml")


def user_data_stack(name: str) -> MeshConfig:
    """The stack with `delivery: user-data` (prod is live): the wg0.conf in the user data, what these tests read."""
    return stack(name).model_copy(update={"delivery": "user-data"})


def raw_mesh(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((REPO / f"Pulumi.{name}.yaml").read_text())["config"]["wg-mesh:mesh"]
    return raw


def run_mesh(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wg_mesh", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160", **(env or {})},
    )


# --- the plan (pure) -------------------------------------------------------------------------------------


def test_plan_lays_out_prod_like_the_clouds() -> None:
    cfg = stack("prod")
    plan = plan_lab(cfg, PREFIX)
    aws, gcp, vps = plan.sites
    assert (aws.cloud, gcp.cloud, vps.cloud) == ("aws", "gcp", "static")
    assert plan.tunnel_mtu == topology.tunnel_mtu(cfg) == 1400 and plan.mss == 1360

    # Cloud sites: VPC router .1, gateway .10, host .100 in the gateway subnet pulumi creates.
    assert [str(aws.router_ip), str(aws.gateway_ip), str(aws.host_ip)] == [
        "10.10.0.1/24",
        "10.10.0.10/24",
        "10.10.0.100/24",
    ]
    assert aws.gateway_ip in topology.gateway_subnet(cfg.sites[0].cidrs[0])
    assert [str(gcp.gateway_ip.ip), str(gcp.host_ip.ip)] == ["10.100.0.10", "10.100.0.100"]
    # A static site has no VPC: its gateway is the LAN router and holds its public address itself.
    assert vps.vpc_ns is None and vps.router_ip is None and vps.transit_site is None
    assert [str(vps.gateway_ip), str(vps.host_ip)] == ["192.168.50.1/24", "192.168.50.100/24"]

    # The hosts' route tables are the VPC route tables pulumi writes: remote ranges via the gateway.
    for site in plan.sites:
        assert list(site.host_routes) == topology.remote_ranges(cfg, site.name)
        assert site.host_ip.ip in cfg.site(site.name).cidrs[0]

    # MTUs as in the clouds: AWS VPC 9001 with a 1500 internet path; GCP 1460 throughout; the VPS 1500.
    assert [(s.nic_mtu, s.uplink_mtu) for s in plan.sites] == [(9001, 1500), (1460, 1460), (1500, 1500)]


def test_plan_names_and_addresses_cannot_collide() -> None:
    plan = plan_lab(stack("prod"), PREFIX)
    publics = [s.public_ip for s in plan.sites]
    assert len(set(publics)) == len(publics) and all(ip in LAB_PUBLIC_RANGE for ip in publics)
    transits = [s.transit_internet.network for s in plan.sites]
    assert len(set(transits)) == len(transits)
    assert all(not t.overlaps(c) for t in transits for s in stack("prod").sites for c in s.cidrs)
    assert len(set(plan.namespaces)) == len(plan.namespaces) == 1 + 3 + 3 + 2
    assert all(NETNS_PATTERN.match(ns) and ns.startswith(f"{PREFIX}-") for ns in plan.namespaces)
    assert all(len(s.internet_if) <= IFNAMSIZ for s in plan.sites)


def test_plan_rejects_what_it_cannot_lay_out() -> None:
    raw = raw_mesh("prod")
    raw["sites"][2]["cidrs"] = ["192.168.50.0/30"]
    with pytest.raises(LabPlanError, match=r"sites\[2\]\.cidrs\[0\]: 192\.168\.50\.0/30 is too small"):
        plan_lab(load_mesh(raw), PREFIX)
    with pytest.raises(LabPlanError, match=r"faults\.link_mtu: nowhere is not a site"):
        plan_lab(stack("dev"), PREFIX, LabFaults(link_mtu={"nowhere": 1400}))
    with pytest.raises(LabPlanError, match="prefix"):
        plan_lab(stack("dev"), "lab-1")


def test_small_cidrs_use_consecutive_addresses() -> None:
    raw = raw_mesh("prod")
    raw["sites"][2]["cidrs"] = ["192.168.50.0/29"]
    vps = plan_lab(load_mesh(raw), PREFIX).sites[2]
    assert [str(vps.gateway_ip), str(vps.host_ip)] == ["192.168.50.1/29", "192.168.50.3/29"]


def test_link_mtu_fault_changes_the_link_not_the_config() -> None:
    plan = plan_lab(stack("dev"), PREFIX, LabFaults(link_mtu={"aws-use1": 1420}))
    aws = plan.site("aws-use1")
    assert (aws.uplink_mtu, aws.declared_underlay_mtu, plan.tunnel_mtu) == (1420, 1500, 1400)


def test_artifacts_are_what_pulumi_up_renders_with_only_the_public_addresses_replaced() -> None:
    """The lab's user data is what the Pulumi components render (wg_mesh.component) for the lab's directory;
    rendered for the clouds' addresses instead, it differs only in the peers' Endpoint lines."""
    from wg_mesh import component  # the Pulumi side: importing it is enough to call its pure rendering steps

    cfg = user_data_stack("prod")
    plan = plan_lab(cfg, PREFIX)
    keys = LabKeys.generate(cfg)
    lab = render_artifacts(cfg, plan, keys)
    cloud_ips = {"aws-use1": "54.1.2.3", "gcp-euw3": "34.5.6.7", **topology.static_endpoints(cfg)}

    def pulumi_user_data(site: str, directory: dict[str, topology.PeerAddress]) -> str:
        conf = component._render_wg_conf(cfg, site, {"directory": directory, "private_key": keys.private[site]})
        rendered = component._render_user_data(cfg, site, {"wg_conf": conf, "directory": directory})
        # The lab leaves out only the steps that need the cloud's API (AWS's readiness mark), nothing else.
        assert rendered == userdata.render_user_data(cfg, site, conf, directory, cloud_steps=True)
        return userdata.render_user_data(cfg, site, conf, directory, cloud_steps=False)

    for site in plan.sites:
        assert lab[site.name].user_data == pulumi_user_data(site.name, plan.directory(keys.public))
        cloud = pulumi_user_data(
            site.name, {n: topology.PeerAddress(ip, keys.public[n]) for n, ip in cloud_ips.items()}
        )
        lines = zip(cloud.splitlines(), lab[site.name].user_data.splitlines(), strict=True)
        changed = [(a.strip(), b.strip()) for a, b in lines if a != b]
        peers = [p for p in plan.sites if p is not site]
        endpoints = [(a, b) for a, b in changed if a.startswith("Endpoint = ")]
        assert endpoints == [
            (f"Endpoint = {cloud_ips[p.name]}:51820", f"Endpoint = {p.public_ip}:51820") for p in peers
        ]
        # A static site also filters its WireGuard port to the peers' public /32s (rendered in sorted order).
        filters = [(a, b) for a, b in changed if not a.startswith("Endpoint = ")]

        def unaddressed(line: str, ips: list[str]) -> str:
            for address in ips:
                line = line.replace(f" -s {address}/32 ", " -s PEER ")
            return line

        cloud_peer_ips, lab_peer_ips = [cloud_ips[p.name] for p in peers], [str(p.public_ip) for p in peers]
        assert len(filters) == (2 * len(peers) if site.cloud == "static" else 0)
        assert all(
            " INPUT " in a and unaddressed(a, cloud_peer_ips) == unaddressed(b, lab_peer_ips) for a, b in filters
        )


def test_live_artifacts_are_what_pulumi_up_renders_and_hold_no_peer_and_no_key() -> None:
    """delivery: live: the user data is the component's (wg_mesh.component: render_live_user_data for the site's
    stores), named for the lab's project and stack; neither a key nor a peer's address is in it."""
    cfg = stack("prod")
    assert cfg.delivery == "live"
    plan = plan_lab(cfg, PREFIX)
    keys = LabKeys.generate(cfg)
    lab = render_artifacts(cfg, plan, keys)
    for site in plan.sites:
        source = live.agent_source(cfg.site(site.name), LAB_PROJECT, PREFIX)
        trust = live.trust(cfg, cfg.site(site.name), LAB_PROJECT, PREFIX, keys.verify_key)
        assert lab[site.name].trust == trust
        rendered = userdata.render_live_user_data(cfg, site.name, source, trust=trust, cloud_steps=False)
        assert lab[site.name].user_data == rendered
        assert base64.b64encode(keys.signing).decode() not in rendered and keys.signing.hex() not in rendered
        assert not any(key in lab[site.name].user_data for key in (*keys.private.values(), *keys.public.values()))
        assert not any(str(p.public_ip) in lab[site.name].user_data for p in plan.sites)


def test_faults_that_edit_wg0_conf_are_refused_in_live_mode() -> None:
    with pytest.raises(LabPlanError, match="delivery: user-data only"):
        plan_lab(stack("prod"), PREFIX, LabFaults(wrong_key=("aws-use1", "gcp-euw3")))


def test_wrong_key_fault_breaks_one_gateway_only() -> None:
    cfg = user_data_stack("prod")
    plan = plan_lab(cfg, PREFIX, LabFaults(wrong_key=("aws-use1", "gcp-euw3")))
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    aws_peers = {p.name: p.public_key for p in artifacts["aws-use1"].interface.peers}
    assert wgkey.is_public_key(aws_peers["gcp-euw3"]) and aws_peers["gcp-euw3"] != keys.public["gcp-euw3"]
    assert aws_peers["vps-fra"] == keys.public["vps-fra"]
    vps_peers = {p.name: p.public_key for p in artifacts["vps-fra"].interface.peers}
    assert vps_peers == {"aws-use1": keys.public["aws-use1"], "gcp-euw3": keys.public["gcp-euw3"]}


def test_lab_keys_are_fresh_and_never_in_reprs() -> None:
    cfg = stack("dev")
    keys, again = LabKeys.generate(cfg), LabKeys.generate(cfg)
    assert keys.public != again.public
    artifacts = render_artifacts(cfg, plan_lab(cfg, PREFIX), keys)
    for private in keys.private.values():
        assert wgkey.public_key(private) in keys.public.values()
        assert private not in repr(keys) and private not in repr(artifacts)
        assert private in "".join(a.user_data for a in artifacts.values())


def test_wg_quick_output_is_redacted_before_it_is_logged() -> None:
    key = wgkey.generate_private_key()
    line = f"Key is not the correct length or format: `{key}'"
    assert key not in redact_keys(line) and "(key redacted)" in redact_keys(line)
    assert redact_keys("[#] ip link set mtu 1400 up dev wg0") == "[#] ip link set mtu 1400 up dev wg0"


# --- what the lab does with a cloud-config (pure) ----------------------------------------------------------


def test_cloud_config_is_read_into_files_sysctl_and_wg_quick() -> None:
    cfg = stack("dev")
    keys = LabKeys.generate(cfg)
    user_data = render_artifacts(cfg, plan_lab(cfg, PREFIX), keys)["aws-use1"].user_data
    setup = cloudinit.interpret(user_data)
    files = {str(f.path): f for f in setup.files}
    assert list(files)[:2] == [render.WG_CONF_PATH, render.SYSCTL_PATH]
    assert oct(files[render.WG_CONF_PATH].mode) == "0o600"
    assert f"PrivateKey = {keys.private['aws-use1']}" in files[render.WG_CONF_PATH].text
    # The metrics extras travel gzip+base64; the lab writes them decoded, like cloud-init.
    assert files[metrics.SCRIPT_PATH].text == metrics.shipped_source() and files[metrics.SCRIPT_PATH].mode == 0o755
    assert setup.sysctl == tuple(render.SYSCTL_SETTINGS.items())
    assert setup.interfaces == ("wg0",)
    units = ["wg-quick@wg0", inputpolicy.UNIT_NAME, "wg-mesh-metrics.timer", metrics.NODE_EXPORTER_SERVICE]
    # The INPUT policy is not loaded in the namespace lab (tests/test_inputpolicy_netns.py loads it; --boot runs it).
    not_run = [f"systemctl enable --now {inputpolicy.UNIT_NAME}"] + [" ".join(c) for c in metrics_commands(cfg, keys)]
    not_run += [" ".join(render.units_active_check(units).split())]
    assert setup.notes == tuple(f"runcmd not run in the lab: {c}" for c in not_run)
    assert setup.modes == ((PurePosixPath("/etc/wireguard"), 0o700),)
    assert "wireguard-tools" in setup.packages


def metrics_commands(cfg: MeshConfig, keys: LabKeys) -> list[tuple[str, ...]]:
    extras = metrics.metrics_extras(cfg, "aws-use1", plan_lab(cfg, PREFIX).directory(keys.public))
    return [tuple(c) for c in (*extras.setup, *extras.commands)]


def _user_data(doc: dict[str, Any]) -> str:
    return "#cloud-config\n" + yaml.safe_dump(doc)


def test_write_files_encodings_are_decoded() -> None:
    packed = base64.b64encode(gzip.compress(b"hello\n")).decode()
    setup = cloudinit.interpret(
        _user_data(
            {
                "write_files": [
                    {"path": "/etc/a", "encoding": "b64", "content": base64.b64encode(b"plain\n").decode()},
                    {"path": "/usr/local/sbin/b", "encoding": "gz+b64", "content": packed, "permissions": "0755"},
                ]
            }
        )
    )
    assert [(str(f.path), f.content, f.mode) for f in setup.files] == [
        ("/etc/a", b"plain\n", 0o644),
        ("/usr/local/sbin/b", b"hello\n", 0o755),
    ]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"write_files": [{"path": "/usr/bin/x", "content": ""}]}, "can only place files under /etc, /usr/local"),
        ({"write_files": [{"path": "/var/log/x", "content": ""}]}, "can only place files under /etc, /usr/local"),
        ({"write_files": [{"path": "/etc/../usr/x", "content": ""}]}, "can only place files under /etc, /usr/local"),
        ({"write_files": [{"path": "/etc/x", "append": True, "content": ""}]}, "does not support append"),
        ({"write_files": [{"path": "/etc/x", "encoding": "rot13", "content": ""}]}, "unknown encoding 'rot13'"),
        ({"write_files": [{"path": "/etc/x", "encoding": "gz+b64", "content": "aGk="}]}, "not valid gz\\+b64"),
        (
            {"write_files": [{"path": "/etc/sysctl.d/10-x.conf", "content": "kernel.pid_max = 9\n"}]}
            | {"runcmd": [["sysctl", "--system"]]},
            "kernel.pid_max is not per network namespace",
        ),
    ],
)
def test_cloud_config_the_lab_cannot_reproduce_is_refused(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(cloudinit.UserDataError, match=message):
        cloudinit.interpret(_user_data(doc))


def test_other_runcmds_are_reported_not_dropped() -> None:
    setup = cloudinit.interpret(_user_data({"runcmd": [["systemctl", "restart", "node-exporter"]]}))
    assert setup.notes == ("runcmd not run in the lab: systemctl restart node-exporter",)


# --- the CLI without building anything -----------------------------------------------------------------------


@pytest.fixture
def nothing_may_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything starts a process (every namespace, veth, wg-quick goes through one) or
    writes a lab state file (written before anything is built)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the lab started {args[0] if args else kwargs.get('args')}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(LabState, "save", refuse)


def broken_stack(tmp_path: Path) -> Path:
    raw = raw_mesh("prod")
    raw["sites"][1]["overlay_ip"] = "10.201.0.2"
    raw["listen_port"] = 0
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
    return path


def test_invalid_config_exits_1_with_the_errors_of_validate(tmp_path: Path) -> None:
    path = broken_stack(tmp_path)
    result = run_mesh("lab", "--file", str(path))
    validate = run_mesh("validate", "--file", str(path))
    assert result.returncode == 1
    assert result.stderr == validate.stderr and "sites[1].overlay_ip: 10.201.0.2 is outside" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.usefixtures("nothing_may_start")
def test_invalid_config_builds_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--file", str(broken_stack(tmp_path))]) == 1
    assert "listen_port: 0 is below the minimum 1" in capsys.readouterr().err


def test_lab_needs_a_stack() -> None:
    result = run_mesh("lab")
    assert (result.returncode, result.stderr) == (2, "lab: --stack NAME or --file PATH is required\n")


@pytest.mark.usefixtures("nothing_may_start")
def test_missing_tools_exit_2_with_a_clear_message_and_build_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # the lab adds the sbin directories: ip and iptables stay
    assert main(["lab", "--stack", "dev"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("lab: ") and "missing tools: wg, wg-quick, wireguard-go, iperf3, ping, nstat, nsenter (" in err
    )


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_not_root_exits_2_with_a_clear_message() -> None:
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": "/tmp"}
    for args in (["--stack", "dev"], ["down"]):
        cmd = [*as_nobody, sys.executable, "-m", "wg_mesh", "lab", *args]
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, check=False, timeout=60)
        if result.returncode == 126:
            pytest.skip(f"nobody cannot run {sys.executable} here")
        assert result.returncode == 2, result.stderr
        assert "lab: needs root" in result.stderr and "Traceback" not in result.stderr


# --- integration: the mesh for real ---------------------------------------------------------------------------


@pytest.fixture
def no_lab_left_behind() -> Iterator[None]:
    """Remove whatever lab a test started and left (a failing test must not leak namespaces): the labs of `lab`
    processes this test process launched (LabState.launched_by) once they ended, and labs it runs itself. Never
    another test's: a kept lab, or a crashed one, looks the same whoever started it, and pytest-xdist's groups cannot
    keep the tests that clean up apart from the others (pytest 9.2 ignores them: pytest-xdist#1386)."""
    me = os.getpid()
    before = set(find_labs())
    yield
    for prefix, state in find_labs().items():
        if prefix not in before and ((state.launched_by(me) and not state.owner_alive()) or state.owner_pid == me):
            teardown(state, lambda line: None)


@pytest.fixture
def no_own_lab_left_behind() -> Iterator[None]:
    """Remove a lab this test started in its own process (`run_lab`) and left: it touches no other lab, so the tests
    using it need not know who launched a lab (no_lab_left_behind, for labs of `lab` subprocesses, does)."""
    before = set(find_labs())
    yield
    for prefix, state in find_labs().items():
        if prefix not in before and state.owner_pid == os.getpid():
            teardown(state, lambda line: None)


def assert_gone(prefix: str, pids: Sequence[tuple[int, int | None]] = ()) -> None:
    assert [n for n in list_netns() if n.startswith(prefix + "-")] == []
    assert not (STATE_DIR / f"{prefix}.json").exists()
    assert [pid for pid, start in pids if start is not None and proc_start_time(pid) == start] == []


def lab_processes(prefix: str) -> list[tuple[int, int | None]]:
    """(pid, start time) of every process living in the lab's namespaces."""
    return [(pid, proc_start_time(pid)) for n in list_netns() if n.startswith(prefix + "-") for pid in pids_in_netns(n)]


@pytest.mark.integration
@needs_lab
@pytest.mark.parametrize("stack_file", STACK_FILES, ids=[p.name for p in STACK_FILES])
@pytest.mark.usefixtures("no_lab_left_behind")
def test_lab_passes_for_every_stack_file(stack_file: Path, tmp_path: Path) -> None:
    cfg = load(stack_file)
    out = tmp_path / "report.json"
    result = run_mesh("lab", "--file", str(stack_file), "--json", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(out.read_text())
    n = len(cfg.sites)

    assert report["ok"] is True and report["error"] is None
    assert [s["name"] for s in report["sites"]] == [s.name for s in cfg.sites]
    assert all(IPv4Address(s["public_ip"]) in LAB_PUBLIC_RANGE for s in report["sites"])
    checks = report["checks"]
    assert list(checks) == ["handshakes", "ping", "path_mtu", "bulk_tcp", "throughput", "recovery"]
    assert all(check["ok"] for check in checks.values())
    assert len(checks["handshakes"]["pairs"]) == n * (n - 1) // 2

    pairs = report["pairs"]
    assert sorted((p["from"], p["to"]) for p in pairs) == sorted(
        (a.name, b.name) for a in cfg.sites for b in cfg.sites if a is not b
    )
    assert all(p["ok"] and p["rtt_ms"] > 0 for p in pairs)

    mtu = report["mtu"]
    assert mtu["computed"] == topology.tunnel_mtu(cfg)
    assert mtu["max_unfragmented"] == mtu["computed"] - 28
    assert all(
        p["max_payload"] == mtu["computed"] - 28 and p["over_refused_cleanly"] for p in checks["path_mtu"]["probes"]
    )
    assert all(v == 0 for counters in mtu["fragmentation"].values() for v in counters.values())

    for transfer in checks["bulk_tcp"]["transfers"]:
        assert transfer["verified"] and max(transfer["mss_sender"], transfer["mss_receiver"]) <= mtu["clamped_mss"]
    assert {t["to"] for t in checks["bulk_tcp"]["transfers"]} == {s.name for s in cfg.sites} - {
        checks["bulk_tcp"]["transfers"][0]["from"]
    }

    assert set(report["throughput_mbps"]) == {"host_to_host", "gateway_tunnel", "underlay"}
    assert all(v > 0 for v in report["throughput_mbps"].values())
    assert report["recovery_ms"] > 0 and checks["recovery"]["restart_ms"] > 0
    assert report["duration_s"] > 0
    assert_gone(report["prefix"])


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_lab_left_behind")
def test_wrong_peer_key_fails_the_handshake_check() -> None:
    cfg = user_data_stack("prod")
    report = run_lab(cfg, "wrong-key", options=QUICK, faults=LabFaults(wrong_key=("aws-use1", "gcp-euw3")))
    assert not report.ok and report.error is None
    handshakes = report.check("handshakes")
    assert handshakes is not None and not handshakes.ok
    assert {(p["a"], p["b"]): p["ok"] for p in handshakes.data["pairs"]} == {
        ("aws-use1", "gcp-euw3"): False,
        ("aws-use1", "vps-fra"): True,
        ("gcp-euw3", "vps-fra"): True,
    }
    failed = {(p["from"], p["to"]) for p in report.to_json()["pairs"] if not p["ok"]}
    assert failed == {("aws-use1", "gcp-euw3"), ("gcp-euw3", "aws-use1")}
    assert_gone(report.plan.prefix)


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_lab_left_behind")
def test_underlay_smaller_than_declared_is_caught_by_the_fragmentation_counters() -> None:
    """The config says the AWS internet path carries 1500 bytes; the lab's really carries 1420. Tunnel
    packets (1400 + 60) then get fragmented: the path-MTU check must fail on the gateways' counters."""
    report = run_lab(stack("dev"), "mtu-lies", options=QUICK, faults=LabFaults(link_mtu={"aws-use1": 1420}))
    assert not report.ok and report.error is None
    path_mtu = report.check("path_mtu")
    assert path_mtu is not None and not path_mtu.ok
    fragments = path_mtu.data["fragmentation"]
    assert fragments["aws-use1"]["IpFragCreates"] > 0 and fragments["gcp-euw3"]["IpReasmReqds"] > 0
    caught_by = {c.key for c in report.checks if not c.ok}
    assert caught_by == {"path_mtu"}, "connectivity itself still works: only the MTU check can catch this"
    assert_gone(report.plan.prefix)


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_lab_left_behind")
def test_missing_mss_clamp_fails_the_bulk_tcp_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendered without the TCPMSS rules, TCP still gets through (path MTU discovery), but with segments the
    tunnel cannot carry unfragmented at first: check 4 must notice the unclamped MSS."""
    rules = wgconf.forwarding_rules  # where wg_quick_conf looks it up (render only re-exports it)
    monkeypatch.setattr(wgconf, "forwarding_rules", lambda plan: [r for r in rules(plan) if r.table != "mangle"])
    report = run_lab(stack("dev"), "no-clamp", options=QUICK)
    bulk = report.check("bulk_tcp")
    assert bulk is not None and not bulk.ok
    (transfer,) = bulk.data["transfers"]
    assert transfer["verified"] and transfer["mss_sender"] > report.plan.mss
    assert_gone(report.plan.prefix)


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_lab_left_behind")
def test_kept_lab_runs_until_lab_down_removes_it(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = run_mesh("lab", "--stack", "dev", "--keep", "--json", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    prefix = json.loads(out.read_text())["prefix"]
    state = LabState.load(STATE_DIR / f"{prefix}.json")
    assert sorted(state.namespaces) == sorted(n for n in list_netns() if n.startswith(prefix + "-"))
    processes = lab_processes(prefix)
    commands = {Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] for pid, _ in processes}
    assert b"wireguard-go" in commands, commands  # the tunnels are still up
    gateway = next(ns for ns in state.holders if ns.endswith("gw-aws-use1"))
    show = subprocess.run(
        ["nsenter", f"--target={state.holders[gateway]}", "--mount", "--net", "--", "wg", "show", "wg0", "peers"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(show.stdout.split()) == 1

    down = run_mesh("lab", "down", prefix)
    assert down.returncode == 0, down.stderr
    assert prefix in down.stdout
    assert_gone(prefix, processes)


def wait_for(condition: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met")


def start_lab_in_background() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "wg_mesh", "lab", "--stack", "prod"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )

    def wireguard_running() -> str | None:
        for prefix, state in find_labs().items():
            if state.owner_pid == proc.pid and len(state.interfaces) == 3:
                return prefix
        return None

    return proc, wait_for(wireguard_running)


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_lab_left_behind")
def test_interrupted_lab_tears_itself_down() -> None:
    proc, prefix = start_lab_in_background()
    processes = lab_processes(prefix)
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted; the lab was removed" in stderr
    assert_gone(prefix, processes)


@pytest.mark.integration
@needs_lab
@pytest.mark.usefixtures("no_lab_left_behind")
def test_lab_down_removes_a_crashed_lab() -> None:
    proc, prefix = start_lab_in_background()
    processes = lab_processes(prefix)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert [n for n in list_netns() if n.startswith(prefix + "-")], "a crashed lab leaves its namespaces"
    down = run_mesh("lab", "down", prefix)
    assert down.returncode == 0, down.stderr
    assert_gone(prefix, processes)


def test_a_lab_records_who_launched_it_and_only_that_process_counts() -> None:
    """no_lab_left_behind removes ended labs that its own process launched: the state file's launcher (pid and
    start time, as for the owner) tells them apart from another test's kept or crashed lab."""
    state = new_state("wgl0c05", "test")
    parent, me = os.getppid(), os.getpid()
    assert (state.owner_pid, state.launcher_pid) == (me, parent) and state.launched_by(parent)
    assert not state.launched_by(me)
    other = LabState("wgl0c05", 0, 0, launcher_pid=parent, launcher_start=state.launcher_start + 1)  # a reused pid
    assert not other.launched_by(parent)
    assert not LabState("wgl0c05", 0, 0).launched_by(0)  # written by hand, or by a wg-mesh before launchers


def test_lab_down_needs_names_or_all() -> None:
    result = run_mesh("lab", "down")
    if os.geteuid() != 0:
        assert result.returncode == 2 and "needs root" in result.stderr
        return
    assert result.returncode == 2 and "name the labs to remove" in result.stderr


@pytest.mark.integration
@needs_lab
# its labs look ended (owner_pid 0) and no process launched them: no test's cleanup removes them
def test_lab_down_touches_only_what_a_lab_recorded() -> None:
    """Issue 9: `lab down` removed every namespace named like a lab's, and every kept lab. Now it removes the
    named lab, and of it only the namespaces (and processes) its state file records."""
    recorded, unrecorded_of_it, stray, other = "wgl0c01-gw-x", "wgl0c01-gw-y", "wgl0c02-gw-x", "wgl0c03-gw-x"
    made = [recorded, unrecorded_of_it, stray, other]
    assert not set(made) & set(list_netns()), "test namespaces already exist"
    states = [LabState(prefix="wgl0c01", owner_pid=0, owner_start=0, namespaces=[recorded])]
    states.append(LabState(prefix="wgl0c03", owner_pid=0, owner_start=0, namespaces=[other]))
    garbled = STATE_DIR / "wgl0c04.json"
    try:
        for netns in made:
            subprocess.run(["ip", "netns", "add", netns], check=True)
        for state in states:
            state.save()
        down = run_mesh("lab", "down", "wgl0c01")
        assert down.returncode == 0, down.stderr
        left = set(list_netns())
        assert recorded not in left
        assert {unrecorded_of_it, stray, other} <= left, "lab down removed what no lab (or another lab) recorded"
        assert not states[0].path.exists() and states[1].path.exists()
        missing = run_mesh("lab", "down", "wgl0c02")  # namespaces named like a lab, but no lab recorded them
        assert missing.returncode == 1 and "no lab wgl0c02 recorded" in missing.stderr
        assert stray in list_netns()
        garbled.write_text('{"prefix": "wgl0c04", "owner_pid": 1, "owner_start": 1, "from_the_future": 1}')
        unreadable = run_mesh("lab", "down", "wgl0c04")  # not proof of a dead lab: it may be running
        assert unreadable.returncode == 1 and "cannot be read" in unreadable.stderr and garbled.exists()
    finally:
        garbled.unlink(missing_ok=True)
        for netns in made:
            if netns in list_netns():
                subprocess.run(["ip", "netns", "delete", netns], check=False)
        for state in states:
            state.path.unlink(missing_ok=True)


def test_a_lab_run_or_drill_outcome_writes_its_report_and_says_how_it_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """wg_mesh.lab.cli's end of `lab` and `lab --drill`: the report as JSON when --json asks, then 0 if it passed,
    1 if it failed or its JSON cannot be written."""
    from types import SimpleNamespace

    from wg_mesh.lab import cli as lab_cli

    passed = SimpleNamespace(ok=True, to_json=lambda: {"ok": True})
    failed = SimpleNamespace(ok=False, to_json=lambda: {"ok": False})
    assert lab_cli._outcome(passed, None) == lab_cli.EXIT_OK
    assert lab_cli._outcome(failed, tmp_path / "r.json") == lab_cli.EXIT_FAILED
    assert json.loads((tmp_path / "r.json").read_text()) == {"ok": False}
    assert lab_cli._outcome(passed, tmp_path / "missing" / "r.json") == lab_cli.EXIT_FAILED
    assert "cannot write" in capsys.readouterr().err


def test_no_test_relies_on_xdist_grouping() -> None:
    """pytest 9.2 ignores pytest-xdist's groups without a word (pytest-xdist#1386: `loadgroup` still rewrites the old
    `_nodeid`), so a test that needs to be kept apart from another would silently not be: write it so that any two lab
    tests may overlap (their own prefixes, cleanup of what they launched) instead of marking it."""
    mark = "mark.xdist" + "_group("
    found = [f"{p.relative_to(REPO)}" for p in sorted((REPO / "tests").glob("*.py")) if mark in p.read_text()]
    assert found == [], f"{found}: {mark} marks are ignored under pytest 9.2 (see docs/contributing/tests.md)"
