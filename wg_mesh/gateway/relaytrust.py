"""A relayed site's pinned relay (agent.json `trust.relay`) and what a document may do with relays (issue 24 item 2;
docs/security.md section 3: the rules and why). Standard library only (it ships with the agent).

Linear in the pinned ranges (issue 33 item 6: a relay with 64 partners of 65 ranges took 10-14 s to load, every
range against every other): a prefix is a span of integers, and two prefixes overlap iff one contains the other, so
disjoint spans sorted by start answer "which one holds or meets this" by bisection (`Spans`), and "do any two
overlap" by one sweep after a sort (`first_overlap`). `python -m bench.relay_load` measures it.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from ipaddress import IPv4Interface, IPv4Network

from .wgconf import InterfacePlan

NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # wg_mesh.gateway.trust.NAME (a test keeps them equal)
MAX_PARTNERS, MAX_RANGES = 512, 65  # a peer's AllowedIPs: 64 cidrs and its overlay /32
# the partners' ranges together: wg_mesh.config.relay.MAX_RELAY_RANGES (a test keeps them equal), what a document's
# relay entry can carry at most
MAX_PINNED = 1024


def span(network: IPv4Network) -> tuple[int, int]:
    return int(network.network_address), int(network.broadcast_address)


def first_overlap(spans: list[tuple[int, int, str]]) -> str | None:
    """Two prefixes overlap iff one contains the other: sorted by start, each must begin after all before it end."""
    end, last = -1, ""
    for low, high, what in sorted(spans):
        if low <= end:
            return f"{what} overlaps {last}"
        if high > end:
            end, last = high, what
    return None


class Spans:
    """Disjoint prefixes sorted by start: which one meets, or holds, a prefix, in O(log n)."""

    def __init__(self, networks: list[IPv4Network]) -> None:
        pairs = sorted((*span(n), str(n)) for n in networks)
        self.starts = [low for low, _, _ in pairs]
        self.ends = [high for _, high, _ in pairs]
        self.names = [name for _, _, name in pairs]

    def _last_at_or_below(self, value: int) -> int:
        return bisect.bisect_right(self.starts, value) - 1

    def meeting(self, network: IPv4Network) -> str | None:
        """The prefix that overlaps `network` (the ends rise with the starts: only the last one starting at or
        below its end can), or None."""
        low, high = span(network)
        at = self._last_at_or_below(high)
        return self.names[at] if at >= 0 and self.ends[at] >= low else None

    def holding(self, network: IPv4Network) -> bool:
        low, high = span(network)
        at = self._last_at_or_below(low)
        return at >= 0 and self.ends[at] >= high


@dataclass(frozen=True)
class Relay:
    """agent.json's `trust.relay`: through which site this one reaches which partners, and every range involved."""

    site: str
    ranges: tuple[str, ...]  # the relay's own: its overlay /32 and cidrs
    partners: tuple[tuple[str, tuple[str, ...]], ...]  # (name, its overlay /32 and cidrs), in config order

    def partner_ranges(self) -> list[IPv4Network]:
        return [IPv4Network(r) for _, ranges in self.partners for r in ranges]

    # Derived once per Relay (it is immutable; parse_relay has checked the ranges disjoint): what every document's
    # check asks of it, peer by peer and entry by entry.
    @functools.cached_property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.partners)

    @functools.cached_property
    def partner_spans(self) -> Spans:
        return Spans(self.partner_ranges())

    @functools.cached_property
    def pinned_spans(self) -> Spans:
        return Spans([IPv4Network(r) for r in self.ranges] + self.partner_ranges())

    @functools.cached_property
    def pinned_count(self) -> int:
        return len(self.ranges) + sum(len(ranges) for _, ranges in self.partners)


