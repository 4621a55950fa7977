#!/usr/bin/env python3
"""wg-mesh-metrics: WireGuard peers and forwarding state as node-exporter textfile metrics.

Run by wg-mesh-metrics.timer on every gateway; peers are labelled with site names from /etc/wg-mesh/peers.json.
Python 3 stdlib only. `mesh doctor` imports the parsers. The dump's private key is dropped while parsing.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

DESCRIPTION = "WireGuard peers and forwarding state as node-exporter textfile metrics"

HANDSHAKE_STALE_SECONDS = 180  # WireGuard rekeys every 120 s on an active tunnel: older means broken
MAPPING_PATH = "/etc/wg-mesh/peers.json"
TEXTFILE_PATH = "/var/lib/prometheus/node-exporter/wg_mesh.prom"
UNKNOWN_SITE = "unknown"  # a peer key that is not in the mapping

# name -> (type, help); the order of the output
METRICS: dict[str, tuple[str, str]] = {
    "wgmesh_metrics_last_run_timestamp_seconds": ("gauge", "When wg-mesh-metrics last ran (unix time)."),
    "wgmesh_wg_show_success": ("gauge", "1 if `wg show all dump` succeeded on the last run."),
    "wgmesh_interface_up": ("gauge", "1 if the WireGuard interface exists and is administratively up."),
    "wgmesh_interface_mtu_bytes": ("gauge", "MTU of the WireGuard interface."),
    "wgmesh_ip_forward_enabled": ("gauge", "1 if net.ipv4.ip_forward is 1."),
    "wgmesh_peers": ("gauge", "Peers configured on the WireGuard interface."),
    "wgmesh_peers_expected": ("gauge", "Peers this gateway should have, from the mesh topology."),
    "wgmesh_peer_latest_handshake_seconds": ("gauge", "Unix time of the latest handshake with the peer (0: never)."),
    "wgmesh_peer_receive_bytes_total": ("counter", "Bytes received from the peer."),
    "wgmesh_peer_transmit_bytes_total": ("counter", "Bytes sent to the peer."),
    "wgmesh_route_present": ("gauge", "1 if the route lookup for the peer's AllowedIPs prefix leads into wg."),
}


# --- parsing (pure) -------------------------------------------------------------------------


@dataclass(frozen=True)
class PeerStat:
    interface: str
    public_key: str
    endpoint: str | None
    allowed_ips: tuple[str, ...]
    latest_handshake: int  # unix time, 0 = never
    rx_bytes: int
    tx_bytes: int


def parse_dump(text: str, interface: str | None = None) -> list[PeerStat]:
    """Peers of `wg show all dump` (or `wg show IFACE dump` with `interface`); errors never quote a line."""
    peers = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if interface is not None:
            fields = [interface, *fields]
        if len(fields) == 5:  # interface, private key, public key, listen port, fwmark
            continue
        if len(fields) != 9:
            raise ValueError(f"wg dump line {number}: expected 5 or 9 fields, got {len(fields)}")
        iface, key, _psk, endpoint, allowed, handshake, rx, tx, _keepalive = fields
        try:
            peers.append(
                PeerStat(
                    interface=iface,
                    public_key=key,
                    endpoint=None if endpoint == "(none)" else endpoint,
                    allowed_ips=() if allowed == "(none)" else tuple(a for a in allowed.split(",") if a),
                    latest_handshake=int(handshake),
                    rx_bytes=int(rx),
                    tx_bytes=int(tx),
                )
            )
        except ValueError:
            raise ValueError(f"wg dump line {number}: handshake and transfer fields are not numbers") from None
    return peers


@dataclass(frozen=True)
class Link:
    name: str
    up: bool
    mtu: int


def parse_link(json_text: str) -> Link | None:
    """`ip -j link show dev IFACE` -> the link, or None if the output holds none."""
    items = json.loads(json_text or "[]")
    if not items:
        return None
    item = items[0]
    return Link(name=str(item["ifname"]), up="UP" in item.get("flags", []), mtu=int(item.get("mtu", 0)))


@dataclass(frozen=True)
class Route:
    dst: ipaddress.IPv4Network | ipaddress.IPv6Network
    dev: str | None
    kind: str  # unicast, blackhole, unreachable, prohibit, ...


def parse_routes(json_text: str, family: int = 4) -> list[Route]:
    """`ip -j -4 route show table main` (or `-6` with family=6) -> routes; entries it cannot read are skipped."""
    routes = []
    for item in json.loads(json_text or "[]"):
        dst = str(item.get("dst", ""))
        try:
            net = ipaddress.ip_network(("0.0.0.0/0" if family == 4 else "::/0") if dst == "default" else dst, False)
        except ValueError:
            continue  # e.g. a multicast or an `ip` newer than this script: not a route a prefix can resolve to
        routes.append(Route(dst=net, dev=item.get("dev"), kind=str(item.get("type", "unicast"))))
    return routes


def is_ipv6(prefix: str) -> bool:
    return ":" in prefix


def route_for(routes: Iterable[Route], prefix: str) -> Route | None:
    """The route the kernel picks for a whole prefix: the most specific one of its family that covers it.

    None also for a prefix that is not an IP prefix at all (a hand-edited mapping)."""
    try:
        net = ipaddress.ip_network(prefix, strict=False)
    except ValueError:
        return None
    covering = [r for r in routes if r.dst.version == net.version and net.subnet_of(r.dst)]  # type: ignore[arg-type]
    return max(covering, key=lambda r: r.dst.prefixlen, default=None)


def routes_into(routes: Iterable[Route], prefix: str, interface: str) -> bool:
    route = route_for(routes, prefix)
    return route is not None and route.kind == "unicast" and route.dev == interface


@dataclass(frozen=True)
class ExpectedPeer:
    site: str
    public_key: str
    allowed_ips: tuple[str, ...]


@dataclass(frozen=True)
class Mapping:
    site: str
    interface: str
    peers: tuple[ExpectedPeer, ...]

    def site_of(self, public_key: str) -> str:
        return next((p.site for p in self.peers if p.public_key == public_key), UNKNOWN_SITE)


def parse_mapping(text: str) -> Mapping:
    doc = json.loads(text)
    return Mapping(
        site=str(doc["site"]),
        interface=str(doc["interface"]),
        peers=tuple(
            ExpectedPeer(site=str(p["site"]), public_key=str(p["public_key"]), allowed_ips=tuple(p["allowed_ips"]))
            for p in doc["peers"]
        ),
    )


# --- formatting (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """What one run observed (None: could not be read)."""

    now: float
    peers: tuple[PeerStat, ...] | None
    link: Link | None
    ip_forward: bool | None
    routes: tuple[Route, ...] | None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
    number = str(int(value)) if float(value).is_integer() else repr(float(value))
    return f"{name}{{{text}}} {number}"


def format_metrics(mapping: Mapping, snap: Snapshot) -> str:
    """Each family's HELP, TYPE and samples together, in METRICS order, without timestamps."""
    site = {"site": mapping.site}
    iface = {"site": mapping.site, "interface": mapping.interface}
    samples: dict[str, list[str]] = {name: [] for name in METRICS}

    def add(name: str, labels: dict[str, str], value: float) -> None:
        samples[name].append(_sample(name, labels, value))

    add("wgmesh_metrics_last_run_timestamp_seconds", site, round(snap.now, 3))
    add("wgmesh_wg_show_success", site, snap.peers is not None)
    add("wgmesh_interface_up", iface, snap.link is not None and snap.link.up)
    if snap.link is not None:
        add("wgmesh_interface_mtu_bytes", iface, snap.link.mtu)
    if snap.ip_forward is not None:
        add("wgmesh_ip_forward_enabled", site, snap.ip_forward)
    mine = [p for p in snap.peers or () if p.interface == mapping.interface]
    add("wgmesh_peers", iface, len(mine))
    add("wgmesh_peers_expected", site, len(mapping.peers))
    for peer in sorted(mine, key=lambda p: (mapping.site_of(p.public_key), p.public_key)):
        labels = {**iface, "peer_site": mapping.site_of(peer.public_key), "peer": peer.public_key}
        add("wgmesh_peer_latest_handshake_seconds", labels, peer.latest_handshake)
        add("wgmesh_peer_receive_bytes_total", labels, peer.rx_bytes)
        add("wgmesh_peer_transmit_bytes_total", labels, peer.tx_bytes)
    if snap.routes is not None:
        for expected in mapping.peers:
            for prefix in expected.allowed_ips:
                labels = {**iface, "peer_site": expected.site, "prefix": prefix}
                add("wgmesh_route_present", labels, routes_into(snap.routes, prefix, mapping.interface))

    lines = []
    for name, (kind, help_text) in METRICS.items():
        if samples[name]:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples[name]]
    return "\n".join(lines) + "\n"


