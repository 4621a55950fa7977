"""What the rendered gateway config does for the host's safety: sysctl precedence over GCE's file, no tunnel
traffic to link-local addresses, and (static sites) the WireGuard port filtered to the peers' addresses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_render import directory, rendered
from wg_mesh.config import StaticSite
from wg_mesh.lab.machines.cloudinit import parse_sysctl
from wg_mesh.plan import render
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent

# The settings of GoogleCloudPlatform/guest-configs src/etc/sysctl.d/60-gce-network-security.conf that a
# forwarding gateway cares about (the file as shipped in GCE images, e.g. Ubuntu's google-guest-agent setup).
GCE_NETWORK_SECURITY = """
net.ipv4.conf.all.accept_redirects=0
net.ipv4.conf.default.accept_redirects=0
net.ipv4.ip_forward=0
net.ipv4.conf.all.send_redirects=0
net.ipv4.conf.default.send_redirects=0
net.ipv4.conf.all.rp_filter=1
net.ipv4.conf.default.rp_filter=1
"""


def sysctl_system(files: dict[str, str]) -> dict[str, str]:
    """What `sysctl --system` leaves set: files applied by basename in lexicographic order, last value wins
    (procps sysctl(8), systemd sysctl.d(5))."""
    settings: dict[str, str] = {}
    for name in sorted(files):
        settings.update(parse_sysctl(files[name]))
    return settings


def effective_rp_filter(settings: dict[str, str], interface_value: str) -> int:
    """The kernel validates with max(conf/all/rp_filter, conf/IFACE/rp_filter) (Documentation/networking/ip-sysctl)."""
    return max(int(settings["net.ipv4.conf.all.rp_filter"]), int(interface_value))


def test_our_sysctl_file_wins_over_gces_network_security_file() -> None:
    files = {
        "60-gce-network-security.conf": GCE_NETWORK_SECURITY,
        "99-sysctl.conf": "",  # Ubuntu's link to /etc/sysctl.conf (everything commented out)
        Path(render.SYSCTL_PATH).name: render.sysctl_conf(),
    }
    final = sysctl_system(files)
    assert final["net.ipv4.ip_forward"] == "1"
    assert final["net.ipv4.conf.all.rp_filter"] == final["net.ipv4.conf.default.rp_filter"] == "2"
    assert final["net.ipv4.conf.all.send_redirects"] == final["net.ipv4.conf.default.send_redirects"] == "0"
    # ens4 exists before our file is applied and may keep GCE's strict 1: `all` = 2 still makes it loose.
    assert effective_rp_filter(final, "1") == 2
    # Without our file, GCE's strict mode stays: the case this guards against.
    without = sysctl_system({k: v for k, v in files.items() if k != Path(render.SYSCTL_PATH).name})
    assert effective_rp_filter(without, "1") == 1 and without["net.ipv4.ip_forward"] == "0"


def test_loose_rp_filter_is_also_set_when_wg0_comes_up() -> None:
    post_up = render.parse_wg_quick_conf(rendered(load(REPO / "Pulumi.dev.yaml"), "gcp-euw3"))[0][1]["PostUp"]
    assert "sysctl -q -w net.ipv4.conf.all.rp_filter=2" in post_up
    assert "sysctl -q -w net.ipv4.conf.default.rp_filter=2" in post_up


@pytest.mark.parametrize("site", ["aws-use1", "gcp-euw3", "vps-fra"])
def test_nothing_from_the_tunnel_reaches_link_local_addresses(site: str) -> None:
    iface = render.parse_wg_quick_conf(rendered(load(REPO / "Pulumi.prod.yaml"), site))[0][1]
    drop = "iptables -t raw -I PREROUTING -i %i -d 169.254.0.0/16 -j DROP"
    assert drop in iface["PostUp"]
    assert drop.replace(" -I ", " -D ") in iface["PostDown"]
    # Only packets coming in on wg0: the gateway's own requests to its metadata server are untouched.
    assert not any("169.254" in c and "-i %i" not in c for c in iface["PostUp"])


def test_static_sites_admit_wireguard_only_from_their_peers() -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    peers = {f"{address.public_ip}/32" for name, address in directory(cfg).items() if name != "vps-fra"}
    post_up = render.parse_wg_quick_conf(rendered(cfg, "vps-fra"))[0][1]["PostUp"]
    accepts = [c for c in post_up if c.startswith("iptables -t filter -I INPUT") and c.endswith("-j ACCEPT")]
    assert {c.split(" -s ")[1].split()[0] for c in accepts} == peers
    assert all(f"-p udp --dport {cfg.listen_port} -s " in c for c in accepts)
    drop = f"iptables -t filter -I INPUT -p udp --dport {cfg.listen_port} -j DROP"
    # Each rule is inserted at the top: the DROP first, so that every ACCEPT ends up above it.
    assert post_up.index(drop) < min(post_up.index(c) for c in accepts)
    # Nothing else of the host's INPUT is touched (SSH and the rest of its management stay as they are).
    assert [c for c in post_up if " INPUT " in c] == [drop, *accepts]


@pytest.mark.parametrize("site", ["aws-use1", "gcp-euw3"])
def test_cloud_gateways_leave_the_port_filter_to_the_cloud_firewall(site: str) -> None:
    cfg = load(REPO / "Pulumi.prod.yaml")
    assert not isinstance(cfg.site(site), StaticSite)
    assert not any(" INPUT " in c for c in render.parse_wg_quick_conf(rendered(cfg, site))[0][1]["PostUp"])


def node_exporter_files(site: str) -> dict[str, str]:
    from wg_mesh.plan import metrics

    cfg = load(REPO / "Pulumi.prod.yaml")
    return {f.path: f.content for f in metrics.metrics_extras(cfg, site, directory(cfg)).files}


def test_static_sites_serve_node_exporter_on_the_overlay_address_only() -> None:
    from wg_mesh.plan import metrics

    files = node_exporter_files("vps-fra")
    args = next(line for line in files[metrics.NODE_EXPORTER_DEFAULTS_PATH].splitlines() if line.startswith("ARGS="))
    assert "--web.listen-address=10.200.0.3:9100 " in args
    # The overlay address exists once wg0 is up: node-exporter waits for it and retries until it can bind.
    drop_in = files[metrics.NODE_EXPORTER_DROP_IN_PATH]
    assert "After=wg-quick@wg0.service" in drop_in and "Restart=on-failure" in drop_in


@pytest.mark.parametrize("site", ["aws-use1", "gcp-euw3"])
def test_cloud_gateways_serve_node_exporter_behind_their_cloud_firewall(site: str) -> None:
    from wg_mesh.plan import metrics

    files = node_exporter_files(site)
    assert '"--web.listen-address=:9100 ' in files[metrics.NODE_EXPORTER_DEFAULTS_PATH]
    # Their drop-in is the sandbox alone: node-exporter listens on every address, no need to wait for wg0.
    drop_in = files[metrics.NODE_EXPORTER_DROP_IN_PATH]
    assert "After=" not in drop_in and "Restart=" not in drop_in and "CapabilityBoundingSet=\n" in drop_in
