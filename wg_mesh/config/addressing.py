"""Address rules of the config that depend on what an address *is*, not on how it was written.

Pure functions over `ipaddress` values, each returning problem lines (`field: message`) for
`wg_mesh.config`: special-purpose ranges, prefixes that swallow half the internet, routing loops through
a site's own endpoint, and the CIDR sizes the clouds accept for networks wg-mesh creates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

# IANA IPv4 Special-Purpose Address Registry (RFC 6890 and its updates). These are never a site's network,
# the overlay, an endpoint or a scrape source: the kernel, the clouds or every router treats them specially.
SPECIAL_PURPOSE: tuple[tuple[IPv4Network, str], ...] = (
    (IPv4Network("0.0.0.0/8"), "'this network' (RFC 6890), not a destination"),
    (IPv4Network("127.0.0.0/8"), "loopback: never leaves the host"),
    (
        IPv4Network("169.254.0.0/16"),
        "link-local: the clouds' metadata service (169.254.169.254) lives there, it must never be routed",
    ),
    (IPv4Network("192.0.0.0/24"), "IETF protocol assignments (RFC 6890), not for sites"),
    (IPv4Network("224.0.0.0/4"), "multicast: WireGuard and the VPC routers carry unicast only"),
    (IPv4Network("240.0.0.0/4"), "reserved (RFC 1112), includes the broadcast address 255.255.255.255"),
)
# An endpoint is dialled by every peer across the internet: these are not reachable from there. The
# documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24) stay allowed so that examples validate.
NOT_INTERNET_REACHABLE: tuple[tuple[IPv4Network, str], ...] = (
    (IPv4Network("10.0.0.0/8"), "private (RFC 1918): peers reach an endpoint over the internet"),
    (IPv4Network("172.16.0.0/12"), "private (RFC 1918): peers reach an endpoint over the internet"),
    (IPv4Network("192.168.0.0/16"), "private (RFC 1918): peers reach an endpoint over the internet"),
    (IPv4Network("100.64.0.0/10"), "carrier-grade NAT space (RFC 6598): not reachable from the internet"),
    (IPv4Network("198.18.0.0/15"), "benchmarking (RFC 2544): not reachable from the internet"),
)
HALF_THE_INTERNET = 2**31  # addresses; routes this wide also catch the gateways' own underlay traffic

# AWS: "The allowed block size is between a /16 netmask (65,536 IP addresses) and /28 netmask (16 IP
# addresses)", for the VPC's first block and for every block associated later
# (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html).
AWS_VPC_PREFIXES = (16, 28)
# GCP: a subnet's primary IPv4 range is at least a /29 (four addresses of every range are reserved)
# (https://cloud.google.com/vpc/docs/subnets, "Valid ranges"). wg-mesh creates one subnet per GCP network,
# topology.gateway_subnet(): at most a /24, so only the lower bound can be crossed.
GCP_SUBNET_MIN_SIZE_PREFIX = 29


def special_purpose(net: IPv4Network) -> str | None:
    """Why `net` (or an address as a /32) overlaps a special-purpose range, or None."""
    for special, why in SPECIAL_PURPOSE:
        if net.overlaps(special):
            return f"overlaps {special}, {why}"
    return None


def cidr_problem(net: IPv4Network) -> str | None:
    """A site CIDR, the overlay or a monitoring range: not special-purpose, not half the internet."""
    why = special_purpose(net)
    if why is not None:
        return f"{net} {why}"
    if net.num_addresses >= HALF_THE_INTERNET:
        return f"{net} covers half the internet or more: its routes would capture the tunnels' own traffic"
    return None


def endpoint_problem(ip: IPv4Address) -> str | None:
    net = IPv4Network(ip)
    why = special_purpose(net)
    if why is None:
        why = next((f"is in {n}, {text}" for n, text in NOT_INTERNET_REACHABLE if ip in n), None)
    else:
        why = f"is special-purpose: {why.removeprefix('overlaps ')}"
    return None if why is None else f"{ip} {why}"


@dataclass(frozen=True)
class Ranges:
    """One site's addresses, as the mesh-wide checks see them."""

    where: str  # e.g. sites[2]
    cidrs: tuple[tuple[int, IPv4Network], ...]
    endpoint: IPv4Address | None


