"""Announced key rotation: every party switches to a rotated key at the same announced moment, `key_at`.

A document names a site's new public key `rotation_lead_seconds` before it becomes valid (README, "Rotating a key"):
its own `key_at` (the rotating site) and its peer entry's `key_at` (everyone else). Until then:
- a peer NAME that wg0 already runs with another public key keeps the running key; at key_at the timer thread adds
  the new peer with the same AllowedIPs (WireGuard moves them to it), then removes the old one;
- the rotating site keeps its running private key (wg0.conf's), prefetches the new one from the store, checks that
  it matches the document's public key, and sets it at key_at (`wg set wg0 private-key /dev/stdin`);
- a party that runs no key for that name (a fresh agent, a new peer) uses the new key at once.
Then the level-triggered apply runs with the switched document (wg0.conf rewritten). Nothing restarts.

Why this loses (almost) nothing: setting a new private key expires every session and resets the handshake timer
(wireguard-go `SetPrivateKey` -> `ExpireCurrentKeypairs`; the kernel's `wg_noise_expire_current_peer_keypairs`), and a
new peer has never sent a handshake: whichever side switches last initiates with its next packet and both keys
match. Two things made that "almost" a 0.5 s silence now and then (issue 32 item 10: the lab's live drill lost 0-3
pings in most runs, and once 35 with a 600 ms silence; a run on 58f58f7 logged a 535 ms silence, a 1.3 s stream stall
and the rotating side's re-arm; docs/benchmarks.md 8.1):
- the order. When a peer swaps first, the rotating site's packets on its old session reach a peer that dropped the old
  key: lost, for as long as the two switches are apart (tens of ms under load). When the rotating site switches
  first, nothing is lost: its own sessions expire (its packets wait in WireGuard's staged queue for the handshake),
  the peer's packets on the old session still decrypt there. So the rotating site switches at key_at and every peer
  swaps its key PEER_SWITCH_LAG_S later, more than the clocks' tolerance and the agents' own spread: the order is the
  lossless one whatever the skew;
- the initiation. "Its next packet" is there only when traffic leaves that side: with a flow in one direction (A's
  host sends, B's host only answers) the rotating side's initiation reaches a peer that has not swapped yet and is
  dropped, and the peer then swaps with nothing to send (the answers wait for requests that cannot reach it): nobody
  initiated until the kick below. So each side, right after its switch, sends one ping to each switched peer's overlay
  address (its own key: every peer), in the active role: the side that switches last initiates at once, whatever the
  traffic (the same move as an HA promotion's, wg_mesh.gateway.ha_run).
An initiation sent in the skew window is still dropped, and its sender would wait REKEY_TIMEOUT (5 s) to retry; so,
every SWITCH_KICK_S from key_at + SWITCH_KICK_S for SWITCH_KICK_FOR_S, each swapped peer without a handshake since
key_at is removed and re-added (the mechanism of wg_mesh.gateway.ha_kick: a fresh peer initiates on its next packet).

Clocks: the parties must agree on the time within CLOCK_TOLERANCE_S (100 ms); the kick SWITCH_KICK_S after key_at lies
above it plus the peers' lag and a handshake's round trip, so the other side has switched by then, the handshake the
peers' swap starts is over, and a re-armed peer's initiation is answered. What the clouds document is far inside it:
AWS, "customers have depended on the Amazon Time Sync Service to provide one millisecond clock accuracy", microseconds
with the PTP hardware clock on supported instances (AWS Compute Blog, "It's About Time: Microsecond-Accurate Clocks on
Amazon EC2 Instances", https://aws.amazon.com/blogs/compute/
its-about-time-microsecond-accurate-clocks-on-amazon-ec2-instances/; the EC2 user guide's "Set the time" page says how
to point chrony at 169.254.169.123); GCE, "Compute Engine instances are preconfigured to use network time protocol
(NTP)", Google's internal servers, and "accuracy within 1 ms" with chrony and ptp_kvm (Compute Engine docs, "Configure
time synchronization": https://cloud.google.com/compute/docs/instances/time-synchronization, and "Configure NTP on a
VM": https://cloud.google.com/compute/docs/instances/configure-ntp; Google smears a leap second over 24 hours there).
Static sites: the operator's NTP (README). A larger skew costs at most the skew plus the kick's period, and past
SWITCH_KICK_FOR_S WireGuard's own 5 s retry: never more than the unannounced rotation did.

Pure decisions (`running_peers`, `hold`) and a `RotatingApplier` (the agent's Applier with the hold and the timer),
whose clock, runner and waiting are injectable: tests drive `tick(now)` with a fake clock.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .apply import Applier, ApplyError, Paths, Runner, read_text
from .document import Document, is_key
from .ha_kick import stale_peers
from .pmtu_heal import overlay_address
from .sources import FetchError
from .wgconf import INTERFACE, Peer, parse_wg_quick_conf

CLOCK_TOLERANCE_S = 0.1  # the parties' clocks agree within this (module docstring: AWS Time Sync, GCE NTP)
# A peer's key is swapped this long after its key_at, so that the rotating site, whose own key switches at key_at, has
# switched first (module docstring: that order loses nothing): > CLOCK_TOLERANCE_S + the agents' own spread (timer,
# lock, `wg set`: at most 72 ms over the lab's runs on a loaded 2-core machine, docs/benchmarks.md 8.1)
PEER_SWITCH_LAG_S = 0.2
# the first re-arm after key_at: > PEER_SWITCH_LAG_S + CLOCK_TOLERANCE_S + a handshake's round trip (<= 0.3 s between
# any two regions), so that it never drops the handshake the peers' swap starts
SWITCH_KICK_S = 0.8
SWITCH_KICK_FOR_S = 5.0  # WireGuard's REKEY_TIMEOUT: by then its own retry has come
APPLY_GUARD_S = 1.0  # an apply starting this close before a switch performs the switch first, at its moment
OWN = ""  # the name of the site's own key in a Switch
# The longest an old key is held: the config's largest rotation_lead_seconds (a day, wg_mesh.config) + an hour for
# `pulumi up`. A key_at further ahead is not honoured (the new key applies at once): a document must not be able to
# keep a revoked key running for long.
MAX_HOLD_S = 86_400 + 3_600
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # a site name (the config model's DNS label)


@dataclass(frozen=True)
class Switch:
    """One announced key change: the site's own (`name` OWN) or a peer's, from `old` to `new` (public keys) at `at`."""

    at: int
    name: str
    old: str
    new: str

    @property
    def due(self) -> float:
        """When it is performed: the own key at `at`, a peer's PEER_SWITCH_LAG_S later."""
        return float(self.at) + (0.0 if self.name == OWN else PEER_SWITCH_LAG_S)


