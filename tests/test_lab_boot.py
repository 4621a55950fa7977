"""`lab --boot`: gateways booted as systemd-nspawn containers (Debian trixie, cloud-init, the user data as NoCloud
seed). Pure tests of what a container is given and what the boot checks expect; as root with systemd-nspawn and
mmdebstrap, every stack file booted for real, and deliberately broken user data that must fail at the right check.

The image is built once per machine and cached (wg_mesh/lab/machines/image.py: CACHE_DIR); the first run builds it.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.lableft import lab_left
from tests.stacks import STACK_FILES
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.fabric.netns import missing_requirements, proc_start_time
from wg_mesh.lab.fabric.plan import LabFaults, LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.fabric.teardown import find_labs
from wg_mesh.lab.machines.image import REPO_MOUNT, missing_boot_tools
from wg_mesh.lab.machines.seed import GCE_SYSCTL_PATH, image_files, network_config, user_data_facts
from wg_mesh.lab.run import run_lab
from wg_mesh.plan import metrics, render
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent
# Pulumi.ha.yaml is dev's topology with HA pairs; a booted lab does not model the pair's cloud (lease, IMDS, EIP
# moves: the HA drill does, in namespaces), and its topology boots as dev. Left out to keep CI under 30 minutes.
BOOT_STACK_FILES = [p for p in STACK_FILES if p.name != "Pulumi.ha.yaml"]
PREFIX = "wgl0b0b"
BOOT_CHECKS = ["cloud_init", "units", "files", "packages", "metrics", "sysctl", "reboot"]
CANNOT_BOOT = missing_requirements() + missing_boot_tools()
needs_boot = pytest.mark.skipif(bool(CANNOT_BOOT), reason="--boot cannot run here: " + "; ".join(CANNOT_BOOT))
# Booted labs run beside the other lab tests, another boot included: each checks only what its own lab left
# (tests/lableft.py: its containers and systemd-nspawn processes by the lab's prefix), and the boot timings they
# report are figures, never assertions (`python -m bench boot` measures them on a quiet machine).
QUICK = LabOptions(handshake_timeout=4, iperf_seconds=1, bulk_bytes=4 * 1024 * 1024, reboot_timeout=30)


@functools.cache
def _user_data(stack: str) -> dict[str, str]:
    """Each site's user data of a stack, rendered once per test process (a render generates keys: ~2 CPU-s)."""
    cfg = load(REPO / f"Pulumi.{stack}.yaml")
    return {
        site: a.user_data for site, a in render_artifacts(cfg, plan_lab(cfg, PREFIX), LabKeys.generate(cfg)).items()
    }


def user_data(stack: str, site: str) -> str:
    return _user_data(stack)[site]


# --- what a booted gateway is given, and what is expected of it (pure) ------------------------------------


def test_network_config_gives_each_gateway_its_cloud_nic_address_and_mtu() -> None:
    plan = plan_lab(load(REPO / "Pulumi.prod.yaml"), PREFIX)
    aws, gcp, vps = (network_config(s)["ethernets"] for s in plan.sites)
    assert aws == {
        "ens5": {"addresses": ["10.10.0.10/24"], "mtu": 9001, "routes": [{"to": "0.0.0.0/0", "via": "10.10.0.1"}]}
    }
    assert list(gcp) == ["ens4"] and gcp["ens4"]["mtu"] == 1460
    router = str(plan.sites[2].transit_internet.ip)
    assert vps["ens3"] == {
        "addresses": [f"{plan.sites[2].public_ip}/32"],
        "mtu": 1500,
        "routes": [{"to": f"{router}/32"}, {"to": "0.0.0.0/0", "via": router}],
    }
    assert vps["lan0"]["addresses"] == ["192.168.50.1/24"]


