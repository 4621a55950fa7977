"""What every doctor check shares: verdicts, the Host it looks through, and the wg-quick config it reads.

Standard library only (doctor runs on a bare gateway): see wg_mesh/gateway/doctor.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
IPV4_TCP_HEADERS = 40
EXIT_OK, EXIT_FAILED = 0, 1


@dataclass(frozen=True)
class Check:
    check: str
    status: str
    detail: str
    hint: str = ""
    peer_site: str | None = None


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str = ""


class Host(Protocol):
    """Where the checks look: this machine, a lab namespace, or captured outputs in a test."""

    def run(self, argv: Sequence[str]) -> CommandResult: ...

    def read(self, path: str) -> str: ...

    def now(self) -> float: ...


class LocalHost:
    def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            # errors="replace": an interface or peer name that is not UTF-8 must give a report, not a traceback.
            done = subprocess.run(
                list(argv), capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=15,
                check=False, env={**os.environ, "LC_ALL": "C"},
            )  # fmt: skip
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"{argv[0]}: timed out")
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def read(self, path: str) -> str:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def now(self) -> float:
        return time.time()


# --- wg0.conf, with the site names that render.wg_quick_conf writes as `# name` above each [Peer] -------


@dataclass(frozen=True)
class ConfPeer:
    name: str | None
    public_key: str
    allowed_ips: tuple[str, ...]
    endpoint: str | None
    keepalive: int = 0  # PersistentKeepalive, seconds (0: none)


@dataclass(frozen=True)
class WgConf:
    site: str | None
    mtu: int | None
    peers: tuple[ConfPeer, ...]
    # prefix -> MTU of the PostUp's `ip -4 route replace P dev %i mtu N` (internet peers of a gateway whose wg0 is at
    # a private path's jumbo MTU: wg_mesh.gateway.wgconf.route_mtus)
    route_mtus: Mapping[str, int] = field(default_factory=dict)
    # A wg-mesh single host (a static site without cidrs: wgconf's InterfacePlan.forward False): its generated config
    # turns on no forwarding, so the forwarding checks do not apply
    single_host: bool = False

    def peer_mtu(self, peer: ConfPeer, default: int) -> int:
        """The tunnel MTU towards `peer`: the lowest route MTU on its AllowedIPs, else `default` (wg0's)."""
        return min((self.route_mtus[a] for a in peer.allowed_ips if a in self.route_mtus), default=default)

    def name_of(self, public_key: str) -> str | None:
        return next((p.name for p in self.peers if p.public_key == public_key), None)


_SITE_HEADER = re.compile(r"^#\s*wg-mesh site ([^\s:]+)")
_ROUTE_MTU = re.compile(r"ip -4 route replace (\S+) dev %i mtu (\d+)")


def parse_conf(text: str) -> WgConf:
    """The parts doctor needs. PrivateKey is never kept; errors never quote a line."""
    site = None
    mtu = None
    route_mtus: dict[str, int] = {}
    forwarding = False  # a PostUp turns ip_forward on (every wg-mesh gateway's does; a single host's does not)
    peers: list[ConfPeer] = []
    section = ""
    comment: str | None = None
    current: dict[str, list[str]] = {}
    name: str | None = None

    def close() -> None:
        if section == "Peer":
            keys = current.get("PublicKey", [])
            if len(keys) != 1:
                raise ValueError("a [Peer] section without exactly one PublicKey")
            allowed = tuple(a.strip() for v in current.get("AllowedIPs", []) for a in v.split(",") if a.strip())
            endpoint = current.get("Endpoint", [None])[0]
            keepalive = current.get("PersistentKeepalive", ["0"])[0]
            every = int(keepalive) if keepalive.isascii() and keepalive.isdigit() else 0  # "off": 0
            peers.append(ConfPeer(name, keys[0], allowed, endpoint, every))

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            header = _SITE_HEADER.match(line)
            if header and site is None and not section:
                site = header.group(1)
            else:
                comment = line.lstrip("#").strip() or None
            continue
        line = line.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            close()
            section, current = line[1:-1], {}
            name, comment = (comment if section == "Peer" else None), None
            continue
        key, sep, value = line.partition("=")
        if not sep or not section:
            raise ValueError(f"line {number} is not `Key = Value` inside a section")
        comment = None
        key = key.strip()
        if key == "PrivateKey":
            continue
        if section == "Interface" and key == "MTU":
            try:
                mtu = int(value)
            except ValueError:
                raise ValueError(f"line {number}: MTU is not a number") from None
        if section == "Interface" and key == "PostUp" and (route := _ROUTE_MTU.fullmatch(value.strip())):
            route_mtus[route.group(1)] = int(route.group(2))
        if section == "Interface" and key == "PostUp" and "net.ipv4.ip_forward=1" in value:
            forwarding = True
        current.setdefault(key, []).append(value.strip())
    close()
    single_host = site is not None and not forwarding  # generated by wg-mesh, and no ip_forward
    return WgConf(site=site, mtu=mtu, peers=tuple(peers), route_mtus=route_mtus, single_host=single_host)


def ago(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    if seconds < 120:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 120:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def error_line(result: CommandResult) -> str:
    return (result.stderr.strip() or result.stdout.strip() or f"exit status {result.returncode}").splitlines()[0]