@dataclass(frozen=True)
class Held:
    """What runs now: the document with running keys kept, and the switches still to come (earliest first)."""

    doc: Document
    switches: tuple[Switch, ...]


def running_peers(conf: str | None) -> dict[str, str]:
    """Peer name -> public key in a wg0.conf the agent wrote (wgconf.wg_quick_conf: `# NAME` above each [Peer])."""
    peers: dict[str, str] = {}
    comment = current = None
    for raw in (conf or "").splitlines():
        line = raw.strip()
        if line.startswith("#"):
            comment = line[1:].strip()
        elif line.startswith("["):
            current = comment if line == "[Peer]" and comment and _NAME.fullmatch(comment) else None
            comment = None
        elif current is not None and line.partition("=")[0].strip() == "PublicKey":
            key = line.partition("=")[2].strip()
            if is_key(key):
                peers[current] = key
    return peers


def conf_private_key(conf: str | None) -> str | None:
    """wg0.conf's PrivateKey, if it has one that is a key."""
    if not conf:
        return None
    key = dict(parse_wg_quick_conf(conf)).get("Interface", {}).get("PrivateKey", [""])[0]
    return key if is_key(key) else None


def ahead(key_at: int | None, now: float, lag: float = 0.0) -> bool:
    """Whether a key valid from `key_at` is to be held at `now`: its moment (plus `lag`: PEER_SWITCH_LAG_S for a
    peer's key) is ahead, by at most MAX_HOLD_S."""
    return key_at is not None and now < key_at + lag and key_at <= now + MAX_HOLD_S


