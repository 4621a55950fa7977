"""On a dynamic-address site (`endpoint: dynamic`): re-arm a peer that lost its session with us, so it is back in
seconds after a gateway restarts, reboots, is replaced or fails over.

The gap: the gateways have no endpoint for a dynamic site (wg_mesh.plan.topology); a gateway that restarted has lost
its session keys, cannot decrypt our packets of the old session and cannot initiate. It learns our address only from
our next handshake initiation, and wireguard-go sends one only when (device/, WireGuard/wireguard-go at
f333402bd9cbe0f3eeb02507bd14e23d7d639280):

- the current keypair is older than REKEY_AFTER_TIME, 120 s (constants.go `RekeyAfterTime`; send.go
  `keepKeyFreshSending`);
- or data (not a keepalive: send.go sets `dataSent` only for `len(elem.packet) != MessageKeepaliveSize`) got no
  answer for KEEPALIVE_TIMEOUT + REKEY_TIMEOUT, 15 s (timers.go `timersDataSent` arms `newHandshake`). Keepalives
  alone never start one: an idle site waited up to 2 minutes (the lab: 11 s, 84 s, 107 s).

The signal is not the peer's own persistent keepalive: timers.go `timersAnyAuthenticatedPacketTraversal` re-arms the
persistent-keepalive timer on every authenticated packet sent *or received*, so of two idle peers with the same
interval only the one whose timer fires first keeps sending; the other may stay silent while healthy. What a peer
with a session always does: a data packet it receives arms its `sendKeepalive` timer (receive.go
`timersDataReceived`), and unless it sends something else first it answers with a keepalive after KEEPALIVE_TIMEOUT,
10 s (timers.go `expiredSendKeepalive`). So:

1. probe: a peer we received nothing from for more than `persistent_keepalive` + MARGIN_S gets one empty UDP datagram
   to its overlay address (the /32 of its AllowedIPs in `--overlay`; port 9, discard), a data packet through the
   tunnel. A relayed site's entry for its relay carries its partners' overlay /32s too, in whatever order `wg show`
   lists them; a probe to a partner would work (the relay forwards it and answers our data the same), but it is the
   relay's own address that is probed: the partners' ranges are known locally (`relayed_ranges`: agent.json's pinned
   `trust.relay` in `delivery: live`; else the rendered wg0.conf, where each peer's own /32 comes first);
2. re-arm: if still nothing came from it KEEPALIVE_TIMEOUT + MARGIN_S after the probe, its session is gone: remove the
   peer and add it again with its own settings from the same dump (`wg set`, argv lists, no shell). A new wireguard-go
   peer has no keypair, and `lastSentHandshake` is set REKEY_TIMEOUT + 1 s in the past when it starts (peer.go
   `Start`), so no rate limit holds its first initiation (send.go `SendHandshakeInitiation`); setting
   persistent-keepalive on a peer that had none sends a keepalive at once (uapi.go: `pkaOn`, then `SendKeepalive` in
   `handlePostConfig`), and a keepalive with no keypair sends a handshake initiation (send.go `SendStagedPackets`).
   The gateway answers it and learns our address; WireGuard's own timers retry a lost initiation every REKEY_TIMEOUT.

Rules: a peer that is receiving is never touched (a healthy one answers the probe within KEEPALIVE_TIMEOUT); a peer
without an endpoint, a keepalive or a /32 is never watched; a re-arm starts the peer's watch again (the next one comes
at the earliest a full probe cycle later, never within MIN_GAP_S). Pure `Watchdog.due` and `parse_dump`; `main` is
the thin shell the dynamic site's cloud-init runs as a service (wg_mesh.plan.rearmunit). Standard library only; it
reads only the local `wg show`, agent.json and wg0.conf (neither is written here; a file that does not parse is as
none: the first /32 is probed) and talks only to the peers' overlay addresses, through the tunnel.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

INTERFACE = "wg0"
MARGIN_S = 3.0  # a keepalive's jitter, a slow tick
KEEPALIVE_TIMEOUT_S = 10.0  # wireguard-go constants.go KeepaliveTimeout: a peer answers our data within it
PROBE_PORT = 9  # discard: nobody answers; the peer's WireGuard does (its keepalive)
MIN_GAP_S = 5.0  # REKEY_TIMEOUT: WireGuard retries a lost initiation itself after that
TICK_S = 1.0
MAX_PEERS = 4096
MAX_LINE = 8192
MAX_COUNTER = 2**64 - 1
KEY = re.compile(r"^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$")
ENDPOINT = re.compile(r"^\d{1,3}(\.\d{1,3}){3}:\d{1,5}$")
CIDR = re.compile(r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")
AGENT_CONFIG = "/etc/wg-mesh/agent.json"  # wg_mesh.gateway.ship.CONFIG_PATH (a test keeps them equal)
WG_CONF_DIR = "/etc/wireguard"  # wg-quick's; the interface's file is IFACE.conf (wg_mesh.gateway.wgconf.WG_CONF_PATH)
MAX_FILE = 1 << 20  # bytes read of either file
MAX_RANGES = 65 * 512  # a relay entry's: each partner's overlay /32 and 64 cidrs (wg_mesh.gateway.relaytrust)


@dataclass(frozen=True)
class PeerLine:
    """A peer of `wg show IFACE dump`, its fields checked (no preshared key, which the dump holds, is kept)."""

    key: str
    endpoint: str  # "" without one
    allowed_ips: tuple[str, ...]
    rx: int
    tx: int
    keepalive: int  # 0: off


def _counter(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) <= 20 and int(text) <= MAX_COUNTER else None


def parse_dump(dump: str) -> dict[str, PeerLine]:
    """The peers of `wg show IFACE dump` (the first line is the interface's); a line that does not parse is left out,
    as are lines beyond MAX_PEERS and over MAX_LINE characters."""
    peers: dict[str, PeerLine] = {}
    for line in dump.splitlines()[1 : MAX_PEERS + 1]:
        fields = line.split("\t") if len(line) <= MAX_LINE else []
        if len(fields) != 8 or not KEY.match(fields[0]):
            continue
        key, _psk, endpoint, allowed, _handshake, rx_text, tx_text, keepalive_text = fields
        rx, tx = _counter(rx_text), _counter(tx_text)
        keepalive = 0 if keepalive_text == "off" else _counter(keepalive_text)
        ips = tuple(ip for ip in allowed.split(",") if ip and ip != "(none)")
        if rx is None or tx is None or keepalive is None or keepalive > 65535:
            continue
        if (endpoint != "(none)" and not ENDPOINT.match(endpoint)) or not all(CIDR.match(ip) for ip in ips):
            continue
        peers[key] = PeerLine(key, "" if endpoint == "(none)" else endpoint, ips, rx, tx, keepalive)
    return peers


Ranges = frozenset[ipaddress.IPv4Network]


def probe_address(peer: PeerLine, overlay: ipaddress.IPv4Network | None, relayed: Ranges = frozenset()) -> str | None:
    """The peer's overlay address: the first /32 of its AllowedIPs inside `overlay` (None: any) and in none of the
    `relayed` partners' ranges; without one (nothing known locally, a file that lies), the first /32 inside
    `overlay`: a relayed partner's still brings an answer through the relay."""
    addresses = [ipaddress.IPv4Address(ip.removesuffix("/32")) for ip in peer.allowed_ips if ip.endswith("/32")]
    inside = [a for a in addresses if overlay is None or a in overlay]
    own = [a for a in inside if not any(a in r for r in relayed)]
    return str(own[0]) if own else str(inside[0]) if inside else None


def _networks(values: object) -> list[ipaddress.IPv4Network]:
    if not isinstance(values, list):
        raise ValueError("not a list")
    return [ipaddress.IPv4Network(v, strict=True) for v in values if isinstance(v, str)]


def relayed_from_agent(text: str) -> Ranges | None:
    """agent.json's pinned `trust.relay` (wg_mesh.gateway.relaytrust): every partner's ranges; an empty set for a site
    that is not relayed; None when there is no trust to read (user-data mode has no agent.json) or it does not
    parse."""
    try:
        trust = json.loads(text).get("trust")
        if not isinstance(trust, dict):
            return None
        relay = trust.get("relay")
        if relay is None:
            return frozenset()
        partners = relay["partners"]
        found = [n for ranges in partners.values() for n in _networks(ranges)] if isinstance(partners, dict) else []
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
    return frozenset(found[:MAX_RANGES])


def relayed_from_conf(text: str, overlay: ipaddress.IPv4Network | None) -> Ranges:
    """The rendered wg-quick file (wg_mesh.gateway.wgconf.wg_quick_conf): each peer's AllowedIPs start with its own
    overlay /32 (wg_mesh.plan.topology.peer_allowed_ips); any later overlay /32 on the same peer (the relay's entry)
    is a relayed partner's. Only `PublicKey`, `AllowedIPs` and section lines are looked at."""
    found: list[ipaddress.IPv4Network] = []
    for raw in text.splitlines():
        key, _, value = raw.split("#", 1)[0].partition("=")
        if key.strip() != "AllowedIPs":
            continue
        try:
            nets = [ipaddress.IPv4Network(v.strip(), strict=True) for v in value.split(",") if v.strip()]
        except ValueError:
            continue
        mine = [n for n in nets if n.prefixlen == 32 and (overlay is None or n.subnet_of(overlay))]
        found += mine[1:]
    return frozenset(found[:MAX_RANGES])


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_FILE)
    except OSError:
        return None


