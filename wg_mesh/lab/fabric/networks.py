"""The lab's networks, shared by both kinds of gateway machine: VPC bridges and routers, the internet with
its 1:1 NAT, the workload hosts, and the places where a gateway's NICs plug in.

A gateway's NIC is created by the machine (a veth into the gateway's namespace, or the veth systemd-nspawn
makes for a container); the functions here wire the fabric's end of it.
"""

from __future__ import annotations

from wg_mesh.lab.fabric.haplan import HaSite, chain_setup, ha_site, nat_rules
from wg_mesh.lab.fabric.netns import run
from wg_mesh.lab.fabric.plan import BRIDGE, BRIDGE_GW_PORT, BRIDGE_HOST_PORT, NIC, VPC_UPLINK, LabPlan, SitePlan
from wg_mesh.lab.fabric.privatepath import PrivateLink

# Counting rules (no target) on a private link's outgoing side: WireGuard to the listen port, ICMP between the two
# gateways (the errors about WireGuard's UDP: port unreachable while a peer's wg0 is down, fragmentation needed), and
# everything.
PRIVATE_WG_COMMENT, PRIVATE_ALL_COMMENT = "wg-mesh-lab private wireguard", "wg-mesh-lab private all"
PRIVATE_ICMP_COMMENT = "wg-mesh-lab private gateway icmp"


def ip(netns: str, *args: object) -> None:
    run(["ip", "-n", netns, *(str(a) for a in args)])


def veth(netns: str, name: str, peer_netns: str, peer: str, mtu: int) -> None:
    """A veth created directly in its two namespaces (never in the host's), both ends at `mtu` and up."""
    ip(netns, "link", "add", name, "mtu", mtu, "type", "veth", "peer", "name", peer, "mtu", mtu, "netns", peer_netns)
    ip(netns, "link", "set", name, "up")
    ip(peer_netns, "link", "set", peer, "up")


