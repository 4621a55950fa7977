#!/usr/bin/env python3
"""wg-mesh-metrics: WireGuard peers and forwarding state as node-exporter textfile metrics.

Run by wg-mesh-metrics.timer on every gateway; peers are labelled with site names and kinds from peers.json, roams
found against the endpoints in --state (track). Stdlib only; `mesh doctor` imports the parsers. No private key kept.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .files import atomic_write, read_text

DESCRIPTION = "WireGuard peers and forwarding state as node-exporter textfile metrics"
HANDSHAKE_STALE_SECONDS = 180  # WireGuard rekeys every 120 s on an active tunnel: older means broken
MAPPING_PATH = "/etc/wg-mesh/peers.json"
TEXTFILE_PATH = "/var/lib/prometheus/node-exporter/wg_mesh.prom"
UNKNOWN_SITE = "unknown"  # a peer key that is not in the mapping
STATE_PATH = "/var/lib/wg-mesh-metrics/endpoints"  # the unit's StateDirectory; no --state: no roam tracking
KINDS = ("configured", "dynamic", "relayed")  # = wg_mesh.gateway.mapping's (no kind: configured; else: "unknown")
INVALID = "invalid"  # the endpoint label of what is not IP:PORT
MAX_ENDPOINT_CHARS = 64  # "[" IPv6 (39) "%" scope (15) "]:" port (5) = 63: longer is not an endpoint
ENDPOINT_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.:[]%-_")
MAX_STATE_BYTES = 1 << 20
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
    "wgmesh_peer_info": ("gauge", "1 per peer of the mapping; kind: configured, dynamic or relayed (via: the relay)."),
    "wgmesh_peer_endpoint_info": ("gauge", "1 with the mapped peer's current endpoint (IP:PORT, or invalid)."),
    "wgmesh_peer_last_roam_timestamp_seconds": ("gauge", "Unix time the peer's endpoint last changed (0: not seen)."),
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
        ips = () if allowed == "(none)" else tuple(a for a in allowed.split(",") if a)
        try:
            numbers = int(handshake), int(rx), int(tx)
        except ValueError:
            raise ValueError(f"wg dump line {number}: handshake and transfer fields are not numbers") from None
        peers.append(PeerStat(iface, key, None if endpoint == "(none)" else endpoint, ips, *numbers))
    return peers


@dataclass(frozen=True)
class Link:
    name: str
    up: bool
    mtu: int


def parse_link(json_text: str) -> Link | None:
    """`ip -j link show dev IFACE` -> the link, or None if the output holds none."""
    item = (json.loads(json_text or "[]") or [None])[0]
    return None if item is None else Link(str(item["ifname"]), "UP" in item.get("flags", []), int(item.get("mtu", 0)))


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
    """The route the kernel picks for a whole prefix: the most specific one of its family that covers it (None also
    for a prefix that is not an IP prefix at all: a hand-edited mapping)."""
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
    public_key: str  # a relayed site's: its relay's (the peer entry that carries its AllowedIPs)
    allowed_ips: tuple[str, ...]
    kind: str = "configured"  # KINDS, or "unknown"
    via: str = ""  # relayed: the relay's site


@dataclass(frozen=True)
class Mapping:
    site: str
    interface: str
    peers: tuple[ExpectedPeer, ...]

    @property
    def direct(self) -> tuple[ExpectedPeer, ...]:  # the peers with an entry of their own on the interface
        return tuple(p for p in self.peers if p.kind != "relayed")

    def site_of(self, public_key: str) -> str:
        return next((p.site for p in self.direct if p.public_key == public_key), UNKNOWN_SITE)


def parse_mapping(text: str) -> Mapping:
    doc = json.loads(text)
    peers = tuple(
        ExpectedPeer(str(p["site"]), str(p["public_key"]), tuple(p["allowed_ips"]),
                     next((k for k in KINDS if k == p.get("kind", KINDS[0])), "unknown"), str(p.get("via", "")))
        for p in doc["peers"]
    )  # fmt: skip
    return Mapping(site=str(doc["site"]), interface=str(doc["interface"]), peers=peers)


def endpoint_label(endpoint: str | None) -> str | None:
    """`wg show`'s HOST:PORT ([IPv6]:PORT), canonical, or INVALID: a bounded label value, whatever the dump held."""
    if endpoint is None:
        return None
    host, _, port = endpoint.rpartition(":")
    if len(endpoint) > MAX_ENDPOINT_CHARS or not ENDPOINT_CHARS.issuperset(endpoint) or not port.isdigit():
        return INVALID
    v6 = host.startswith("[") and host.endswith("]")
    try:
        ip = ipaddress.ip_address(host[1:-1] if v6 else host)
    except ValueError:
        return INVALID
    return (
        INVALID
        if (ip.version == 6) != v6 or int(port) > 65535
        else f"[{ip}]:{int(port)}"
        if v6
        else f"{ip}:{int(port)}"
    )


class Seen(NamedTuple):
    endpoint: str  # the last endpoint_label observed (never None: a peer with none keeps its last known)
    roamed: float  # unix time it was last seen to change; 0: not since the state began


def track(previous: dict[str, Seen], current: dict[str, str | None], now: float) -> dict[str, Seen]:
    """The state after observing `current` (public key -> endpoint label). A roam: the endpoint changed from one
    address to another. A first address is learnt, not a roam; a peer with none (wg0 restarted, the peer not heard
    since) keeps its last known one: A, none, A is no roam, A, none, B is one. Peers not in `current` are dropped."""
    state = {}
    for key, endpoint in current.items():
        before = previous.get(key)
        if endpoint is not None and (before is None or before.endpoint != endpoint):
            state[key] = Seen(endpoint, 0.0 if before is None else now)
        elif before is not None:
            state[key] = before
    return state


