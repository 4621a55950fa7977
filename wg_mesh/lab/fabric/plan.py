"""The lab's plan: which namespaces, links, addresses, MTUs, routes and NAT rules stand in for the clouds.

Pure: a `MeshConfig` (plus lab keys and faults) in, plain data out. `build.py` carries it out; the unit
tests read it without root. The artifacts each gateway runs come from the same functions that feed
`pulumi up` (`topology.interface_plan`, `render.wg_quick_conf`, `render.cloud_config`); only the public
addresses differ, because the lab hands out its own from the 198.18.0.0/15 benchmarking range.

Per site, as in the clouds (a single host, a static site without `cidrs`: its gateway namespace is the host, no LAN):

    AWS / GCP site                                   static site
    host ── VPC bridge (VPC router) ── uplink ─┐     host ── LAN ── gateway ── uplink ─┐
    gateway ─┘ (private address)              │     (gateway holds its public address)  │
                                      internet namespace: 1:1 NAT public <-> private, routes

* The workload host sits in the site's first CIDR; its routes are `topology.remote_ranges` via the
  gateway, as the VPC route tables that `pulumi up` writes would send them.
* A cloud gateway's NIC holds a private VPC address; its public address exists only as DNAT+SNAT in
  the internet namespace (Elastic IP / external IP). A static gateway holds its public address.
* MTUs: AWS VPC (gateway NIC, host NIC) 9001 with the internet path at `underlay_mtu` (1500);
  GCP VPC at `underlay_mtu` (1460, up to 8896); a static uplink at `underlay_mtu`. The internet carries 1500 at
  most (`sites.INTERNET_MTU`): a jumbo `underlay_mtu` counts on a private path only, as `topology.tunnel_mtu` has it.
* Private paths (`private_paths`, privatepath.py): a link between the member sites' VPC routers at the path's MTU,
  routing only the far gateway's private address; the directory carries each cloud gateway's private address.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Any

from wg_mesh.config import MeshConfig, StaticSite
from wg_mesh.config.reach import dns_name, is_dynamic
from wg_mesh.config.sites import INTERNET_MTU
from wg_mesh.lab.fabric.privatepath import IPV4_TCP_HEADERS, PrivateLink, link_between, plan_private_links
from wg_mesh.plan import live, render, signing, topology, userdata, wgkey
from wg_mesh.plan.topology import PeerAddress

LAB_PUBLIC_RANGE = IPv4Network("198.18.0.0/15")  # RFC 2544 benchmarking range, never routed on the internet
PUBLIC_POOL = IPv4Network("198.18.0.0/16")  # site i's public address: PUBLIC_POOL[i + 1]
TRANSIT_POOL = IPv4Network("198.19.0.0/16")  # one /30 per site between its uplink and the internet
TRANSIT_PREFIX = 30
AWS_VPC_MTU = 9001  # jumbo frames inside an AWS VPC; the internet path is underlay_mtu
STATIC_LAN_MTU = 1500
BROKEN_LISTEN_PORT = "51820x"  # a typo wg(8) refuses ("Servname not supported"); 65536 it would accept

PREFIX_PATTERN = re.compile(r"^wgl[0-9a-f]{4}$")
NETNS_PATTERN = re.compile(r"^(wgl[0-9a-f]{4})-")
INTERNET = "internet"
SIGNING_SEED_BYTES = 32  # the lab mesh's Ed25519 seed (RFC 8032 section 5.1.5), as wg_mesh.keys.SigningKey's
LAB_PROJECT = "wg-mesh-lab"  # delivery: live: the Pulumi project in the stores' names (the stack: the lab's prefix)

# Interface names inside the namespaces (each namespace has its own, so they never collide; IFNAMSIZ 15).
NIC = "eth0"  # a workload host's network interface
# A gateway's NIC is named as on the cloud's images (the rendered PostUp looks the default route's device up):
# ens5 on AWS Nitro, ens4 on GCE; a VPS's is whatever its provider's kernel names it.
GATEWAY_NICS = {"aws": "ens5", "gcp": "ens4", "static": "ens3"}
GW_LAN = "lan0"  # a static gateway's LAN side
BRIDGE = "br0"  # the VPC fabric
BRIDGE_GW_PORT = "gw0"
BRIDGE_HOST_PORT = "host0"
VPC_UPLINK = "igw0"  # the VPC router's leg towards the internet (internet gateway)


class LabPlanError(ValueError):
    """The config is valid but cannot be laid out in the lab (e.g. a CIDR too small for three addresses)."""


@dataclass(frozen=True)
class LabFaults:
    """Deliberate breakage, for proving that the checks catch it (tests only).

    wrong_key: (gateway, peer) -- the gateway's directory gets a random public key for that peer.
    broken_listen_port: site -- its rendered wg0.conf is unusable (wg-quick fails), the rest of its user data not.
    link_mtu: site -> the real MTU of that site's internet path, below what the config declares
        (the underlay lies); the rendered artifacts are unchanged.
    """

    wrong_key: tuple[str, str] | None = None
    link_mtu: Mapping[str, int] = field(default_factory=dict)
    broken_listen_port: str | None = None  # this site's wg0.conf gets a ListenPort wg(8) refuses

    def describe(self) -> list[str]:
        notes = []
        if self.broken_listen_port is not None:
            notes.append(f"fault: {self.broken_listen_port}'s wg0.conf has ListenPort = {BROKEN_LISTEN_PORT}")
        if self.wrong_key is not None:
            notes.append(f"fault: {self.wrong_key[0]} has a wrong public key for peer {self.wrong_key[1]}")
        notes += [f"fault: {site}'s internet path MTU is really {mtu}" for site, mtu in self.link_mtu.items()]
        return notes


@dataclass(frozen=True)
class SitePlan:
    index: int
    name: str
    cloud: str
    overlay_ip: IPv4Address
    public_ip: IPv4Address  # the lab's stand-in for the Elastic IP / external IP / static endpoint
    real_public: str  # what the lab address replaces, for the report
    gateway_ns: str
    host_ns: str
    vpc_ns: str | None  # cloud sites: the VPC fabric and router
    gateway_ip: IPv4Interface  # cloud: private VPC address on the NIC; static: the LAN side
    host_ip: IPv4Interface
    router_ip: IPv4Interface | None  # cloud: the VPC router on the VPC bridge
    transit_internet: IPv4Interface  # the internet namespace's end of this site's uplink
    transit_site: IPv4Interface | None  # cloud: the VPC router's end of the uplink
    internet_if: str  # this site's uplink in the internet namespace
    nic_mtu: int  # cloud: the VPC (gateway NIC, host NIC); static: the LAN
    uplink_mtu: int  # the real internet path of this site
    declared_underlay_mtu: int
    host_routes: tuple[IPv4Network, ...]
    gateways: int = 1  # 2: an HA site (haplan.py): gateway_ns is gateway a's, standby_ns gateway b's
    standby_ns: str | None = None
    spare_ns: str | None = None  # HA site: a third instance's place (the drill's replacement beside the old)
    dynamic: bool = False  # `endpoint: dynamic` (issue 24): its peers have no Endpoint for it and learn public_ip
    # A single host (a static site without cidrs): host_ns is gateway_ns, host_ip its overlay address, no LAN
    single_host: bool = False
    dns_name: str | None = None  # a DNS-named endpoint (issue 24): the lab's resolver serves it (resolver.py)

    @property
    def is_cloud(self) -> bool:
        return self.vpc_ns is not None

    @property
    def gateway_nic(self) -> str:
        return GATEWAY_NICS[self.cloud]

    @property
    def namespaces(self) -> tuple[str, ...]:
        standby = tuple(ns for ns in (self.standby_ns, self.spare_ns) if ns)
        host = () if self.single_host else (self.host_ns,)
        return (self.gateway_ns, *standby, *host) + ((self.vpc_ns,) if self.vpc_ns else ())


@dataclass(frozen=True)
class LabPlan:
    prefix: str
    internet_ns: str
    sites: tuple[SitePlan, ...]
    tunnel_mtu: int
    mss: int
    listen_port: int
    faults: LabFaults
    private_links: tuple[PrivateLink, ...] = ()
    reresolve_s: int = 0  # the mesh's reresolve_seconds when a site is DNS-named (else 0): how often peers ask

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.internet_ns, *(ns for site in self.sites for ns in site.namespaces))

    def site(self, name: str) -> SitePlan:
        for site in self.sites:
            if site.name == name:
                return site
        raise KeyError(name)

    def private_link(self, a: str, b: str) -> PrivateLink | None:
        """The private link between two sites, if a private path joins them."""
        return link_between(self.private_links, a, b)

    def peer_mtu(self, a: str, b: str) -> int:
        """The tunnel MTU between two sites: the private path's MTU - 60, else the internet tunnel MTU."""
        link = self.private_link(a, b)
        return self.tunnel_mtu if link is None else link.tunnel_mtu

    def peer_mss(self, a: str, b: str) -> int:
        return self.peer_mtu(a, b) - IPV4_TCP_HEADERS

    def directory(
        self, public_keys: Mapping[str, str], key_at: Mapping[str, int] | None = None
    ) -> dict[str, PeerAddress]:
        """The mesh directory `interface_plan` takes, with the lab's public addresses and each cloud gateway's private
        address (a private-path peer's endpoint; a static site in a path is refused by `plan_lab`); `key_at`: the
        sites whose key is announced (wg_mesh.gateway.rotation)."""
        return {
            s.name: PeerAddress(
                public_ip=str(s.public_ip),
                public_key=public_keys[s.name],
                private_ip=str(s.gateway_ip.ip) if s.is_cloud else None,
                key_at=(key_at or {}).get(s.name),
            )
            for s in self.sites
        }


