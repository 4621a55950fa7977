"""On a dynamic-address site (`endpoint: dynamic`): re-arm a peer that lost its session with us, so it is back in
seconds after a gateway restarts, reboots, is replaced or fails over.

The gap: the gateways have no endpoint for a dynamic site (wg_mesh.plan.topology); a gateway that restarted has lost
its session keys, cannot decrypt our keepalives (data packets of the old session) and cannot initiate. It learns our
address only from our next handshake initiation, and wireguard-go sends one only when (device/, WireGuard/wireguard-go
at f333402bd9cbe0f3eeb02507bd14e23d7d639280):

- the current keypair is older than REKEY_AFTER_TIME, 120 s (constants.go `RekeyAfterTime`; send.go
  `keepKeyFreshSending`);
- or data (not a keepalive: send.go `dataSent` is only set for `len(elem.packet) != MessageKeepaliveSize`) got no answer
  for KEEPALIVE_TIMEOUT + REKEY_TIMEOUT, 15 s (timers.go `timersDataSent` arms `newHandshake` with
  `KeepaliveTimeout + RekeyTimeout`). Our persistent keepalives alone never start one.

The lab measured 11 s, 84 s and 107 s of outage for traffic the cloud side starts.

The signal: a gateway keeps `PersistentKeepalive` for us, so while it holds a session it sends something at least every
`persistent_keepalive` seconds (timers.go `expiredPersistentKeepalive`). A peer whose rx bytes (`wg show wg0 dump`) did
not grow for more than 2 x persistent_keepalive + MARGIN_S while ours (tx) did has lost its session (or is down).

The re-arm: remove the peer and add it again with its own settings read from the same dump (`wg set`, argv lists, no
shell; delivery: live asks the agent instead, `Agent.rearm`, as the HA kick does: wg_mesh.gateway.ha_kick). A new
wireguard-go peer has no keypair, and its `lastSentHandshake` is set REKEY_TIMEOUT + 1 s in the past when it starts
(peer.go `Start`), so no rate limit holds its first initiation (send.go `SendHandshakeInitiation`); setting
persistent-keepalive on a peer that had none sends a keepalive at once (uapi.go: `pkaOn`, then `SendKeepalive` in
`handlePostConfig`), and a keepalive with no keypair sends a handshake initiation (send.go `SendStagedPackets`: no
current keypair -> `SendHandshakeInitiation`). The gateway answers it, learns our address from it, and traffic flows.
WireGuard's own timers retry a lost initiation every REKEY_TIMEOUT (5 s) after that.

Rules: a peer that is receiving is never touched; a peer without an endpoint or a keepalive is never touched (it
cannot initiate, or has no signal); a re-arm resets the peer's watch, so the next one comes at the earliest another
2 x keepalive + margin later (and never within MIN_GAP_S). Pure `Watchdog.due` and `parse_dump`; `main` is the thin
shell the `delivery: user-data` cloud-init runs as a service (wg_mesh.plan.rearmunit). Standard library only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

INTERFACE = "wg0"
MARGIN_S = 3.0  # beyond two keepalive intervals: a keepalive's jitter and a slow tick
MIN_GAP_S = 5.0  # REKEY_TIMEOUT: WireGuard retries a lost initiation itself after that
TICK_S = 1.0
MAX_PEERS = 4096
MAX_LINE = 8192
MAX_COUNTER = 2**64 - 1
KEY = re.compile(r"^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$")
ENDPOINT = re.compile(r"^\d{1,3}(\.\d{1,3}){3}:\d{1,5}$")
CIDR = re.compile(r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")


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


@dataclass
class _Watch:
    rx: int
    tx: int
    since: float  # when rx last grew (or the watch started)
    tx_at_since: int  # tx then: we must have sent since for silence to mean anything
    rearmed: float = float("-inf")


class Watchdog:
    """Pure: `due(now, dump)` every tick (monotonic seconds) -> the peers to re-arm now (often none)."""

    def __init__(self, margin_s: float = MARGIN_S, min_gap_s: float = MIN_GAP_S) -> None:
        self.margin_s, self.min_gap_s = margin_s, min_gap_s
        self.watch: dict[str, _Watch] = {}

    def silent_after(self, keepalive: int) -> float:
        return 2 * keepalive + self.margin_s

    def due(self, now: float, dump: str) -> list[str]:
        peers = parse_dump(dump)
        self.watch = {k: w for k, w in self.watch.items() if k in peers}  # removed peers are forgotten
        due = []
        for key, peer in sorted(peers.items()):
            w = self.watch.get(key)
            if w is None or peer.rx < w.rx or peer.tx < w.tx:  # new, or its counters restarted (a re-arm, a restart)
                self.watch[key] = _Watch(peer.rx, peer.tx, now, peer.tx)
                continue
            if peer.rx > w.rx:
                w.since, w.tx_at_since = now, peer.tx
            w.rx, w.tx = peer.rx, peer.tx
            if not peer.endpoint or not peer.keepalive:
                continue
            silent = now - w.since > self.silent_after(peer.keepalive) and peer.tx > w.tx_at_since
            if silent and now - w.rearmed >= self.min_gap_s:
                w.rearmed, w.since, w.tx_at_since = now, now, peer.tx
                due.append(key)
        return due


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)


def rearm_commands(interface: str, peer: PeerLine) -> list[list[str]]:
    """Remove the peer, then add it with its endpoint, AllowedIPs and keepalive (a peer added with a keepalive sends
    one at once: with no keypair, a handshake initiation)."""
    add = ["wg", "set", interface, "peer", peer.key, "endpoint", peer.endpoint]
    add += ["persistent-keepalive", str(peer.keepalive), "allowed-ips", ",".join(peer.allowed_ips)]
    return [["wg", "set", interface, "peer", peer.key, "remove"], add]


def tick(watchdog: Watchdog, interface: str, now: float, runner: Runner, log: Callable[[str], None]) -> list[str]:
    """One tick of the service: read the dump, re-arm the silent peers; the keys re-armed."""
    try:
        shown = runner(["wg", "show", interface, "dump"])
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"wg show {interface} dump: {exc}")
        return []
    if shown.returncode != 0:
        return []
    keys = watchdog.due(now, shown.stdout)
    peers = parse_dump(shown.stdout)
    for key in keys:
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
            quiet = watchdog.silent_after(peer.keepalive)
            log(f"peer {key[:8]}... ({peer.endpoint}): nothing received for over {quiet:.0f} s while we sent: re-armed")
    return keys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-rearm", description=__doc__.splitlines()[0])
    parser.add_argument("--interface", default=INTERFACE)
    parser.add_argument("--tick", type=float, default=TICK_S, help="seconds between two reads of wg show")
    args = parser.parse_args(argv)
    watchdog = Watchdog()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    while True:
        tick(watchdog, args.interface, time.monotonic(), run, log)
        time.sleep(args.tick)


if __name__ == "__main__":
    sys.exit(main())