def relayed_ranges(
    interface: str, overlay: ipaddress.IPv4Network | None, agent_config: str = AGENT_CONFIG, conf_dir: str = WG_CONF_DIR
) -> Ranges:
    """The relayed partners' ranges this site knows locally: agent.json's pinned trust when it has one (live), else
    the interface's rendered wg-quick file (user-data); none when neither can be read."""
    text = _read(agent_config)
    pinned = relayed_from_agent(text) if text is not None else None
    if pinned is not None:
        return pinned
    conf = _read(os.path.join(conf_dir, f"{interface}.conf"))
    return relayed_from_conf(conf, overlay) if conf is not None else frozenset()


class LocalRanges:
    """`relayed_ranges`, read again only when either file changes (its mtime, size or inode)."""

    def __init__(self, interface: str, overlay: ipaddress.IPv4Network | None, **paths: str) -> None:
        self.interface, self.overlay = interface, overlay
        self.paths = {"agent_config": AGENT_CONFIG, "conf_dir": WG_CONF_DIR, **paths}
        self.stamp: tuple[object, ...] | None = None
        self.ranges: Ranges = frozenset()

    def files(self) -> tuple[str, str]:
        return self.paths["agent_config"], os.path.join(self.paths["conf_dir"], f"{self.interface}.conf")

    def get(self) -> Ranges:
        stamp = tuple(_stamp(path) for path in self.files())
        if stamp != self.stamp:
            self.stamp, self.ranges = stamp, relayed_ranges(self.interface, self.overlay, **self.paths)
        return self.ranges


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