def parse_state(text: str) -> dict[str, Seen]:
    """The state file (roam_state writes a line `KEY ENDPOINT ROAMED` per peer); other lines are dropped."""
    state = {}
    for line in text.splitlines() if len(text) <= MAX_STATE_BYTES else ():
        key, endpoint, roamed = fields if len(fields := line.split()) == 3 else ("", "", "")
        number = roamed.replace(".", "", 1)
        if endpoint_label(endpoint) == endpoint and number.isascii() and number.isdigit():
            state[key] = Seen(endpoint, float(roamed))
    return state


# --- formatting (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:  # what one run observed (None: could not be read)
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


def observed(mapping: Mapping, snap: Snapshot) -> dict[str, str | None]:
    """The endpoint labels of the interface's peers that the mapping knows: at most one per mapped peer."""
    known = {p.public_key for p in mapping.direct}
    mine = [p for p in snap.peers or () if p.interface == mapping.interface and p.public_key in known]
    return {p.public_key: endpoint_label(p.endpoint) for p in mine}


def format_metrics(mapping: Mapping, snap: Snapshot, roams: dict[str, Seen] | None = None) -> str:
    """Each family's HELP, TYPE and samples together, in METRICS order, without timestamps; roams: track's state."""
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
    add("wgmesh_peers_expected", site, len(mapping.direct))
    for peer in sorted(mine, key=lambda p: (mapping.site_of(p.public_key), p.public_key)):
        labels = {**iface, "peer_site": mapping.site_of(peer.public_key), "peer": peer.public_key}
        add("wgmesh_peer_latest_handshake_seconds", labels, peer.latest_handshake)
        add("wgmesh_peer_receive_bytes_total", labels, peer.rx_bytes)
        add("wgmesh_peer_transmit_bytes_total", labels, peer.tx_bytes)
    for expected in mapping.peers:
        info = {**iface, "peer_site": expected.site, "peer": expected.public_key, "kind": expected.kind}
        add("wgmesh_peer_info", {**info, "via": expected.via} if expected.via else info, 1)
    endpoints = observed(mapping, snap)
    for key, endpoint in sorted(endpoints.items(), key=lambda item: (mapping.site_of(item[0]), item[0])):
        labels = {**iface, "peer_site": mapping.site_of(key), "peer": key}
        if endpoint is not None:
            add("wgmesh_peer_endpoint_info", {**labels, "endpoint": endpoint}, 1)
        if roams is not None:
            add("wgmesh_peer_last_roam_timestamp_seconds", labels, roams[key].roamed if key in roams else 0)
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
    peers = None if dump is None else tuple(parse_dump(dump))
    routes_seen = None if parsed is None else tuple(parsed)
    return Snapshot(now(), peers, None if link is None else parse_link(link), read_ip_forward(), routes_seen)


def write_atomically(path: str, text: str, mode: int = 0o644) -> None:
    """One rename (wg_mesh.gateway.files.atomic_write): readers see the old or the new file, never a part, and nothing
    planted at the path is written through. The temporary file is in the same directory and does not end in .prom,
    so node-exporter never reads it."""
    atomic_write(path, text, mode)


def main(argv: Sequence[str] | None = None) -> int:
    # Not __doc__: the live user data ships this script without docstrings (mesh.gateway.ship.compact).
    parser = argparse.ArgumentParser(prog="wg-mesh-metrics", description=DESCRIPTION)
    parser.add_argument("--mapping", default=MAPPING_PATH, help=f"site/peer mapping (default {MAPPING_PATH})")
    parser.add_argument("--out", default=TEXTFILE_PATH, help=f"textfile to replace (default {TEXTFILE_PATH})")
    parser.add_argument("--state", help=f"last known endpoints, for roams (the unit's: {STATE_PATH}; unset: none)")
    args = parser.parse_args(argv)
    try:
        mapping = parse_mapping(read_text(args.mapping) or "")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"wg-mesh-metrics: cannot read the mapping {args.mapping}: {exc!r}", file=sys.stderr)
        return 1
    try:
        snapshot = collect(mapping)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"wg-mesh-metrics: unexpected command output: {exc}", file=sys.stderr)
        return 1
    roams = None if args.state is None else roam_state(args.state, observed(mapping, snapshot), snapshot.now)
    write_atomically(args.out, format_metrics(mapping, snapshot, roams))
    return 0


def roam_state(path: str, current: dict[str, str | None], now: float) -> dict[str, Seen] | None:
    """The state after this run, saved if it changed (none, or unreadable: a fresh start); None if it cannot be."""
    text = ""
    try:
        text = read_text(path, MAX_STATE_BYTES) or ""
    except OSError as exc:  # a symlink, not a regular file, too large: a fresh start (and the write replaces it)
        print(f"wg-mesh-metrics: ignoring the state {path}: {exc!r}", file=sys.stderr)
    state = track(parse_state(text), current, now)
    saved = "".join(f"{key} {seen.endpoint} {seen.roamed}\n" for key, seen in sorted(state.items()))
    try:
        if saved != text:
            write_atomically(path, saved)  # its directory made if missing (files.atomic_write)
    except OSError as exc:
        print(f"wg-mesh-metrics: cannot save the state {path}: {exc!r}", file=sys.stderr)
        return None
    return state


if __name__ == "__main__":
    sys.exit(main())
