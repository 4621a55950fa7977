"""Text artifacts from plain values: a site's wg0.conf and its cloud-init user data.

No Pulumi here: the Pulumi components, the lab and the tests all call these same functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from wg_mesh.gateway import ship
from wg_mesh.gateway.wgconf import (  # re-exported: one renderer for user data and the gateway agent
    DEFAULT_ROUTE_DEV,
    DEFAULT_ROUTE_GUARD,
    INTERFACE,
    LINK_LOCAL,
    NO_REDIRECTS_ON_EXISTING_INTERFACES,
    SYSCTL_SETTINGS,
    WG_CONF_PATH,
    InterfacePlan,
    Peer,
    Rule,
    forwarding_rules,
    parse_wg_quick_conf,
    wg_quick_conf,
)

__all__ = [
    "DEFAULT_ROUTE_DEV",
    "DEFAULT_ROUTE_GUARD",
    "INTERFACE",
    "LINK_LOCAL",
    "NO_REDIRECTS_ON_EXISTING_INTERFACES",
    "SYSCTL_SETTINGS",
    "WG_CONF_PATH",
    "CloudInitExtras",
    "File",
    "InterfacePlan",
    "Peer",
    "Rule",
    "cloud_config",
    "forwarding_rules",
    "parse_wg_quick_conf",
    "sysctl_conf",
    "units_active_check",
    "wg_quick_conf",
]

# Sorts after the image's own files (GCE ships 60-gce-network-security.conf with ip_forward=0,
# Ubuntu links 99-sysctl.conf): systemd-sysctl applies files in lexical order at boot, last one wins. At first boot
# runcmd loads this file alone (`sysctl -p`), after the image's were applied: the same result for its keys, and a
# key of another file that cannot be set (a read-only /proc/sys/kernel in a container, a module's key before the
# module) does not fail the step as `sysctl --system` would (it exits 1 when any key of any file fails).
SYSCTL_PATH = "/etc/sysctl.d/99-wg-mesh.conf"
PACKAGES = ("wireguard-tools", "iptables")
# A gateway installs what it needs and nothing else: apt's default pulls in Recommends (node-exporter's bring a
# collectors package with ipmitool, smartmontools, nvme-cli and timers that fail on a VM). write_files runs
# before cloud-init installs packages, so this file is in place for that install and any later one.
APT_NO_RECOMMENDS_PATH = "/etc/apt/apt.conf.d/90-wg-mesh-no-recommends"
APT_NO_RECOMMENDS = 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
# /etc/wireguard is 0700 before write_files runs: cloud-init's write_files creates a missing parent directory with
# os.makedirs (0755 under its umask), opens the file with open(path, "wb") (0644) and chmods it to `permissions`
# only after writing the content (cloudinit/util.py write_file and ensure_dir; ensure_dir leaves an existing
# directory's mode alone when no mode is given, as write_files does). So wg0.conf, private key included, is
# world-readable for a moment unless its directory already shuts others out. bootcmd runs before write_files
# (config/cloud.cfg.tmpl: cloud_init_modules lists bootcmd, then write_files) and at every boot.
WG_DIR_MODE = "0700"
WG_DIR = WG_CONF_PATH.rsplit("/", 1)[0]
# wg-quick@wg0's drop-in (`systemd-analyze security --offline=yes`: 2.6, was 9.6). wg-quick up runs as root and
# needs CAP_NET_ADMIN (links, addresses, routes, iptables-nft, TUNSETIFF for wireguard-go) and CAP_NET_RAW
# (iptables-legacy's raw socket) and nothing else. ProtectSystem=full, not strict: wireguard-go (started by wg-quick
# where the kernel has no WireGuard, and living in this unit) creates /run/wireguard/wg0.sock, and iptables-legacy
# its lock in /run; /etc and /usr are read-only. No PrivateDevices: /dev/net/tun (wireguard-go), allowed alone.
# /proc/sys read-only except net/ipv4 (PostUp's sysctls). The kernel loads its wireguard module for `ip link add`
# itself (request_module, as the kernel's helper), so ProtectKernelModules does not stop it.
WG_QUICK_DROP_IN_PATH = f"/etc/systemd/system/wg-quick@{INTERFACE}.service.d/wg-mesh.conf"
WG_QUICK_DROP_IN = (
    """[Service]
CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW
NoNewPrivileges=yes
ProtectSystem=full
DevicePolicy=closed
DeviceAllow=/dev/net/tun rw
ProtectKernelTunables=yes
ReadWritePaths=/proc/sys/net/ipv4
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallFilter=@system-service
"""
    + ship.SANDBOX_BASE
)


@dataclass(frozen=True)
class File:
    path: str
    content: str
    permissions: str = "0644"
    owner: str = "root:root"
    encoding: str | None = None  # cloud-init's write_files encoding of `content`, e.g. "gz+b64"


@dataclass(frozen=True)
class CloudInitExtras:
    """Additions from other features (e.g. monitoring) to a gateway's cloud-init."""

    packages: Sequence[str] = ()
    files: Sequence[File] = ()
    commands: Sequence[Sequence[str]] = field(default_factory=tuple)
    units: Sequence[str] = ()  # systemd units that must be active once cloud-init is done
    # Commands before wg-quick@wg0 starts (delivery: live: the agent's first fetch, which writes wg0.conf) and units
    # started right after it, before `commands`.
    setup: Sequence[Sequence[str]] = field(default_factory=tuple)
    start: Sequence[str] = ()


def sysctl_conf() -> str:
    return "".join(f"{key} = {value}\n" for key, value in SYSCTL_SETTINGS.items())


def units_active_check(units: Sequence[str]) -> str:
    """A shell line that fails, naming the unit, unless every unit is active."""
    return (
        f'for unit in {" ".join(units)}; do systemctl is-active --quiet "$unit" || '
        '{ echo "wg-mesh: $unit is not active" >&2; exit 1; }; done'
    )


def cloud_config(wg_conf: str | None, extras: CloudInitExtras = CloudInitExtras(), *, forward: bool = True) -> str:
    """`#cloud-config` user data that installs WireGuard, writes wg0.conf and starts wg-quick@wg0.

    wg_conf None (delivery: live): no wg0.conf in the user data; a command of `extras.setup` writes it. `forward`
    False (a single host, topology.forwards): no sysctl file and no `sysctl -p`: the host's own settings stay."""
    files = [
        *([File(WG_CONF_PATH, wg_conf, permissions="0600")] if wg_conf is not None else []),
        *([File(SYSCTL_PATH, sysctl_conf())] if forward else []),
        File(APT_NO_RECOMMENDS_PATH, APT_NO_RECOMMENDS),
        File(WG_QUICK_DROP_IN_PATH, WG_QUICK_DROP_IN),
        *extras.files,
    ]
    wg_unit = f"wg-quick@{INTERFACE}"
    doc: dict[str, Any] = {
        "bootcmd": [["install", "-d", "-m", WG_DIR_MODE, WG_DIR]],
        "package_update": True,
        "packages": list(dict.fromkeys([*PACKAGES, *extras.packages])),  # a package two steps need, named once
        "write_files": [
            {
                "path": f.path,
                "owner": f.owner,
                "permissions": f.permissions,
                **({"encoding": f.encoding} if f.encoding else {}),
                "content": f.content,
            }
            for f in files
        ],
        # cloud-init writes runcmd into one `#!/bin/sh` script, a line per entry (cc_runcmd: util.shellify), and
        # scripts_user runs it (subp.runparts): its exit status is the last command's, so without `set -e` a failed
        # step (the agent's first fetch, wg-quick) would be followed by the next ones and hidden by a later success.
        # With it the first failure ends the script non-zero: scripts_user raises and `cloud-init status` is error.
        "runcmd": [
            "set -eu",
            *([["sysctl", "-p", SYSCTL_PATH]] if forward else []),
            *(list(cmd) for cmd in extras.setup),
            ["systemctl", "enable", "--now", wg_unit],
            *(["systemctl", "enable", "--now", unit] for unit in extras.start),
            *(list(cmd) for cmd in extras.commands),
            # cloud-init runs runcmd as one shell script and judges it by its last command alone: this one makes
            # a gateway whose tunnel (or any unit it set up) is not running report an error in `cloud-init status`.
            # One unit at a time: `systemctl is-active A B` succeeds when any one of them is active.
            units_active_check([wg_unit, *extras.units]),
        ],
    }
    return "#cloud-config\n" + yaml.dump(doc, Dumper=_LiteralDumper, sort_keys=False, width=1000)


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings as `|` blocks so the user data stays readable."""


def _str_representer(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_LiteralDumper.add_representer(str, _str_representer)