def site_addresses(cidr: IPv4Network, cloud: bool) -> tuple[IPv4Interface | None, IPv4Interface, IPv4Interface]:
    """(VPC router, gateway, host) inside a site's first CIDR.

    Cloud sites use the subnet wg-mesh creates for the gateway (`topology.gateway_subnet`): router .1 as
    the clouds reserve it, gateway .10, workload host .100. A static site's LAN is its first CIDR:
    gateway .1, host .100. Small subnets fall back to consecutive addresses.
    """
    subnet = topology.gateway_subnet(cidr) if cloud else cidr
    if subnet.num_addresses < 8:
        raise ValueError(f"{cidr} is too small for the lab (it needs a /29 or larger for router, gateway and host)")
    router_at, gateway_at, host_at = (1, 10, 100) if subnet.num_addresses > 128 else (1, 2, 3)
    if not cloud:
        gateway_at = router_at

    def at(offset: int) -> IPv4Interface:
        return IPv4Interface(f"{subnet[offset]}/{subnet.prefixlen}")

    return (at(router_at) if cloud else None), at(gateway_at), at(host_at)


def _transit(index: int) -> tuple[IPv4Interface, IPv4Interface]:
    net = IPv4Network((int(TRANSIT_POOL.network_address) + index * 4, TRANSIT_PREFIX))
    if not net.subnet_of(TRANSIT_POOL):
        raise LabPlanError("too many sites for the lab's transit range")
    return IPv4Interface(f"{net[1]}/{TRANSIT_PREFIX}"), IPv4Interface(f"{net[2]}/{TRANSIT_PREFIX}")


