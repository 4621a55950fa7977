"""What a gateway knows before it reads any document, and the rules no signed document can override.

Standard library only (it ships with the agent). `Trust` is agent.json's `trust` object, written by the Pulumi
program into the user data (stable config: the mesh's signing key, the Pulumi scope, the site, its own CIDRs, the
overlay and its address, whether it may masquerade; never peers or keys of other sites). `parse_trust` checks it
(ValueError naming the field: the agent then exits 2). `plan_problem` is the defence in depth the agent applies to
every verified document (docs/security.md: what a stolen signing key still cannot do), and `unsafe_destination` the
check the HA agent repeats right before it replaces a route in a VPC route table.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from .relaytrust import (
    Relay,
    allowed_ips_allowance,
    first_overlap,
    parse_relay,
    peer_relay_problem,
    ranges_problem,
    relay_overlay_allowance,
    span,
)
from .wgconf import InterfacePlan

# The config model's DNS-label rule for site names (wg_mesh.config.sites; a test compares them). fullmatch: `$` would
# let a trailing newline through. [a-z] in a str pattern is ASCII only.
NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# Pulumi project and stack names: alphanumerics, '-', '_', '.' ("organization/project/stack" accepted too).
SCOPE = re.compile(r"[A-Za-z0-9._-]{1,100}(/[A-Za-z0-9._-]{1,100}){1,2}")
KEY_BYTES, KEY_CHARS = 32, 44
KEYID_HEX = 16  # the envelope's keyid: the first 16 hex digits of sha256(raw verify key)
MIN_PREFIX = 8  # nothing shorter than a /8: no default route, no half of it, no quarter...
MIN_MTU, MAX_MTU = 1280, 8920  # wg_mesh.config.sites MIN_TUNNEL_MTU, MAX_TUNNEL_MTU (a test keeps them equal)
MAX_CIDRS = 64
# Never routed into the tunnel, never a peer's endpoint: "this network" (RFC 1122 3.2.1.3), loopback, link-local
# (169.254.169.254 is the clouds' metadata server: the instance's credentials), multicast and the reserved class E
# block with the limited broadcast address 255.255.255.255 (RFC 5735 / RFC 6890 special-purpose registry).
FORBIDDEN = tuple(IPv4Network(n) for n in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"))


def is_key(value: object) -> bool:
    """A WireGuard (or Ed25519) key as wg(8) prints it: 32 bytes in canonical base64, 44 characters (the unused low
    bits of the last character zero: one key, one spelling, so comparisons of keys are comparisons of strings)."""
    if not isinstance(value, str) or len(value) != KEY_CHARS or not value.isascii():
        return False
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == KEY_BYTES and base64.b64encode(raw).decode() == value


def is_name(value: object) -> bool:
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def keyid_of(verify_key_b64: str) -> str:
    """The envelope's keyid of a base64 Ed25519 verify key (wg_mesh.plan.signing.keyid is this)."""
    return hashlib.sha256(base64.b64decode(verify_key_b64)).hexdigest()[:KEYID_HEX]


@dataclass(frozen=True)
class Trust:
    signing_key: str  # base64 Ed25519 verify key: the only key whose documents this gateway applies
    scope: str  # "<pulumi project>/<stack>": a document of another stack is refused
    site: str
    cidrs: tuple[str, ...]  # the site's own ranges: never routed into the tunnel
    overlay: str  # the overlay network ("100.96.0.0/24"): the address lies in it at exactly its prefix length
    address: str | None = None  # the site's configured overlay address ("100.96.0.1/24"); None: any in the overlay
    masquerade: bool = False  # whether a document may turn masquerade on (it can never turn it on otherwise)
    relay: Relay | None = None  # a relayed site's relay and partners, pinned (wg_mesh.gateway.relaytrust)
    # The serial of the site's document when this gateway was made: nothing older is ever applied, whatever the
    # gateway's disk holds (wg_mesh.tools.serial.floor_pin). 0: none pinned.
    floor: int = 0
    expiring: bool = False  # every document must carry a `not_after` that has not passed (a cloud gateway's)
    # What the site is (the config's `cloud`): a cloud gateway ("aws", "gcp") never gets a host filter on its WireGuard
    # port (listen_sources: its cloud firewall admits its peers, and a filter of a document's choosing would cut it off
    # the mesh). None: an agent.json written before the field (only a static site keeps one: a cloud gateway's comes
    # with its user data), the rules of a static site.
    cloud: str | None = None

    @property
    def forwards(self) -> bool:
        """Whether this gateway forwards: a site with no ranges of its own is a single host (wgconf's
        InterfacePlan.forward), whatever a document says."""
        return bool(self.cidrs)

    @property
    def keyid(self) -> str:
        return keyid_of(self.signing_key)


