"""What a relay changes in the topology (issue 24 item 2; the rules and the choice: wg_mesh.config.relay).

Two relayed sites (two `endpoint: dynamic` sites: no direct path) do not peer with each other. Each one's peer entry
for the relay carries, besides the relay's own ranges, its partners' ranges and overlay /32s: wg-quick routes them
into wg0 towards the relay, and WireGuard accepts the partners' packets from the relay's key. The relay keeps its
normal peer entries (each site's own ranges) and forwards wg0 -> wg0 between the relayed sites' ranges only
(`ranges`; the rules, two per range: wg_mesh.gateway.wgconf.relay_chains), the source addresses kept (its
masquerade, if any, is on the default route's device only: wgconf.host_rules). The clouds' route tables do not
change: a cloud site peers with every site.

Plain data in, plain data out (wg_mesh.plan.topology builds the interface plans from it).
"""

from __future__ import annotations

from wg_mesh.config import MeshConfig
from wg_mesh.config import relay as relaying
from wg_mesh.config.sites import SiteBase


def own_ranges(site: SiteBase) -> tuple[str, ...]:
    """A site's ranges, as its peers accept them from it and route them to it: its overlay /32 and its CIDRs."""
    return (f"{site.overlay_ip}/32", *(str(cidr) for cidr in site.cidrs))


def relay_of(cfg: MeshConfig) -> str | None:
    """The site that relays, or None when no pair needs one."""
    return relaying.relay_name(cfg.sites, cfg.relay)


def partners(cfg: MeshConfig, name: str) -> list[str]:
    """The sites `name` reaches only through the relay, in `sites` order."""
    return relaying.partners(cfg.sites, name)


def carried(cfg: MeshConfig, name: str, peer: str) -> tuple[str, ...]:
    """What `name`'s peer entry for `peer` carries besides `peer`'s own ranges: its relayed partners' ranges when
    `peer` is the relay; nothing otherwise."""
    if peer != relay_of(cfg):
        return ()
    return tuple(r for partner in partners(cfg, name) for r in own_ranges(cfg.site(partner)))


def ranges(cfg: MeshConfig, name: str) -> tuple[str, ...]:
    """The ranges the relay `name` forwards wg0 -> wg0 between: every relayed site's, in `sites` order; none for any
    other site (its FORWARD rules stay as they were)."""
    if name != relay_of(cfg):
        return ()
    return tuple(r for s in relaying.relayed_sites(cfg.sites) for r in own_ranges(s))


def trust_relay(cfg: MeshConfig, name: str) -> dict[str, object] | None:
    """agent.json's `trust.relay` of a relayed site (wg_mesh.gateway.relaytrust): the relay's name, its ranges and
    each partner's, pinned, so that no document can put other ranges behind the relay's key; None for any other
    site. Config only (names, cidrs, overlay addresses; no key, no address), so it changes only with those."""
    relay, found = relay_of(cfg), partners(cfg, name)
    if relay is None or not found:
        return None
    return {
        "site": relay,
        "ranges": list(own_ranges(cfg.site(relay))),
        "partners": {p: list(own_ranges(cfg.site(p))) for p in found},
    }
