"""Who peers with whom, what each peer may send, which routes point at a gateway, which MTU.

Plain data in, plain data out: no Pulumi, no I/O. The cloud components, the renderers and the
lab all take their decisions from here, so the clouds and the lab cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Network

from wg_mesh.config import Deferred, MeshConfig, StaticSite, underlay
from wg_mesh.config.addressing import GATEWAY_SUBNET_PREFIX as GATEWAY_SUBNET_PREFIX  # re-exported
from wg_mesh.config.addressing import gateway_subnet as gateway_subnet
from wg_mesh.config.addressing import standby_gateway_subnet as standby_gateway_subnet
from wg_mesh.config.model import tunnel_mtu as tunnel_mtu  # re-exported (the model's: validate prints it)
from wg_mesh.config.reach import address_unknown, dns_name
from wg_mesh.config.underlay import PrivatePath
from wg_mesh.gateway.wgconf import InterfacePlan as InterfacePlan  # re-exported (moved to the gateway package)
from wg_mesh.gateway.wgconf import Peer as Peer
from wg_mesh.plan import relay

IPV4_TCP_HEADERS = 40  # IPv4 (20) + TCP (20): MSS = MTU - 40


@dataclass(frozen=True)
class PeerAddress:
    """What the rest of the mesh must know about a site once its address and key exist."""

    public_ip: str
    public_key: str
    private_ip: str | None = None  # its gateway's address on a private path (docs/underlay.md), if it is on one
    # unix seconds from which public_key is valid: its key_epoch's last change + rotation_lead_seconds (an announced
    # rotation, wg_mesh.gateway.rotation: peers that run its old key switch then); None: valid now
    key_at: int | None = None


def private_directory(cfg: MeshConfig) -> dict[str, str]:
    """Each private-path site's private address: plain config (given, or fixed in the gateway subnet), never an
    output of the gateway, so the directory needs no instance and no cycle can form."""
    on_path = {name for path in cfg.private_paths for name in path.sites}
    found = {site.name: underlay.default_private_ip(site) for site in cfg.sites if site.name in on_path}
    return {name: str(ip) for name, ip in found.items() if ip is not None}


def path_between(cfg: MeshConfig, a: str, b: str) -> PrivatePath | None:
    """The private path two sites share, or None (they meet over the internet)."""
    return next((p for p in cfg.private_paths if a in p.sites and b in p.sites and a != b), None)


def peer_tunnel_mtu(cfg: MeshConfig, name: str, peer: str) -> int:
    """The tunnel MTU between two sites: their private path's, or the mesh's (internet)."""
    path = path_between(cfg, name, peer)
    return tunnel_mtu(cfg) if path is None else path.tunnel_mtu


def site_tunnel_mtu(cfg: MeshConfig, name: str) -> int:
    """A site's wg0 MTU: the largest of its peers' tunnel MTUs (the others get theirs on their routes: wgconf
    route_mtus). Without private paths, the mesh's tunnel MTU."""
    return max(peer_tunnel_mtu(cfg, name, peer) for peer in peer_names(cfg, name))


ANYWHERE = "0.0.0.0/0"  # a dynamic or DNS-named peer without endpoint_ranges: its packets may come from any address


def peer_endpoint_ip(cfg: MeshConfig, name: str, peer: str, directory: Mapping[str, PeerAddress]) -> str | None:
    """Where `name` sends to `peer`: its private address on their shared path, else its public one; None for a dynamic
    peer (`endpoint: dynamic`: it initiates, and `name` learns its address from its packets) and a DNS-named one
    (its endpoint is the re-resolver's: `peer_endpoint_name`)."""
    if address_unknown(cfg.site(peer)):
        return None
    entry = directory[peer]
    if path_between(cfg, name, peer) is None:
        return entry.public_ip
    if entry.private_ip is None:
        raise KeyError(f"no private address known for {peer} (private path with {name})")
    return entry.private_ip


def peer_endpoint_name(cfg: MeshConfig, peer: str) -> str | None:
    """A DNS-named peer's NAME:PORT (the gateways resolve it: wg_mesh.gateway.reresolve), else None."""
    name = dns_name(cfg.site(peer))
    return None if name is None else f"{name}:{cfg.listen_port}"


def clamped_mss(mtu: int) -> int:
    return mtu - IPV4_TCP_HEADERS


def peer_names(cfg: MeshConfig, name: str) -> list[str]:
    """A full mesh: every other site, in config order, but a relayed partner (wg_mesh.plan.relay: two dynamic sites
    meet through the relay, never directly)."""
    cfg.site(name)  # KeyError for an unknown site
    relayed = relay.partners(cfg, name)
    return [site.name for site in cfg.sites if site.name != name and site.name not in relayed]


def forwards(cfg: MeshConfig, name: str) -> bool:
    """Whether a site's gateway forwards: a site with networks behind it; a single host (a static site without
    `cidrs`) is only itself, and its config turns on no forwarding (wgconf's InterfacePlan.forward)."""
    return bool(cfg.site(name).cidrs)


def allowed_ips(cfg: MeshConfig, name: str) -> tuple[str, ...]:
    """What a site's peers accept from it and route to it: its overlay /32 and its CIDRs."""
    return relay.own_ranges(cfg.site(name))


