"""Highly available sites in the lab (issue 11): two gateway machines per site and the cloud state that decides which
one carries the site. Pure: a `LabPlan` in, plain data and rule text out (`hafabric.py` carries it out, `awsmodel.py`
applies the cloud's state with `nat_rules` / `route_targets`).

An HA site's two gateways `<prefix>-gw-<site>-a` / `-b` sit in the site's VPC subnet (one bridge: the lab's VPC has
one subnet where AWS would put the pair in two zones' subnets; route tables are per VPC, so nothing else differs):

    host ── VPC bridge ── router ── uplink ── internet namespace
             │    │                          EIP (site's public address) 1:1 NAT -> the holder's private address
             a    b (private .10, .11)        each gateway's own public IPv4 1:1 NAT while it does not hold the EIP

* The Elastic IP: DNAT + SNAT between the site's public address and the private address of whichever ENI holds it in
  the cloud model (moto's DescribeAddresses), none when nobody does. The program allocates it without association
  (docs/ha.md 5.3): at the start nobody holds it.
* Every gateway has its own auto-assigned public IPv4 (`associate_public_ip_address=True`), released while it holds
  the EIP (AWS replaces the instance's public IPv4 by the EIP): the standby reaches the cloud's APIs through it.
* Peers admit WireGuard only from the site's EIP (security groups, firewalls, the static sites' INPUT filter: README
  "What `pulumi up` creates"); the lab drops WireGuard's port from a non-holder at the internet router instead of
  modelling every peer's filter.
* The VPC route table: the workload host's routes to the remote ranges (the lab's stand-in for the VPC route table,
  as for single gateways) point to the private address of the ENI that DescribeRouteTables names.
* Conntrack: the internet router's NAT is stateful, a cloud's 1:1 NAT is not. Every change of holder gives the EIP's
  flows (both directions) a new conntrack zone, so no entry of the old holder's ever matches again (no flush tool
  needed): after a move, a peer's packet to the EIP reaches the new holder at once and the new holder's packets
  leave with the EIP and their own port, as AWS's 1:1 mapping does. The nat table is committed before the raw
  table (as roamnat.py does): a packet between the two commits stays in the old zone. The other order let a peer
  sending at that moment open the new zone's entry with the old DNAT, bound to the old holder for as long as the
  peer kept sending (a relayed office, which the new active cannot dial: the HA drill on examples/edge's HA relay).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Any

from wg_mesh.lab.fabric.plan import BRIDGE_GW_PORT, PUBLIC_POOL, LabPlan, LabPlanError, SitePlan

LETTERS = ("a", "b")
SPARE = "c"  # an HA site's third place (AWS and GCP): the drill starts a replacement there beside the old instance
ZONE_BASE = 1000  # site i's EIP flows use conntrack zones ZONE_BASE * (i + 1) + k (k counts the moves, mod 1000)


@dataclass(frozen=True)
class HaGateway:
    letter: str
    netns: str
    private_ip: IPv4Interface
    instance_public: IPv4Address  # its own auto-assigned public IPv4
    bridge_port: str  # its NIC's fabric end in the VPC namespace

    @property
    def private(self) -> str:
        return str(self.private_ip.ip)


@dataclass(frozen=True)
class HaSite:
    site: str
    index: int
    cloud: str
    eip: IPv4Address  # the site's public address (SitePlan.public_ip)
    gateways: tuple[HaGateway, ...]
    internet_ns: str
    host_ns: str
    vpc_ns: str
    vpc_hop: str  # the VPC router's end of the uplink: the internet namespace's route to the private addresses
    remote_ranges: tuple[IPv4Network, ...]
    listen_port: int

    def gateway(self, letter: str) -> HaGateway:
        for g in self.gateways:
            if g.letter == letter:
                return g
        raise KeyError(letter)

    def by_private(self, address: str) -> str | None:
        return next((g.letter for g in self.gateways if g.private == address), None)

    @property
    def chain(self) -> str:
        return f"wgha{self.index}"


def plan_ha(plan: LabPlan) -> dict[str, HaSite]:
    """The HA layout of the plan's sites with two gateways (gateway `a` is the plan's gateway of the site)."""
    return {site.name: ha_site(plan, site) for site in plan.sites if site.gateways == 2}


def ha_site(plan: LabPlan, site: SitePlan) -> HaSite:
    assert site.vpc_ns is not None and site.transit_site is not None and site.standby_ns is not None
    subnet = site.gateway_ip.network
    places = {"a": site.gateway_ns, "b": site.standby_ns, **({SPARE: site.spare_ns} if site.spare_ns else {})}
    gateways = []
    for k, (letter, netns) in enumerate(places.items()):
        address = site.gateway_ip.ip + k
        if address not in subnet or address in (site.host_ip.ip, subnet.broadcast_address):
            raise LabPlanError(f"{site.name}: no room for gateway {letter} next to {site.gateway_ip.ip} in {subnet}")
        gateways.append(
            HaGateway(
                letter=letter,
                netns=netns,
                private_ip=IPv4Interface(f"{address}/{subnet.prefixlen}"),
                instance_public=PUBLIC_POOL[256 * (site.index + 1) + k + 1],  # 198.18.<i+1>.<k+1>, off the site pool
                bridge_port=BRIDGE_GW_PORT if letter == "a" else f"gw{letter}",
            )
        )
    return HaSite(
        site=site.name,
        index=site.index,
        cloud=site.cloud,
        eip=site.public_ip,
        gateways=tuple(gateways),
        internet_ns=plan.internet_ns,
        host_ns=site.host_ns,
        vpc_ns=site.vpc_ns,
        vpc_hop=str(site.transit_site.ip),
        remote_ranges=site.host_routes,
        listen_port=plan.listen_port,
    )


def zone(ha: HaSite, moves: int) -> int:
    return ZONE_BASE * (ha.index + 1) + moves % ZONE_BASE


def nat_rules(ha: HaSite, holder: str | None, moves: int) -> str:
    """`iptables-restore --noflush` input that replaces the site's chains in the internet namespace at once (each
    table commits atomically): the EIP's 1:1 NAT to `holder` (None: nobody holds it), every other gateway's own
    public IPv4, WireGuard from a non-holder dropped (the peers' filters)."""
    eip, c, z = ha.eip, ha.chain, zone(ha, moves)
    raw: list[str] = []
    nat: list[str] = []
    fwd: list[str] = []
    if holder is not None:
        h = ha.gateway(holder)
        raw += [f"-A {c} -d {eip}/32 -j CT --zone {z}", f"-A {c} -s {h.private}/32 -j CT --zone {z}"]
        nat += [f"-A {c}-pre -d {eip}/32 -j DNAT --to-destination {h.private}",
                f"-A {c}-post -s {h.private}/32 -j SNAT --to-source {eip}"]  # fmt: skip
    for g in ha.gateways:
        if g.letter == holder:
            continue
        nat += [f"-A {c}-pre -d {g.instance_public}/32 -j DNAT --to-destination {g.private}",
                f"-A {c}-post -s {g.private}/32 -j SNAT --to-source {g.instance_public}"]  # fmt: skip
        fwd.append(f"-A {c}-fwd -s {g.private}/32 -p udp --sport {ha.listen_port} -j DROP")
    # nat before raw: each table commits on its own, and a packet between the two commits must not open the new zone
    # while the old DNAT still stands (its entry would stay bound to the old holder for as long as the flow goes on)
    tables = (("nat", [f"{c}-pre", f"{c}-post"], nat), ("raw", [c], raw), ("filter", [f"{c}-fwd"], fwd))
    text = ""
    for table, chains, rules in tables:  # declaring a chain flushes it; the rules follow; COMMIT swaps atomically
        text += f"*{table}\n" + "".join(f":{chain} - [0:0]\n" for chain in chains)
        text += "".join(f"{rule}\n" for rule in rules) + "COMMIT\n"
    return text


def chain_setup(ha: HaSite) -> list[tuple[str, ...]]:
    """iptables argv (after `iptables -w`) that create the site's chains, jump to them and keep private addresses
    unreachable except through the NAT, once, when the fabric is built."""
    c = ha.chain
    rules: list[tuple[str, ...]] = [
        ("-t", "raw", "-N", c),
        ("-t", "raw", "-A", "PREROUTING", "-j", c),
        ("-t", "nat", "-N", f"{c}-pre"),
        ("-t", "nat", "-N", f"{c}-post"),
        ("-t", "nat", "-A", "PREROUTING", "-j", f"{c}-pre"),
        ("-t", "nat", "-A", "POSTROUTING", "-j", f"{c}-post"),
        ("-N", f"{c}-fwd"),
        ("-A", "FORWARD", "-j", f"{c}-fwd"),
    ]
    for g in ha.gateways:
        rules.append(("-A", "FORWARD", "-d", g.private, "-m", "conntrack", "!", "--ctstate", "DNAT,SNAT", "-j", "DROP"))
    return rules


def route_targets(ha: HaSite, targets: dict[str, str | None]) -> list[tuple[str, ...]]:
    """`ip -n <host> route ...` argv for the VPC route table's state: remote range -> the private address of the ENI
    it targets (None or an address of no gateway of the site: a blackhole, as AWS shows such a route)."""
    argv: list[tuple[str, ...]] = []
    for cidr in ha.remote_ranges:
        target = targets.get(str(cidr))
        if target is not None and ha.by_private(target) is not None:
            argv.append(("route", "replace", str(cidr), "via", target))
        else:
            argv.append(("route", "replace", "blackhole", str(cidr)))
    return argv


def ha_to_json(ha: HaSite) -> dict[str, Any]:
    """For the cloud model's process (awsmodel.py): plain JSON values."""
    data: dict[str, Any] = json.loads(json.dumps(asdict(ha), default=str))
    return data


def ha_from_json(data: dict[str, Any]) -> HaSite:
    gateways = tuple(
        HaGateway(
            letter=g["letter"],
            netns=g["netns"],
            private_ip=IPv4Interface(g["private_ip"]),
            instance_public=IPv4Address(g["instance_public"]),
            bridge_port=g["bridge_port"],
        )
        for g in data["gateways"]
    )
    fields = {k: v for k, v in data.items() if k in HaSite.__dataclass_fields__}
    return HaSite(
        **{
            **fields,
            "eip": IPv4Address(data["eip"]),
            "gateways": gateways,
            "remote_ranges": tuple(IPv4Network(c) for c in data["remote_ranges"]),
        }
    )