def test_only_gcp_images_carry_the_gce_sysctl_file_which_turns_forwarding_off() -> None:
    plan = plan_lab(load(REPO / "Pulumi.prod.yaml"), PREFIX)
    files = {s.cloud: image_files(s) for s in plan.sites}
    assert files["aws"] == {} and files["static"] == {}
    gce = files["gcp"][GCE_SYSCTL_PATH]
    assert "net.ipv4.ip_forward = 0" in gce and "net.ipv4.conf.all.rp_filter = 1" in gce
    assert all(line.startswith(("#", "net.")) for line in gce.splitlines())  # per-namespace keys only
    assert str(GCE_SYSCTL_PATH) < render.SYSCTL_PATH  # ours sorts after it: the boot check proves it wins


def test_boot_checks_read_their_expectations_from_the_user_data() -> None:
    facts = user_data_facts(user_data("dev", "aws-use1"))
    assert facts.packages == (*render.PACKAGES, metrics.NODE_EXPORTER_PACKAGE)
    assert facts.apt_files == {render.APT_NO_RECOMMENDS_PATH: render.APT_NO_RECOMMENDS.encode()}
    assert facts.modes["/etc/wireguard"] == 0o700 and facts.modes[render.WG_CONF_PATH] == 0o600
    assert facts.modes[metrics.SCRIPT_PATH] == 0o755
    assert facts.units == (
        "wg-mesh-input.service",
        "wg-mesh-metrics.timer",
        "wg-mesh-metrics.service",
        "wg-quick@wg0",
        metrics.NODE_EXPORTER_SERVICE,
    )


def test_boot_without_its_tools_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from wg_mesh.lab.machines import image

    monkeypatch.setattr(image.shutil, "which", lambda tool, path=None: None)
    problems = missing_boot_tools()
    assert problems and "systemd-container" in problems[0] and "mmdebstrap" in problems[0]


# --- integration: booted for real ---------------------------------------------------------------------------


def run_mesh(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wg_mesh", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"},
    )


def assert_gone(prefix: str) -> None:
    assert lab_left(prefix) == []


@pytest.mark.integration
@needs_boot
@pytest.mark.parametrize("stack_file", BOOT_STACK_FILES, ids=[p.name for p in BOOT_STACK_FILES])
def test_boot_lab_passes_for_every_stack_file(stack_file: Path, tmp_path: Path) -> None:
    """A `delivery: live` stack (prod) boots as it is: the lab's clouds start first, each container finds the agent's
    EnvironmentFile in its root, and cloud-init runs the agent's --once and starts wg-mesh-agent.service (among the
    units checked); its compacted metrics script must run (wg-mesh-metrics.service, the metrics check)."""
    out = tmp_path / "report.json"
    result = run_mesh("lab", "--boot", "--file", str(stack_file), "--json", str(out))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    report = json.loads(out.read_text())
    cfg = load(stack_file)
    assert report["ok"] is True and report["mode"] == "boot"
    checks = report["checks"]
    if cfg.delivery == "live":
        assert all(g["units"]["wg-mesh-agent.service"] == "active" for g in checks["units"]["gateways"].values())
    assert list(checks) == ["handshakes", "ping", "path_mtu", "bulk_tcp", "throughput", "recovery", *BOOT_CHECKS]
    assert all(c["ok"] for c in checks.values())
    for name, gateway in checks["cloud_init"]["gateways"].items():
        assert gateway["status"] == "done" and gateway["errors"] == [] and gateway["recoverable_errors"] == {}, name
    # Issue 8's defects 2 and 3, on every gateway: the key's directory is 0700, no package came through Recommends.
    for gateway in checks["files"]["gateways"].values():
        assert gateway["/etc/wireguard"] == {"expected": "0o700", "actual": "0o700"}
    assert all(not g["through_recommends"] for g in checks["packages"]["gateways"].values())
    assert all(g["sources"] == [f"file:{REPO_MOUNT}"] for g in checks["packages"]["gateways"].values())
    assert checks["packages"]["route_out_of_the_lab"] is False
    # GCP's image turns forwarding off; the rendered 99-wg-mesh.conf wins.
    for site in cfg.sites:
        sysctl = checks["sysctl"]["gateways"][site.name]
        assert sysctl["gce_file"] is (site.cloud == "gcp") and sysctl["actual"] == render.SYSCTL_SETTINGS
    boot = report["boot"]
    assert set(boot["gateways"]) == {s.name for s in cfg.sites}
    assert all(g["boot_to_handshake_s"] and g["boot_to_cloud_init_done_s"] for g in boot["gateways"].values())
    reboot = boot["reboot"]
    assert reboot["cloud_init_reran"] == [] and reboot["wg_active_ms"] > 0 and reboot["traffic_outage_ms"] > 0
    assert_gone(report["prefix"])


