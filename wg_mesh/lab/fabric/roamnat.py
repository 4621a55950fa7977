"""A NAT in front of a static site, whose public address the roam drill changes (issue 24: a line on a dynamic address,
a provider's NAT that rebinds). Pure rule text (`nat_rules`) and the one call that applies it (`NatFront`).

The site's gateway keeps the address it was built with (`SitePlan.public_ip`, its "inside" address); the internet
namespace, the lab's router, becomes its NAT:

* cone       every flow of the site leaves from the mapping's address, its source port kept (51820 stays 51820): a
             home router's or a provider's port-preserving NAT, MASQUERADE's behaviour
* symmetric  a different public source port per destination (endpoint-dependent mapping, RFC 4787 4.1): each peer's
             flow is mapped into its own port range, `--random-fully` within it, so every peer sees the site at
             another port (the ranges are disjoint: two peers never share a port, by construction)
* static     1:1 (DNAT and SNAT): the mapping's address is the site's, reachable before the site sends anything, as
             a server's public address is: a DNS-named site's (the lab's resolver serves the name, resolver.py)

Each change gives the site's flows (out, and the replies to the new address) a new conntrack zone, as the HA model
(haplan.py) does for an Elastic IP: no entry of the old mapping ever matches again, nothing else in the lab's
conntrack table is touched, no flush tool is needed. A packet to an old mapping's address finds no entry and no route
(the roam addresses are outside every site's), and the site's own inside address is unreachable from the internet
(dropped): the peers can reach the site only through a mapping its own packets opened, as behind a real NAT.
The nat table is committed before the raw table: the new zone's first packet already finds the new rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wg_mesh.lab.fabric.netns import run

# In the internet namespace, per site (`chains`): CHAIN + index, raw PREROUTING and nat POSTROUTING jump to it;
# CHAIN_IN + index, nat PREROUTING jumps to it: a static NAT's DNAT (empty for the other kinds)
CHAIN, CHAIN_IN = "wgroam", "wgroamin"
ZONE_BASE = 40000  # site i's mappings: conntrack zones ZONE_BASE + 100 * i + k (the HA model's are below 40000)
ZONES_PER_SITE = 100
SYMMETRIC_PORTS = 20000  # peer j's flows map into SYMMETRIC_PORTS + PORTS_PER_PEER * j .. + PORTS_PER_PEER - 1
PORTS_PER_PEER = 1000
NAT_KINDS = ("cone", "symmetric", "static")


@dataclass(frozen=True)
class NatState:
    """One state of the NAT: the site's flows leave from `address`; `kind` cone or symmetric; `ports` (symmetric): the
    peer's public address (the destination the site's packets carry) -> its port range; static: `address` is the
    site's, inbound too."""

    address: str
    kind: str = "cone"
    ports: Mapping[str, tuple[int, int]] | None = None


def symmetric_ports(peers: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Each peer's public address -> its own port range (disjoint), in the order given."""
    return {
        peer: (SYMMETRIC_PORTS + PORTS_PER_PEER * j, SYMMETRIC_PORTS + PORTS_PER_PEER * (j + 1) - 1)
        for j, peer in enumerate(peers)
    }


def zone(site_index: int, change: int) -> int:
    return ZONE_BASE + ZONES_PER_SITE * site_index + change % ZONES_PER_SITE


def chains(site_index: int) -> tuple[str, str]:
    """Site `site_index`'s own chains (two NAT'd sites never share one): out and raw, and in (DNAT)."""
    return f"{CHAIN}{site_index}", f"{CHAIN_IN}{site_index}"


def setup_rules(inside: str, site_index: int) -> list[tuple[str, ...]]:
    """The chains and their jumps (iptables arguments), once: first in raw PREROUTING and nat POSTROUTING. The site's
    inside address is dropped from then on; until the first mapping the chains are otherwise empty."""
    chain, chain_in = chains(site_index)
    return [
        ("-t", "raw", "-N", chain),
        ("-t", "nat", "-N", chain),
        ("-t", "nat", "-N", chain_in),
        ("-t", "raw", "-I", "PREROUTING", "1", "-j", chain),
        ("-t", "nat", "-I", "POSTROUTING", "1", "-j", chain),
        ("-t", "nat", "-I", "PREROUTING", "1", "-j", chain_in),
        ("-t", "raw", "-I", "PREROUTING", "1", "-d", f"{inside}/32", "-j", "DROP"),
    ]


def nat_rules(inside: str, mapping: NatState, zone_id: int, site_index: int) -> str:
    """`iptables-restore --noflush` input that replaces the NAT's chains: the site's flows (from `inside`) in zone
    `zone_id` and mapped to `mapping.address`, the replies to that address in the same zone."""
    if mapping.kind not in NAT_KINDS:
        raise ValueError(f"no NAT kind {mapping.kind!r}: {', '.join(NAT_KINDS)}")
    chain, chain_in = chains(site_index)
    src, new = f"-s {inside}/32", mapping.address
    nat, into = [], []
    if mapping.kind == "static":
        into.append(f"-A {chain_in} -d {new}/32 -j DNAT --to-destination {inside}")
    if mapping.kind == "symmetric":
        for peer, (low, high) in (mapping.ports or {}).items():
            nat.append(f"-A {chain} {src} -p udp -m conntrack --ctorigdst {peer}/32 "
                       f"-j SNAT --to-source {new}:{low}-{high} --random-fully")  # fmt: skip
    nat.append(f"-A {chain} {src} -j SNAT --to-source {new}")
    raw = [f"-A {chain} {src} -j CT --zone {zone_id}", f"-A {chain} -d {new}/32 -j CT --zone {zone_id}"]
    lines = (f"*nat\n:{chain} - [0:0]\n:{chain_in} - [0:0]\n", *nat, *into, "COMMIT\n",  # nat first: see above
             f"*raw\n:{chain} - [0:0]\n", *raw, "COMMIT\n")  # fmt: skip
    return "".join(line if line.endswith("\n") else f"{line}\n" for line in lines)


class NatFront:
    """The NAT in front of one static site, in the lab's internet namespace (it goes with the namespace). Until its
    first `apply` the site holds its own address, reachable; from then on it is behind the NAT."""

    def __init__(self, internet_ns: str, site_index: int, inside: str) -> None:
        self.netns, self.site_index, self.inside = internet_ns, site_index, inside
        self.changes = 0

    def apply(self, mapping: NatState) -> None:
        if self.changes == 0:
            for rule in setup_rules(self.inside, self.site_index):
                run(["ip", "netns", "exec", self.netns, "iptables", "-w", *rule])
        self.changes += 1
        text = nat_rules(self.inside, mapping, zone(self.site_index, self.changes), self.site_index)
        run(["ip", "netns", "exec", self.netns, "iptables-restore", "-w", "--noflush"], stdin_text=text)
