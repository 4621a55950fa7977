"""The HA state machine (wg_mesh.gateway.ha), pure: a fake clock, an in-test lease store with DynamoDB's conditional
write semantics (compare-and-swap on one item), and an address that has at most one holder (as EC2's). Each
scenario of docs/ha.md section 7 runs both gateways of a pair tick by tick and checks the invariant at every tick:
never two gateways that the cloud lets carry traffic, and never a cloud write outside the write window."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from wg_mesh.gateway.ha import (
    Claim,
    Demote,
    Health,
    Lease,
    Machine,
    Promote,
    Reconcile,
    Release,
    Renew,
    Unreachable,
)
from wg_mesh.gateway.ha_config import parse_ha

OK = Health()
BAD = Health(failed="wg0 down")


@dataclass
class Store:
    """One lease item with DynamoDB's conditional-write semantics, and the Elastic IP's holder."""

    item: Lease | None = None
    address: str = "none"
    writes: list[tuple[float, str, str]] = field(default_factory=list)  # (time, gateway, what)
    moves: int = 0  # changes of the address's holder

    def claim(self, me: str, seen: Lease | None) -> Lease | None:
        if seen is None:
            if self.item is not None:
                return None
            self.item = Lease(me, 1, 0)
            return self.item
        if self.item is None or (self.item.epoch, self.item.counter) != (seen.epoch, seen.counter):
            return None
        self.item = Lease(me, seen.epoch + 1, 0)
        return self.item

    def renew(self, me: str, epoch: int) -> bool:
        if self.item is None or (self.item.holder, self.item.epoch) != (me, epoch):
            return False
        self.item = Lease(me, epoch, self.item.counter + 1)
        return True

    def release(self, me: str, epoch: int) -> bool:
        if self.item is None or (self.item.holder, self.item.epoch) != (me, epoch):
            return False
        self.item = Lease("none", epoch, self.item.counter)
        return True


@dataclass
class Gateway:
    """One gateway: its machine, whether its process runs, whether it reaches the arbiter, its local health."""

    machine: Machine
    alive: bool = True
    reaches_store: bool = True
    health: Health = OK
    wg_role: str = "standby"
    instance: str = ""  # which machine it is (the address names it): a, b, or a replacement a2, b2

    @property
    def me(self) -> str:
        """The lease's holder and the address's owner when this gateway holds them: its instance (or letter)."""
        return self.machine.holder_id


class Pair:
    def __init__(self, instances: bool = False) -> None:
        """`instances`: the machines know their instance ids (i-a1, i-b1: the lease names the instance), else they
        are the previous agent's, whose lease names the letter."""
        self.store = Store()
        self.gws = {g: Gateway(Machine(g, lease_id=f"i-{g}1" if instances else ""), instance=g) for g in ("a", "b")}
        self.now = 0.0
        self.log: list[tuple[float, str, str]] = []
        self.strict = True  # the invariants checked at every tick (off only to show the letter identity's fight)

    def holder_for(self, gw: Gateway) -> str | None:
        if not gw.reaches_store:
            return None
        return "none" if self.store.address == "none" else ("me" if self.store.address == gw.instance else "other")

    def run(self, action: object, gw: Gateway) -> list[object]:
        m, now = gw.machine, self.now
        if isinstance(action, Claim):
            won = self.store.claim(gw.me, action.seen) if gw.reaches_store else None
            outcome = None if not gw.reaches_store else won is not None
            self.log.append((now, gw.me, f"claim {action.reason} {outcome}"))
            return list(m.done(now, action, outcome, won))
        if isinstance(action, Renew):
            ok = self.store.renew(gw.me, action.epoch) if gw.reaches_store else None
            return list(m.done(now, action, ok))
        if isinstance(action, Release):
            if gw.reaches_store:
                self.store.release(gw.me, action.epoch)
            self.log.append((now, gw.me, f"release {action.why}"))
            return []
        if isinstance(action, Reconcile):
            assert m.may_write(now) or not self.strict, f"{gw.me}: a cloud write outside the write window at {now}"
            if gw.reaches_store:
                self.store.moves += self.store.address != gw.instance
                self.store.address = gw.instance
                self.store.writes.append((now, gw.instance, "associate"))
            return []
        if isinstance(action, Promote):
            gw.wg_role = "active"
        elif isinstance(action, Demote):
            gw.wg_role = "standby"
            self.log.append((now, gw.me, f"demote {action.why}"))
        return []

    def step(self) -> None:
        for gw in self.gws.values():
            if not gw.alive:
                continue
            m = gw.machine
            view: Lease | Unreachable | None = Unreachable("timeout") if not gw.reaches_store else self.store.item
            queue = list(m.tick(self.now, gw.health, view, self.holder_for(gw)))
            while queue:
                queue += self.run(queue.pop(0), gw)
        self.check()
        self.now = round(self.now + 0.5, 3)

    def check(self) -> None:
        """Never two active that the cloud lets carry traffic: an active role whose lease is current."""
        serving = [
            g.me
            for g in self.gws.values()
            if g.alive and g.machine.role == "active" and self.store.item and self.store.item.holder == g.me
        ]
        assert len(serving) <= 1 or not self.strict, f"two active at {self.now}: {serving}"

    def until(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.step()

    def active(self) -> list[str]:
        return [g.me for g in self.gws.values() if g.alive and g.machine.role == "active"]


def started(instances: bool = False) -> Pair:
    pair = Pair(instances)
    pair.until(3)
    assert pair.active() == [pair.gws["a"].me] and pair.store.address == "a" and pair.store.item is not None
    assert pair.gws["a"].machine.claims["initial"] == 1
    return pair


def test_first_start_one_gateway_claims_and_the_other_stays_standby() -> None:
    pair = started()
    pair.until(30)
    assert pair.active() == ["a"]
    assert pair.store.item is not None and pair.store.item.counter >= 25  # renewed every second
    assert pair.gws["b"].wg_role == "standby" and pair.gws["a"].wg_role == "active"


def test_standby_killed_changes_nothing() -> None:
    pair = started()
    pair.gws["b"].alive = False
    pair.until(20)
    assert pair.active() == ["a"] and pair.store.address == "a"
    assert [w for w in pair.store.writes if w[1] == "b"] == []


def test_active_dies_standby_claims_after_the_lease_is_unchanged_for_3_s() -> None:
    pair = started()
    pair.until(5)
    died = pair.now
    pair.gws["a"].alive = False
    pair.until(6)
    claim = next(t for t, g, what in pair.log if g == "b" and what.startswith("claim lease_expired True"))
    # 3 s unchanged on b's clock from a's last renewal (up to 1 s before it died), plus b's 0.5 s poll
    assert 2.0 <= claim - died <= 3.5
    assert pair.active() == ["b"] and pair.store.address == "b"
    assert pair.gws["b"].machine.claims["lease_expired"] == 1


def test_active_releases_after_two_failed_local_samples_and_the_standby_claims_at_once() -> None:
    pair = started()
    pair.gws["a"].health = BAD
    failed = pair.now
    pair.until(3)
    release = next(t for t, g, what in pair.log if g == "a" and what.startswith("release"))
    claim = next(t for t, g, what in pair.log if g == "b" and what.startswith("claim released True"))
    assert release - failed == 0.5  # the second bad sample
    assert claim - release <= 0.5  # b's next poll: no 3 s wait for a planned handover
    assert pair.active() == ["b"] and pair.store.address == "b"


def test_a_single_bad_sample_does_not_release() -> None:
    pair = started()
    pair.gws["a"].health = BAD
    pair.step()
    pair.gws["a"].health = OK
    pair.until(10)
    assert pair.active() == ["a"]


def test_partition_between_the_pair_changes_nothing() -> None:
    """Both alive, both reach the arbiter but not each other: the lease decides; the standby sees it renewed."""
    pair = started()
    pair.until(60)  # the machines never talk to each other: a partition between them is invisible to the lease
    assert pair.active() == ["a"]
    assert [w for w in pair.store.writes if w[1] == "b"] == []


def test_active_cut_off_from_the_arbiter_stops_writing_and_demotes_when_it_sees_the_new_holder() -> None:
    """The active loses the arbiter and the cloud API (unreachable, not lost): it keeps its role, writes nothing
    after its write window, the standby claims after 3 s; when the active sees the other holder twice, it demotes."""
    pair = started()
    a = pair.gws["a"]
    a.reaches_store = False
    cut = pair.now
    pair.until(5)
    assert a.machine.role == "active"  # unreachable != lost
    assert not a.machine.may_write(pair.now)
    assert [w for w in pair.store.writes if w[1] == "a" and w[0] > cut] == []
    assert pair.store.address == "b"
    a.reaches_store = True
    pair.until(2)
    assert pair.active() == ["b"] and a.wg_role == "standby"
    demotions = [what for _, g, what in pair.log if g == "a" and what.startswith("demote")]
    assert demotions and ("another gateway holds the address" in demotions[0] or "renewal refused" in demotions[0])


def test_recovering_old_active_stays_standby() -> None:
    pair = started()
    pair.gws["a"].alive = False
    pair.until(6)
    assert pair.active() == ["b"]
    # a comes back as a fresh process (a reboot): a new machine, standby; the lease is b's and renewed
    pair.gws["a"] = Gateway(Machine("a"), instance="a")
    pair.until(60)
    assert pair.active() == ["b"] and pair.store.address == "b"
    assert pair.gws["a"].machine.claims == dict.fromkeys(pair.gws["a"].machine.claims, 0)


def test_hung_old_active_resumes_and_is_fenced() -> None:
    """SIGSTOP of the agent itself: its machine resumes 'active' with a stale epoch; its first renewal is refused and
    it demotes; its Reconcile is not issued because its last renewal is older than the write window."""
    pair = started()
    a = pair.gws["a"]
    a.alive = False
    pair.until(6)
    assert pair.active() == ["b"]
    a.alive = True
    actions = a.machine.tick(pair.now, OK, pair.store.item, "other")
    assert not any(isinstance(x, Reconcile) for x in actions)
    queue = list(actions)
    while queue:
        queue += pair.run(queue.pop(0), a)
    assert a.machine.role == "standby" and a.wg_role == "standby"
    pair.until(10)
    assert pair.active() == ["b"]


def test_arbiter_unreachable_for_the_standby_means_no_claim() -> None:
    pair = started()
    b = pair.gws["b"]
    b.reaches_store = False
    pair.gws["a"].alive = False
    pair.until(10)
    assert pair.active() == []  # a double fault: nothing moves (docs/ha.md section 7)
    assert b.machine.claims["lease_expired"] == 0
    b.reaches_store = True
    pair.until(2)
    assert pair.active() == ["b"]  # unchanged since it was first seen, long ago: claims at once


def test_unhealthy_standby_never_claims() -> None:
    pair = started()
    pair.gws["b"].health = BAD
    pair.gws["a"].alive = False
    pair.until(20)
    assert pair.active() == []
    pair.gws["b"].health = OK
    pair.until(1.5)
    assert pair.active() == ["b"]


def test_both_read_before_either_writes_exactly_one_wins_the_race() -> None:
    """Both see no item (first start) or the same expired lease, both claim: the conditional write lets one win."""
    for seen in (None, Lease("none", 4, 17)):
        pair = Pair()
        pair.store.item = seen
        pair.until(0.5)  # one good sample each: not claimable yet
        claims = {g: gw.machine.tick(pair.now, OK, seen, "none") for g, gw in pair.gws.items()}
        assert all(isinstance(c[0], Claim) for c in claims.values())
        for g, actions in claims.items():
            queue = list(actions)
            while queue:
                queue += pair.run(queue.pop(0), pair.gws[g])
        assert len(pair.active()) == 1
        assert [what for _, g, what in pair.log if what.startswith("claim")].count("claim initial False") + [
            what for _, g, what in pair.log if what.startswith("claim")
        ].count("claim released False") == 1
        pair.until(10)
        assert len(pair.active()) == 1


def test_tunnel_failure_releases_after_10_s_but_not_within_the_hold_down_and_once_per_5_min() -> None:
    pair = started()
    a, b = pair.gws["a"], pair.gws["b"]
    a.health = Health(tunnel_ok=False)
    pair.until(12)
    assert pair.active() == ["a"]  # claimed < 30 s ago: hold-down
    pair.until(20)
    assert pair.active() == ["b"]  # held 30 s, tunnel bad for >= 10 s: handed over
    a.health = OK
    b.health = Health(tunnel_ok=False)
    pair.until(45)
    assert pair.active() == ["a"]  # b held 30 s with a bad tunnel: back to a (one handover by b)
    a.health = Health(tunnel_ok=False)
    pair.until(60)
    assert pair.active() == ["a"]  # a already handed over for the tunnel within 5 min: it keeps the role


def test_released_gateway_waits_before_reclaiming() -> None:
    pair = started()
    pair.gws["b"].alive = False
    a = pair.gws["a"]
    a.health = BAD
    pair.until(1)
    assert pair.active() == []
    a.health = OK
    pair.until(1.5)
    assert pair.active() == []  # backoff: its partner gets the first chance
    pair.until(2)
    assert pair.active() == ["a"]


def test_restarted_active_adopts_its_own_lease_without_waiting() -> None:
    pair = started()
    pair.gws["a"] = Gateway(Machine("a"), instance="a")  # agent restart (Restart=always) while the lease names it
    pair.until(1.5)
    assert pair.active() == ["a"]


# --- a replacement beside the old instance (issue 21): the lease names the instance -----------------------------


def replaced(pair: Pair, old: str, seconds: float = 30.0) -> Gateway:
    """Pulumi creates `old`'s replacement (same letter, a new instance) and both run for `seconds`: three machines."""
    letter = pair.gws[old].machine.me
    new = pair.gws[f"{letter}2"] = Gateway(Machine(letter, lease_id=f"i-{letter}2"), instance=f"{letter}2")
    pair.until(seconds)
    return new


def stopped(pair: Pair, name: str) -> None:
    """The old instance terminated: systemd stops its agent (ha_run.Controller.shutdown: the lease released when it
    held it), then the process is gone."""
    gw = pair.gws[name]
    if gw.machine.role == "active":
        pair.run(Release(gw.machine.epoch, "stopping"), gw)
        gw.machine.role = "standby"
    gw.alive = False


@pytest.mark.parametrize("terminated", ["stopped (releases)", "killed (lease expires)"])
def test_replacing_the_active_moves_the_address_once(terminated: str) -> None:
    pair = started(instances=True)
    moves = pair.store.moves
    new = replaced(pair, "a")
    assert pair.active() == ["i-a1"] and pair.store.moves == moves  # the replacement waits: the old one renews
    assert new.machine.role == "standby" and new.machine.claims == dict.fromkeys(new.machine.claims, 0)
    if terminated.startswith("stopped"):
        stopped(pair, "a")
        pair.until(1.0)  # released: claimed at the next read
    else:
        pair.gws["a"].alive = False
        pair.until(4.0)  # unchanged for lease_s on the standby's clock
    assert len(pair.active()) == 1 and pair.active()[0] in ("i-a2", "i-b1")
    assert pair.store.moves == moves + 1
    pair.until(30)
    assert pair.store.moves == moves + 1  # and it stays: nobody takes it back


def test_replacing_the_standby_moves_nothing() -> None:
    pair = started(instances=True)
    moves = pair.store.moves
    replaced(pair, "b")
    stopped(pair, "b")
    pair.until(30)
    assert pair.active() == ["i-a1"] and pair.store.moves == moves
    assert pair.gws["b2"].machine.role == "standby"


def test_a_letter_lease_of_the_previous_agent_is_another_holders() -> None:
    """Migration: the old `a` runs the previous agent (its lease names the letter `a`); its replacement runs this one.
    The replacement reads `a` as someone else's lease: it waits while it is renewed and takes it over only as any
    standby does (released, or unchanged for lease_s), once."""
    pair = started()  # the previous agent: holder "a"
    assert pair.store.item is not None and pair.store.item.holder == "a"
    moves = pair.store.moves
    new = replaced(pair, "a")
    assert pair.active() == ["a"] and pair.store.moves == moves and new.machine.role == "standby"
    stopped(pair, "a")
    pair.until(1.0)
    assert len(pair.active()) == 1 and pair.store.moves == moves + 1
    pair.until(10)
    assert pair.store.moves == moves + 1


def test_the_letter_as_identity_makes_old_and_new_fight() -> None:
    """Why the lease names the instance: with the letter (the previous agent), the replacement reads its own name in
    the old instance's lease and adopts it, the old one is fenced, reads its name, adopts it back... (issue 21: the
    address and every route moved 24 times in 60 s against moto)."""
    pair = started()
    moves = pair.store.moves
    pair.gws["a2"] = Gateway(Machine("a"), instance="a2")  # the replacement, same letter, no instance id
    with pytest.raises(AssertionError):  # both act on "a"'s lease: the invariants break...
        pair.until(10)
    pair.strict = False
    pair.until(10)
    assert pair.store.moves - moves > 2  # ...and the address flaps


def retired(stand_down: bool) -> Pair:
    """`gateways: 2` -> 1 (issue 32 item 2), in Pulumi's order: the documents say the site has one gateway (each
    agent reads it within its poll; `stand_down` False: the agents of before, which have no such rule), the new
    single gateway `n` (no HA agent) is created and gated, Pulumi moves the address to it (EipAssociation), and the
    old pair is deleted last: systemd stops each agent (the active releases unless stood down), then it is gone."""
    pair = started(instances=True)
    pair.until(5)
    for gw in pair.gws.values():
        gw.machine.stood_down = stand_down
    pair.until(5)
    assert pair.active() == ["i-a1"] and pair.store.address == "a"  # nothing moves before Pulumi moves it
    pair.store.address, pair.store.moves = "n", pair.store.moves + 1  # the EipAssociation to the new gateway
    pair.until(5)
    for name in ("b", "a"):  # b depends on a's gate: Pulumi deletes it first
        gw = pair.gws[name]
        if gw.machine.role == "active" and not gw.machine.stood_down:
            pair.run(Release(gw.machine.epoch, "stopping"), gw)
        gw.alive = False
        pair.until(4)
    return pair


def test_a_retired_pair_stands_down_and_the_address_stays_on_the_new_gateway() -> None:
    pair = retired(stand_down=True)
    assert pair.store.address == "n" and pair.active() == []
    assert [w for w in pair.store.writes if w[0] >= 8] == []  # no write since the document (t = 8)
    assert all(sum(g.machine.claims.values()) == (1 if g.instance == "a" else 0) for g in pair.gws.values())
    a = pair.gws["a"]  # it read the new holder twice: wg0 to standby (a local change, no cloud write)
    assert a.wg_role == "standby" and (13.5, a.me, "demote another gateway holds the address (2 reads)") in pair.log


def test_a_retired_pair_without_the_rule_takes_the_address_back_and_leaves_it_on_nothing() -> None:
    """What the agents of before did (the issue's finding): the active's reconcile takes the address back from the new
    gateway within a second, and it ends on a deleted instance."""
    pair = retired(stand_down=False)
    assert pair.store.address in ("a", "b")  # a deleted instance: on nothing once it is gone
    assert [w for w in pair.store.writes if w[0] > 15]  # taken back after Pulumi's move


def test_a_stood_down_active_keeps_the_lease_so_a_partner_that_has_not_read_yet_claims_nothing() -> None:
    pair = started(instances=True)
    pair.gws["a"].machine.stood_down = True  # a read the document, b has not yet
    counter = pair.store.item.counter if pair.store.item else 0
    pair.until(20)
    assert pair.active() == ["i-a1"] and pair.store.address == "a"
    assert pair.store.item is not None and pair.store.item.counter > counter + 15  # renewed: b saw a live lease
    assert pair.gws["b"].machine.claims == dict.fromkeys(pair.gws["b"].machine.claims, 0)
    pair.gws["a"].health = BAD  # stood down: no release for a failing check either (the pair is going)
    pair.until(5)
    assert pair.active() == ["i-a1"] and not [what for _, g, what in pair.log if what.startswith("release")]


def test_a_document_without_the_field_gives_back_the_pairs_rules_not_a_claim() -> None:
    m = Machine("b", arbiter="health", stood_down=True)
    for t in range(20):  # the holder unhealthy, or nobody holding it: no claim while stood down
        assert m.tick(t / 2, OK, holder="other", other_health="UNHEALTHY") == []
        assert m.tick(t / 2 + 0.25, OK, holder="none") == []
    m.stood_down = False
    assert m.tick(20.0, OK, holder="other", other_health="UNHEALTHY") == []  # the ordinary rules: settle_s first
    assert m.tick(23.0, OK, holder="other", other_health="UNHEALTHY") == [Claim(None, "unhealthy")]
    active = Machine("a", arbiter="health")
    active.tick(0.0, OK, holder="none")
    active.done(0.5, Claim(None, "initial"), True)
    active.stood_down = True
    assert not active.may_write(1.0) and active.tick(1.0, OK, holder="none") == []  # never takes an unheld address


def test_gcp_standby_claims_when_google_reports_the_active_unhealthy() -> None:
    m = Machine("b", arbiter="health")
    assert m.tick(0.0, OK, holder="other", other_health="HEALTHY") == []
    assert m.tick(0.5, OK, holder="other", other_health="UNHEALTHY") == []  # a holder seen < 3 s: not judged yet
    assert m.tick(3.0, OK, holder="other", other_health="UNHEALTHY") == [Claim(None, "unhealthy")]
    assert m.done(3.5, Claim(None, "unhealthy"), True) == [Promote(), Reconcile()]
    assert m.role == "active" and m.may_write(100.0)
    # a partition between the pair: Google still sees the other healthy, nothing happens
    n = Machine("a", arbiter="health")
    for t in range(20):
        assert n.tick(t / 2, OK, holder="other", other_health="HEALTHY") == []


def test_gcp_first_start_b_waits_for_a() -> None:
    b = Machine("b", arbiter="health")
    assert [b.tick(t / 2, OK, holder="none") for t in range(10)] == [[]] * 10
    assert b.tick(5.0, OK, holder="none") == [Claim(None, "initial")]
    a = Machine("a", arbiter="health")
    a.tick(0.0, OK, holder="none")
    assert a.tick(0.5, OK, holder="none") == [Claim(None, "initial")]


def test_gcp_active_unhealthy_demotes_without_a_lease_write() -> None:
    m = Machine("a", arbiter="health")
    m.tick(0.0, OK, holder="none")
    m.done(0.5, Claim(None, "initial"), True)
    assert m.tick(1.0, BAD, holder="me") == []
    assert m.tick(1.5, BAD, holder="me") == [Demote("released: local check failed 2 times: wg0 down")]


AWS = {
    "cloud": "aws",
    "gateway": "a",
    "health_port": 9181,
    "region": "us-east-1",
    "lease_table": "wg-mesh-ha",
    "allocation_id": "eipalloc-0123",
    "route_table_ids": ["rtb-1", "rtb-2"],
}
GCP = {
    "cloud": "gcp",
    "gateway": "b",
    "project": "proj",
    "region": "europe-west3",
    "address": "gw-ip",
    "address_ip": "203.0.113.7",
    "backend_service": "gw-bs",
    "groups": {"a": {"zone": "europe-west3-a", "name": "ga"}, "b": {"zone": "europe-west3-b", "name": "gb"}},
}


def test_parse_ha_reads_both_clouds() -> None:
    aws = parse_ha(AWS)
    assert (aws.cloud, aws.gateway, aws.other, aws.route_table_ids) == ("aws", "a", "b", ("rtb-1", "rtb-2"))
    gcp = parse_ha(GCP)
    assert gcp.health_port == 9181 and gcp.group("a") == ("europe-west3-a", "ga") and gcp.other == "a"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], "ha"),
        ({**AWS, "cloud": "azure"}, "ha.cloud"),
        ({**AWS, "gateway": "c"}, "ha.gateway"),
        ({**AWS, "health_port": 0}, "ha.health_port"),
        ({**AWS, "health_port": True}, "ha.health_port"),
        ({**AWS, "route_table_ids": "rtb-1"}, "ha.route_table_ids"),
        ({**AWS, "allocation_id": "eip-1"}, "ha.allocation_id"),
        ({**AWS, "lease_table": ""}, "ha.lease_table"),
        ({k: v for k, v in AWS.items() if k != "region"}, "ha.region"),
        ({**GCP, "groups": {"a": {"zone": "z", "name": "n"}}}, "ha.groups"),
        ({**GCP, "groups": {**GCP["groups"], "b": {"zone": "z"}}}, "ha.groups.b.name"),
        ({**GCP, "address_ip": 7}, "ha.address_ip"),
    ],
)
def test_parse_ha_names_the_bad_field(raw: object, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field.replace('.', '[.]')}:"):
        parse_ha(raw)


def test_the_programs_ha_objects_parse() -> None:
    """The contract with the program (wg_mesh.plan.ha.aws_ha / gcp_ha write agent.json's `ha`): what it writes, we
    read."""
    from wg_mesh.plan import ha as program

    aws = parse_ha(program.aws_ha("b", "us-east-1", "wg-mesh-x-lease", "eipalloc-1", ["rtb-1"]))
    assert (aws.gateway, aws.health_port, aws.lease_table, aws.route_table_ids) == (
        "b",
        9181,
        "wg-mesh-x-lease",
        ("rtb-1",),
    )
    groups = {"a": {"zone": "europe-west3-a", "name": "ga"}, "b": {"zone": "europe-west3-b", "name": "gb"}}
    gcp = parse_ha(program.gcp_ha("a", "proj", "europe-west3", "gw-ip", "203.0.113.7", "bs", groups))
    assert gcp.group("b") == ("europe-west3-b", "gb") and gcp.backend_service == "bs"
