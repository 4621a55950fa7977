"""Carry out a `LabPlan`: namespaces, veths, the VPC bridges, the internet with its 1:1 NAT, then each
gateway's cloud-init (files, sysctl, the real `wg-quick up`) in its own mount namespace."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mesh.lab import cloudinit
from mesh.lab.netns import WG_QUICK_ENV, LabError, LabState, Node, run, start_holder
from mesh.lab.plan import (
    BRIDGE,
    BRIDGE_GW_PORT,
    BRIDGE_HOST_PORT,
    GW_LAN,
    NIC,
    VPC_UPLINK,
    GatewayArtifacts,
    LabPlan,
    SitePlan,
)

Step = Callable[[str], None]


@dataclass
class BuiltLab:
    plan: LabPlan
    state: LabState
    internet: Node
    gateways: dict[str, Node] = field(default_factory=dict)
    hosts: dict[str, Node] = field(default_factory=dict)
    setups: dict[str, cloudinit.GatewaySetup] = field(default_factory=dict)
    site_notes: dict[str, list[str]] = field(default_factory=dict)  # note -> gateways it applies to

    @property
    def notes(self) -> list[str]:
        every = len(self.plan.sites)
        return [f"{n} ({'every gateway' if len(s) == every else ', '.join(s)})" for n, s in self.site_notes.items()]

    def log_path(self, site: str) -> Path:
        return self.state.log_dir / f"{site}.log"

    def append_log(self, site: str, text: str) -> None:
        with self.log_path(site).open("a") as log:
            log.write(text)


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
    """VPC bridge with the gateway's and host's NICs, the VPC router on it, its uplink to the internet."""
    assert site.vpc_ns is not None and site.router_ip is not None and site.transit_site is not None
    vpc, inet = site.vpc_ns, plan.internet_ns
    ip(vpc, "link", "add", BRIDGE, "mtu", site.nic_mtu, "type", "bridge")
    veth(vpc, BRIDGE_GW_PORT, site.gateway_ns, NIC, site.nic_mtu)
    veth(vpc, BRIDGE_HOST_PORT, site.host_ns, NIC, site.nic_mtu)
    for port in (BRIDGE_GW_PORT, BRIDGE_HOST_PORT):
        ip(vpc, "link", "set", port, "master", BRIDGE)
    ip(vpc, "link", "set", BRIDGE, "mtu", site.nic_mtu, "up")
    ip(vpc, "address", "add", site.router_ip, "dev", BRIDGE)
    veth(inet, site.internet_if, vpc, VPC_UPLINK, site.uplink_mtu)
    ip(vpc, "address", "add", site.transit_site, "dev", VPC_UPLINK)
    ip(vpc, "route", "add", "default", "via", site.transit_internet.ip)
    sysctl(vpc, "net.ipv4.ip_forward=1")

    ip(inet, "address", "add", site.transit_internet, "dev", site.internet_if)
    ip(inet, "route", "add", f"{site.gateway_ip.ip}/32", "via", site.transit_site.ip)
    # The Elastic IP / external IP: 1:1 NAT between the public and the private address.
    private, public = str(site.gateway_ip.ip), str(site.public_ip)
    iptables(inet, "-t", "nat", "-A", "PREROUTING", "-d", public, "-j", "DNAT", "--to-destination", private)
    iptables(inet, "-t", "nat", "-A", "POSTROUTING", "-s", private, "-j", "SNAT", "--to-source", public)
    # Private addresses are not routable on the internet: only NATed traffic reaches them.
    iptables(inet, "-A", "FORWARD", "-d", private, "-m", "conntrack", "!", "--ctstate", "DNAT,SNAT", "-j", "DROP")

    ip(site.gateway_ns, "address", "add", site.gateway_ip, "dev", NIC)
    ip(site.gateway_ns, "route", "add", "default", "via", site.router_ip.ip)


def build_static_site(plan: LabPlan, site: SitePlan) -> None:
    """A VPS: the gateway holds its public address on its uplink; its LAN holds the host."""
    gw, inet = site.gateway_ns, plan.internet_ns
    veth(inet, site.internet_if, gw, NIC, site.uplink_mtu)
    ip(inet, "address", "add", site.transit_internet, "dev", site.internet_if)
    ip(inet, "route", "add", f"{site.public_ip}/32", "dev", site.internet_if)
    ip(gw, "address", "add", f"{site.public_ip}/32", "dev", NIC)
    ip(gw, "route", "add", site.transit_internet.ip, "dev", NIC, "scope", "link")
    ip(gw, "route", "add", "default", "via", site.transit_internet.ip, "dev", NIC)
    veth(gw, GW_LAN, site.host_ns, NIC, site.nic_mtu)
    ip(gw, "address", "add", site.gateway_ip, "dev", GW_LAN)


def build_host(site: SitePlan) -> None:
    """The workload host: an address in the site's first CIDR, remote ranges via the gateway (route table)."""
    ip(site.host_ns, "address", "add", site.host_ip, "dev", NIC)
    for cidr in site.host_routes:
        ip(site.host_ns, "route", "add", cidr, "via", site.gateway_ip.ip)