def sysctl(netns: str, *settings: str) -> None:
    run(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", *settings])


def iptables(netns: str, *rule: str) -> None:
    run(["ip", "netns", "exec", netns, "iptables", "-w", *rule])


def build_cloud_site(plan: LabPlan, site: SitePlan) -> None:
    """VPC bridge with the host's NIC, the VPC router on it, its uplink to the internet, the 1:1 NAT.
    The gateway's NIC joins the bridge later (`plug_cloud_gateway`)."""
    assert site.vpc_ns is not None and site.router_ip is not None and site.transit_site is not None
    vpc, inet = site.vpc_ns, plan.internet_ns
    ip(vpc, "link", "add", BRIDGE, "mtu", site.nic_mtu, "type", "bridge")
    veth(vpc, BRIDGE_HOST_PORT, site.host_ns, NIC, site.nic_mtu)
    ip(vpc, "link", "set", BRIDGE_HOST_PORT, "master", BRIDGE)
    ip(vpc, "link", "set", BRIDGE, "mtu", site.nic_mtu, "up")
    ip(vpc, "address", "add", site.router_ip, "dev", BRIDGE)
    veth(inet, site.internet_if, vpc, VPC_UPLINK, site.uplink_mtu)
    ip(vpc, "address", "add", site.transit_site, "dev", VPC_UPLINK)
    ip(vpc, "route", "add", "default", "via", site.transit_internet.ip)
    sysctl(vpc, "net.ipv4.ip_forward=1")

    ip(inet, "address", "add", site.transit_internet, "dev", site.internet_if)
    ip(inet, "route", "add", f"{site.gateway_ip.ip}/32", "via", site.transit_site.ip)
    if site.gateways == 2:
        build_ha_nat(plan, site)
        return
    # The Elastic IP / external IP: 1:1 NAT between the public and the private address.
    private, public = str(site.gateway_ip.ip), str(site.public_ip)
    iptables(inet, "-t", "nat", "-A", "PREROUTING", "-d", public, "-j", "DNAT", "--to-destination", private)
    iptables(inet, "-t", "nat", "-A", "POSTROUTING", "-s", private, "-j", "SNAT", "--to-source", public)
    # Private addresses are not routable on the internet: only NATed traffic reaches them.
    iptables(inet, "-A", "FORWARD", "-d", private, "-m", "conntrack", "!", "--ctstate", "DNAT,SNAT", "-j", "DROP")


def build_ha_nat(plan: LabPlan, site: SitePlan) -> None:
    """An HA site (haplan.py): the second gateway's route, the site's NAT chains, nobody holding the address yet
    (the cloud model, awsmodel.py, applies who does)."""
    ha = ha_site(plan, site)
    for g in ha.gateways[1:]:  # b and the spare place c
        ip(plan.internet_ns, "route", "add", f"{g.private}/32", "via", ha.vpc_hop)
    for rule in chain_setup(ha):
        iptables(plan.internet_ns, *rule)
    apply_nat(ha, None, 0)


def apply_nat(ha: HaSite, holder: str | None, moves: int) -> None:
    """The EIP's 1:1 NAT to `holder` (None: nobody), in one iptables-restore (atomic per table)."""
    argv = ["ip", "netns", "exec", ha.internet_ns, "iptables-restore", "-w", "--noflush"]
    run(argv, stdin_text=nat_rules(ha, holder, moves))


def plug_cloud_gateway(site: SitePlan) -> None:
    """The gateway's NIC (its fabric end, BRIDGE_GW_PORT in the VPC namespace) joins the VPC bridge."""
    assert site.vpc_ns is not None
    ip(site.vpc_ns, "link", "set", BRIDGE_GW_PORT, "mtu", site.nic_mtu, "master", BRIDGE, "up")


def plug_static_gateway(plan: LabPlan, site: SitePlan) -> None:
    """A VPS's uplink (its fabric end, `internet_if` in the internet namespace): the route to its public address."""
    inet = plan.internet_ns
    ip(inet, "link", "set", site.internet_if, "mtu", site.uplink_mtu, "up")
    ip(inet, "address", "add", site.transit_internet, "dev", site.internet_if)
    ip(inet, "route", "add", f"{site.public_ip}/32", "dev", site.internet_if)


def build_host(site: SitePlan) -> None:
    """The workload host: an address in the site's first CIDR, remote ranges via the gateway (route table)."""
    ip(site.host_ns, "address", "add", site.host_ip, "dev", NIC)
    for cidr in site.host_routes:
        ip(site.host_ns, "route", "add", cidr, "via", site.gateway_ip.ip)


def build_private_link(plan: LabPlan, link: PrivateLink) -> None:
    """A private path between two VPC routers (privatepath.py): the veth at the path's MTU, link-local addresses,
    the far gateway's /32 over it (nothing else), and counters of what the routers forward onto it."""
    a, b = link.a, link.b
    veth(a.vpc_ns, a.interface, b.vpc_ns, b.interface, link.mtu)
    for end, far in link.ends():
        ip(end.vpc_ns, "address", "add", end.address, "dev", end.interface)
        wireguard = ("-p", "udp", "--dport", str(plan.listen_port))
        iptables(end.vpc_ns, "-A", "FORWARD", "-o", end.interface, *wireguard, "-m", "comment", "--comment",
                 PRIVATE_WG_COMMENT)  # fmt: skip
        icmp = ("-p", "icmp", "-s", str(end.gateway_ip), "-d", str(far.gateway_ip))
        iptables(end.vpc_ns, "-A", "FORWARD", "-o", end.interface, *icmp, "-m", "comment", "--comment",
                 PRIVATE_ICMP_COMMENT)  # fmt: skip
        iptables(end.vpc_ns, "-A", "FORWARD", "-o", end.interface, "-m", "comment", "--comment", PRIVATE_ALL_COMMENT)
    for netns, destination, via, device in link.routes():
        ip(netns, "route", "add", destination, "via", via, "dev", device)
