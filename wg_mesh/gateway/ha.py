"""High availability (issue 11): the pure state machine of one gateway of a pair (agent.json's `ha` object:
wg_mesh.gateway.ha_config).

No I/O here. The controller (wg_mesh.gateway.ha_run) samples the local health (wg_mesh.gateway.ha_health) and the
arbiter every `Settings.tick_s`, calls `Machine.tick(now, ...)` with its monotonic clock, runs the returned
actions through the cloud adapter (wg_mesh.gateway.ha_aws, ha_gcp) and reports each outcome with
`Machine.done(now, action, outcome)`. docs/ha.md sections 4 (health, hold-down), 5.3 (AWS lease), 6.3 (GCP) and 7
(fencing) are the specification; the rules, in short:

- AWS, the lease item {site, holder, epoch, counter} decides who may write. The active renews it every
  `renew_s` (a compare-and-swap on holder and epoch); a lost CAS demotes at once. A network error is not a loss:
  it keeps the role, but cloud writes (address, routes) happen only within `write_window_s` of the *sending* of a
  successful renewal. A standby claims (CAS on the epoch and counter it saw) when the item is missing, released
  (`holder = none`), still names it (an agent restart), or has not changed for `lease_s` on the standby's own
  monotonic clock (the DynamoDB Lock Client rule: clock skew does not matter). The holder is the *instance*
  (`Machine.lease_id`: its EC2 instance id), never the letter: a replacement (Pulumi creates the new `a` beside the
  old one) is another holder, waits as a standby while the old instance renews, and takes over once the old one
  releases on shutdown or stops renewing. A holder that is a bare letter (an item written by an agent before
  instance ids) is another holder too, taken over by the same rules (docs/ha.md 5.3 "Lease identity").
- GCP, Google's health view of the other gateway's instance group decides: a standby claims when the other is
  UNHEALTHY (2 failed probes, by Google) or nobody holds the address; gateway `b` waits `initial_wait_s` before
  claiming an unheld address at first start, so the pair does not race for it.
- Both: a standby claims only while its local checks pass (2 good samples in a row); the active releases (AWS: the
  lease; GCP: /healthz turns 503 and Google moves the traffic) after `bad_samples` failed local samples in a row;
  the tunnel check (active only) releases after `tunnel_fail_s` of failure, but not within `hold_down_s` of a
  claim and at most once per `tunnel_handover_s`; a gateway that released waits `backoff_s` before it may claim
  again, so its partner gets the first chance; a gateway that sees another holder of the address twice in a row
  demotes (EC2 is eventually consistent: one read decides nothing); on GCP a standby judges a holder by Google's
  health view only once it has seen that holder for `settle_s` (the view of a fresh holder lags one probe).
- Stood down (`stood_down`: the applied document says the site has one gateway, `gateways: 2` -> 1, issue 32): the
  pair is being retired and `pulumi up` hands the address and the routes to the site's new single gateway, which runs
  no HA agent. A stood-down gateway never claims, never writes the address or a route (no reconcile; `may_write` is
  False, so a reconcile in flight stops at its next write), and releases nothing (a release lets a partner that has not
  read the document yet claim at once): the active keeps the role it has (its wg0 and /healthz carry the site until
  Pulumi moves the address and routes) and, AWS, keeps renewing the lease, so that a partner that has not read the
  document yet sees a live lease, not an expired one; it still demotes when it reads another holder of the address.
  The document can only take rights away: nothing in it makes a gateway claim, and a later document without the
  field gives back the ordinary rules, not a claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("standby", "active")
NONE = "none"  # the lease's holder when nobody holds it
CLAIM_REASONS = ("initial", "lease_expired", "released", "unhealthy")  # wgmesh_ha_failovers_total{reason}


# --- what the machine sees ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """The DynamoDB item as read (strongly consistent) or as written by our own successful CAS."""

    holder: str
    epoch: int
    counter: int


@dataclass(frozen=True)
class Unreachable:
    """The arbiter or the cloud API did not answer (timeout, 5xx, no route): never read as "lost"."""

    error: str = ""


MISSING = None  # the lease item does not exist (first start)
LeaseView = Lease | Unreachable | None


@dataclass(frozen=True)
class Health:
    """One sample of the local checks (docs/ha.md section 4). `failed`: the first failing local check, "" if all
    pass; `tunnel_ok`: the tunnel check (only used while active)."""

    failed: str = ""
    tunnel_ok: bool = True

    @property
    def local_ok(self) -> bool:
        return not self.failed


# address holder as the cloud reports it: "me", "other", "none", or None (not known this tick)
Holder = str | None


# --- what the machine asks for ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """AWS: the CAS on what was seen (`seen` None: attribute_not_exists). GCP: move the address to us."""

    seen: Lease | None
    reason: str


@dataclass(frozen=True)
class Renew:
    epoch: int


@dataclass(frozen=True)
class Release:
    epoch: int
    why: str


@dataclass(frozen=True)
class Promote:
    """wg0 to the active role (syncconf with endpoints) and one ping per peer."""


@dataclass(frozen=True)
class Demote:
    why: str


@dataclass(frozen=True)
class Reconcile:
    """Address and routes to us, where they are not (allowed only within the write window)."""


Action = Claim | Renew | Release | Promote | Demote | Reconcile

# outcomes reported by the controller: True (done / won), False (the CAS lost), None (unreachable, error)
Outcome = bool | None


@dataclass(frozen=True)
class Settings:
    tick_s: float = 0.5
    renew_s: float = 1.0
    lease_s: float = 3.0
    write_window_s: float = 1.0
    bad_samples: int = 2
    good_samples: int = 2
    tunnel_fail_s: float = 10.0
    hold_down_s: float = 30.0
    tunnel_handover_s: float = 300.0
    backoff_s: float = 2.0
    holder_reads: int = 2
    initial_wait_s: float = 5.0
    settle_s: float = 3.0  # GCP: Google's view of a new holder turns HEALTHY after a probe (1 s interval + 1 s timeout)


@dataclass
class Machine:
    """One gateway's role. `arbiter` is "lease" (AWS) or "health" (GCP). `me`: the letter (the role in the pair);
    `lease_id`: the identity written as the lease's holder (AWS: the instance id; "" until known, then `me`)."""

    me: str
    arbiter: str = "lease"
    settings: Settings = field(default_factory=Settings)
    role: str = "standby"
    epoch: int = 0  # the epoch we hold (active, lease)
    seen: Lease | None = None  # last lease read (standby)
    seen_since: float | None = None  # monotonic time (epoch, counter) was first seen unchanged
    renew_sent: float | None = None  # when the last *successful* renewal was sent
    next_renew: float = 0.0
    next_reconcile: float = 0.0
    bad: int = 0  # consecutive failed local samples
    good: int = 0  # consecutive passed local samples
    tunnel_bad_since: float | None = None
    claimed_at: float | None = None
    last_tunnel_handover: float | None = None
    released_at: float | None = None
    other_holder: int = 0  # consecutive reads showing another address holder
    started: float | None = None
    unheld_since: float | None = None  # GCP: nobody holds the address since
    other_since: float | None = None  # GCP: the other gateway holds the address since (as far as we saw)
    pending: bool = False  # a claim is in flight
    why: str = ""  # the latest role change's reason, for logs
    claims: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLAIM_REASONS, 0))
    lease_id: str = ""
    stood_down: bool = False  # the applied document says the site has one gateway: the pair is retired

    @property
    def holder_id(self) -> str:
        """Who the lease names when we hold it: the instance (`lease_id`), the letter only where none is given."""
        return self.lease_id or self.me

    # -- inputs ---------------------------------------------------------------------------------------------

    def tick(self, now: float, health: Health, view: LeaseView = MISSING, holder: Holder = None,
             other_health: str | None = None) -> list[Action]:  # fmt: skip
        """One sample. `view`: the lease read this tick (AWS standby; the active may pass Unreachable/None as it
        does not read); `holder`: the address holder if read this tick; `other_health`: GCP getHealth of the other
        gateway's group ("HEALTHY", "UNHEALTHY", None = unknown)."""
        if self.started is None:
            self.started = now
        self.bad, self.good = (0, self.good + 1) if health.local_ok else (self.bad + 1, 0)
        if self.role == "active":
            return self._active(now, health, holder)
        return self._standby(now, view, holder, other_health)

    def done(self, now: float, action: Action, outcome: Outcome, lease: Lease | None = None) -> list[Action]:
        """The outcome of an action; returns follow-up actions (a won claim: promote and reconcile)."""
        if isinstance(action, Claim):
            self.pending = False
            if outcome is True:
                self.role, self.claimed_at, self.why = "active", now, f"claimed ({action.reason})"
                self.epoch = lease.epoch if lease else self.epoch
                self.renew_sent, self.next_renew = now, now + self.settings.renew_s
                self.next_reconcile = now + self.settings.renew_s
                self.other_holder, self.tunnel_bad_since = 0, None
                self.claims[action.reason] += 1
                return [Promote(), Reconcile()]
            self.seen, self.seen_since = None, None  # someone else moved: look again
            return []
        if isinstance(action, Renew) and self.role == "active":
            if outcome is True:
                # the renewal counts from its sending (the controller passes `now` = send time): a standby counts
                # its lease_s from a later moment, so our write window always closes before it can claim
                self.renew_sent = now
            elif outcome is False:
                return self._demote(now, "the lease was taken (renewal refused)")
        return []

    # -- the two roles ---------------------------------------------------------------------------------------

    def _demote(self, now: float, why: str) -> list[Action]:
        self.role, self.why, self.seen, self.seen_since = "standby", why, None, None
        self.released_at = now  # a demoted gateway waits backoff_s before it may claim again
        self.other_holder, self.claimed_at = 0, None
        return [Demote(why)]

    def may_write(self, now: float) -> bool:
        """Cloud writes (address, routes) only within write_window_s of a successful renewal (AWS); never stood down."""
        if self.role != "active" or self.stood_down:
            return False
        if self.arbiter != "lease":
            return True
        return self.renew_sent is not None and now - self.renew_sent <= self.settings.write_window_s

    def _active(self, now: float, health: Health, holder: Holder) -> list[Action]:
        s = self.settings
        if not self.stood_down:  # stood down, the pair is retired: it releases nothing (module docstring)
            released = self._failed(now, health)
            if released:
                return released
        self.other_holder = self.other_holder + 1 if holder == "other" else (0 if holder is not None else
                                                                               self.other_holder)  # fmt: skip
        if self.other_holder >= s.holder_reads:
            return self._demote(now, f"another gateway holds the address ({self.other_holder} reads)")
        actions: list[Action] = []
        if self.arbiter == "lease" and now >= self.next_renew:
            self.next_renew = now + s.renew_s
            actions.append(Renew(self.epoch))
        if self.may_write(now) and now >= self.next_reconcile:
            self.next_reconcile = now + s.renew_s  # level-triggered: address and routes checked once a second
            actions.append(Reconcile())
        return actions

    def _failed(self, now: float, health: Health) -> list[Action]:
        """The release a failing local check (at once) or tunnel (after tunnel_fail_s, past the hold-down) asks for."""
        s = self.settings
        if self.bad >= s.bad_samples:
            return self._release(now, f"local check failed {self.bad} times: {health.failed}", tunnel=False)
        self.tunnel_bad_since = None if health.tunnel_ok else (self.tunnel_bad_since or now)
        if self.tunnel_bad_since is not None and now - self.tunnel_bad_since >= s.tunnel_fail_s:
            held = self.claimed_at is None or now - self.claimed_at >= s.hold_down_s
            recent = self.last_tunnel_handover is not None and now - self.last_tunnel_handover < s.tunnel_handover_s
            if held and not recent:
                return self._release(now, f"no peer answered for {now - self.tunnel_bad_since:.0f} s", tunnel=True)
        return []

    def _release(self, now: float, why: str, tunnel: bool) -> list[Action]:
        if tunnel:
            self.last_tunnel_handover = now
        self.released_at = now
        actions: list[Action] = [Release(self.epoch, why)] if self.arbiter == "lease" else []
        return actions + self._demote(now, f"released: {why}")

    def _claimable(self, now: float) -> bool:
        s = self.settings
        if self.pending or self.good < s.good_samples:
            return False
        return self.released_at is None or now - self.released_at >= s.backoff_s

    def _standby(self, now: float, view: LeaseView, holder: Holder, other_health: str | None) -> list[Action]:
        if self.stood_down:
            return []  # the pair is retired: never a claim
        if self.arbiter == "health":
            return self._standby_health(now, holder, other_health)
        if isinstance(view, Unreachable):
            return []  # no claim without the arbiter; the unchanged-since clock keeps running (it is our own)
        if view is None:
            return self._claim(now, None, "initial")
        if self.seen is None or (view.epoch, view.counter) != (self.seen.epoch, self.seen.counter):
            self.seen, self.seen_since = view, now
        else:
            self.seen = view
        assert self.seen_since is not None
        if view.holder == NONE:
            return self._claim(now, view, "released")
        if view.holder == self.holder_id:
            # our own lease after an agent restart on the same instance: adopt it (still a CAS). A replacement
            # instance never reads its own id here (a letter holder is someone else's: another holder)
            return self._claim(now, view, "initial")
        if now - self.seen_since >= self.settings.lease_s:
            return self._claim(now, view, "lease_expired")
        return []

    def _standby_health(self, now: float, holder: Holder, other_health: str | None) -> list[Action]:
        if holder == "me":
            return self._claim(now, None, "initial")  # a restart while holding it: take the role back
        if holder == NONE:
            self.unheld_since = self.unheld_since if self.unheld_since is not None else now
            wait = 0.0 if self.me == "a" else self.settings.initial_wait_s
            if now - self.unheld_since >= wait:
                return self._claim(now, None, "released" if self.released_at is not None else "initial")
            return []
        self.unheld_since = None
        if holder != "other":
            self.other_since = None
            return []
        self.other_since = self.other_since if self.other_since is not None else now
        # Google's verdict on a gateway that has just taken the address may still be the one from before it
        # served 200: only a holder we have seen for settle_s is judged by it (else the pair could swap back)
        if other_health == "UNHEALTHY" and now - self.other_since >= self.settings.settle_s:
            return self._claim(now, None, "unhealthy")
        return []

    def _claim(self, now: float, seen: Lease | None, reason: str) -> list[Action]:
        if not self._claimable(now):
            return []
        self.pending = True
        return [Claim(seen, reason)]


__all__ = [
    "CLAIM_REASONS",
    "Action",
    "Claim",
    "Demote",
    "Health",
    "Lease",
    "Machine",
    "Promote",
    "Reconcile",
    "Release",
    "Renew",
    "Settings",
    "Unreachable",
]
