"""What a booted gateway is given, and what the boot checks expect of it (pure: plan and user data in).

A container gets the NoCloud seed a cloud would hand its datasource: the rendered user data unchanged,
`meta-data` (instance id, hostname) and a network-config v2 with the addresses and MTUs the lab's fabric
expects (what the VPC's DHCP would give). A GCP gateway's image also carries a GCE-style sysctl file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from wg_mesh.lab.fabric.plan import GW_LAN, LabPlan, SitePlan
from wg_mesh.lab.machines import cloudinit
from wg_mesh.lab.machines.image import APT_CONF_DIR
from wg_mesh.plan.render import WG_CONF_PATH

# What GCE's guest environment puts into its images: GoogleCloudPlatform/guest-configs,
# src/etc/sysctl.d/60-gce-network-security.conf (ip_forward=0, strict rp_filter, ...). Only its net.ipv4 keys:
# they are per network namespace, so a container has its own; the file's kernel.* keys belong to the host.
GCE_SYSCTL_PATH = PurePosixPath("/etc/sysctl.d/60-gce-network-security.conf")
GCE_SYSCTL = """\
# GCE-style image defaults (guest-configs' 60-gce-network-security.conf, per-namespace keys only)
net.ipv4.tcp_syncookies = 1
net.ipv4.conf.all.accept_source_route = 0
net.ipv4.conf.default.accept_source_route = 0
net.ipv4.conf.all.accept_redirects = 0
net.ipv4.conf.default.accept_redirects = 0
net.ipv4.conf.all.secure_redirects = 1
net.ipv4.conf.default.secure_redirects = 1
net.ipv4.ip_forward = 0
net.ipv4.conf.all.send_redirects = 0
net.ipv4.conf.default.send_redirects = 0
net.ipv4.conf.all.rp_filter = 1
net.ipv4.conf.default.rp_filter = 1
net.ipv4.icmp_echo_ignore_broadcasts = 1
net.ipv4.icmp_ignore_bogus_error_responses = 1
net.ipv4.conf.all.log_martians = 1
net.ipv4.conf.default.log_martians = 1
"""
WG_DIR = PurePosixPath(WG_CONF_PATH).parent
WG_DIR_MODE = 0o700


def image_files(site: SitePlan) -> dict[PurePosixPath, str]:
    """Files the cloud's own image would have, placed in the container's root before it boots."""
    return {GCE_SYSCTL_PATH: GCE_SYSCTL} if site.cloud == "gcp" else {}


def meta_data(plan: LabPlan, site: SitePlan) -> str:
    return f"instance-id: {plan.prefix}-{site.name}\nlocal-hostname: {site.name}\n"


def network_config(site: SitePlan) -> dict[str, Any]:
    """NoCloud network-config v2: a cloud gateway's private address behind the VPC router; a VPS's public
    address on its uplink (a direct route to the provider's router) and its LAN."""
    nic = site.gateway_nic
    if site.is_cloud:
        assert site.router_ip is not None
        ethernets: dict[str, Any] = {
            nic: {
                "addresses": [str(site.gateway_ip)],
                "mtu": site.nic_mtu,
                "routes": [{"to": "0.0.0.0/0", "via": str(site.router_ip.ip)}],
            }
        }
    else:
        router = str(site.transit_internet.ip)
        ethernets = {
            nic: {
                "addresses": [f"{site.public_ip}/32"],
                "mtu": site.uplink_mtu,
                "routes": [{"to": f"{router}/32"}, {"to": "0.0.0.0/0", "via": router}],
            },
            GW_LAN: {"addresses": [str(site.gateway_ip)], "mtu": site.nic_mtu},
        }
    return {"version": 2, "ethernets": ethernets}


def network_config_text(site: SitePlan) -> str:
    return yaml.safe_dump(network_config(site), sort_keys=False)


@dataclass(frozen=True)
class UserDataFacts:
    """What the boot checks expect, read from the user data (not from a second copy of the renderer)."""

    packages: tuple[str, ...]
    apt_files: dict[str, bytes]  # /etc/apt/apt.conf.d/* the user data writes: they decide about Recommends
    modes: dict[str, int]  # every file it writes, and the WireGuard directory
    units: tuple[str, ...]  # what its runcmd enables, starts or restarts


def user_data_facts(user_data: str) -> UserDataFacts:
    doc = yaml.safe_load(user_data)
    files = doc.get("write_files") or []
    apt_files, modes = {}, {str(WG_DIR): WG_DIR_MODE}
    for entry in files:
        path = PurePosixPath(entry["path"])
        modes[str(path)] = int(str(entry.get("permissions", "0644")), 8)
        if path.parent == APT_CONF_DIR:
            apt_files[str(path)] = cloudinit.decode(
                path, str(entry.get("content", "")), entry.get("encoding", "text/plain")
            )
    units: list[str] = []
    for cmd in doc.get("runcmd") or []:
        argv = [str(a) for a in cmd] if isinstance(cmd, list) else str(cmd).split()
        if argv[:1] == ["systemctl"] and len(argv) > 2 and argv[1] in ("enable", "start", "restart"):
            units += [a for a in argv[2:] if not a.startswith("-") and a not in units]
    return UserDataFacts(tuple(str(p) for p in doc.get("packages") or []), apt_files, modes, tuple(units))
