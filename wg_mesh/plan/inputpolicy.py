"""A gateway's INPUT policy: who may open a connection to the gateway itself (issue 20 item 6). Pure.

Typed values in (`InputPolicy`, built from the mesh by `policy_for`), `iptables-restore` text out (`render`,
`render6`); the user data ships both files and a oneshot unit (`unit_text`) that loads them before any network is
configured (`Before=network-pre.target`, like Debian's netfilter-persistent), so the policy holds from the first packet
of every boot, with or without wg0, and the agent, wg-quick and the documents never touch it.

Only the filter table's INPUT is concerned: what the gateway FORWARDS (the mesh itself) goes through FORWARD, which
this policy never sees. The rules live in their own chain, `WGMESH-INPUT`, jumped to from the top of INPUT:
`iptables-restore --noflush` replaces that chain's rules in one transaction (declaring a chain in a restore file
flushes it) and leaves every other rule (wg-quick's FORWARD, NAT and raw rules) as it is.

Cloud gateways (AWS, GCP) are closed: a new connection is admitted only for
- WireGuard (UDP listen_port), not from wg0: the cloud firewall in front admits only the peers' addresses;
- node-exporter (TCP exporter_port) from `monitoring_cidrs`, from any interface (a Prometheus in another site scrapes
  the overlay address through wg0: its network must be in monitoring_cidrs too);
- `/healthz` (TCP 9181, gateways: 2 only) from the site's gateway subnets (the HA partner; the site's CIDRs when the
  network is the user's own, whose subnets wg-mesh does not know) and, on GCP, Google's health-check probers;
- SSH (TCP 22), GCP only, from IAP TCP forwarding's range: the VPC firewall rule that `operator_access: cloud` adds is
  the switch (the host rule does not depend on operator_access, so toggling it replaces no gateway); AWS Session
  Manager needs no inbound port, so SSH is never admitted on AWS;
- ICMP destination-unreachable (path-MTU discovery's "fragmentation needed"), time-exceeded and echo-request (the
  agents' tunnel, path-MTU and private-path probes); DHCP replies (the image's DHCP client renews with a UDP socket);
  loopback and whatever belongs to a connection the gateway opened (conntrack ESTABLISHED, RELATED).
Everything else is dropped, from wg0 and the site's own networks alike (their security group / firewall rule admits
all of the site's traffic to the gateway, so that it can forward it).

A single host (a static site without cidrs) gets no policy at all: see input_extras.

Static sites are someone's own host (their operator reaches it over SSH; other services may run on it): only what
arrives through wg0 is policed (the same admissions, the rest dropped), every other interface is left to its owner.
Their WireGuard port already has a host filter from the peers' addresses (wg_mesh.gateway.wgconf.forwarding_rules,
listen_sources), which wg-quick inserts above this chain's jump: not repeated here.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network

from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite, addressing
from wg_mesh.gateway import ship
from wg_mesh.gateway.wgconf import INTERFACE
from wg_mesh.plan import ha, topology
from wg_mesh.plan.render import CloudInitExtras, File

CHAIN = "WGMESH-INPUT"
RULES_PATH = "/etc/wg-mesh/input.rules"
RULES6_PATH = "/etc/wg-mesh/input6.rules"
UNIT_NAME = "wg-mesh-input.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
SSH_PORT = 22
# Where IAP TCP forwarding connects from (https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule;
# the same constant as wg_mesh.gcp.firewall's rule).
IAP_TCP_FORWARDING = IPv4Network("35.235.240.0/20")
# Google's health-check probers for load balancers such as the internal passthrough one of gateways: 2
# (https://cloud.google.com/load-balancing/docs/health-check-concepts, "Probe IP ranges and firewall rules"); the
# same ranges as wg_mesh.gcp.ha.PROBER_RANGES' VPC rule (not imported: that module is Pulumi's, this one is pure).
GCP_PROBERS = (IPv4Network("35.191.0.0/16"), IPv4Network("130.211.0.0/22"))
# ICMP types admitted from anywhere (RFC 792): 3 destination unreachable (code 4: fragmentation needed, path-MTU
# discovery, RFC 1191), 11 time exceeded (traceroute), 8 echo request (the agents' probes).
ICMP_TYPES = ("destination-unreachable", "time-exceeded", "echo-request")
DHCP_SERVER_PORT, DHCP_CLIENT_PORT = 67, 68
DHCP6_SERVER_PORT, DHCP6_CLIENT_PORT = 547, 546


@dataclass(frozen=True)
class Admit:
    """New TCP or UDP connections to `port` from `sources` (empty: from any address)."""

    what: str  # for the comment above the rule
    protocol: str  # "tcp" | "udp"
    port: int
    sources: tuple[IPv4Network, ...] = ()
    through_tunnel: bool = False  # also from wg0 (else: from every interface but wg0)

    def __post_init__(self) -> None:
        if self.protocol not in ("tcp", "udp"):
            raise ValueError(f"protocol: {self.protocol!r} is not tcp or udp")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port: {self.port} is not 1..65535")
        if any(not isinstance(s, IPv4Network) for s in self.sources):
            raise ValueError("sources: IPv4 networks only")
        if not all(c.isprintable() and c not in "\n\r" for c in self.what):
            raise ValueError("what: one printable line")


@dataclass(frozen=True)
class InputPolicy:
    site: str
    closed: bool  # True: every interface (cloud gateways); False: wg0 only (static sites)
    admits: tuple[Admit, ...]


def health_sources(site: AwsSite | GcpSite) -> tuple[IPv4Network, ...]:
    """Who may GET /healthz from outside the gateway: its HA partner (the gateway subnets wg-mesh creates, else the
    site's CIDRs) and, on GCP, Google's probers. The agent's own checks and doctor use 127.0.0.1."""
    if site.uses_existing_network:
        partner: tuple[IPv4Network, ...] = tuple(site.cidrs)
    else:
        first = site.cidrs[0]
        standby = addressing.standby_gateway_subnet(first) if isinstance(site, AwsSite) else None
        partner = (addressing.gateway_subnet(first), *((standby,) if standby is not None else ()))
    return partner + (GCP_PROBERS if isinstance(site, GcpSite) else ())


def policy_for(cfg: MeshConfig, site_name: str) -> InputPolicy:
    """The INPUT policy of a site's gateway(s), from the mesh: values that replace no gateway when the peers change."""
    site = cfg.site(site_name)
    exporter = Admit("node-exporter from monitoring_cidrs", "tcp", cfg.exporter_port, tuple(cfg.monitoring_cidrs), True)
    admits = [exporter] if cfg.monitoring_cidrs else []
    if isinstance(site, StaticSite):
        return InputPolicy(site.name, closed=False, admits=tuple(admits))
    admits.insert(0, Admit("WireGuard (the cloud firewall admits only the peers)", "udp", cfg.listen_port))
    if site.gateways > 1:
        admits.append(Admit("/healthz from the HA partner and the health checks", "tcp", ha.HEALTH_PORT,
                            health_sources(site)))  # fmt: skip
    if isinstance(site, GcpSite):
        admits.append(Admit("SSH from IAP TCP forwarding (its VPC rule: operator_access cloud)", "tcp", SSH_PORT,
                            (IAP_TCP_FORWARDING,)))  # fmt: skip
    return InputPolicy(site.name, closed=True, admits=tuple(admits))


HEADER = "# wg-mesh {site}: the gateway's INPUT policy ({family}), generated; loaded by {unit} before any network\n"


def render(policy: InputPolicy) -> str:
    """`iptables-restore --noflush` text: the WGMESH-INPUT chain, whole (its jump from INPUT is the unit's)."""
    rule = f"-A {CHAIN}"
    lines = [
        HEADER.format(site=policy.site, family="IPv4", unit=UNIT_NAME).rstrip("\n"),
        "*filter",
        f":{CHAIN} - [0:0]",
    ]
    if not policy.closed:
        lines += ["# a static site: only what arrives through the tunnel is policed here"]
        lines += [f"{rule} ! -i {INTERFACE} -j RETURN"]
    lines += [
        f"{rule} -i lo -j ACCEPT",
        f"{rule} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        *(f"{rule} -p icmp -m icmp --icmp-type {kind} -j ACCEPT" for kind in ICMP_TYPES),
    ]
    if policy.closed:
        lines.append(
            f"{rule} ! -i {INTERFACE} -p udp -m udp --sport {DHCP_SERVER_PORT} --dport {DHCP_CLIENT_PORT} -j ACCEPT"
        )
    for admit in policy.admits:
        lines.append(f"# {admit.what}")
        where = "" if admit.through_tunnel else f" ! -i {INTERFACE}"
        match = f"-p {admit.protocol} -m {admit.protocol} --dport {admit.port}"
        if admit.protocol == "tcp":
            match += " --syn"  # a new connection; the rest of it is ESTABLISHED above
        sources = [f" -s {source}" for source in admit.sources] or [""]
        lines += [f"{rule}{where}{source} {match} -j ACCEPT" for source in sources]
    lines += ["# everything else", f"{rule} -j DROP", "COMMIT"]
    return "\n".join(lines) + "\n"


def render6(policy: InputPolicy) -> str:
    """`ip6tables-restore --noflush` text. The mesh is IPv4 (wg0 has no IPv6 address, no peer an IPv6 AllowedIP), so
    a cloud gateway admits no IPv6 connection at all: only loopback, its own connections, ICMPv6 (neighbour discovery
    and packet-too-big need it: RFC 4890) and DHCPv6 replies. A static site's IPv6 is its owner's: nothing here."""
    header = HEADER.format(site=policy.site, family="IPv6", unit=UNIT_NAME).rstrip("\n")
    lines = [header, "*filter", f":{CHAIN} - [0:0]"]
    rule = f"-A {CHAIN}"
    if policy.closed:
        lines += [
            f"{rule} -i lo -j ACCEPT",
            f"{rule} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
            f"{rule} -p ipv6-icmp -j ACCEPT",
            f"{rule} -p udp -m udp --sport {DHCP6_SERVER_PORT} --dport {DHCP6_CLIENT_PORT} -j ACCEPT",
            f"{rule} -j DROP",
        ]
    else:
        lines.append(f"{rule} -j RETURN")
    return "\n".join([*lines, "COMMIT"]) + "\n"


# The jump from INPUT, added once: `-C` (check) before `-I`, so a restart neither duplicates it nor opens a moment
# without it (the chain's rules are replaced in one transaction by the restore before).
HOOK = "{tool} -w -C INPUT -j {chain} 2>/dev/null || {tool} -w -I INPUT 1 -j {chain}"


def unit_text() -> str:
    """The oneshot unit that loads both files at every boot, before the network (systemd.special(7):
    network-pre.target "is used to order services before any network interface is configured", e.g. firewalls)."""
    hooks = [HOOK.format(tool=f"/usr/sbin/{tool}", chain=CHAIN) for tool in ("iptables", "ip6tables")]
    return f"""[Unit]
Description=wg-mesh: the gateway's INPUT policy (who may connect to the gateway itself)
DefaultDependencies=no
Wants=network-pre.target
Before=network-pre.target shutdown.target
After=local-fs.target systemd-modules-load.service
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/iptables-restore --wait --noflush {RULES_PATH}
ExecStart=/usr/sbin/ip6tables-restore --wait --noflush {RULES6_PATH}
ExecStart=/bin/sh -c '{hooks[0]}'
ExecStart=/bin/sh -c '{hooks[1]}'
# Netfilter changes need CAP_NET_ADMIN (and CAP_NET_RAW for iptables' raw sockets); nothing else. It writes only
# iptables' lock under /run, talks netlink (iptables-nft) or a raw socket (iptables-legacy), and sends no packet.
CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths=/run
ProtectKernelTunables=yes
RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET AF_INET6
IPAddressDeny=any
SystemCallFilter=@system-service
{ship.SANDBOX}
[Install]
WantedBy=multi-user.target
"""


def input_extras(cfg: MeshConfig, site_name: str) -> CloudInitExtras:
    """What the user data adds: both files, the unit, and its first start, before anything else of runcmd (wg-quick, the
    agent's first fetch) runs; the unit must be active for `cloud-init status` to report success. A single host (a
    static site without cidrs) gets none: it is the mesh's workload there, and what the sites may reach on it is its
    owner's firewall's to say, on wg0 as on its other interfaces (as a cloud's workload firewall is for its workloads).
    wg0 carries only the peers' AllowedIPs (the mesh's ranges) and never reaches link-local (wgconf's raw rule)."""
    if not topology.forwards(cfg, site_name):
        return CloudInitExtras()
    policy = policy_for(cfg, site_name)
    return CloudInitExtras(
        files=(File(RULES_PATH, render(policy), "0600"), File(RULES6_PATH, render6(policy), "0600"),
               File(UNIT_PATH, unit_text())),
        setup=(("systemctl", "enable", "--now", UNIT_NAME),),
        units=(UNIT_NAME,),
    )  # fmt: skip