# --- the shell: commands, files --------------------------------------------------------------

Runner = Callable[[Sequence[str]], "str | None"]


def run_command(argv: Sequence[str]) -> str | None:
    """stdout of a command, or None if it is missing, fails or hangs."""
    try:
        # Interface names are bytes to the kernel: a non-UTF-8 name must not crash the run (replaced, not fatal).
        done = subprocess.run(
            list(argv), capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=10,
            check=False, env={**os.environ, "LC_ALL": "C"},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def read_ip_forward(path: str = "/proc/sys/net/ipv4/ip_forward") -> bool | None:
    try:
        with open(path) as handle:
            return handle.read().strip() == "1"
    except OSError:
        return None


def collect(mapping: Mapping, run: Runner = run_command, now: Callable[[], float] = time.time) -> Snapshot:
    dump = run(["wg", "show", "all", "dump"])
    link = run(["ip", "-j", "link", "show", "dev", mapping.interface])
    routes = run(["ip", "-j", "-4", "route", "show", "table", "main"])
    parsed = None if routes is None else parse_routes(routes)
    if parsed is not None and any(is_ipv6(prefix) for peer in mapping.peers for prefix in peer.allowed_ips):
        routes6 = run(["ip", "-j", "-6", "route", "show", "table", "main"])
        parsed += parse_routes(routes6, family=6) if routes6 is not None else []
    return Snapshot(
        now=now(),
        peers=None if dump is None else tuple(parse_dump(dump)),
        link=None if link is None else parse_link(link),
        ip_forward=read_ip_forward(),
        routes=None if parsed is None else tuple(parsed),
    )


def write_atomically(path: str, text: str, mode: int = 0o644) -> None:
    """One rename: readers see the old or the new file, never a part. The temp file is in the same directory
    (same filesystem) and does not end in .prom, so node-exporter never reads it."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    # Not __doc__: the live user data ships this script without docstrings (mesh.gateway.ship.compact).
    parser = argparse.ArgumentParser(prog="wg-mesh-metrics", description=DESCRIPTION)
    parser.add_argument("--mapping", default=MAPPING_PATH, help=f"site/peer mapping (default {MAPPING_PATH})")
    parser.add_argument("--out", default=TEXTFILE_PATH, help=f"textfile to replace (default {TEXTFILE_PATH})")
    args = parser.parse_args(argv)
    try:
        with open(args.mapping) as handle:
            mapping = parse_mapping(handle.read())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"wg-mesh-metrics: cannot read the mapping {args.mapping}: {exc!r}", file=sys.stderr)
        return 1
    try:
        snapshot = collect(mapping)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"wg-mesh-metrics: unexpected command output: {exc}", file=sys.stderr)
        return 1
    write_atomically(args.out, format_metrics(mapping, snapshot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
