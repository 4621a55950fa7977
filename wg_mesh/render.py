"""Text artifacts from plain values: a site's wg0.conf and its cloud-init user data.

No Pulumi here: the Pulumi components, the lab and the tests all call these same functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from wg_mesh.gateway.wgconf import (  # re-exported: one renderer for user data and the gateway agent
    DEFAULT_ROUTE_DEV,
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
# Ubuntu links 99-sysctl.conf): sysctl --system applies files in lexical order, last one wins.
SYSCTL_PATH = "/etc/sysctl.d/99-wg-mesh.conf"
PACKAGES = ("wireguard-tools", "iptables")
# A gateway installs what it needs and nothing else: apt's default pulls in Recommends (node-exporter's bring a
# collectors package with ipmitool, smartmontools, nvme-cli and timers that fail on a VM). write_files runs
# before cloud-init installs packages, so this file is in place for that install and any later one.
APT_NO_RECOMMENDS_PATH = "/etc/apt/apt.conf.d/90-wg-mesh-no-recommends"
APT_NO_RECOMMENDS = 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
# write_files creates /etc/wireguard (0755) before the package would (0700): tightened before wg-quick reads it.
WG_DIR_MODE = "0700"


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


def cloud_config(wg_conf: str | None, extras: CloudInitExtras = CloudInitExtras()) -> str:
    """`#cloud-config` user data that installs WireGuard, writes wg0.conf and starts wg-quick@wg0.

    wg_conf None (delivery: live): no wg0.conf in the user data; a command of `extras.setup` writes it."""
    files = [
        *([File(WG_CONF_PATH, wg_conf, permissions="0600")] if wg_conf is not None else []),
        File(SYSCTL_PATH, sysctl_conf()),
        File(APT_NO_RECOMMENDS_PATH, APT_NO_RECOMMENDS),
        *extras.files,
    ]
    wg_unit = f"wg-quick@{INTERFACE}"
    doc: dict[str, Any] = {
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
        "runcmd": [
            ["chmod", WG_DIR_MODE, WG_CONF_PATH.rsplit("/", 1)[0]],
            ["sysctl", "--system"],
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
