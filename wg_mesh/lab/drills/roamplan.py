"""The roam drill's plan and judgement (pure): which sites, which changes in which order, their targets, and when
traffic counts as back. roamdrill.py carries it out on a lab.

Sites: D, the stack's first `endpoint: dynamic` site (behind the lab's NAT from its first change on: roamnat.py), and
P, the first site with a fixed address (its workload host pings D's every 10 ms; D's host streams to P's); N, the
stack's first DNS-named site (its endpoint a name the lab's resolver serves, behind a static NAT from the lab's
start: resolver.py), D too when the stack has no dynamic site.

Changes, each one entry of CHANGE_KINDS and its apply function in roamdrill.APPLY; a change names the site whose
address it changes (D, or N for `dns`: its pinger is one of its own, from P's host to N's):

* idle       D's public address changes while no traffic flows (only keepalives); a ping from P's host to D's host
             is started right after the change. Target: reachable again within persistent_keepalive (D's next
             keepalive teaches each peer its new address; until then the peers send to the old one).
* flowing    D's public address changes mid-transfer. Target: traffic resumes within 1 s (D's next data packet
             teaches P at once).
* symmetric  mid-transfer too, and the NAT becomes symmetric: a different public port per destination. Target as
             flowing; and every other gateway learns D's new address, each at its own port, within 2 x
             persistent_keepalive, and its workload host reaches D's.
* dns        N moves to a new address (its static NAT's) and the lab's resolver re-points N's name to it, while N is
             idle; a ping from P's host to N's is started right after. Target: reachable again within one
             re-resolve interval (`reresolve_seconds`: P's gateway asks again and follows the changed answer). N's
             own persistent_keepalive would teach P too (at most a keepalive later): the re-resolve interval is set
             below it to be what is measured.

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
from wg_mesh.lab.fabric.resolver import dns_address

STEADY_S = 1.0  # traffic is back once no ping was lost for this long
FLOWING_TARGET_S = 1.0
SLACK_S = 2.0  # added to a bound (never to a target): the drill stops waiting after a change's bound


@dataclass(frozen=True)
class ChangeKind:
    name: str
    traffic: bool  # runs while the ping and the stream flow; else the site is idle and a ping starts after it
    nat: str  # roamnat.NAT_KINDS
    target: str  # "keepalive": persistent_keepalive seconds; "reresolve": reresolve_seconds; else FLOWING_TARGET_S
    describe: str


_KINDS = (
    ChangeKind("idle", False, "cone", "keepalive", "the address changes while the site is idle"),
    ChangeKind("flowing", True, "cone", "flowing", "the address changes mid-transfer"),
    ChangeKind("symmetric", True, "symmetric", "flowing", "mid-transfer, to a symmetric NAT (a port per peer)"),
    ChangeKind("dns", False, "static", "reresolve", "the name is re-pointed to the site's new address (idle)"),
)
CHANGE_KINDS = {k.name: k for k in _KINDS}
DEFAULT_CHANGES = ("idle", "flowing", "symmetric")  # a stack's default: these with a dynamic site, dns with a named


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    site: SitePlan  # whose address changes: D, or N for a `dns` change
    address: str  # the NAT's public address after the change (dns: the name's answer too)
    target_s: float
    bound_s: float  # the drill stops waiting for the traffic (and, symmetric, for every peer) after this long
    stale_peer: bool = False  # a fault (tests): P sets D's old endpoint back, over and over, after the change

    @property
    def label(self) -> str:
        return self.kind.name + (" (fault: P keeps the old endpoint)" if self.stale_peer else "")


@dataclass(frozen=True)
class RoamPlan:
    site: SitePlan  # D (N when the stack has no dynamic site)
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


def default_changes(plan: LabPlan) -> tuple[str, ...]:
    """The changes a stack gets without --changes: DEFAULT_CHANGES with a dynamic site, `dns` with a DNS-named one."""
    dynamic = DEFAULT_CHANGES if any(s.dynamic for s in plan.sites) else ()
    return dynamic + (("dns",) if any(s.dns_name for s in plan.sites) else ())


def pick_sites(plan: LabPlan, label: str, kinds: Sequence[str] = DEFAULT_CHANGES) -> tuple[SitePlan, SitePlan]:
    """(D, P) for `kinds`: a dynamic site unless every kind is `dns` (then D is N, the DNS-named site)."""
    dynamic, named = [s for s in plan.sites if s.dynamic], [s for s in plan.sites if s.dns_name]
    if not dynamic and (not named or any(k != "dns" for k in kinds)):
        raise LabError(f"{label}: no site with `endpoint: dynamic`: the roam drill moves such a site's address "
                       "(docs/how-to/static-sites.md)")  # fmt: skip
    if "dns" in kinds and not named:
        raise LabError(f"{label}: no site with a DNS name as its endpoint: the `dns` change re-points one")
    fixed = [s for s in plan.sites if not s.dynamic and not s.dns_name]
    if not fixed:  # the config refuses two dynamic sites; a mesh of one dynamic site has no peer
        raise LabError(f"{label}: no site with a fixed address to roam against")
    return (dynamic or named)[0], fixed[0]


def plan_roam(plan: LabPlan, label: str, keepalive: int, kinds: Sequence[str] | None = None,
              stale: Sequence[int] = ()) -> RoamPlan:  # fmt: skip
    """`kinds`: the changes (CHANGE_KINDS; default: default_changes), run idle ones first; `stale`: indexes into
    `kinds` whose change gets the stale-endpoint fault. LabError for a stack without a dynamic site (or without a
    DNS-named one for `dns`), an unknown kind, keepalive 0 for a dynamic site's change."""
    kinds = default_changes(plan) if kinds is None else kinds
    unknown = [k for k in kinds if k not in CHANGE_KINDS]
    if unknown:
        raise LabError(f"no roam change {', '.join(unknown)}: {', '.join(CHANGE_KINDS)}")
    site, peer = pick_sites(plan, label, kinds)
    if not kinds:
        raise LabError(f"no roam change (none given): {', '.join(CHANGE_KINDS)}")
    if any(not 0 <= i < len(kinds) for i in stale):
        raise LabError(f"stale: {list(stale)} are not indexes of the {len(kinds)} changes")
    if keepalive <= 0 and any(k != "dns" for k in kinds):
        raise LabError(f"{label}: {site.name} is dynamic but its peers have no persistent_keepalive")
    named = next((s for s in plan.sites if s.dns_name), None)
    changes = []
    for i, name in enumerate(kinds):
        kind = CHANGE_KINDS[name]
        targets = {"keepalive": float(keepalive), "reresolve": float(plan.reresolve_s)}
        target = targets.get(kind.target, FLOWING_TARGET_S)
        # twice the target (a miss is measured, not only seen), and symmetric: every peer within 2 x keepalive
        bound = 2 * (max(target, keepalive) if kind.nat == "symmetric" else target) + STEADY_S + SLACK_S
        whose = named if kind.nat == "static" and named is not None else site
        changes.append(Change(kind, whose, "", target, bound, stale_peer=i in stale))
    ordered = [c for c in changes if not c.kind.traffic] + [c for c in changes if c.kind.traffic]
    moved = [c.kind.nat == "static" for c in ordered]  # a dns change: N's next address; the others: the NAT pool's
    ordered = [dataclasses.replace(c, address=change_address(plan, c.site, moved[:k].count(m)))
               for k, (c, m) in enumerate(zip(ordered, moved, strict=True))]  # fmt: skip
    return RoamPlan(site, peer, keepalive, tuple(ordered), plan.sites)


def change_address(plan: LabPlan, site: SitePlan, k: int) -> str:
    """The address after a change: a DNS-named site's next one (resolver.dns_address: k + 1, its first is the
    lab's start), else the NAT's k-th (roam_address)."""
    return str(dns_address(site, k + 1)) if site.dns_name else roam_address(plan, k)


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