def plan_lab(cfg: MeshConfig, prefix: str, faults: LabFaults = LabFaults(), ha_sites: Collection[str] = ()) -> LabPlan:
    """Lay the mesh out in namespaces named `<prefix>-...`; LabPlanError when it cannot be. `ha_sites`: the sites laid
    out with two gateways (haplan.py; `--drill ha` passes a stack's sites with `gateways: 2`). Every other site,
    whatever its `gateways`, has one gateway: the lab's checks and other drills run an HA site's gateway a alone."""
    if not PREFIX_PATTERN.match(prefix):
        raise LabPlanError(f"lab prefix {prefix!r} does not match {PREFIX_PATTERN.pattern}")
    problems: list[str] = []
    names = {s.name for s in cfg.sites}
    if faults.broken_listen_port is not None and faults.broken_listen_port not in names:
        problems.append(f"faults.broken_listen_port: {faults.broken_listen_port} is not a site of the mesh")
    if faults.wrong_key is not None and not set(faults.wrong_key) <= names:
        problems.append(f"faults.wrong_key: {faults.wrong_key} names a site that is not in the mesh")
    if cfg.delivery == "live" and (faults.wrong_key is not None or faults.broken_listen_port is not None):
        problems.append("faults.wrong_key / broken_listen_port change the rendered wg0.conf: delivery: user-data only")
    problems += [f"lab: HA site {name} is not a site of the mesh" for name in sorted(set(ha_sites) - names)]
    for name, mtu in faults.link_mtu.items():
        if name not in names:
            problems.append(f"faults.link_mtu: {name} is not a site of the mesh")
        elif mtu < 576:
            problems.append(f"faults.link_mtu: {mtu} for {name} is below IPv4's minimum of 576")

    sites = []
    private = topology.private_directory(cfg)
    for i, site in enumerate(cfg.sites):
        cloud = not isinstance(site, StaticSite)
        ha = site.name in ha_sites
        if ha and not cloud:
            problems.append(f"sites[{i}]: {site.name} is a static site: one gateway only")
        if not site.cidrs:  # a single host (static: the model requires a cloud site's): the gateway is the host
            public = PUBLIC_POOL[i + 1]
            router, gateway, host = None, IPv4Interface(f"{public}/32"), IPv4Interface(f"{site.overlay_ip}/32")
        else:
            try:
                router, gateway, host = site_addresses(site.cidrs[0], cloud)
            except ValueError as exc:
                problems.append(f"sites[{i}].cidrs[0]: {exc}")
                continue
        if cloud and site.name in private:  # a private-path gateway sits at its fixed private address
            subnet, gateway = gateway.network, IPv4Interface(f"{private[site.name]}/{gateway.network.prefixlen}")
            if gateway.ip not in subnet or gateway in (router, host):
                problems.append(f"sites[{i}]: the lab cannot put {site.name}'s gateway at its private address")
        transit_internet, transit_site = _transit(i)
        internet_mtu = min(site.underlay_mtu, INTERNET_MTU)
        if site.cloud == "aws":
            nic_mtu, real = AWS_VPC_MTU, "Elastic IP"
        elif site.cloud == "gcp":
            nic_mtu, real = site.underlay_mtu, "external IP"
        else:
            nic_mtu, real = max(STATIC_LAN_MTU, site.underlay_mtu), f"endpoint {site.endpoint}"
            real = "a dynamic address (its peers learn it)" if is_dynamic(site) else real
            real = f"{site.endpoint}, served by the lab's resolver" if dns_name(site) else real
        sites.append(
            SitePlan(
                index=i,
                name=site.name,
                cloud=site.cloud,
                overlay_ip=site.overlay_ip,
                public_ip=PUBLIC_POOL[i + 1],
                real_public=real,
                gateway_ns=f"{prefix}-gw-{site.name}" + ("-a" if ha else ""),
                host_ns=f"{prefix}-gw-{site.name}" if not site.cidrs else f"{prefix}-host-{site.name}",
                vpc_ns=f"{prefix}-vpc-{site.name}" if cloud else None,
                gateway_ip=gateway,
                host_ip=host,
                router_ip=router,
                transit_internet=transit_internet,
                transit_site=transit_site if cloud else None,
                internet_if=f"site{i}",
                nic_mtu=nic_mtu,
                uplink_mtu=faults.link_mtu.get(site.name, internet_mtu),
                declared_underlay_mtu=site.underlay_mtu,
                host_routes=tuple(topology.remote_ranges(cfg, site.name))
                if site.cidrs
                else (),  # wg-quick's, on a host
                gateways=2 if ha else 1,
                standby_ns=f"{prefix}-gw-{site.name}-b" if ha else None,
                spare_ns=f"{prefix}-gw-{site.name}-c" if ha else None,
                dynamic=is_dynamic(site),
                single_host=not site.cidrs,
                dns_name=dns_name(site),
            )
        )
    links, link_problems = plan_private_links(cfg, sites)
    problems += link_problems
    if problems:
        raise LabPlanError("; ".join(problems))
    mtu = topology.tunnel_mtu(cfg)
    return LabPlan(
        prefix=prefix,
        internet_ns=f"{prefix}-{INTERNET}",
        sites=tuple(sites),
        tunnel_mtu=mtu,
        mss=topology.clamped_mss(mtu),
        listen_port=cfg.listen_port,
        faults=faults,
        private_links=tuple(links),
        reresolve_s=cfg.reresolve_seconds if any(s.dns_name for s in sites) else 0,
    )


