"""Private paths (issue 13, docs/underlay.md) in the lab's plan: a veth per pair of member sites between their VPC
routers, at the path's MTU, standing in for an interconnect (AWS Interconnect - multicloud / Partner Cross-Cloud
Interconnect, Direct Connect, VPC peering, a VPN). Pure: the config and the sites' plans in, plain data out;
`fabric.build_private_link` carries a link out.

    host ── VPC bridge ── VPC router ──(internet uplink, 1500 / 1460)── internet namespace ── ...
    gateway ─┘              └──(private link pp<j>, the path's MTU)── the peer site's VPC router

What crosses a private link (docs/underlay.md section 3): only gateway-to-gateway WireGuard. Each VPC router routes
the *remote gateway's private address* (/32) over the link and nothing else: the workload ranges keep going through
the mesh (the hosts' routes point at their own gateway, as the VPC route tables `pulumi up` writes). The addresses on
the link itself are link-local, as an interconnect attachment's BGP peering addresses are.

Not modelled yet: a static site in a private path (its private address would sit on a LAN behind its gateway, with no
VPC router to carry the link): the plan refuses it, it does not fall back silently.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wg_mesh.config import MeshConfig

IPV4_TCP_HEADERS = 40
LINK_POOL = IPv4Network("169.254.64.0/18")  # one /30 per link; 169.254.169.254 (metadata) lies outside
LINK_PREFIX = 30


@dataclass(frozen=True)
class LinkEnd:
    site: str
    vpc_ns: str
    interface: str  # in vpc_ns; named after the peer site's index: pp<j>
    address: IPv4Interface  # link-local, on `interface`
    gateway_ip: IPv4Address  # this site's gateway's private address: what the other end routes over the link


@dataclass(frozen=True)
class PrivateLink:
    path: str
    kind: str
    mtu: int  # the path's underlay IP MTU
    tunnel_mtu: int  # the pair's tunnel MTU (`PrivatePath.tunnel_mtu`: mtu - 60, at most 8920)
    a: LinkEnd
    b: LinkEnd

    @property
    def sites(self) -> frozenset[str]:
        return frozenset((self.a.site, self.b.site))

    def ends(self) -> tuple[tuple[LinkEnd, LinkEnd], tuple[LinkEnd, LinkEnd]]:
        """(this end, the far end), for each end."""
        return (self.a, self.b), (self.b, self.a)

    def routes(self) -> list[tuple[str, IPv4Network, IPv4Address, str]]:
        """(VPC namespace, destination, next hop, device): the far gateway's /32 only, in each VPC router."""
        return [
            (near.vpc_ns, IPv4Network(f"{far.gateway_ip}/32"), far.address.ip, near.interface)
            for near, far in self.ends()
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "mtu": self.mtu,
            "tunnel_mtu": self.tunnel_mtu,
            "sites": [self.a.site, self.b.site],
            "routes": [
                {"netns": ns, "to": str(dst), "via": str(via), "dev": dev} for ns, dst, via, dev in self.routes()
            ],
        }


def _link_net(n: int) -> IPv4Network:
    net = IPv4Network((int(LINK_POOL.network_address) + n * 4, LINK_PREFIX))
    if not net.subnet_of(LINK_POOL):
        raise ValueError("too many private links for the lab's link-local range")
    return net


def plan_private_links(cfg: MeshConfig, sites: Sequence[Any]) -> tuple[list[PrivateLink], list[str]]:
    """The links for `cfg.private_paths` (every pair of a path's sites), and the problems (LabPlanError's text).

    `sites`: the `SitePlan`s (index, name, vpc_ns, gateway_ip, gateways). A static member, or an HA member, is a
    problem: the lab does not model it yet."""
    by_name = {s.name: s for s in sites}
    links: list[PrivateLink] = []
    problems: list[str] = []
    for p, path in enumerate(cfg.private_paths):
        before = len(problems)
        members = [by_name.get(name) for name in path.sites]
        for name, member in zip(path.sites, members, strict=True):
            if member is None:
                problems.append(f"private_paths[{p}] ({path.name}): {name} is not a site the lab laid out")
            elif member.vpc_ns is None:
                problems.append(
                    f"private_paths[{p}] ({path.name}): {name} is a static site: a static member of a private path is "
                    "not modelled by the lab yet (only AWS and GCP sites, whose VPC routers carry the link)"
                )
            elif getattr(cfg.site(name), "gateways", 1) != 1:  # the config's: the lab may lay out places beside
                problems.append(f"private_paths[{p}] ({path.name}): {name} has two gateways: not modelled by the lab")
        if len(problems) > before:
            continue
        for x, y in itertools.combinations(sorted((m for m in members if m is not None), key=lambda m: m.index), 2):
            net = _link_net(len(links))
            ends = []
            for near, far, host in ((x, y, 1), (y, x, 2)):
                address = IPv4Interface(f"{net[host]}/{LINK_PREFIX}")
                ends.append(LinkEnd(near.name, near.vpc_ns, f"pp{far.index}", address, near.gateway_ip.ip))
            links.append(PrivateLink(path.name, path.kind, path.mtu, path.tunnel_mtu, ends[0], ends[1]))
    return links, problems


def link_between(links: Sequence[PrivateLink], a: str, b: str) -> PrivateLink | None:
    pair = frozenset((a, b))
    return next((link for link in links if link.sites == pair), None)
