"""How the mesh reaches a static site: a fixed public address, `dynamic` (issue 24: a site on a dynamic address or
behind a NAT, with no address anyone can dial), or a DNS name (wg_mesh.config.dnsname: its peers' gateways resolve it
every `reresolve_seconds` and follow it when its answer changes, wg_mesh.gateway.reresolve).

A dynamic site initiates: it has every peer's endpoint and sends a keepalive every `persistent_keepalive` seconds;
its peers have no Endpoint for it and learn its address from its authenticated packets (WireGuard's roaming). Their
firewalls cannot know that address in advance: they admit the site's `endpoint_ranges`, or any address, on the
WireGuard port (docs/how-to/static-sites.md). Two dynamic sites have no direct path: they meet through a relay
(wg_mesh.config.relay).

Part of the config model; pure, no Pulumi. The field types here, the rules as `field: message` lines over raw or
parsed sites (wg_mesh.config.rules' style).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator

from wg_mesh.config import addressing, dnsname
from wg_mesh.config.fields import parse_address, parse_network
from wg_mesh.config.messages import quote

DYNAMIC = "dynamic"
MIN_RANGE_PREFIX = 8  # a wider range admits a large part of the internet: leave endpoint_ranges out instead
MAX_ENDPOINT_RANGES = 16  # each is a firewall rule on every gateway that peers with the site (AWS counts them)
ENDPOINT_DESCRIPTION = (
    "The host's public IPv4 address: not special-purpose, private (RFC 1918), CGNAT or benchmarking space (from a "
    "program: a known value or a pulumi Output); or `dynamic`: no fixed address (a dynamic IP, behind a NAT): the "
    "site initiates and keeps the path open with `persistent_keepalive`; or a DNS name (e.g. vpn.example.com: an "
    "address that changes, re-resolved by its peers' gateways every `reresolve_seconds`)."
)
RANGES_DESCRIPTION = (
    "`endpoint: dynamic` or a DNS name only: the public ranges its packets may come from (e.g. its provider's); the "
    "WireGuard port of the gateways that peer with it admits these. Unset: any address."
)


def parse_endpoint(value: Any) -> Any:
    """A static site's `endpoint`: the literal `dynamic`, an IPv4 address the internet reaches, or a DNS name
    (lower-case, without a final dot)."""
    if value == DYNAMIC or isinstance(value, IPv4Address):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected an IPv4 address, 'dynamic' or a DNS name, got {quote(value)}")
    try:
        ip = parse_address(value)
    except ValueError:
        name = dnsname.normalized(value)
        if "." not in name or not any(ch.isalpha() for ch in name):  # `dynamc`, `Dynamic`, or a mistyped address
            raise ValueError(
                f"{quote(value)} is neither an IPv4 address, 'dynamic' (a site with no fixed address) nor a fully "
                "qualified DNS name (e.g. vpn.example.com)"
            ) from None
        problem = dnsname.name_problem(name)
        if problem is not None:
            raise ValueError(f"{quote(value)} is not a DNS name a site can have: {problem}") from None
        return name
    problem = addressing.endpoint_problem(ip)
    if problem is not None:
        raise ValueError(problem)
    return ip


def _endpoint_range(net: IPv4Network) -> IPv4Network:
    if net.prefixlen < MIN_RANGE_PREFIX:
        raise ValueError(
            f"{net} is wider than a /{MIN_RANGE_PREFIX}: leave endpoint_ranges out to admit any address "
            "(docs/how-to/static-sites.md)"
        )
    why = addressing.special_purpose(net)
    if why is not None:
        raise ValueError(f"{net} {why}")
    private = next((n for n, _ in addressing.NOT_INTERNET_REACHABLE if net.overlaps(n)), None)
    if private is not None:
        raise ValueError(
            f"{net} overlaps {private}: the gateways see the public address a dynamic site's packets leave its "
            "NAT with, never a private, CGNAT or benchmarking one"
        )
    return net


# The field types (wg_mesh.config.sites uses them on StaticSite).
SiteEndpoint = Annotated[IPv4Address | Literal["dynamic"] | str, BeforeValidator(parse_endpoint)]
EndpointRange = Annotated[IPv4Network, BeforeValidator(parse_network), AfterValidator(_endpoint_range)]


def is_dynamic(site: object) -> bool:
    """Whether `site` (any site model) is a static site with `endpoint: dynamic`: no address its peers can dial."""
    return getattr(site, "endpoint", None) == DYNAMIC


def dns_name(site: object) -> str | None:
    """A static site's endpoint when it is a DNS name (a parsed site: `parse_endpoint` made it one), else None."""
    endpoint = getattr(site, "endpoint", None)
    return endpoint if isinstance(endpoint, str) and endpoint != DYNAMIC else None


def address_unknown(site: object) -> bool:
    """Whether a site's address is not known in advance (dynamic or DNS-named): its peers' firewalls admit its
    endpoint_ranges, or anywhere, on the WireGuard port."""
    return is_dynamic(site) or dns_name(site) is not None


def _named(raw: Mapping[str, Any]) -> bool:
    value = raw.get("endpoint")
    if not isinstance(value, str) or raw.get("cloud") != "static":
        return False
    try:
        return isinstance(parse_endpoint(value), str)
    except ValueError:
        return False


def site_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """Rules within one site (raw input or a parsed site's fields): endpoint_ranges only on a dynamic or DNS-named
    site."""
    if site.get("endpoint_ranges") is None or _named(site):
        return []
    what = "a cloud site's address is its own" if site.get("cloud") in ("aws", "gcp") else "its peers admit its /32"
    return [
        f"sites[{i}].endpoint_ranges: only for endpoint: dynamic or a DNS name ({what}); remove endpoint_ranges or "
        "set endpoint: dynamic"
    ]


def mesh_problems(sites: Sequence[Any], persistent_keepalive: int | None, path_sites: Sequence[str]) -> list[str]:
    """Rules between dynamic sites and the rest of the mesh (parsed sites; `persistent_keepalive` None: invalid,
    reported elsewhere; `path_sites`: the sites on a private path)."""
    out = [
        f"sites[{i}].endpoint: a DNS name, and {site.name} is on a private path: its public fallback would have no "
        "fixed address; a DNS-named site on a private path is not supported yet"
        for i, site in enumerate(sites)
        if dns_name(site) is not None and site.name in path_sites
    ]
    dynamic = [(i, s) for i, s in enumerate(sites) if is_dynamic(s)]
    if not dynamic:
        return out
    first = f"sites[{dynamic[0][0]}]"
    if persistent_keepalive == 0:
        out.append(
            f"persistent_keepalive: 0, and {first} ({dynamic[0][1].name}) has endpoint: dynamic: its keepalives are "
            "the only way the gateways learn its address and its NAT keeps the mapping open (set e.g. 25)"
        )
    for i, site in dynamic:
        if site.name in path_sites:
            out.append(
                f"sites[{i}].endpoint: dynamic, and {site.name} is on a private path: its public fallback would "
                "have no address; a dynamic site on a private path is not supported yet"
            )
    return out