# --- keys and artifacts -------------------------------------------------------------------


@dataclass(frozen=True)
class LabKeys:
    """Fresh keys for one lab run. The private keys never leave memory and the gateways' tmpfs. `signing`: the lab
    mesh's document signing seed (delivery: live; wg_mesh.keys.SigningKey's in `pulumi up`): the user data pins its
    verify key, the lab's control plane signs every document with it."""

    private: Mapping[str, str] = field(repr=False)
    public: Mapping[str, str]
    signing: bytes = field(repr=False, default=b"")

    @classmethod
    def generate(cls, cfg: MeshConfig) -> LabKeys:
        private = {site.name: wgkey.generate_private_key() for site in cfg.sites}
        public = {name: wgkey.public_key(key) for name, key in private.items()}
        return cls(private=private, public=public, signing=secrets.token_bytes(SIGNING_SEED_BYTES))

    @property
    def verify_key(self) -> str:
        return signing.verify_key_b64(self.signing)


@dataclass(frozen=True)
class GatewayArtifacts:
    site: str
    interface: topology.InterfacePlan
    user_data: str = field(repr=False)  # the #cloud-config, holding the private key
    trust: Mapping[str, Any] | None = None  # delivery: live: agent.json's `trust` (wg_mesh.plan.live.trust)


