"""`mesh doctor`'s path-MTU check: does a full-size packet reach each peer, or only small ones? (issue #14)

The failure it is for looks healthy everywhere else: handshakes fresh, small pings answered, every metric green,
yet bulk TCP hangs, because the internet path toward one peer now carries less than the tunnel needs (MTU + 60
bytes) and drops ICMP "fragmentation needed". Per peer with a working tunnel, one small and one full-size ping
with DF set go to the peer's overlay address (the /32 in its AllowedIPs); when only the small one comes back, a
binary search (wg_mesh.gateway.pmtu_probe, the agent's own probes) finds the largest size that passes, and the hint
names it. Peers are probed in parallel; each ping waits at most PING_TIMEOUT_S.

Standard library only, like the rest of doctor.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from wg_mesh.gateway.doctor.base import FAIL, OK, SKIP, WARN, Check, ConfPeer, Host
from wg_mesh.gateway.pmtu_probe import SMALL_SIZE, Settings, ping_argv, search

PING_TIMEOUT_S = 1
PARALLEL = 16
WIREGUARD_IPV4_OVERHEAD = 60  # outer IPv4 (20) + UDP (8) + WireGuard data header (32)


def overlay_address(peer: ConfPeer) -> str | None:
    """The peer's overlay address: its first IPv4 /32 in AllowedIPs (where its gateway answers on wg0)."""
    for entry in peer.allowed_ips:
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if network.version == 4 and network.prefixlen == 32:
            return str(network.network_address)
    return None


def _passes(host: Host, address: str, size: int) -> bool | None:
    """One DF ping of `size` bytes; None when ping itself is missing."""
    result = host.run(ping_argv(address, size, PING_TIMEOUT_S))
    return None if result.returncode == 127 else result.returncode == 0


def _check(host: Host, peer: ConfPeer, mtu: int) -> Check:
    name, site = peer.name or f"peer {peer.public_key[:8]}…", peer.name
    address = overlay_address(peer)
    if address is None:
        return Check("path-mtu", SKIP, f"{name}: no /32 in its AllowedIPs to probe", peer_site=site)
    small, full = _passes(host, address, SMALL_SIZE), _passes(host, address, mtu)
    if small is None or full is None:
        return Check("path-mtu", SKIP, "ping is not installed", "`sudo apt-get install iputils-ping`", site)
    if full:
        return Check("path-mtu", OK, f"{name}: {mtu}-byte packets with DF set reach {address}", peer_site=site)
    if not small:
        return Check(
            "path-mtu",
            WARN,
            f"{name}: {address} answers no ping, neither {SMALL_SIZE} nor {mtu} bytes: the path MTU cannot be judged",
            f"The tunnel's handshake is fresh, so {name}'s gateway is up but drops ICMP on wg0 (or its overlay "
            f"address is not on its wg0). Allow ICMP echo on wg0 there to get this check and the agent's probes.",
            site,
        )
    settings = Settings()
    largest = search(lambda size: bool(_passes(host, address, size)), settings.floor, mtu, settings.step)
    found = f"the largest that passes is {largest} bytes" if largest else f"not even {settings.floor} bytes pass"
    outer = (largest or settings.floor) + WIREGUARD_IPV4_OVERHEAD
    return Check(
        "path-mtu",
        FAIL,
        f"path-MTU black hole to {name}: {SMALL_SIZE}-byte pings with DF set pass, {mtu}-byte ones vanish; {found}",
        f"The internet path toward {name} now carries fewer than {mtu + WIREGUARD_IPV4_OVERHEAD} bytes and its ICMP "
        f"'fragmentation needed' does not come back, so large TCP transfers, UDP and QUIC stall while small packets "
        f"pass. Now: `sudo ip route replace <{name}'s CIDR> dev wg0 mtu lock {largest or settings.floor}` for each "
        f"of its AllowedIPs but {address}/32 (TCP's MSS follows the route). For good: set the mesh's `mtu` to "
        f"{largest or settings.floor} or less (an outer path of {outer} bytes) and `pulumi up`, or have the path's "
        f"owner let ICMP type 3 code 4 through.",
        site,
    )


def path_checks(
    host: Host, peers: Sequence[ConfPeer], mtu: int | None, peer_mtu: Callable[[ConfPeer, int], int] | None = None
) -> list[Check]:
    """One check per peer, in the given order (the caller passes the peers whose handshake is fresh), each at its
    tunnel MTU: `peer_mtu(peer, mtu)` (WgConf.peer_mtu: an internet peer of a gateway on a private path has its own),
    else `mtu`."""
    if not peers:
        return []
    if mtu is None:
        return [Check("path-mtu", SKIP, "the tunnel's MTU is unknown (no MTU in the config, no wg0)")]
    full = mtu
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(peers))) as pool:
        return list(pool.map(lambda peer: _check(host, peer, peer_mtu(peer, full) if peer_mtu else full), peers))
