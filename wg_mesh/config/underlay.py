"""Private paths (issue 13, docs/underlay.md): sites that reach each other over an interconnect, a peering, a VPN or
a private WAN, and use each other's private addresses and that path's MTU; every other pair stays on the internet.

Pure: the config model of one path, the rules between paths and sites (field-path messages, like
wg_mesh.config.rules), and each site's private address. No Pulumi, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network
from itertools import combinations
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator

from wg_mesh.config.addressing import gateway_subnet, special_purpose
from wg_mesh.config.messages import quote
from wg_mesh.config.sites import MAX_TUNNEL_MTU, WIREGUARD_IPV4_OVERHEAD, AwsSite, GcpSite, StaticSite, Strict

if TYPE_CHECKING:
    from wg_mesh.config.model import MeshConfig

# The path's underlay MTU: its tunnel (MTU - 60) must carry IPv6's 1280 (RFC 8200), and 9001 is the largest frame an
# EC2 instance sends (Amazon EC2 User Guide, "Network maximum transmission unit (MTU) for your EC2 instance").
MIN_PATH_MTU = 1280 + WIREGUARD_IPV4_OVERHEAD
MAX_PATH_MTU = 9001
DEFAULT_PATH_MTU = 1500
# A created gateway subnet's address the gateway is fixed to on a private path: past AWS's four reserved addresses
# at the start of a subnet (Amazon VPC User Guide, "Subnet CIDR blocks") and GCP's two (VPC docs, "Reserved IP
# addresses in IPv4 subnets"); the lab's gateways use the same one.
GATEWAY_HOST_OFFSET = 10
_PATH_NAME = re.compile(r"^[a-z]([a-z0-9-]*[a-z0-9])?$")
# Addresses of a subnet the cloud keeps for itself: an instance cannot be given one.
# AWS: "The first four IP addresses and the last IP address in each subnet CIDR block are not available for your use"
# (network, VPC router, DNS, future use, broadcast: https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html).
# GCP: the network address, the default gateway (the second), the second-to-last ("reserved for potential future
# use") and the broadcast address of a subnet's primary range (https://cloud.google.com/vpc/docs/subnets, "Reserved
# IP addresses in IPv4 subnets").
RESERVED_FROM_START = {"aws": (0, 1, 2, 3), "gcp": (0, 1)}
RESERVED_FROM_END = {"aws": (0,), "gcp": (0, 1)}  # 0: the last address
_RESERVED_WHY = {
    "aws": "AWS reserves the first four and the last address of every subnet",
    "gcp": "GCP reserves the network, gateway (second), second-to-last and broadcast address of every subnet",
}


class PrivatePath(Strict):
    name: str = Field(description="The path's name: lowercase letters, digits and `-`, at most 32.")
    sites: list[str] = Field(min_length=2, description="The sites on the path (two or more; one path per pair).")
    mtu: Annotated[int, Field(ge=MIN_PATH_MTU, le=MAX_PATH_MTU)] = Field(
        default=DEFAULT_PATH_MTU, description="The path's MTU; the tunnel over it is 60 bytes less."
    )
    kind: Literal["interconnect", "peering", "vpn", "wan"] = Field(  # a label (docs, metrics) only
        default="interconnect", description="What the path is: a label for the docs and metrics only."
    )

    @field_validator("name")
    @classmethod
    def _label(cls, name: str) -> str:
        if not _PATH_NAME.fullmatch(name) or len(name) > 32:
            raise ValueError(f"{quote(name)} is not a name (lowercase letters, digits and '-', at most 32)")
        return name

    @property
    def tunnel_mtu(self) -> int:
        """The tunnel MTU of the pairs on this path."""
        return min(self.mtu - WIREGUARD_IPV4_OVERHEAD, MAX_TUNNEL_MTU)


def default_private_ip(site: AwsSite | GcpSite | StaticSite) -> IPv4Address | None:
    """A site's private address on a path: given, or the fixed host of the gateway subnet wg-mesh creates (None: an
    existing network or a static site without one, refused by `problems`)."""
    if site.private_ip is not None:
        return site.private_ip
    if isinstance(site, StaticSite) or _existing_network(site):
        return None
    return gateway_subnet(site.cidrs[0]).network_address + GATEWAY_HOST_OFFSET


def _existing_network(site: AwsSite | GcpSite) -> bool:
    return site.subnet_id is not None if isinstance(site, AwsSite) else site.subnetwork is not None


def problems(cfg: MeshConfig) -> list[str]:
    """Every rule between the paths and the sites, as `field: message` lines."""
    out: list[str] = []
    names = {s.name: s for s in cfg.sites}
    on_path: dict[str, str] = {}
    seen_pairs: dict[frozenset[str], str] = {}
    seen_names: set[str] = set()
    for i, path in enumerate(cfg.private_paths):
        where = f"private_paths[{i}]"
        if path.name in seen_names:
            out.append(f"{where}.name: {quote(path.name)} names two paths")
        seen_names.add(path.name)
        for j, member in enumerate(path.sites):
            if member not in names:
                out.append(f"{where}.sites[{j}]: no site is named {quote(member)}")
            elif path.sites.index(member) != j:
                out.append(f"{where}.sites[{j}]: {quote(member)} is named twice in this path")
        known = [m for m in dict.fromkeys(path.sites) if m in names]
        for a, b in combinations(known, 2):
            pair = frozenset((a, b))
            if pair in seen_pairs:
                out.append(
                    f"{where}.sites: {a} and {b} are also on path {quote(seen_pairs[pair])}: one path per pair "
                    "(which endpoint and MTU would they use?)"
                )
            seen_pairs.setdefault(pair, path.name)
        for member in known:
            on_path.setdefault(member, path.name)
            site = names[member]
            if isinstance(site, GcpSite) and path.mtu > site.underlay_mtu:
                out.append(
                    f"{where}.mtu: {path.mtu} is above {site.name}'s network MTU ({site.underlay_mtu}, underlay_mtu): "
                    "raise the VPC network's MTU (up to 8896) or lower the path's"
                )
            elif isinstance(site, StaticSite) and path.mtu > site.underlay_mtu:
                out.append(
                    f"{where}.mtu: {path.mtu} is above {site.name}'s underlay MTU ({site.underlay_mtu}, underlay_mtu): "
                    "a host sends no frame larger than its link's; set its underlay_mtu to its link's MTU or lower "
                    "the path's"
                )
    if cfg.private_paths and cfg.delivery != "live":
        out.append(
            "private_paths: needs `delivery: live`: a gateway on a private path has a fixed private address, so it "
            "can only be replaced after its old instance is gone, and with user-data delivery every peer change "
            "replaces it"
        )
    for i, site in enumerate(cfg.sites):
        if site.name in on_path:
            out += _member_problems(f"sites[{i}]", on_path[site.name], site, cfg.overlay_cidr)
        elif site.private_ip is not None:
            out.append(f"sites[{i}].private_ip: {site.name} is on no private path (private_paths), nothing uses it")
    return out + _static_address_problems(cfg, set(on_path))


def reserved_problem(cloud: str, address: IPv4Address, subnet: IPv4Network) -> str | None:
    """Why the cloud will not give `address` to an instance of `subnet` (or of any subnet inside it that holds it:
    a cloud subnet is aligned, so the first and last addresses of a range are those of every subnet at its ends, and
    AWS's smallest subnet, a /28, and GCP's, a /29, keep the four and two at the start inside one subnet)."""
    offset, from_end = int(address) - int(subnet.network_address), int(subnet.broadcast_address) - int(address)
    if address not in subnet or not (offset in RESERVED_FROM_START[cloud] or from_end in RESERVED_FROM_END[cloud]):
        return None
    return f"{address} is a reserved address of {subnet}: {_RESERVED_WHY[cloud]}"


def _static_address_problems(cfg: MeshConfig, on_path: set[str]) -> list[str]:
    """A static site's private address is whatever its operator wrote: one its peers can reach, nobody else's."""
    out = []
    claimed: dict[IPv4Address, int] = {}
    for i, site in enumerate(cfg.sites):
        if not isinstance(site, StaticSite) or site.private_ip is None or site.name not in on_path:
            continue
        field, address = f"sites[{i}].private_ip", site.private_ip
        if (why := special_purpose(IPv4Network(address))) is not None:
            out.append(f"{field}: {address} {why.replace('overlaps', 'is in', 1)}")
        if address in claimed:
            out.append(f"{field}: {address} is already the private address of sites[{claimed[address]}]")
        claimed.setdefault(address, i)
        for k, other in enumerate(cfg.sites):
            clash = next((c for c in other.cidrs if address in c), None) if k != i else None
            if clash is not None:
                out.append(
                    f"{field}: {address} is inside sites[{k}] ({other.name})'s {clash}: its peers' host route to it "
                    "would go into that network (or the tunnel to it), not over the path"
                )
    return out


def _member_problems(where: str, path: str, site: AwsSite | GcpSite | StaticSite, overlay: IPv4Network) -> list[str]:
    """A site on a private path (the first that names it: `path`): one gateway, a usable private address."""
    out = []
    if site.gateways > 1:
        out.append(
            f"{where}.gateways: 2 on private path {quote(path)}: a private path does not follow a failover yet (the "
            "private address would have to move with the Elastic IP: docs/underlay.md section 6)"
        )
    if not isinstance(site, StaticSite) and not _existing_network(site) and site.cidrs[0].prefixlen >= 24:
        out.append(
            f"{where}.cidrs[0]: {site.cidrs[0]} is the whole gateway subnet; on private path {quote(path)} the path "
            "must carry a prefix more specific than the mesh's routes to the site (its gateway subnet, a /24 of a "
            "larger CIDR): with equal prefixes AWS prefers the mesh's static route and the tunnel loops into itself"
        )
    address = default_private_ip(site)
    field = f"{where}.private_ip"
    if address is None:
        why = "a static site" if isinstance(site, StaticSite) else "its network is an existing one"
        out.append(f"{field}: required on private path {quote(path)} ({why}): the address its peers there reach")
    elif address in overlay:
        out.append(f"{field}: {address} is inside the overlay ({overlay})")
    elif isinstance(site, StaticSite):
        if address == site.endpoint:
            out.append(f"{field}: {address} is the public endpoint; on a private path it is the private one")
    elif not any(address in cidr for cidr in site.cidrs):
        out.append(f"{field}: {address} is in none of the site's cidrs ({_join(site.cidrs)})")
    elif not _existing_network(site) and address not in gateway_subnet(site.cidrs[0]):
        out.append(f"{field}: {address} is not in the gateway subnet wg-mesh creates ({gateway_subnet(site.cidrs[0])})")
    else:
        # the created gateway subnet, or (an existing network) the site's cidr holding it: its ends are reserved in
        # whichever subnet of it the gateway sits
        subnet = (
            next(c for c in site.cidrs if address in c) if _existing_network(site) else gateway_subnet(site.cidrs[0])
        )
        if (reserved := reserved_problem(site.cloud, address, subnet)) is not None:
            out.append(f"{field}: {reserved}")
    return out


def _join(cidrs: Sequence[IPv4Network]) -> str:
    return ", ".join(str(c) for c in cidrs)