def _prefixes(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_RANGES:
        raise ValueError(f"trust.relay.{field}: not a list of 1..{MAX_RANGES} prefixes")
    out = []
    for item in value:
        try:
            if not isinstance(item, str) or not item.isascii():
                raise ValueError
            out.append(str(IPv4Network(item, strict=True)))
        except ValueError:
            raise ValueError(f"trust.relay.{field}: {item!r} is not an IPv4 prefix") from None
    return tuple(out)


def parse_relay(raw: object, site: str) -> Relay | None:
    """agent.json's `trust.relay` (absent or null: this site is not relayed), checked; ValueError naming the field."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"site", "ranges", "partners"}:
        raise ValueError("trust.relay: not an object of site, ranges and partners")
    relay, partners = raw["site"], raw["partners"]
    if not isinstance(relay, str) or NAME.fullmatch(relay) is None or relay == site:
        raise ValueError(f"trust.relay.site: {relay!r} is not another site's name")
    if not isinstance(partners, dict) or not 0 < len(partners) <= MAX_PARTNERS:
        raise ValueError(f"trust.relay.partners: not an object of 1..{MAX_PARTNERS} sites")
    for name in partners:
        if not isinstance(name, str) or NAME.fullmatch(name) is None or name in (site, relay):
            raise ValueError(f"trust.relay.partners: {name!r} is not a third site's name")
    pinned = Relay(
        relay,
        _prefixes(raw["ranges"], "ranges"),
        tuple((name, _prefixes(ranges, f"partners.{name}")) for name, ranges in partners.items()),
    )
    if pinned.pinned_count - len(pinned.ranges) > MAX_PINNED:
        raise ValueError(
            f"trust.relay.partners: {pinned.pinned_count - len(pinned.ranges)} ranges, more than {MAX_PINNED}"
        )
    every = [IPv4Network(r) for r in pinned.ranges] + pinned.partner_ranges()
    clash = first_overlap([(*span(n), str(n)) for n in every])
    if clash:
        raise ValueError(f"trust.relay: {clash}")
    return pinned


def peer_relay_problem(plan: InterfacePlan, relay: Relay | None, index: int) -> str | None:
    """Why peer `index`'s entry breaks the pinned relay (or, without one, claims one), or None. The overlay /32s of
    any other peer are counted by trust._peer_problem (at most its own)."""
    peer = plan.peers[index]
    what = f"peer {peer.name}"
    if relay is None:
        return None
    if peer.name in relay.names:
        return f"{what} is reached through the relay {relay.site} (agent.json): never a direct peer"
    entries = [IPv4Network(e) for e in peer.allowed_ips]
    if peer.name != relay.site:
        hit = next((f"{e} overlaps {p}" for e in entries if (p := relay.partner_spans.meeting(e)) is not None), None)
        return f"{what}: {hit}, a relayed partner's range (agent.json): only the relay {relay.site} carries it" if hit \
            else None  # fmt: skip
    stray = next((e for e in entries if not relay.pinned_spans.holding(e)), None)
    if stray is not None:
        return (
            f"{what}: {stray} is neither the relay's nor a relayed partner's range (agent.json pins "
            f"{relay.pinned_count} of them: {', '.join(relay.ranges)} and its partners')"
        )
    return None


def allowed_ips_allowance(plan: InterfacePlan, relay: Relay | None, index: int) -> int:
    """How many AllowedIPs peer `index` may carry: a site's own ranges (MAX_RANGES), and the pinned relay its own
    and every pinned partner's (the document parser bounds any list at 1024 only)."""
    if relay is None or plan.peers[index].name != relay.site:
        return MAX_RANGES
    return relay.pinned_count


def relay_overlay_allowance(plan: InterfacePlan, relay: Relay | None, index: int) -> int:
    """How many overlay /32s peer `index` may carry: one, and the relay one per pinned partner."""
    if relay is None or plan.peers[index].name != relay.site:
        return 1
    return 1 + len(relay.partners)


def ranges_problem(plan: InterfacePlan, forwards: bool, own: tuple[str, ...]) -> str | None:
    """Why the plan's relay_ranges cannot be a relay's on this gateway, or None. Each one lies inside one peer's
    AllowedIPs of this document (so WireGuard admits it as a source from that peer alone and routes it to that peer
    alone) and none is the relay's own (`own`: its cidrs; its overlay address is plan.address): its chains then
    forward only between the document's own peers (wgconf.relay_chains). The peers' AllowedIPs are disjoint
    (trust.plan_problem checks them first), so the peer holding a range is the entry that starts last at or below it."""
    if not plan.relay_ranges:
        return None
    if not forwards:
        return "interface.relay_ranges: this site forwards nothing (agent.json: no cidrs), it cannot relay"
    mine = [IPv4Network(IPv4Interface(plan.address).ip), *(IPv4Network(c) for c in own)]
    entries = sorted((int(n.network_address), int(n.broadcast_address), p.name)
                     for p in plan.peers for n in map(IPv4Network, p.allowed_ips))  # fmt: skip
    starts = [start for start, _, _ in entries]
    for prefix in map(IPv4Network, plan.relay_ranges):
        clash = next((m for m in mine if prefix.overlaps(m)), None)
        if clash is not None:
            return f"interface.relay_ranges: {prefix} overlaps this relay's own {clash}"
        at = bisect.bisect_right(starts, int(prefix.network_address)) - 1
        if at < 0 or entries[at][1] < int(prefix.broadcast_address):
            return f"interface.relay_ranges: {prefix} is not inside a peer's AllowedIPs of this document"
    return None
