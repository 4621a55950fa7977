"""Relays (issue 24 item 2): a pair of sites with no direct path meets through a cloud gateway.

Two `endpoint: dynamic` sites (wg_mesh.config.reach) have no address the other can dial: each sits behind a NAT or
on a changing address, and each learns its peers' addresses only from their packets, so neither ever sends the
first one. Such a pair is relayed: neither peers with the other; each sends the other's ranges to the relay (one
cloud gateway, fixed address), which forwards them wg0 -> wg0 with the source addresses kept
(wg_mesh.plan.relay; docs/how-to/static-sites.md, "Relays").

Which gateway relays is the mesh's `relay: SITE`, or by default the first cloud site in `sites` order: every
relayed site already peers with it (every site peers with every cloud site), its address is fixed, and the order
of `sites` is the user's own, so appending a site never moves the relay (inserting a cloud site before it does:
set `relay` to pin it). Part of the config model; pure, no Pulumi.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

from wg_mesh.config.messages import quote
from wg_mesh.config.reach import is_dynamic

CLOUDS = ("aws", "gcp")
# The relayed sites' ranges (overlay /32s and cidrs) the relay forwards between, two iptables rules each: its agent
# reads at most this many (wg_mesh.gateway.document.MAX_RELAY_RANGES, a test keeps them equal): the parser's bound on
# any list, twice the 512 peers a document holds (an overlay /32 and one LAN each). iptables takes it in its stride:
# 2049 rules in the two chains are one iptables-restore commit of about 50 ms, and a relayed packet meets at most
# one rule per range in each chain; a gateway's other traffic meets one jump rule (-i wg0 -o wg0), not one per pair.
MAX_RELAY_RANGES = 1024
RELAY_DESCRIPTION = (
    "The cloud site (aws or gcp) whose gateway relays the pairs with no direct path (two `endpoint: dynamic` sites): "
    "they send each other's traffic through it, source addresses kept. Unset: the first cloud site in `sites` order "
    "(appending a site never moves it). Its bandwidth and egress carry the relayed traffic; an HA site "
    "(`gateways: 2`) keeps relaying across a failover."
)


def relayed_sites(sites: Sequence[Any]) -> list[Any]:
    """The sites that meet some others through the relay, in `sites` order: the dynamic ones, when there are two."""
    dynamic = [s for s in sites if is_dynamic(s)]
    return dynamic if len(dynamic) > 1 else []


def relayed_pairs(sites: Sequence[Any]) -> list[tuple[str, str]]:
    """The pairs with no direct path, in `sites` order: every two relayed sites (so the relay may forward from any
    relayed range to any: wg_mesh.gateway.wgconf.relay_chains)."""
    return [(a.name, b.name) for a, b in combinations(relayed_sites(sites), 2)]


def relay_name(sites: Sequence[Any], relay: str | None) -> str | None:
    """The site that relays (`relay`, or the first cloud site), or None when no pair needs one."""
    if not relayed_sites(sites):
        return None
    if relay is not None:
        return relay
    return next((s.name for s in sites if getattr(s, "cloud", None) in CLOUDS), None)


def partners(sites: Sequence[Any], name: str) -> list[str]:
    """The sites `name` reaches through the relay (none for a site that is not relayed)."""
    relayed = [s.name for s in relayed_sites(sites)]
    return [other for other in relayed if other != name] if name in relayed else []


def problems(sites: Sequence[Any], relay: Any) -> list[str]:
    """The `relay` field against the parsed sites: a known cloud site; a mesh whose relayed pairs have no cloud site
    to go through is refused at the second dynamic site. `relay` set with no pair needing it is accepted: it pins
    the choice before the second dynamic site arrives (validate's summary says it relays nothing yet)."""
    names = {s.name: s for s in sites}
    out = []
    if relay is not None:
        if relay not in names:
            out.append(f"relay: {quote(relay)} is not a site of this mesh (sites: {', '.join(names)})")
        elif getattr(names[relay], "cloud", None) not in CLOUDS:
            out.append(
                f"relay: {relay} is a static site; a relay is a cloud gateway (aws or gcp) with a fixed address that "
                "every relayed site already peers with"
            )
    relayed = relayed_sites(sites)
    ranges = sum(1 + len(s.cidrs) for s in relayed)  # each relayed site's overlay /32 and cidrs
    if ranges > MAX_RELAY_RANGES:
        out.append(
            f"relay: {len(relayed)} relayed sites have {ranges} ranges (overlay addresses and cidrs), more than the "
            f"relay's {MAX_RELAY_RANGES}: give some dynamic sites a fixed endpoint, or fewer cidrs"
        )
    pairs = relayed_pairs(sites)
    if pairs and relay is None and not any(getattr(s, "cloud", None) in CLOUDS for s in sites):
        first, second = pairs[0]
        i = next(i for i, s in enumerate(sites) if s.name == second)
        out.append(
            f"sites[{i}].endpoint: {second} and {first} are both dynamic: neither can reach the other, and the mesh "
            "has no cloud gateway to relay them; give one of them a fixed endpoint or add a cloud site"
        )
    return out


def summary(sites: Sequence[Any], relay: str | None) -> str:
    """validate's words on relays: which site relays which pairs; nothing for a mesh without dynamic pairs."""
    chosen = relay_name(sites, relay)
    if chosen is not None:
        relayed = relayed_sites(sites)
        if len(relayed) > 3:  # past three pairs: the sites, not each pair
            count = len(relayed) * (len(relayed) - 1) // 2
            names = f"{relayed[0].name}, {relayed[1].name}, ..., {relayed[-1].name}"
            return f", relay {chosen} ({len(relayed)} dynamic sites, every two of them: {names}; {count} pairs)"
        return f", relay {chosen} ({', '.join(f'{a} <-> {b}' for a, b in relayed_pairs(sites))})"
    return f", relay {relay} (no pair needs it yet)" if relay is not None else ""