def render_artifacts(cfg: MeshConfig, plan: LabPlan, keys: LabKeys) -> dict[str, GatewayArtifacts]:
    """Each gateway's cloud-init, rendered as `pulumi up` renders it (wg_mesh.component: wg0.conf from the
    interface plan, then the cloud-config with the metrics extras), from the lab's directory."""
    artifacts = {}
    for site in plan.sites:
        public = dict(keys.public)
        if plan.faults.wrong_key is not None and plan.faults.wrong_key[0] == site.name:
            public[plan.faults.wrong_key[1]] = wgkey.public_key(wgkey.generate_private_key())
        directory = plan.directory(public)
        interface = topology.interface_plan(cfg, site.name, directory)
        if cfg.delivery == "live":
            # No peer and no key in it: the lab's clouds (controlplane.py) hold them, where agent.json says.
            source = live.agent_source(cfg.site(site.name), LAB_PROJECT, plan.prefix)
            trust = live.trust(cfg, cfg.site(site.name), LAB_PROJECT, plan.prefix, keys.verify_key)
            user_data = userdata.render_live_user_data(cfg, site.name, source, trust=trust, cloud_steps=False)
            artifacts[site.name] = GatewayArtifacts(site.name, interface, user_data, trust)
            continue
        wg_conf = render.wg_quick_conf(interface, keys.private[site.name])
        if plan.faults.broken_listen_port == site.name:
            port = f"ListenPort = {interface.listen_port}\n"
            wg_conf = wg_conf.replace(port, f"ListenPort = {BROKEN_LISTEN_PORT}\n")
        user_data = userdata.render_user_data(cfg, site.name, wg_conf, directory, cloud_steps=False)
        artifacts[site.name] = GatewayArtifacts(site.name, interface, user_data)
    return artifacts