def _network(value: object, field: str) -> IPv4Network:
    if not isinstance(value, str) or not value.isascii():
        raise ValueError(f"trust.{field}: {value!r} is not an IPv4 prefix")
    try:
        return IPv4Network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"trust.{field}: {exc}") from None


TRUST_KEYS = {
    "signing_key", "scope", "site", "cidrs", "overlay", "address", "masquerade", "relay", "floor", "expiring", "cloud"
}  # fmt: skip
MAX_SERIAL = 2**53
CLOUDS = ("aws", "gcp", "static")  # wg_mesh.config.sites' `cloud` (a test keeps them equal)


def parse_trust(raw: object) -> Trust:
    """agent.json's `trust` object, checked; ValueError naming the field."""
    if not isinstance(raw, dict):
        raise ValueError("trust: not an object")
    unknown = sorted(set(raw) - TRUST_KEYS)
    if unknown:
        raise ValueError(f"trust: unknown field {unknown[0]!r}")
    if not is_key(raw.get("signing_key")):
        raise ValueError("trust.signing_key: not a base64 Ed25519 public key (32 bytes)")
    scope, site = raw.get("scope"), raw.get("site")
    if not isinstance(scope, str) or not SCOPE.fullmatch(scope):
        raise ValueError(f"trust.scope: {scope!r} is not PROJECT/STACK")
    if not is_name(site):
        raise ValueError(f"trust.site: {site!r} is not a DNS label")
    cidrs = raw.get("cidrs")
    if not isinstance(cidrs, list) or len(cidrs) > MAX_CIDRS:
        raise ValueError(f"trust.cidrs: not a list of at most {MAX_CIDRS} prefixes")
    own = [_network(c, "cidrs") for c in cidrs]
    overlay = _network(raw.get("overlay"), "overlay")
    if not MIN_PREFIX <= overlay.prefixlen <= 30 or overlay_problem(overlay):
        raise ValueError(f"trust.overlay: {overlay} cannot be an overlay network")
    address = raw.get("address")
    if address is not None and (not isinstance(address, str) or address_problem(address, overlay)):
        raise ValueError(f"trust.address: {address!r} is not an address in {overlay} at /{overlay.prefixlen}")
    masquerade = raw.get("masquerade", False)
    if not isinstance(masquerade, bool):
        raise ValueError(f"trust.masquerade: {masquerade!r} is not true or false")
    relay = parse_relay(raw.get("relay"), str(site))
    floor, expiring = raw.get("floor", 0), raw.get("expiring", False)
    if not isinstance(floor, int) or isinstance(floor, bool) or not 0 <= floor <= MAX_SERIAL:
        raise ValueError(f"trust.floor: {floor!r} is not a serial (0..2**53)")
    if not isinstance(expiring, bool):
        raise ValueError(f"trust.expiring: {expiring!r} is not true or false")
    cloud = raw.get("cloud")
    if cloud is not None and cloud not in CLOUDS:
        raise ValueError(f"trust.cloud: {cloud!r} is not one of {', '.join(CLOUDS)}")
    return Trust(str(raw["signing_key"]), scope, str(site), tuple(str(c) for c in own), str(overlay),
                 address, masquerade, relay, floor, expiring, cloud)  # fmt: skip


def overlay_problem(network: IPv4Network) -> str | None:
    return next((f"overlaps {f} (reserved)" for f in FORBIDDEN if network.overlaps(f)), None)


