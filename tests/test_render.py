"""Renderers: wg0.conf and cloud-init, against golden files, cloud-init's schema and wireguard-tools."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.golden import assert_golden
from tests.stacks import STACK_FILES
from wg_mesh.config import MeshConfig
from wg_mesh.plan import render, wgkey
from wg_mesh.plan.topology import PeerAddress, interface_plan
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent
STACKS = STACK_FILES
needs_cloud_init = pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init not installed")
needs_wg = pytest.mark.skipif(shutil.which("wg") is None, reason="wireguard-tools not installed")


def fake_public_key(name: str) -> str:
    """A stable, well-formed public key per site (test data, never anyone's secret)."""
    return base64.b64encode(hashlib.sha256(name.encode()).digest()).decode()


def redacted(name: str) -> str:
    return f"<private key of {name}>"


def directory(cfg: MeshConfig) -> dict[str, PeerAddress]:
    return {s.name: PeerAddress(f"198.51.100.{i + 1}", fake_public_key(s.name)) for i, s in enumerate(cfg.sites)}


def rendered(cfg: MeshConfig, name: str, private_key: str | None = None) -> str:
    return render.wg_quick_conf(interface_plan(cfg, name, directory(cfg)), private_key or redacted(name))


def site_cases() -> list[tuple[Path, str]]:
    return [(stack, site.name) for stack in STACKS for site in load(stack).sites]


@pytest.mark.parametrize(("stack", "site"), site_cases(), ids=lambda v: getattr(v, "stem", v))
def test_wg_conf_and_cloud_init_match_golden(stack: Path, site: str) -> None:
    cfg = load(stack)
    conf = rendered(cfg, site)
    env = stack.stem.split(".", 1)[1]
    assert_golden(f"{env}/{site}.wg0.conf", conf)
    assert_golden(f"{env}/{site}.cloud-init.yaml", render.cloud_config(conf))


@needs_cloud_init
@pytest.mark.parametrize(("stack", "site"), site_cases(), ids=lambda v: getattr(v, "stem", v))
def test_cloud_init_passes_cloud_init_schema(stack: Path, site: str, tmp_path: Path) -> None:
    user_data = tmp_path / "user-data"
    user_data.write_text(render.cloud_config(rendered(load(stack), site)))
    result = subprocess.run(
        ["cloud-init", "schema", "--config-file", str(user_data)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Valid" in result.stdout


def test_cloud_init_writes_the_config_installs_and_starts_wireguard() -> None:
    cfg = load(REPO / "Pulumi.dev.yaml")
    conf = rendered(cfg, "gcp-euw3")
    text = render.cloud_config(conf)
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    files = {f["path"]: f for f in doc["write_files"]}
    assert files["/etc/wireguard/wg0.conf"]["content"] == conf
    assert files["/etc/wireguard/wg0.conf"]["permissions"] == "0600"
    assert files["/etc/wireguard/wg0.conf"]["owner"] == "root:root"
    sysctl = files[render.SYSCTL_PATH]["content"]
    assert "net.ipv4.ip_forward = 1" in sysctl
    assert "net.ipv4.conf.all.send_redirects = 0" in sysctl and "net.ipv4.conf.default.send_redirects = 0" in sysctl
    # GCE ships /etc/sysctl.d/60-gce-network-security.conf with ip_forward=0; Ubuntu links 99-sysctl.conf.
    assert Path(render.SYSCTL_PATH).name > "60-gce-network-security.conf"
    assert Path(render.SYSCTL_PATH).name > "99-sysctl.conf"
    assert "wireguard-tools" in doc["packages"]
    assert ["systemctl", "enable", "--now", "wg-quick@wg0"] in doc["runcmd"]
    assert doc["runcmd"].index(["sysctl", "-p", render.SYSCTL_PATH]) < doc["runcmd"].index(
        ["systemctl", "enable", "--now", "wg-quick@wg0"]
    )


def test_wg_conf_sections_peers_and_mtu() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    sections = render.parse_wg_quick_conf(rendered(cfg, "aws-use1", "KEY"))
    (iface_name, iface), *peers = sections
    assert iface_name == "Interface"
    assert iface["Address"] == ["10.200.0.1/24"]
    assert iface["ListenPort"] == ["51820"]
    assert iface["MTU"] == ["1400"]
    assert iface["PrivateKey"] == ["KEY"]
    assert [p["Endpoint"] for _, p in peers] == [["198.51.100.2:51820"], ["198.51.100.3:51820"]]
    assert [p["AllowedIPs"] for _, p in peers] == [["10.200.0.2/32, 10.100.0.0/16"], ["10.200.0.3/32, 192.168.50.0/24"]]
    assert [p["PublicKey"] for _, p in peers] == [[fake_public_key("gcp-euw3")], [fake_public_key("vps-fra")]]
    assert all(p["PersistentKeepalive"] == ["25"] for _, p in peers)


def test_forwarding_and_mss_clamp_in_both_directions_without_eth0() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    conf = rendered(cfg, "aws-use1")
    post_up = render.parse_wg_quick_conf(conf)[0][1]["PostUp"]
    post_down = render.parse_wg_quick_conf(conf)[0][1]["PostDown"]
    assert "sysctl -q -w net.ipv4.ip_forward=1" in post_up
    assert "sysctl -q -w net.ipv4.conf.all.send_redirects=0" in post_up
    assert render.NO_REDIRECTS_ON_EXISTING_INTERFACES in post_up
    assert "iptables -t filter -I FORWARD -i %i -j ACCEPT" in post_up
    clamps = [c for c in post_up if "TCPMSS" in c]
    # The constant clamp first (the upper bound, and what doctor reads), then the clamp to the route's MTU that
    # the path-MTU heal lowers per peer; each in both directions.
    assert [(c.split()[5], "--clamp-mss-to-pmtu" in c) for c in clamps] == [
        ("-o", False), ("-i", False), ("-o", True), ("-i", True),
    ]  # fmt: skip
    assert all("--set-mss 1360" in c and "--mss 1361:65535" in c for c in clamps[:2])
    assert not any("MASQUERADE" in c for c in post_up)
    assert "eth0" not in conf
    # Every rule added on up is removed on down.
    assert [c.replace(" -I ", " -D ").replace(" -A ", " -D ") for c in post_up if c.startswith("iptables")] == post_down


def test_masquerade_only_when_asked_on_the_default_route_interface() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    cfg = cfg.model_copy(update={"masquerade": True})
    iface = render.parse_wg_quick_conf(rendered(cfg, "gcp-euw3"))[0][1]
    (up,) = [c for c in iface["PostUp"] if "MASQUERADE" in c]
    (down,) = [c for c in iface["PostDown"] if "MASQUERADE" in c]
    assert up.startswith(render.DEFAULT_ROUTE_GUARD) and down.startswith(render.DEFAULT_ROUTE_GUARD)
    assert up.endswith('iptables -t nat -A POSTROUTING -o "$dev" -j MASQUERADE')
    assert down.endswith('iptables -t nat -D POSTROUTING -o "$dev" -j MASQUERADE')
    assert "eth0" not in up
    assert_golden("masquerade/gcp-euw3.wg0.conf", rendered(cfg, "gcp-euw3"))


@pytest.mark.parametrize(
    ("route", "device"),
    [
        ("default via 10.10.0.1 dev ens5 proto dhcp src 10.10.0.12 metric 100", "ens5"),
        ("default via 10.100.0.1 dev ens4 proto dhcp metric 100", "ens4"),
        ("default dev ppp0 scope link", "ppp0"),
        ("", ""),
    ],
)
def test_default_route_device_lookup(route: str, device: str) -> None:
    """The shell fragment in the MASQUERADE rule, run against `ip route` outputs of each cloud."""
    awk_program = render.DEFAULT_ROUTE_DEV.split("awk ", 1)[1].rstrip(")").strip("'")
    result = subprocess.run(["awk", awk_program], input=route + "\n", capture_output=True, text=True, check=True)
    assert result.stdout.strip() == device


def test_hook_commands_are_valid_bash() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml").model_copy(update={"masquerade": True})
    iface = render.parse_wg_quick_conf(rendered(cfg, "aws-use1"))[0][1]
    for command in iface["PostUp"] + iface["PostDown"]:
        result = subprocess.run(["bash", "-n", "-c", command.replace("%i", "wg0")], capture_output=True, text=True)
        assert result.returncode == 0, (command, result.stderr)
        assert "#" not in command  # wg-quick strips everything after '#'


@needs_wg
def test_wg_quick_accepts_the_rendered_config(tmp_path: Path) -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    conf = tmp_path / "wg0.conf"
    conf.write_text(rendered(cfg, "vps-fra", wgkey.generate_private_key()))
    conf.chmod(0o600)
    stripped = subprocess.run(["wg-quick", "strip", str(conf)], capture_output=True, text=True, check=True).stdout
    assert stripped.count("[Peer]") == 2
    assert "PostUp" not in stripped and "MTU" not in stripped


def test_parse_rejects_keys_outside_sections() -> None:
    with pytest.raises(ValueError, match="outside any section"):
        render.parse_wg_quick_conf("Address = 10.0.0.1/24\n")


def test_cloud_init_reports_an_error_when_the_tunnel_or_a_unit_is_not_running() -> None:
    """cloud-init judges runcmd (one shell script) by its last command: that command is the check that wg-quick and
    every unit the extras set up are active, so a gateway whose tunnel failed reports an error. Nothing after it."""
    extras = render.CloudInitExtras(commands=(("systemctl", "start", "x.service"),), units=("x.service", "y.timer"))
    runcmd = yaml.safe_load(render.cloud_config("conf", extras))["runcmd"]
    assert runcmd[-1] == render.units_active_check(["wg-quick@wg0", "x.service", "y.timer"])
    assert runcmd.index(["systemctl", "enable", "--now", "wg-quick@wg0"]) < runcmd.index(
        ["systemctl", "start", "x.service"]
    )


@pytest.mark.parametrize(("inactive", "exit_code"), [((), 0), (("y.timer",), 1), (("wg-quick@wg0",), 1)])
def test_units_active_check_fails_if_any_one_unit_is_not_active(
    inactive: tuple[str, ...], exit_code: int, tmp_path: Path
) -> None:
    """`systemctl is-active A B` exits 0 when any one unit is active: the check asks about each one."""
    fake = tmp_path / "systemctl"
    fake.write_text(f'#!/bin/sh\ncase " {" ".join(inactive)} " in *" $3 "*) exit 3;; esac\nexit 0\n')
    fake.chmod(0o755)
    line = render.units_active_check(["wg-quick@wg0", "x.service", "y.timer"])
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == exit_code
    assert [f"wg-mesh: {unit} is not active" for unit in inactive[:1]] == result.stderr.splitlines()


def test_wireguard_directory_is_0700_before_write_files_writes_the_key() -> None:
    """cloud-init's write_files creates a file 0644 and chmods it after writing (cloudinit/util.py write_file): the
    key is safe only in a directory others cannot enter. bootcmd runs before write_files, at every boot."""
    doc = yaml.safe_load(render.cloud_config("conf"))
    assert doc["bootcmd"] == [["install", "-d", "-m", "0700", str(Path(render.WG_CONF_PATH).parent)]]
    assert list(doc).index("bootcmd") < list(doc).index("write_files")
    assert not any(isinstance(c, list) and c[0] == "chmod" for c in doc["runcmd"])


def test_install_makes_an_existing_directory_0700_too(tmp_path: Path) -> None:
    """bootcmd's `install -d -m 0700` on a directory that exists already (a reboot, an image that ships it 0755)."""
    target = tmp_path / "wireguard"
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    argv = yaml.safe_load(render.cloud_config("conf"))["bootcmd"][0]
    subprocess.run([*argv[:-1], str(target)], check=True)
    assert target.stat().st_mode & 0o777 == 0o700


def test_packages_come_without_recommends() -> None:
    """write_files runs before cloud-init installs packages: the apt setting is in place for that install."""
    doc = yaml.safe_load(render.cloud_config("conf"))
    apt = next(f for f in doc["write_files"] if f["path"] == render.APT_NO_RECOMMENDS_PATH)
    assert apt["path"].startswith("/etc/apt/apt.conf.d/")
    assert 'APT::Install-Recommends "false";' in apt["content"].splitlines()
