"""Carry out a `LabPlan`: namespaces, veths, the VPC bridges, the internet with its 1:1 NAT, the workload
hosts, then one gateway machine per site (namespace + the lab's interpreter, or a booted container)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from wg_mesh.lab.fabric.netns import LabState, Node, run
from wg_mesh.lab.fabric.networks import build_cloud_site, build_host, build_private_link, ip, iptables, sysctl, veth
from wg_mesh.lab.fabric.plan import GatewayArtifacts, LabPlan, SitePlan
from wg_mesh.lab.fabric.resolver import LabResolver, serve_dns_sites
from wg_mesh.lab.fabric.roamnat import NatFront
from wg_mesh.lab.machines.machine import GatewayMachine, NamespaceGateway, redact_keys

__all__ = ["BuiltLab", "MachineFactory", "build", "ip", "iptables", "redact_keys", "sysctl", "veth", "wg_quick"]

Step = Callable[[str], None]
MachineFactory = Callable[[LabPlan, SitePlan, GatewayArtifacts, LabState], GatewayMachine]


@dataclass
class BuiltLab:
    plan: LabPlan
    state: LabState
    internet: Node
    machines: dict[str, GatewayMachine] = field(default_factory=dict)
    hosts: dict[str, Node] = field(default_factory=dict)
    resolver: LabResolver | None = None  # when a site is DNS-named: the lab's DNS server (resolver.py)
    nats: dict[str, NatFront] = field(default_factory=dict)  # a site behind a NAT of the lab's (roamnat.py)

    @property
    def gateways(self) -> dict[str, Node]:
        """Where commands run on each gateway (a container's changes when it reboots)."""
        return {name: machine.node for name, machine in self.machines.items()}

    @property
    def notes(self) -> list[str]:
        site_notes: dict[str, list[str]] = {}  # note -> gateways it applies to
        for name, machine in self.machines.items():
            for note in machine.notes():
                site_notes.setdefault(note, []).append(name)
        every = len(self.plan.sites)
        return [f"{n} ({'every gateway' if len(s) == every else ', '.join(s)})" for n, s in site_notes.items()]

    def log_path(self, site: str) -> Path:
        return self.state.log_dir / f"{site}.log"

    def append_log(self, site: str, text: str) -> None:
        with self.log_path(site).open("a") as log:
            log.write(text)


def wg_quick(lab: BuiltLab, site: str, verb: str, interface: str) -> None:
    """Take a gateway's WireGuard interface down or up (on a booted gateway, through its systemd unit)."""
    del interface  # the rendered config has one interface, INTERFACE
    lab.machines[site].tunnel(verb)


def build(
    plan: LabPlan,
    artifacts: dict[str, GatewayArtifacts],
    state: LabState,
    step: Step,
    machine: MachineFactory = NamespaceGateway,
    *,
    before_gateways: Callable[[BuiltLab], None] | None = None,
    start: Collection[str] | None = None,
) -> BuiltLab:
    """Create everything; the caller tears down (state lists every namespace before it exists).

    `before_gateways` runs once the namespaces exist, before any gateway is attached (`delivery: live`: the lab's
    clouds, their stores filled, as `pulumi up` fills them before it creates the instances); `start` names the
    gateways to start (default: all; the live drill adds a site later: a booted one is not launched before)."""
    state.namespaces = list(plan.namespaces)
    state.save()
    state.log_dir.mkdir(mode=0o700, exist_ok=True)
    lab = BuiltLab(plan, state, Node(plan.internet_ns))
    lab.machines = {site.name: machine(plan, site, artifacts[site.name], state) for site in plan.sites}

    step(f"namespaces ({len(plan.namespaces)})")
    named_later = {m.site.gateway_ns for m in lab.machines.values() if m.names_netns}
    for netns in plan.namespaces:
        if netns in named_later:
            continue
        run(["ip", "netns", "add", netns])
        ip(netns, "link", "set", "lo", "up")
    sysctl(plan.internet_ns, "net.ipv4.ip_forward=1")
    if before_gateways is not None:
        before_gateways(lab)

    for site in plan.sites:
        step(f"{site.name}: {'VPC, router and 1:1 NAT' if site.is_cloud else 'public uplink and LAN'}")
        if site.is_cloud:
            build_cloud_site(plan, site)
        gateway = lab.machines[site.name]
        gateway.attach(later=start is not None and site.name not in start)
        if gateway.plugged and not site.single_host:  # else its start() builds the host (a booted VPS's LAN is its
            build_host(site)  # container's veth); a single host is its gateway's namespace
        lab.hosts[site.name] = Node(site.host_ns)
    for link in plan.private_links:
        step(f"private path {link.path}: {link.a.site} <-> {link.b.site} at MTU {link.mtu}")
        build_private_link(plan, link)
    if any(site.dns_name for site in plan.sites):
        step("DNS-named sites: a static NAT each, the lab's resolver serving their names")
        lab.resolver, lab.nats = serve_dns_sites(plan, state)

    for site in plan.sites:
        if start is not None and site.name not in start:
            continue
        kind = lab.machines[site.name].kind
        step(f"{site.name}: {'cloud-init files, sysctl, wg-quick up' if kind == 'namespace' else 'booting'}")
        lab.machines[site.name].start()
    return lab