def address_problem(address: str, overlay: IPv4Network) -> str | None:
    """Why `address` ("100.96.0.1/24") is not an interface address inside `overlay` at its prefix length."""
    try:
        interface = IPv4Interface(address)
    except ValueError:
        return f"{address!r} is not an IPv4 address with a prefix length"
    if interface.network != overlay:
        return f"{address} is not in the overlay {overlay} at /{overlay.prefixlen}"
    if interface.ip in (overlay.network_address, overlay.broadcast_address):
        return f"{address} is the overlay's network or broadcast address"
    return None


_FORBIDDEN_SPANS = tuple((span(f), f) for f in FORBIDDEN)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def prefix_problem(network: IPv4Network, trust: Trust) -> str | None:
    """Why `network` must never be routed into the tunnel (as a peer's AllowedIPs, or a route-table entry towards
    this gateway), or None."""
    if network.prefixlen < MIN_PREFIX:
        return f"{network} is shorter than /{MIN_PREFIX} (a default route or a large part of one)"
    wanted = span(network)
    for reserved_span, reserved in _FORBIDDEN_SPANS:
        if _overlap(wanted, reserved_span):
            return f"{network} overlaps {reserved} (reserved)"
    for own in trust.cidrs:
        if _overlap(wanted, span(IPv4Network(own))):
            return f"{network} overlaps the site's own {own}"
    return None


def unsafe_destination(cidr: object, trust: Trust) -> str | None:
    """Why a route towards this gateway for `cidr` must not be written (the HA agent asks right before every
    ReplaceRoute), or None. The overlay itself is a remote range (ha_routes.remote_ranges) and is allowed."""
    if not isinstance(cidr, str) or not cidr.isascii():
        return f"{cidr!r} is not an IPv4 prefix"
    try:
        network = IPv4Network(cidr, strict=True)
    except ValueError:
        return f"{cidr!r} is not an IPv4 prefix"
    return prefix_problem(network, trust)


def host_problem(ip: IPv4Address) -> str | None:
    """Why `ip` cannot be a peer's endpoint or a WireGuard source, or None."""
    if ip == IPv4Address("255.255.255.255") or any(ip in f for f in FORBIDDEN):
        return f"{ip} is a reserved address (this network, loopback, link-local, multicast, class E, broadcast)"
    return None


def _peer_problem(plan: InterfacePlan, trust: Trust, index: int, spans: list[tuple[int, int, str]]) -> str | None:
    peer = plan.peers[index]
    overlay = IPv4Network(trust.overlay)
    own_ip = IPv4Interface(plan.address).ip
    what = f"peer {peer.name}"
    if not is_name(peer.name):
        return f"peers[{index}].name {peer.name!r} is not a DNS label"
    if peer.name == plan.site:
        return f"{what} has this site's own name"
    relayed = peer_relay_problem(plan, trust.relay, index)
    if relayed:
        return relayed
    most = allowed_ips_allowance(plan, trust.relay, index)
    if len(peer.allowed_ips) > most:
        return f"{what} has {len(peer.allowed_ips)} AllowedIPs, more than {most} (its own ranges, a relay's partners')"
    in_overlay = 0
    for entry in peer.allowed_ips:
        network = IPv4Network(entry)
        if network.overlaps(overlay):
            if network.prefixlen != 32 or not network.subnet_of(overlay):
                return f"{what}: {network} overlaps the overlay {overlay} (only peers' own /32s may)"
            if network.network_address in (overlay.network_address, overlay.broadcast_address, own_ip):
                return f"{what}: {network} is the overlay's network, broadcast or this site's own address"
            in_overlay += 1
        else:
            problem = prefix_problem(network, trust)
            if problem:
                return f"{what}: {problem}"
        spans.append((*span(network), f"{peer.name}'s {network}"))
    allowance = relay_overlay_allowance(plan, trust.relay, index)
    if in_overlay > allowance:
        own = "only its own /32" if allowance == 1 else "its own /32 and its relayed partners' (agent.json)"
        return f"{what} has {in_overlay} addresses in the overlay ({own})"
    for endpoint in (peer.endpoint, peer.fallback_endpoint):
        if endpoint is not None:
            ip = IPv4Address(endpoint.rpartition(":")[0])
            problem = (
                host_problem(ip) or (f"{ip} is inside the overlay" if ip in overlay else None) or owned(ip, plan, trust)
            )
            if problem:
                return f"{what}: endpoint {problem}"
    return None