def announced(doc: Document, now: float) -> bool:
    """Whether `doc` announces any key valid only after `now` (nothing to hold otherwise)."""
    peers = (ahead(p.key_at, now, PEER_SWITCH_LAG_S) for p in doc.plan.peers)
    return ahead(doc.key_at, now) or any(peers)


def hold(doc: Document, own: str | None, peers: dict[str, str], now: float) -> Held:
    """`doc` as it may run at `now`: each key whose key_at is still ahead replaced by the one that runs for that name
    (own: the running public key; peers: name -> running public key), when one runs and is not used by anybody
    else in the document. Without a running key (a fresh agent, a new peer) the new key applies at once."""
    taken = {doc.public_key, *(p.public_key for p in doc.plan.peers)}
    switches: list[Switch] = []
    public_key = doc.public_key
    if doc.key_at is not None and ahead(doc.key_at, now) and own and own != doc.public_key and own not in taken:
        switches.append(Switch(doc.key_at, OWN, own, doc.public_key))
        public_key = own
        taken.add(own)
    kept: list[Peer] = []
    for p in doc.plan.peers:
        old = peers.get(p.name)
        lagged = ahead(p.key_at, now, PEER_SWITCH_LAG_S)
        if p.key_at is not None and lagged and old and old != p.public_key and old not in taken:
            switches.append(Switch(p.key_at, p.name, old, p.public_key))
            taken.add(old)
            kept.append(replace(p, public_key=old))
        else:
            kept.append(p)
    if not switches:
        return Held(doc, ())
    plan = replace(doc.plan, peers=tuple(kept))
    ordered = tuple(sorted(switches, key=lambda s: (s.due, s.name != OWN, s.name)))
    return Held(replace(doc, public_key=public_key, plan=plan), ordered)


def peer_addresses(doc: Document, names: set[str] | None) -> list[str]:
    """The overlay addresses of the document's peers named in `names` (None: every peer) that have one."""
    found = []
    for peer in doc.plan.peers:
        if names is None or peer.name in names:
            try:
                found.append(overlay_address(doc.plan, peer.name))
            except ValueError:  # no /32 among its AllowedIPs: nothing to ping
                continue
    return found


def swap_commands(interface: str, peer: Peer, old: str, active: bool) -> list[list[str]]:
    """The new peer with the running one's AllowedIPs (WireGuard moves them), then the old one removed. A standby
    gateway's peers have no endpoint and no keepalive (wgconf.wg_quick_conf). Public keys only: no secret in argv."""
    add = ["wg", "set", interface, "peer", peer.public_key, "allowed-ips", ",".join(peer.allowed_ips)]
    if active:
        add += ["persistent-keepalive", str(peer.persistent_keepalive)]
        add += ["endpoint", peer.endpoint] if peer.endpoint is not None else []  # a dynamic peer: learned, never set
    return [add, ["wg", "set", interface, "peer", old, "remove"]]


Latest = tuple[Document, Callable[[], str]]