def mesh_problems(overlay: IPv4Network | None, sites: Sequence[Ranges]) -> list[str]:
    """Half the internet split into pieces, routing loops through endpoints, one endpoint for two sites."""
    problems: list[str] = []
    for site in sites:
        total = sum(net.num_addresses for _, net in site.cidrs)
        if all(net.num_addresses < HALF_THE_INTERNET for _, net in site.cidrs) and total >= HALF_THE_INTERNET:
            problems.append(
                f"{site.where}.cidrs: together cover {total} addresses, half the internet or more: their routes "
                "would capture the tunnels' own traffic"
            )
    everything = [net for site in sites for _, net in site.cidrs] + ([overlay] if overlay is not None else [])
    total = sum(net.num_addresses for net in everything)
    one_too_wide = any(net.num_addresses >= HALF_THE_INTERNET for net in everything)  # reported on its field
    if total >= HALF_THE_INTERNET and not one_too_wide and not problems:
        problems.append(
            f"sites: the overlay and the sites' cidrs together cover {total} addresses, half the internet or "
            "more: every gateway would route its own underlay traffic into the tunnels"
        )

    seen: dict[IPv4Address, str] = {}
    for site in sites:
        ip = site.endpoint
        if ip is None:
            continue
        if ip in seen:
            problems.append(f"{site.where}.endpoint: {ip} is already the endpoint of {seen[ip]}")
        else:
            seen[ip] = site.where
        if overlay is not None and ip in overlay:
            problems.append(
                f"overlay_cidr: {overlay} contains {site.where}.endpoint {ip}: the tunnel to it would be routed "
                "into itself"
            )
        for other in sites:
            for j, net in other.cidrs:
                if ip in net:
                    problems.append(
                        f"{other.where}.cidrs[{j}]: {net} contains {site.where}.endpoint {ip}: every peer would "
                        "route the tunnel to it into the tunnel itself"
                    )
    return problems


_RFC1918 = (IPv4Network("10.0.0.0/8"), IPv4Network("172.16.0.0/12"), IPv4Network("192.168.0.0/16"))
_AWS_198_19 = IPv4Network("198.19.0.0/16")


def _aws_secondary_problem(primary: IPv4Network, block: IPv4Network) -> str | None:
    """AWS's "IPv4 CIDR block association restrictions" table: which blocks a VPC may add, given its first one
    (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html)."""
    home = next((r for r in _RFC1918 if primary.subnet_of(r)), None)
    other_private = next((r for r in _RFC1918 if block.overlaps(r) and r != home), None)
    if other_private is not None:
        first = f"{primary} (in {home})" if home is not None else f"{primary} (not RFC 1918)"
        return f"a VPC whose first block is {first} cannot add a block from {other_private}"
    if block.overlaps(_AWS_198_19) and not primary.subnet_of(_AWS_198_19):
        return f"AWS does not let a VPC add a block from {_AWS_198_19} unless its first block is in it"
    if home == _RFC1918[1] and block.overlaps(IPv4Network("172.31.0.0/16")):
        return "a VPC whose first block is in 172.16.0.0/12 cannot add a block from 172.31.0.0/16"
    if primary.subnet_of(IPv4Network("10.0.0.0/15")) and block.overlaps(IPv4Network("10.0.0.0/16")):
        return "a VPC whose first block is in 10.0.0.0/15 cannot add a block from 10.0.0.0/16"
    return None


GATEWAY_SUBNET_PREFIX = 24


def gateway_subnet(cidr: IPv4Network) -> IPv4Network:
    """The subnet wg-mesh creates for a gateway: the first /24 of the site's first CIDR."""
    if cidr.prefixlen >= GATEWAY_SUBNET_PREFIX:
        return cidr
    return next(cidr.subnets(new_prefix=GATEWAY_SUBNET_PREFIX))


def standby_gateway_subnet(cidr: IPv4Network) -> IPv4Network | None:
    """AWS `gateways: 2` in a created VPC: the standby's subnet, the second /24 of the first CIDR (an AWS subnet is
    in one zone, docs/ha.md 5.1). None when the CIDR has no second /24."""
    if cidr.prefixlen >= GATEWAY_SUBNET_PREFIX:
        return None
    first = gateway_subnet(cidr)
    return IPv4Network((int(first.network_address) + first.num_addresses, GATEWAY_SUBNET_PREFIX))


def created_network_problems(where: str, cloud: str, cidrs: Sequence[IPv4Network]) -> list[str]:
    """CIDRs the cloud refuses when wg-mesh creates the site's network (an existing network is the user's)."""
    problems = []
    if cloud == "aws":
        low, high = AWS_VPC_PREFIXES
        for j, net in enumerate(cidrs):
            if not low <= net.prefixlen <= high:
                problems.append(
                    f"{where}.cidrs[{j}]: {net} cannot be a VPC block: AWS accepts /{low} to /{high} "
                    f"(split it into /{low}s, or give vpc_id, subnet_id and route_table_ids of an existing VPC)"
                )
            elif j > 0 and (why := _aws_secondary_problem(cidrs[0], net)) is not None:
                problems.append(f"{where}.cidrs[{j}]: {net}: {why} (reorder cidrs, or use an existing VPC)")
    elif cloud == "gcp" and cidrs and cidrs[0].prefixlen > GCP_SUBNET_MIN_SIZE_PREFIX:
        problems.append(
            f"{where}.cidrs[0]: {cidrs[0]} is too small for the gateway subnet wg-mesh creates in it: GCP subnets "
            f"are /{GCP_SUBNET_MIN_SIZE_PREFIX} or larger"
        )
    return problems