def owned(ip: IPv4Address, plan: InterfacePlan, trust: Trust) -> str | None:
    """Why `ip` belongs to this site, so that it can never be a peer's endpoint (a tunnel to itself, or into its own
    networks), or None: its public address (the document's public_ip) or an address of its own ranges (agent.json)."""
    if plan.public_ip is not None and ip == IPv4Address(plan.public_ip):
        return f"{ip} is this site's own public address"
    mine = next((c for c in trust.cidrs if ip in IPv4Network(c)), None)
    return None if mine is None else f"{ip} is in this site's own {mine}"


def own_key_problem(plan: InterfacePlan, own: set[str]) -> str | None:
    """A peer with one of this gateway's own public keys (`own`: the one wg0 runs or wg0.conf holds, one it announced:
    only the gateway knows them; the document's own public_key is refused as a peer's by document.decode), or None.
    During an own key rotation such a document would switch the new private key in at once and let whoever holds the
    rotated-away key in as that peer (issue 33 item 3)."""
    hit = next((p.name for p in plan.peers if p.public_key in own), None)
    return None if hit is None else f"peer {hit} has this gateway's own public key (running or announced)"


def endpoint_clash(plan: InterfacePlan) -> str | None:
    """Two peers with one endpoint address (each site has its own: wg_mesh.config.addressing.mesh_problems), or None."""
    seen: dict[str, str] = {}
    for peer in plan.peers:
        for endpoint in {e.rpartition(":")[0] for e in (peer.endpoint, peer.fallback_endpoint) if e is not None}:
            if endpoint in seen:
                return f"peer {peer.name}: endpoint {endpoint} is also peer {seen[endpoint]}'s"
            seen[endpoint] = peer.name
    return None


def plan_problem(plan: InterfacePlan, trust: Trust) -> str | None:
    """The first invariant a (verified, well-formed) document breaks, or None: what no signature can override."""
    overlay = IPv4Network(trust.overlay)
    problem = address_problem(plan.address, overlay)
    if problem:
        return f"interface.address: {problem}"
    if trust.address is not None and IPv4Interface(plan.address) != IPv4Interface(trust.address):
        return f"interface.address: {plan.address} is not this site's configured {trust.address}"
    if plan.masquerade and not trust.masquerade:
        return "interface.masquerade: on, and this site's agent.json does not allow it"
    if plan.public_ip is not None:
        ip = IPv4Address(plan.public_ip)
        problem = host_problem(ip) or (f"{ip} is inside the overlay" if ip in overlay else None)
        if problem:
            return f"interface.public_ip: {problem}"
    if plan.listen_sources and trust.cloud in ("aws", "gcp"):
        return (
            f"interface.listen_sources: a {trust.cloud} gateway (agent.json) has no host filter on its WireGuard port "
            "(its cloud firewall admits its peers; a filter would cut it off the mesh)"
        )
    for source in plan.listen_sources:
        # a peer's /32, or a dynamic peer's endpoint_ranges (issue 24): never shorter than MIN_PREFIX, never reserved
        # space (an ACCEPT on the WireGuard port only: WireGuard answers nothing to an unauthenticated packet)
        network = IPv4Network(source)
        if network.prefixlen < MIN_PREFIX:
            return f"interface.listen_sources: {network} is shorter than /{MIN_PREFIX}"
        problem = host_problem(network.network_address) or next(
            (f"{network} overlaps {f} (reserved)" for f in FORBIDDEN if network.overlaps(f)), None
        )
        if problem:
            return f"interface.listen_sources: {problem}"
    spans: list[tuple[int, int, str]] = []
    for index in range(len(plan.peers)):
        problem = _peer_problem(plan, trust, index, spans)
        if problem:
            return problem
    clash = first_overlap(spans)
    if clash:
        return f"AllowedIPs are not disjoint: {clash}"
    clash = endpoint_clash(plan)
    if clash:
        return clash
    return ranges_problem(plan, trust.forwards, trust.cidrs)