class RotatingApplier(Applier):
    """The agent's Applier: every apply runs the document as `hold` allows at the clock's time, and a timer thread
    performs the announced switches at their key_at (under `lock`, the agent's apply lock), then re-applies."""

    def __init__(
        self,
        runner: Runner,
        paths: Paths,
        interface: str = INTERFACE,
        *,
        lock: threading.RLock | None = None,
        log: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        timer: bool = True,
    ) -> None:
        super().__init__(runner, paths, interface)
        self.lock = lock or threading.RLock()
        self.log, self.clock, self.sleep, self.timer = log, clock, sleep, timer
        self.latest: Latest | None = None
        self.pending: tuple[Switch, ...] = ()
        self.next_private: str | None = None  # the prefetched private key of the own switch (never logged)
        self.next_public: str | None = None  # its public key (checked when it was fetched)
        self.kicks: list[tuple[float, int, frozenset[str]]] = []  # (when, key_at, public keys): re-armed if stale
        # after a switch: one ping to each of these overlay addresses (each in its own thread: never under the lock)
        self.initiate: Callable[[list[str]], None] = self._ping
        self.wake = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the hold, in every apply ----------------------------------------------------------------------------------

    def own_keys(self) -> frozenset[str]:
        """The new public key of a pending own switch, and the one whose private key is prefetched: this gateway's
        from key_at, never a peer's (Applier.refuse_own_keys)."""
        pending = {s.new for s in self.pending if s.name == OWN}
        return frozenset(pending | ({self.next_public} if self.next_public else set()))

    def held(self, doc: Document, now: float) -> Held:
        if not announced(doc, now):
            return Held(doc, ())
        conf = read_text(self.paths.wg_conf)
        private = conf_private_key(conf) if ahead(doc.key_at, now) else None
        own = self.public_key(private) if private else None
        return hold(doc, own, running_peers(conf), now)

    def apply(self, doc: Document, fetch_key: Callable[[], str]) -> list[str]:
        with self.lock:
            switch = min((s.due for s in self.pending), default=None)
            if switch is not None and 0 < switch - self.clock() <= APPLY_GUARD_S:
                self.sleep(switch - self.clock())  # this thread holds the lock: it performs the switch, on time
            due, changes = self.next_due(), []
            if due is not None and due <= self.clock():
                try:
                    changes = self.tick(self.clock())
                except Exception as exc:  # dropped (tick): this document's own apply below is what counts
                    self.log(f"key switch failed, the document is applied as it is: {exc}")
            held = self.held(doc, self.clock())
            # the document as it will run once every held key has switched: no peer may then carry a key of ours
            self.announced = self.own_keys()
            running = self.conf_key(read_text(self.paths.wg_conf))
            self.refuse_own_keys(doc, running[1] if running else None)
            changes += super().apply(held.doc, fetch_key)
            self.latest = (doc, fetch_key)
            if held.switches != self.pending:
                self.pending = held.switches
                for s in held.switches:
                    self.log(f"key switch announced: {s.name or 'own key'} at {s.at} (in {s.due - self.clock():.1f} s)")
            self._prefetch(doc, fetch_key)
            if self.pending or self.kicks:
                self._start()
        return changes

    def _prefetch(self, doc: Document, fetch_key: Callable[[], str]) -> None:
        """The own switch's new private key, fetched ahead and checked against the document (else the apply after
        the switch fetches it)."""
        if not any(s.name == OWN for s in self.pending):
            self.next_private = None
            return
        if self.next_private is not None and self.next_public == doc.public_key:
            return
        try:
            key = fetch_key().strip()
            matches = is_key(key) and self.public_key(key) == doc.public_key
        except (FetchError, ApplyError) as exc:
            self.log(f"prefetching the new private key failed (again next cycle): {exc}")
            return
        if matches:
            self.next_private, self.next_public = key, doc.public_key
        else:
            self.log("the store's private key does not match the announced public key yet (again next cycle)")

    # -- the timer ---------------------------------------------------------------------------------------------

    def next_due(self) -> float | None:
        times = [s.due for s in self.pending] + [k[0] for k in self.kicks]
        return min(times) if times else None

    def _start(self) -> None:
        """(Under the lock.) Wake the timer thread, or start it."""
        self.wake.set()
        if self.timer and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="key-rotation", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self.lock:
                self.wake.clear()
                due = self.next_due()
                if due is None:
                    self._thread = None
                    return
            wait = due - self.clock()
            if wait > 0:
                self.wake.wait(min(wait, 60.0))  # an apply wakes it: the schedule may have changed
                continue
            try:
                self.tick(self.clock())
            except Exception as exc:  # the thread lives on; tick dropped what failed (no retry loop)
                self.log(f"key switch failed, the next document cycle applies the document: {exc}")

    def tick(self, now: float) -> list[str]:
        """Perform what is due at `now`: switches whose key_at has come, then the re-arm of swapped peers without a
        handshake since their switch. Returns what changed."""
        with self.lock:
            try:
                due = [s for s in self.pending if s.due <= now]
                changes = self._switch(due, now) if due and self.latest else []
                kicks = [k for k in self.kicks if k[0] <= now]
                if kicks and self.latest:
                    changes += self._kick(kicks, now)
            except Exception:
                # what is due is dropped, not retried in a loop: the next document cycle applies the document (whose
                # key_at has passed, so nothing is held), and refuses it with its reason if it still cannot run
                self.pending = tuple(s for s in self.pending if s.due > now)
                self.kicks = [k for k in self.kicks if k[0] > now]
                raise
        return changes

    def _switch(self, due: list[Switch], now: float) -> list[str]:
        assert self.latest is not None
        doc, fetch_key = self.latest
        active, changes = self.role == "active", []
        new_peers = {p.name: p for p in doc.plan.peers}
        for s in due:  # own first (hold's order)
            if s.name == OWN and self.next_private is not None:
                self._must(["wg", "set", self.interface, "private-key", "/dev/stdin"], self.next_private + "\n")
            elif s.name in new_peers:
                for argv in swap_commands(self.interface, new_peers[s.name], s.old, active):
                    self._must(argv)
            else:
                continue  # the own key not prefetched: the apply below fetches and sets it
            done = self.clock()
            self.log(f"key switch {s.name or 'own key'} at {s.at}: done at {done:.6f} ({done - s.at:+.4f} s)")
            changes.append(f"key switch {s.name or 'own key'}")
        next_private = self.next_private
        key = (lambda: next_private) if next_private is not None else fetch_key
        changes += Applier.apply(self, self.held(doc, now).doc, key)
        rest = self.held(doc, now).switches
        for at in sorted({s.at for s in due}):
            names = {s.name for s in due if s.at == at}
            keys = frozenset(p.public_key for p in doc.plan.peers if OWN in names or p.name in names)
            self.kicks.append((at + SWITCH_KICK_S, at, keys))
        self.pending = rest
        if not any(s.name == OWN for s in rest):
            self.next_private = None
        if active:  # the last side to switch initiates now, whatever the traffic (module docstring)
            switched = None if any(s.name == OWN for s in due) else {s.name for s in due}
            self.initiate(peer_addresses(doc, switched))
        return changes

    def _ping(self, addresses: list[str]) -> None:
        for address in addresses:
            argv = ["ping", "-n", "-q", "-c", "1", "-W", "1", address]
            threading.Thread(target=self.run, args=(argv, None), name="key-switch-ping", daemon=True).start()

    def _kick(self, kicks: Sequence[tuple[float, int, frozenset[str]]], now: float) -> list[str]:
        """Re-arm the switched peers without a handshake since their switch (active role), every SWITCH_KICK_S until
        each has one or SWITCH_KICK_FOR_S has passed."""
        assert self.latest is not None
        doc, fetch_key = self.latest
        self.kicks = [k for k in self.kicks if k not in kicks]
        dump = self._must(["wg", "show", self.interface, "dump"]).stdout
        changes: list[str] = []
        for _, at, keys in kicks:
            stale = frozenset(stale_peers(dump, at)) & keys
            if not stale or self.role != "active":
                continue
            self.rearm = stale
            try:
                changes += Applier.apply(self, self.held(doc, now).doc, fetch_key)
            finally:
                self.rearm = frozenset()
            self.log(f"key switch at {at}: {len(stale)} peers without a handshake since re-armed")
            if now + SWITCH_KICK_S <= at + SWITCH_KICK_FOR_S:
                self.kicks.append((now + SWITCH_KICK_S, at, keys))
        return changes