@dataclass
class _Watch:
    rx: int
    tx: int
    since: float  # when rx last grew (or the watch started)
    probed: float | None = None  # when this quiet spell's probe left
    rearmed: float = float("-inf")


@dataclass(frozen=True)
class Actions:
    probe: tuple[tuple[str, str], ...] = ()  # (key, overlay address)
    rearm: tuple[str, ...] = ()


class Watchdog:
    """Pure: `due(now, dump)` every tick (monotonic seconds) -> what to do now (often nothing)."""

    def __init__(
        self, overlay: ipaddress.IPv4Network | None = None, margin_s: float = MARGIN_S, min_gap_s: float = MIN_GAP_S
    ) -> None:
        self.overlay, self.margin_s, self.min_gap_s = overlay, margin_s, min_gap_s
        self.watch: dict[str, _Watch] = {}
        self.relayed: Ranges = frozenset()  # the relayed partners' ranges (the shell keeps it current): never probed

    def probe_after(self, keepalive: int) -> float:
        return keepalive + self.margin_s

    @property
    def answer_within(self) -> float:
        return KEEPALIVE_TIMEOUT_S + self.margin_s

    def due(self, now: float, dump: str) -> Actions:
        peers = parse_dump(dump)
        self.watch = {k: w for k, w in self.watch.items() if k in peers}  # removed peers are forgotten
        probe, rearm = [], []
        for key, peer in sorted(peers.items()):
            w = self.watch.get(key)
            if w is None or peer.rx < w.rx or peer.tx < w.tx:  # new, or its counters restarted (a re-arm, a restart)
                self.watch[key] = _Watch(peer.rx, peer.tx, now, rearmed=w.rearmed if w else float("-inf"))
                continue
            if peer.rx > w.rx:
                w.since, w.probed = now, None
            w.rx, w.tx = peer.rx, peer.tx
            address = probe_address(peer, self.overlay, self.relayed)
            if not peer.endpoint or not peer.keepalive or address is None:
                continue
            if w.probed is None:
                if now - w.since > self.probe_after(peer.keepalive):
                    w.probed = now
                    probe.append((key, address))
            elif now - w.probed > self.answer_within and now - w.rearmed >= self.min_gap_s:
                w.rearmed, w.since, w.probed = now, now, None
                rearm.append(key)
        return Actions(tuple(probe), tuple(rearm))


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)