def peer_allowed_ips(cfg: MeshConfig, name: str, peer: str) -> tuple[str, ...]:
    """`name`'s AllowedIPs for `peer`: the peer's own ranges, and for the relay those of `name`'s relayed partners."""
    return allowed_ips(cfg, peer) + relay.carried(cfg, name, peer)


def remote_ranges(cfg: MeshConfig, name: str) -> list[IPv4Network]:
    """The overlay and every other site's CIDRs.

    A site's route tables send these to its gateway, and its network admits them as sources (a relayed partner's
    too: its traffic comes through the relay's peer entry).
    """
    remote = [cidr for site in cfg.sites if site.name != name for cidr in site.cidrs]
    return [cfg.overlay_cidr, *remote]


def static_endpoints(cfg: MeshConfig) -> dict[str, str]:
    """Public addresses that are known from config alone (static sites; not one given as an Output, not a dynamic
    or DNS-named one)."""
    return {
        site.name: str(site.endpoint)
        for site in cfg.sites
        if isinstance(site, StaticSite) and not isinstance(site.endpoint, Deferred) and not address_unknown(site)
    }


def dynamic_sources(site: StaticSite) -> list[str]:
    """Where a dynamic or DNS-named site's packets may come from: its endpoint_ranges, else anywhere."""
    return [str(net) for net in site.endpoint_ranges] if site.endpoint_ranges else [ANYWHERE]


def peer_source_ranges(cfg: MeshConfig, name: str, directory: Mapping[str, PeerAddress]) -> list[str]:
    """The sources allowed to reach a gateway's WireGuard port: each peer's public /32, and a peer on a shared
    private path its private /32 too (the path, and the public one while the path is down: docs/underlay.md 7); a
    dynamic or DNS-named peer's endpoint_ranges, or 0.0.0.0/0 without them (its address is not known in advance)."""
    sources: set[str] = set()
    for peer in peer_names(cfg, name):
        site = cfg.site(peer)
        if isinstance(site, StaticSite) and address_unknown(site):
            sources |= set(dynamic_sources(site))
            continue
        sources |= {f"{directory[peer].public_ip}/32", f"{peer_endpoint_ip(cfg, name, peer, directory)}/32"}
    return sorted(sources)


def path_probe_sources(cfg: MeshConfig, name: str) -> list[str]:
    """The private /32s of a site's private-path peers: their agents ping this gateway's private address directly
    (outside the tunnel) to see whether the path is up (wg_mesh.gateway.fallback); firewalls admit ICMP from them."""
    private = private_directory(cfg)
    return sorted({f"{private[p]}/32" for p in peer_names(cfg, name) if path_between(cfg, name, p) and p in private})


def interface_plan(cfg: MeshConfig, name: str, directory: Mapping[str, PeerAddress]) -> InterfacePlan:
    site = cfg.site(name)
    mtu = site_tunnel_mtu(cfg, name)
    missing = [peer for peer in peer_names(cfg, name) if peer not in directory]
    if missing:
        raise KeyError(f"no public address/key known for {', '.join(missing)}")
    peers = tuple(
        Peer(
            name=peer,
            public_key=directory[peer].public_key,
            allowed_ips=peer_allowed_ips(cfg, name, peer),
            endpoint=_with_port(peer_endpoint_ip(cfg, name, peer, directory), cfg.listen_port),
            persistent_keepalive=cfg.persistent_keepalive,
            mtu=peer_mtu if (peer_mtu := peer_tunnel_mtu(cfg, name, peer)) < mtu else None,
            fallback_endpoint=f"{directory[peer].public_ip}:{cfg.listen_port}"
            if path_between(cfg, name, peer)
            else None,
            key_at=directory[peer].key_at,
            endpoint_name=peer_endpoint_name(cfg, peer),
            reresolve_s=cfg.reresolve_seconds if dns_name(cfg.site(peer)) is not None else None,
        )
        for peer in peer_names(cfg, name)
    )
    return InterfacePlan(
        site=name,
        address=f"{site.overlay_ip}/{cfg.overlay_cidr.prefixlen}",
        listen_port=cfg.listen_port,
        mtu=mtu,
        mss=clamped_mss(mtu),
        masquerade=cfg.masquerades(site),
        peers=peers,
        forward=forwards(cfg, name),
        listen_sources=listen_sources(cfg, name, directory) if isinstance(site, StaticSite) else (),
        relay_ranges=relay.ranges(cfg, name),
        public_ip=own_public_ip(cfg, name, directory),
    )


def own_public_ip(cfg: MeshConfig, name: str, directory: Mapping[str, PeerAddress]) -> str | None:
    """The site's own public address as its peers reach it (its document's `public_ip`: never a peer's endpoint);
    None when it is not known in advance (dynamic, DNS-named) or not in the directory."""
    if address_unknown(cfg.site(name)) or name not in directory:
        return None
    return directory[name].public_ip


def _with_port(ip: str | None, port: int) -> str | None:
    return None if ip is None else f"{ip}:{port}"


def listen_sources(cfg: MeshConfig, name: str, directory: Mapping[str, PeerAddress]) -> tuple[str, ...]:
    """A static site's host filter on its WireGuard port: its peers' sources; none at all (an empty filter) when a
    dynamic peer may send from anywhere."""
    sources = peer_source_ranges(cfg, name, directory)
    return () if ANYWHERE in sources else tuple(sources)