@pytest.mark.integration
@needs_boot
def test_boot_tunnel_failure_is_a_cloud_init_error_and_shows_in_the_metrics() -> None:
    """Issue 8's defect 1: with a wg0.conf wg(8) refuses, cloud-init must not say `done` without errors, and the
    gateway's own metrics must show wg0 down (WgMeshInterfaceDown) while its metrics keep flowing."""
    report = run_lab(
        load(REPO / "Pulumi.dev.yaml"),
        "broken-port",
        options=QUICK,
        faults=LabFaults(broken_listen_port="gcp-euw3"),
        boot=True,
    )
    assert report.error is None and not report.ok
    cloud_init = report.check("cloud_init")
    assert cloud_init is not None and not cloud_init.ok
    gateways = cloud_init.data["gateways"]
    assert gateways["aws-use1"]["ok"] and not gateways["gcp-euw3"]["ok"]
    assert gateways["gcp-euw3"]["status"] == "error" and gateways["gcp-euw3"]["errors"]
    metrics_check = report.check("metrics")
    assert metrics_check is not None
    served = metrics_check.data["gateways"]
    assert served["gcp-euw3"]["file"] and served["gcp-euw3"]["interface_up"] == 0 and served["aws-use1"]["ok"]
    assert served["gcp-euw3"]["wg_unit_failed"]  # the metrics check stopped waiting for it: wg-quick@wg0 failed
    assert_gone(report.plan.prefix)


@pytest.mark.integration
@needs_boot
def test_interrupted_boot_lab_stops_its_containers() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "wg_mesh", "lab", "--boot", "--stack", "dev"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    deadline = time.monotonic() + 300

    def booting() -> tuple[str, dict[str, Any]] | None:
        for prefix, state in find_labs().items():
            if (
                state.owner_pid == proc.pid
                and len(state.containers) == 2
                and all("leader" in c for c in state.containers.values())
            ):
                return prefix, state.containers
        return None

    found = None
    while found is None and time.monotonic() < deadline and proc.poll() is None:
        found = booting()
        time.sleep(0.2)
    assert found is not None, "the lab never had two running containers"
    prefix, containers = found
    leaders = [(c["leader"], proc_start_time(c["leader"])) for c in containers.values()]
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted; the lab was removed" in stderr
    assert [pid for pid, start in leaders if start is not None and proc_start_time(pid) == start] == []
    assert_gone(prefix)


def test_progress_counts_every_boot_check() -> None:
    from wg_mesh.lab import run
    from wg_mesh.lab.checks import bootchecks

    assert run.BOOT_CHECK_STEPS == len(bootchecks.TITLES) == len(BOOT_CHECKS)
    assert list(bootchecks.TITLES) == BOOT_CHECKS


def test_every_live_gateway_installs_python3_nacl_and_the_package_source_follows_its_list(tmp_path: Path) -> None:
    """The agent verifies documents with Ubuntu's PyNaCl: every live gateway's user data installs it, so the booted
    lab's package source (keyed on the user data's package list) holds it, and a new list is a new source."""
    from wg_mesh.lab.machines import image as images
    from wg_mesh.plan import userdata

    for site in ("aws-use1", "gcp-euw3", "vps-fra"):
        assert userdata.VERIFY_PACKAGE in user_data_facts(user_data("prod", site)).packages, site
    image = images.Image(tmp_path / "root", None, 0)
    facts = user_data_facts(user_data("prod", "vps-fra"))
    without = [p for p in facts.packages if p != userdata.VERIFY_PACKAGE]
    assert images.repo_key(image, facts.packages, facts.apt_files) != images.repo_key(image, without, facts.apt_files)
