"""What a gateway's `#cloud-config` asks for, read the way the lab can carry it out inside a namespace.

Pure. The lab does not run cloud-init itself (it would touch the host); it does what this user data
asks of cloud-init, in the gateway's own network and mount namespaces:

* `write_files` -> decoded (b64, gz+b64, ...) and written into the gateway's private /etc and /usr/local
  (copy-on-write overlays) or /run (a tmpfs);
* `runcmd: [sysctl, --system]` -> the sysctl files it wrote are applied in the gateway's netns
  (only per-namespace `net.ipv4.*` / `net.ipv6.*` keys, so the host is never changed);
* `runcmd: [systemctl, enable, --now, wg-quick@IF]` -> the real `wg-quick up IF`;
* `runcmd: [chmod, MODE, PATH]` -> the mode, on a path under those private directories;
* `packages` -> must already be installed on the host (the lab checks its tools).
Anything else is refused or listed in the report as not run, never silently dropped.
"""

from __future__ import annotations

import base64
import binascii
import gzip
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

PRIVATE_ROOTS = tuple(PurePosixPath(p) for p in ("/etc", "/usr/local", "/run", "/var/run"))
# cloud-init's write_files encodings: (gzip-compressed, base64-encoded)
ENCODINGS = {
    "text/plain": (False, False),
    "b64": (False, True),
    "base64": (False, True),
    "gz": (True, False),
    "gzip": (True, False),
    "gz+b64": (True, True),
    "gz+base64": (True, True),
    "gzip+b64": (True, True),
    "gzip+base64": (True, True),
}
SYSCTL_DIR = PurePosixPath("/etc/sysctl.d")
PER_NETNS_SYSCTL_PREFIXES = ("net.ipv4.", "net.ipv6.")
WG_QUICK_UNIT = "wg-quick@"


class UserDataError(ValueError):
    """User data the lab cannot reproduce faithfully."""


@dataclass(frozen=True)
class WriteFile:
    path: PurePosixPath
    content: bytes = field(repr=False)  # decoded
    mode: int
    owner: str

    @property
    def text(self) -> str:
        return self.content.decode()


@dataclass(frozen=True)
class GatewaySetup:
    files: tuple[WriteFile, ...]
    sysctl: tuple[tuple[str, str], ...]  # (key, value) from the sysctl files, in the order sysctl --system applies
    interfaces: tuple[str, ...]  # wg-quick interfaces to bring up
    modes: tuple[tuple[PurePosixPath, int], ...]  # chmod runcmds, in order
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


def _private_path(text: str, what: str) -> PurePosixPath:
    path = PurePosixPath(text)
    if not path.is_absolute() or ".." in path.parts or not any(path.is_relative_to(r) for r in PRIVATE_ROOTS):
        raise UserDataError(f"{what} {path}: the lab can only place files under {', '.join(map(str, PRIVATE_ROOTS))}")
    return path


def decode(path: PurePosixPath, content: str, encoding: str) -> bytes:
    """A write_files entry's content as cloud-init writes it."""
    return _decode(path, content, encoding)


def _decode(path: PurePosixPath, content: str, encoding: str) -> bytes:
    if encoding not in ENCODINGS:
        raise UserDataError(f"write_files {path}: unknown encoding {encoding!r}")
    compressed, b64 = ENCODINGS[encoding]
    try:
        data = base64.b64decode(content) if b64 else content.encode()
        return gzip.decompress(data) if compressed else data
    except (binascii.Error, OSError, EOFError) as exc:
        raise UserDataError(f"write_files {path}: content is not valid {encoding} ({exc})") from None


def _write_file(entry: Any) -> WriteFile:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise UserDataError(f"write_files entry without a path: {sorted(entry) if isinstance(entry, dict) else entry}")
    path = PurePosixPath(entry["path"])
    unsupported = sorted(set(entry) - {"path", "content", "permissions", "owner", "encoding"})
    if unsupported:
        raise UserDataError(f"write_files {path}: the lab does not support {', '.join(unsupported)}")
    _private_path(entry["path"], "write_files")
    mode = int(str(entry.get("permissions", "0644")), 8)
    content = _decode(path, str(entry.get("content", "")), str(entry.get("encoding", "text/plain")))
    return WriteFile(path, content, mode, str(entry.get("owner", "root:root")))


def interpret(user_data: str) -> GatewaySetup:
    if not user_data.startswith("#cloud-config"):
        raise UserDataError("user data is not a #cloud-config document")
    doc = yaml.safe_load(user_data)
    if not isinstance(doc, dict):
        raise UserDataError("user data is not a mapping")
    files = tuple(_write_file(entry) for entry in doc.get("write_files") or [])

    sysctl: list[tuple[str, str]] = []
    interfaces: list[str] = []
    modes: list[tuple[PurePosixPath, int]] = []
    notes: list[str] = []
    for cmd in doc.get("runcmd") or []:
        argv = [str(a) for a in cmd] if isinstance(cmd, list) else str(cmd).split()
        if argv == ["sysctl", "--system"]:
            for f in sorted((f for f in files if f.path.parent == SYSCTL_DIR), key=lambda f: f.path.name):
                sysctl += parse_sysctl(f.text)
        elif argv[0] == "chmod" and len(argv) == 3:
            modes.append((_private_path(argv[2], "runcmd chmod"), int(argv[1], 8)))
        elif argv[:3] == ["systemctl", "enable", "--now"] and len(argv) == 4 and argv[3].startswith(WG_QUICK_UNIT):
            interfaces.append(argv[3].removeprefix(WG_QUICK_UNIT))
        else:
            notes.append(f"runcmd not run in the lab: {' '.join(argv)}")
    for key, _ in sysctl:
        if not key.startswith(PER_NETNS_SYSCTL_PREFIXES):
            raise UserDataError(f"sysctl {key} is not per network namespace: the lab would change the host with it")
    packages = tuple(str(p) for p in doc.get("packages") or [])
    return GatewaySetup(files, tuple(sysctl), tuple(interfaces), tuple(modes), packages, tuple(notes))
