"""Healing a shrunk path: per-route MTU on the routes to one peer's AllowedIPs (pure decisions).

With `ip route replace <prefix> dev wg0 mtu lock <pmtu>` on each of the peer's prefixes, the kernel
- answers a forwarded, too-big packet with DF set (UDP, QUIC, ICMP from a workload) with ICMP "fragmentation
  needed" carrying <pmtu> instead of letting it vanish in the tunnel (ip_forward honours a route's MTU), and
- clamps the MSS of TCP handshakes through the gateway to <pmtu> - 40 through the `--clamp-mss-to-pmtu` rule of
  wgconf.forwarding_rules (it reads the route's MTU; the constant clamp stays as the upper bound).
`lock` keeps learned path MTUs from overriding it. Other peers' routes are not touched.

The peer's overlay address (the probes' target, its first /32) is left alone: with its route lowered the
kernel would refuse the full-size probe locally, and the monitor could never see the path grow back. It has no
route of its own anyway (the overlay's connected route covers it, so wg-quick adds none); traffic between sites
goes to the peers' CIDRs. Restoring replaces a prefix with the plain `dev wg0` route wg-quick made.

The decision compares the routes the kernel has now (one `ip -4 -o route show dev wg0`) with the wanted ones
and returns only the commands that differ, every tick: a wg-quick restart or an agent that re-adds a route
is healed again on the next tick, and a restarted monitor adopts a heal it finds (`adopted`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from .wgconf import INTERFACE, InterfacePlan

# prefix -> the route's MTU (None: no mtu attribute), for the IPv4 routes on wg0
Routes = dict[str, int | None]


def show_routes_argv(interface: str = INTERFACE) -> list[str]:
    return ["ip", "-4", "-o", "route", "show", "table", "main", "dev", interface]


def parse_routes(text: str) -> Routes:
    """`ip -4 -o route show dev wg0` output: '10.20.0.0/16 scope link mtu lock 1352', '10.99.0.2 scope link'."""
    routes: Routes = {}
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] in ("broadcast", "local", "unreachable", "blackhole", "prohibit", "throw"):
            continue
        try:
            prefix = str(ipaddress.ip_network("0.0.0.0/0" if words[0] == "default" else words[0]))
        except ValueError:
            continue
        mtu = None
        if "mtu" in words:
            values = [w for w in words[words.index("mtu") + 1 :][:2] if w != "lock"]
            mtu = int(values[0]) if values and values[0].isdigit() else None
        routes[prefix] = mtu
    return routes


def overlay(plan: InterfacePlan) -> ipaddress.IPv4Network:
    """The interface's own prefix (the overlay, IPv4 like the whole mesh)."""
    return ipaddress.IPv4Interface(plan.address).network


def overlay_address(plan: InterfacePlan, peer: str) -> str:
    """The peer's overlay address, the probes' target: its first /32 in AllowedIPs."""
    entries = next(p for p in plan.peers if p.name == peer).allowed_ips
    for entry in entries:
        network = ipaddress.ip_network(entry, strict=False)
        if network.prefixlen == network.max_prefixlen:
            return str(network.network_address)
    raise ValueError(f"peer {peer} has no /32 in AllowedIPs {', '.join(entries)}: nothing to probe")


def prefixes(plan: InterfacePlan, peer: str) -> list[tuple[str, bool]]:
    """The routes the heal lowers for a peer: its IPv4 AllowedIPs except the probe target, each with whether the
    interface's connected route already covers it (then wg-quick made no route, and restoring deletes it)."""
    own, target = overlay(plan), f"{overlay_address(plan, peer)}/32"
    out = []
    for entry in next(p for p in plan.peers if p.name == peer).allowed_ips:
        network = ipaddress.ip_network(entry, strict=False)
        if isinstance(network, ipaddress.IPv4Network) and str(network) != target:
            out.append((str(network), network.subnet_of(own)))
    return out


def commands(plan: InterfacePlan, wanted: Mapping[str, int | None], routes: Routes) -> list[list[str]]:
    """The `ip route` commands that make the kernel's routes on wg0 match `wanted` (peer -> route MTU, None =
    the original route). Only the plan's peers' routes are touched, and only those that differ."""
    dev = ["dev", INTERFACE]
    out: list[list[str]] = []
    for peer in plan.peers:
        want = wanted.get(peer.name)
        for prefix, connected in prefixes(plan, peer.name):
            # restored: the route wg0.conf gives it (an internet peer of a jumbo gateway: its own MTU, route_mtus)
            static = plan.peer_mtu(peer) if plan.peer_mtu(peer) < plan.mtu and not connected else None
            if want is not None and (prefix not in routes or routes[prefix] != want):
                out.append(["ip", "-4", "route", "replace", prefix, *dev, "mtu", "lock", str(want)])
            elif want is None and routes.get(prefix) != static:
                if static is not None:
                    out.append(["ip", "-4", "route", "replace", prefix, *dev, "mtu", str(static)])
                else:
                    verb = ["del", prefix, *dev] if connected else ["replace", prefix, *dev]
                    out.append(["ip", "-4", "route", *verb])
    return out


def adopted(plan: InterfacePlan, routes: Routes) -> dict[str, int]:
    """Peers whose routes already carry an MTU below the tunnel's (a heal from before a restart): peer -> MTU."""
    found = {}
    for peer in plan.peers:
        mtus = [routes.get(prefix) for prefix, _ in prefixes(plan, peer.name)]
        lowered = [m for m in mtus if m is not None and m < plan.peer_mtu(peer)]
        if lowered:
            found[peer.name] = min(lowered)
    return found
