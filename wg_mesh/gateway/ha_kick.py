"""After a promotion: re-initiate, every second for a while, the handshake with each peer that has none since.

Why: wireguard-go sends a handshake initiation only if its last one left at least REKEY_TIMEOUT (5 s) ago
(`SendHandshakeInitiation` checks `lastSentHandshake`, device/send.go), and a lost initiation is retried only after
REKEY_TIMEOUT + jitter (device/timers.go). The promotion's ping initiates at once, but that initiation is lost when
it leaves before the cloud's data plane follows the moved address (lag undocumented on AWS and GCP) or when
wireguard-go already tried this peer within the last 5 s (a packet routed into the standby's wg0, whose peers have
no endpoint, is an attempt too: `lastSentHandshake` is set before the send fails; the routes move in parallel with
the promotion, so the workload's packets can get there first: tests/test_ha_netns.py). Either way the peer then
waits for the retry: up to 5 s more of outage.

The kick: a second after the promotion, and every second after it for `for_s`, each peer whose latest handshake
(`wg show wg0 dump`, unix seconds) is older than the promotion is removed and re-added through the agent's
level-triggered apply (`Agent.rearm`: a new wireguard-go peer has no `lastSentHandshake`, so the next packet
initiates at once) and pinged. A peer with a handshake since the promotion is never touched; the kick ends when
every peer has one, or after `for_s` (then WireGuard's own retries go on). wireguard-go keeps running.
"""

from __future__ import annotations

import math

KICK_EVERY_S = 1.0  # more than a handshake's round trip (a re-arm drops an initiation still in flight)
KICK_FOR_S = 20.0  # REKEY_TIMEOUT's retries have taken over well before


def stale_peers(dump: str, since_wall: float) -> list[str]:
    """Public keys of the peers in `wg show IFACE dump` whose latest handshake (unix seconds, 0 = never) is before
    the second of `since_wall`; a handshake within that second counts as fresh (the dump has 1 s resolution)."""
    stale = []
    for fields in (line.split("\t") for line in dump.splitlines()[1:]):
        if len(fields) == 8 and fields[4].isdigit() and int(fields[4]) < math.floor(since_wall):
            stale.append(fields[0])
    return sorted(stale)


class Kick:
    """The schedule, pure: `promoted` at the promotion, `due` every tick of the active, `stop` at a demotion."""

    def __init__(self, every_s: float = KICK_EVERY_S, for_s: float = KICK_FOR_S) -> None:
        self.every_s, self.for_s = every_s, for_s
        self.since_wall: float | None = None  # None: no kick running
        self.started = self.last = 0.0

    def promoted(self, now: float, wall: float) -> None:
        """The promotion's own ping is the first initiation: the first kick comes `every_s` after it."""
        self.since_wall, self.started, self.last = wall, now, now

    def stop(self) -> None:
        self.since_wall = None

    def due(self, now: float, dump: str) -> list[str]:
        """The peers to re-arm and ping now (often none)."""
        if self.since_wall is None:
            return []
        if now - self.started > self.for_s:
            self.stop()
            return []
        if now - self.last < self.every_s:
            return []
        stale = stale_peers(dump, self.since_wall)
        if not stale:
            self.stop()
            return []
        self.last = now
        return stale
