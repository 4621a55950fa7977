"""The roam drill's plan and judgement (pure): which sites, which changes in which order, their targets, and when
traffic counts as back. roamdrill.py carries it out on a lab.

Sites: D, the stack's first `endpoint: dynamic` site (behind the lab's NAT from its first change on: roamnat.py), and
P, the first site with a fixed address (its workload host pings D's every 10 ms; D's host streams to P's).

Changes, each one entry of CHANGE_KINDS and its apply function in roamdrill.APPLY; a change names the site whose
address it changes (D for every kind here: a DNS name re-pointed would name the DNS-named site; the traffic's pinger
is then one of its own, from P's host to that site's):

* idle       D's public address changes while no traffic flows (only keepalives); a ping from P's host to D's host
             is started right after the change. Target: reachable again within persistent_keepalive (D's next
             keepalive teaches each peer its new address; until then the peers send to the old one).
* flowing    D's public address changes mid-transfer. Target: traffic resumes within 1 s (D's next data packet
             teaches P at once).
* symmetric  mid-transfer too, and the NAT becomes symmetric: a different public port per destination. Target as
             flowing; and every other gateway learns D's new address, each at its own port, within 2 x
             persistent_keepalive, and its workload host reaches D's.

The idle changes run first (before any traffic), then the traffic starts and the others run in their order. The
first idle change comes soon after D's handshakes; its outage is the rest of D's keepalive cycle (D's next keepalive
is due a keepalive after the last packet it sent or received): a whole persistent_keepalive at worst.

Outage, one definition for every change: from the moment the change began (before the NAT was touched) to the
first ping reply of an unbroken run of STEADY_S (no ping lost from it for a second): traffic is back and stays. A
ping answered now and then (a peer that flips back to a stale endpoint) is not back. None: not back within the
change's bound (the drill stops waiting).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.fabric.plan import PUBLIC_POOL, LabPlan, SitePlan

STEADY_S = 1.0  # traffic is back once no ping was lost for this long
FLOWING_TARGET_S = 1.0
SLACK_S = 2.0  # added to a bound (never to a target): the drill stops waiting after a change's bound


@dataclass(frozen=True)
class ChangeKind:
    name: str
    traffic: bool  # runs while the ping and the stream flow; else the site is idle and a ping starts after it
    nat: str  # roamnat.NAT_KINDS
    target: str  # "keepalive": persistent_keepalive seconds; else FLOWING_TARGET_S
    describe: str


_KINDS = (
    ChangeKind("idle", False, "cone", "keepalive", "the address changes while the site is idle"),
    ChangeKind("flowing", True, "cone", "flowing", "the address changes mid-transfer"),
    ChangeKind("symmetric", True, "symmetric", "flowing", "mid-transfer, to a symmetric NAT (a port per peer)"),
)
CHANGE_KINDS = {k.name: k for k in _KINDS}
DEFAULT_CHANGES = ("idle", "flowing", "symmetric")


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    site: SitePlan  # whose address changes: D for every kind here (a DNS-named site's for a `dns` kind)
    address: str  # the NAT's public address after the change
    target_s: float
    bound_s: float  # the drill stops waiting for the traffic (and, symmetric, for every peer) after this long
    stale_peer: bool = False  # a fault (tests): P sets D's old endpoint back, over and over, after the change

    @property
    def label(self) -> str:
        return self.kind.name + (" (fault: P keeps the old endpoint)" if self.stale_peer else "")


@dataclass(frozen=True)
class RoamPlan:
    site: SitePlan  # D
    peer: SitePlan  # P
    keepalive: int
    changes: tuple[Change, ...]
    sites: tuple[SitePlan, ...]  # the lab's

    def others(self, site: SitePlan) -> tuple[SitePlan, ...]:
        """Every gateway but `site`'s, P first: they all learn its address."""
        return (self.peer, *(s for s in self.sites if s is not site and s is not self.peer))


def roam_address(plan: LabPlan, k: int) -> str:
    """The NAT's k-th public address: from the top of the lab's public pool, below the addresses the lab's dynamic
    check uses (PUBLIC_POOL[-2 - i]) and far above every site's (PUBLIC_POOL[i + 1])."""
    return str(PUBLIC_POOL[-2 - len(plan.sites) - k])


def pick_sites(plan: LabPlan, label: str) -> tuple[SitePlan, SitePlan]:
    dynamic = [s for s in plan.sites if s.dynamic]
    if not dynamic:
        raise LabError(f"{label}: no site with `endpoint: dynamic`: the roam drill moves such a site's address "
                       "(docs/how-to/static-sites.md)")  # fmt: skip
    fixed = [s for s in plan.sites if not s.dynamic]
    if not fixed:  # the config refuses two dynamic sites; a mesh of one dynamic site has no peer
        raise LabError(f"{label}: no site with a fixed address to roam against")
    return dynamic[0], fixed[0]


def plan_roam(plan: LabPlan, label: str, keepalive: int, kinds: Sequence[str] = DEFAULT_CHANGES,
              stale: Sequence[int] = ()) -> RoamPlan:  # fmt: skip
    """`kinds`: the changes (CHANGE_KINDS), run idle ones first; `stale`: indexes into `kinds` whose change gets the
    stale-endpoint fault. LabError for a stack without a dynamic site, an unknown kind, keepalive 0."""
    site, peer = pick_sites(plan, label)
    unknown = [k for k in kinds if k not in CHANGE_KINDS]
    if unknown or not kinds:
        raise LabError(f"no roam change {', '.join(unknown) or '(none given)'}: {', '.join(CHANGE_KINDS)}")
    if any(not 0 <= i < len(kinds) for i in stale):
        raise LabError(f"stale: {list(stale)} are not indexes of the {len(kinds)} changes")
    if keepalive <= 0:
        raise LabError(f"{label}: {site.name} is dynamic but its peers have no persistent_keepalive")
    changes = []
    for i, name in enumerate(kinds):
        kind = CHANGE_KINDS[name]
        target = float(keepalive) if kind.target == "keepalive" else FLOWING_TARGET_S
        # twice the target (a miss is measured, not only seen), and symmetric: every peer within 2 x keepalive
        bound = 2 * (target if kind.nat == "cone" else max(target, keepalive)) + STEADY_S + SLACK_S
        changes.append(Change(kind, site, "", target, bound, stale_peer=i in stale))
    ordered = [c for c in changes if not c.kind.traffic] + [c for c in changes if c.kind.traffic]
    ordered = [dataclasses.replace(c, address=roam_address(plan, k)) for k, c in enumerate(ordered)]
    return RoamPlan(site, peer, keepalive, tuple(ordered), plan.sites)


def back_at(replies: Sequence[tuple[float, int]], since: float, steady_s: float = STEADY_S) -> float | None:
    """The time of the first reply after `since` from which no ping was lost for `steady_s` (the replies' sequence
    numbers run on without a hole until one at least `steady_s` later), or None. `replies`: (epoch, icmp_seq)."""
    after = sorted(r for r in replies if r[0] > since)
    start = 0
    for j in range(1, len(after)):
        if after[j][1] != after[j - 1][1] + 1:
            start = j
        elif after[j][0] - after[start][0] >= steady_s:
            return after[start][0]
    return None


def met(outage_ms: float | None, target_s: float) -> bool:
    return outage_ms is not None and outage_ms <= target_s * 1000