def rearm_commands(interface: str, peer: PeerLine) -> list[list[str]]:
    """Remove the peer, then add it with its endpoint, AllowedIPs and keepalive (a peer added with a keepalive sends
    one at once: with no keypair, a handshake initiation)."""
    add = ["wg", "set", interface, "peer", peer.key, "endpoint", peer.endpoint]
    add += ["persistent-keepalive", str(peer.keepalive), "allowed-ips", ",".join(peer.allowed_ips)]
    return [["wg", "set", interface, "peer", peer.key, "remove"], add]


def send_probe(address: str) -> None:
    """One empty UDP datagram to the peer's overlay address: a data packet through the tunnel."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"", (address, PROBE_PORT))


def tick(
    watchdog: Watchdog,
    interface: str,
    now: float,
    runner: Runner,
    log: Callable[[str], None],
    probe: Callable[[str], None] = send_probe,
) -> Actions:
    """One tick of the service: read the dump, probe the quiet peers, re-arm the silent ones; what it did."""
    try:
        shown = runner(["wg", "show", interface, "dump"])
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"wg show {interface} dump: {exc}")
        return Actions()
    if shown.returncode != 0:
        return Actions()
    actions = watchdog.due(now, shown.stdout)
    peers = parse_dump(shown.stdout)
    for key, address in actions.probe:
        try:
            probe(address)
        except OSError as exc:
            log(f"probe of peer {key[:8]}... at {address}: {exc}")
    for key in actions.rearm:
        peer = peers[key]
        for argv in rearm_commands(interface, peer):
            try:
                done = runner(argv)
                problem = done.stderr.strip()[:200] if done.returncode != 0 else ""
            except (OSError, subprocess.SubprocessError) as exc:
                problem = str(exc)
            if problem:
                log(f"re-arm of peer {key[:8]}...: {' '.join(argv[:3])} failed: {problem}")
                break
        else:
            log(f"peer {key[:8]}... ({peer.endpoint}): no answer to a probe within {watchdog.answer_within:.0f} s: "
                "re-armed (a new handshake now)")  # fmt: skip
    return actions


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-rearm", description=__doc__.splitlines()[0])
    parser.add_argument("--interface", default=INTERFACE)
    parser.add_argument("--overlay", type=ipaddress.IPv4Network, help="the mesh's overlay_cidr: where probes go")
    parser.add_argument("--tick", type=float, default=TICK_S, help="seconds between two reads of wg show")
    args = parser.parse_args(argv)
    watchdog = Watchdog(args.overlay)
    local = LocalRanges(args.interface, args.overlay)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    while True:
        watchdog.relayed = local.get()
        tick(watchdog, args.interface, time.monotonic(), run, log)
        time.sleep(args.tick)


if __name__ == "__main__":
    sys.exit(main())