def write_files(node: Node, setup: cloudinit.GatewaySetup) -> None:
    for f in setup.files:
        path = node.path(str(f.path))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, f.mode)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), f.mode)
            out.write(f.content)


def wg_quick(lab: BuiltLab, site: str, verb: str, interface: str) -> None:
    """The real wg-quick in the gateway's namespaces; its output goes to the gateway's log."""
    node = lab.gateways[site]
    result = node.run(["wg-quick", verb, interface], env=WG_QUICK_ENV, check=False, timeout=30)
    output = redact_keys(result.stdout + result.stderr)
    lab.append_log(site, f"$ wg-quick {verb} {interface}\n{output}")
    if result.returncode != 0:
        tail = output.strip().splitlines()[-3:]
        raise LabError(f"{site}: wg-quick {verb} {interface} failed: {' / '.join(tail)} (log: {lab.log_path(site)})")
    if verb == "up":
        lab.state.track_namespace_processes(node.netns, "wireguard-go")


_KEY = re.compile(r"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=")


def redact_keys(text: str) -> str:
    """wg(8) quotes a line it cannot parse, key included: logs and errors never carry key material."""
    return _KEY.sub("(key redacted)", text)


def start_gateway(lab: BuiltLab, site: SitePlan, artifacts: GatewayArtifacts) -> None:
    setup = cloudinit.interpret(artifacts.user_data)
    lab.setups[site.name] = setup
    for note in setup.notes:
        lab.site_notes.setdefault(note, []).append(site.name)
    with lab.log_path(site.name).open("a") as log:
        node = start_holder(lab.state, site.gateway_ns, log)
    lab.gateways[site.name] = node
    write_files(node, setup)
    if setup.sysctl:
        node.run(["sysctl", "-q", "-w", *(f"{key}={value}" for key, value in setup.sysctl)])
    for interface in setup.interfaces:
        lab.state.interfaces.setdefault(site.gateway_ns, []).append(interface)
        lab.state.save()
        wg_quick(lab, site.name, "up", interface)


def build(plan: LabPlan, artifacts: dict[str, GatewayArtifacts], state: LabState, step: Step) -> BuiltLab:
    """Create everything; the caller tears down (state lists every namespace before it exists)."""
    state.namespaces = list(plan.namespaces)
    state.save()
    state.log_dir.mkdir(mode=0o700, exist_ok=True)
    lab = BuiltLab(plan, state, Node(plan.internet_ns))

    step(f"namespaces ({len(plan.namespaces)})")
    for netns in plan.namespaces:
        run(["ip", "netns", "add", netns])
        ip(netns, "link", "set", "lo", "up")
    sysctl(plan.internet_ns, "net.ipv4.ip_forward=1")

    for site in plan.sites:
        step(f"{site.name}: {'VPC, router and 1:1 NAT' if site.is_cloud else 'public uplink and LAN'}")
        (build_cloud_site if site.is_cloud else build_static_site)(plan, site)
        build_host(site)
        lab.hosts[site.name] = Node(site.host_ns)

    for site in plan.sites:
        step(f"{site.name}: cloud-init files, sysctl, wg-quick up")
        start_gateway(lab, site, artifacts[site.name])
    return lab
