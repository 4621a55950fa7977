"""What a gateway's `#cloud-config` asks for, read the way the lab can carry it out inside a namespace.

Pure. The lab does not run cloud-init itself (it would touch the host); it does what this user data
asks of cloud-init, in the gateway's own network and mount namespaces:

* `write_files` -> written into the gateway's private /etc (an overlay) or /run (a tmpfs);
* `runcmd: [sysctl, --system]` -> the sysctl files it wrote are applied in the gateway's netns
  (only per-namespace `net.ipv4.*` / `net.ipv6.*` keys, so the host is never changed);
* `runcmd: [systemctl, enable, --now, wg-quick@IF]` -> the real `wg-quick up IF`;
* `packages` -> must already be installed on the host (the lab checks its tools).
Anything else is refused or listed in the report as not run, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

PRIVATE_ROOTS = (PurePosixPath("/etc"), PurePosixPath("/run"), PurePosixPath("/var/run"))
SYSCTL_DIR = PurePosixPath("/etc/sysctl.d")
PER_NETNS_SYSCTL_PREFIXES = ("net.ipv4.", "net.ipv6.")
WG_QUICK_UNIT = "wg-quick@"


class UserDataError(ValueError):
    """User data the lab cannot reproduce faithfully."""


@dataclass(frozen=True)
class WriteFile:
    path: PurePosixPath
    content: str = field(repr=False)
    mode: int
    owner: str


@dataclass(frozen=True)
class GatewaySetup:
    files: tuple[WriteFile, ...]
    sysctl: tuple[tuple[str, str], ...]  # (key, value) from the sysctl files, in the order sysctl --system applies
    interfaces: tuple[str, ...]  # wg-quick interfaces to bring up
    packages: tuple[str, ...]
    notes: tuple[str, ...]  # what the lab did not run, for the report


def parse_sysctl(text: str) -> list[tuple[str, str]]:
    settings = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.lstrip("-").partition("=")
        if not sep:
            raise UserDataError(f"sysctl line {raw!r} has no '='")
        settings.append((key.strip(), value.strip()))
    return settings


def _write_file(entry: Any) -> WriteFile:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise UserDataError(f"write_files entry without a path: {sorted(entry) if isinstance(entry, dict) else entry}")
    path = PurePosixPath(entry["path"])
    unsupported = sorted(set(entry) - {"path", "content", "permissions", "owner"})
    if unsupported:
        raise UserDataError(f"write_files {path}: the lab does not support {', '.join(unsupported)}")
    if not path.is_absolute() or ".." in path.parts or not any(path.is_relative_to(r) for r in PRIVATE_ROOTS):
        raise UserDataError(f"write_files {path}: the lab can only place files under /etc or /run of a gateway")
    mode = int(str(entry.get("permissions", "0644")), 8)
    return WriteFile(path, str(entry.get("content", "")), mode, str(entry.get("owner", "root:root")))


def interpret(user_data: str) -> GatewaySetup:
    if not user_data.startswith("#cloud-config"):
        raise UserDataError("user data is not a #cloud-config document")
    doc = yaml.safe_load(user_data)
    if not isinstance(doc, dict):
        raise UserDataError("user data is not a mapping")
    files = tuple(_write_file(entry) for entry in doc.get("write_files") or [])

    sysctl: list[tuple[str, str]] = []
    interfaces: list[str] = []
    notes: list[str] = []
    for cmd in doc.get("runcmd") or []:
        argv = [str(a) for a in cmd] if isinstance(cmd, list) else str(cmd).split()
        if argv == ["sysctl", "--system"]:
            for f in sorted((f for f in files if f.path.parent == SYSCTL_DIR), key=lambda f: f.path.name):
                sysctl += parse_sysctl(f.content)
        elif argv[:3] == ["systemctl", "enable", "--now"] and len(argv) == 4 and argv[3].startswith(WG_QUICK_UNIT):
            interfaces.append(argv[3].removeprefix(WG_QUICK_UNIT))
        else:
            notes.append(f"runcmd not run in the lab: {' '.join(argv)}")
    for key, _ in sysctl:
        if not key.startswith(PER_NETNS_SYSCTL_PREFIXES):
            raise UserDataError(f"sysctl {key} is not per network namespace: the lab would change the host with it")
    packages = tuple(str(p) for p in doc.get("packages") or [])
    return GatewaySetup(files, tuple(sysctl), tuple(interfaces), packages, tuple(notes))
