"""A gateway's wg-quick(8) configuration from plain values: the interface plan, its rules and its text.

Standard library only, like everything in wg_mesh.gateway: this module ships to every gateway inside the agent
(`wg-mesh-agent`), which renders wg0.conf from the peer document with exactly these functions, and the
Pulumi program renders user data with them too (wg_mesh.plan.render, wg_mesh.plan.topology re-export the names). One
renderer for both delivery modes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    name: str
    public_key: str
    allowed_ips: tuple[str, ...]
    # HOST:PORT; None: a dynamic peer (issue 24, `endpoint: dynamic`): no Endpoint is ever set for it, WireGuard learns
    # its address from its authenticated packets and follows it when it roams.
    endpoint: str | None
    persistent_keepalive: int
    # The tunnel MTU towards this peer when it is below the interface's (docs/underlay.md section 5: a gateway with a
    # jumbo private-path peer has wg0 at that path's MTU; its internet peers' routes carry their own). None: wg0's.
    mtu: int | None = None
    # A private-path peer's public HOST:PORT, used while the path is down (wg_mesh.gateway.fallback); None: none.
    fallback_endpoint: str | None = None
    # Unix seconds from which `public_key` is valid (an announced key rotation, wg_mesh.gateway.rotation): an agent
    # that runs this peer with another key keeps that one until then. None: valid now.
    key_at: int | None = None
    # A DNS-named peer (issue 24): its NAME:PORT, with `endpoint` None (no Endpoint line: wg-quick would resolve the
    # name with no check of the answer, and fail the whole interface when it does not resolve); the re-resolver
    # (wg_mesh.gateway.reresolve) sets its endpoint every `reresolve_s` seconds when the answer changes.
    endpoint_name: str | None = None
    reresolve_s: int | None = None


@dataclass(frozen=True)
class InterfacePlan:
    """Everything in a site's wg0.conf except its private key."""

    site: str
    address: str
    listen_port: int
    mtu: int
    mss: int
    masquerade: bool
    peers: tuple[Peer, ...]
    # /32s allowed to send to listen_port, filtered on the host itself; empty = no host filter (cloud gateways:
    # their security group / firewall rule admits only these already).
    listen_sources: tuple[str, ...] = ()
    # False: a single host (a static site with no networks behind it, `cidrs` empty): it forwards nothing, so its
    # wg0.conf turns on no forwarding (no ip_forward, no FORWARD rules, no MSS clamp, no masquerade) and leaves the
    # host's own sysctls alone. The agent takes it from agent.json's trust (its cidrs), never from a document.
    forward: bool = True
    # A relay's (issue 24, wg_mesh.plan.relay): the relayed sites' ranges (each one's overlay /32 and cidrs); it
    # forwards wg0 -> wg0 from any of them to any of them and nothing else (relay_chains). Empty: not a relay.
    relay_ranges: tuple[str, ...] = ()
    # This site's own public address, as its peers reach it (the program's directory); None when it is not known in
    # advance (a dynamic or DNS-named static site). Never a peer's endpoint (wg_mesh.gateway.trust, reresolve).
    public_ip: str | None = None

    def peer_mtu(self, peer: Peer) -> int:
        """The tunnel MTU towards `peer`: its own (a route MTU on its AllowedIPs) or the interface's."""
        return self.mtu if peer.mtu is None else peer.mtu


INTERFACE = "wg0"
WG_CONF_PATH = f"/etc/wireguard/{INTERFACE}.conf"
SYSCTL_SETTINGS = {
    "net.ipv4.ip_forward": "1",
    # While wg0 is down a gateway routes a LAN host's packets back out of the same interface, and would send
    # it an ICMP redirect to its default router that Linux hosts cache for minutes: traffic stays black-holed
    # after the tunnel is back. Routers in a mesh don't send redirects.
    "net.ipv4.conf.all.send_redirects": "0",
    "net.ipv4.conf.default.send_redirects": "0",
    # Loose reverse-path filtering (RFC 3704): GCE's 60-gce-network-security.conf sets strict mode (1), which drops
    # a packet whose source would not be routed back out of the interface it came in on -- the case for traffic
    # that enters through wg0 or a VPC NIC on asymmetric paths. The kernel uses max(all, interface), so `all` = 2
    # makes every interface, existing ones included, at least loose; 2 still drops sources with no route at all.
    "net.ipv4.conf.all.rp_filter": "2",
    "net.ipv4.conf.default.rp_filter": "2",
}
# The kernel ORs `all` with each interface's own send_redirects, so interfaces that already exist are set too.
NO_REDIRECTS_ON_EXISTING_INTERFACES = 'for conf in /proc/sys/net/ipv4/conf/*/send_redirects; do echo 0 > "$conf"; done'
LINK_LOCAL = "169.254.0.0/16"  # RFC 3927; the clouds' metadata servers live at 169.254.169.254
# The interface that holds the default route, looked up when the rule is added or removed:
# ens5 on AWS Nitro, ens4 on GCE, something else on a VPS. wg-quick strips '#' comments, so no '#'.
DEFAULT_ROUTE_DEV = (
    "$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == \"dev\") {print $(i + 1); exit}}')"
)
# Its router (none on a point-to-point default route).
DEFAULT_ROUTE_GW = (
    "$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == \"via\") {print $(i + 1); exit}}')"
)
# A hook that needs the default route starts with this: no default route (an empty lookup) fails the hook with a
# message instead of running another command (an `ip route replace` without its nexthop, a MASQUERADE on every
# interface for `-o ""`). wg-quick runs each hook as `(eval "$hook")` under `set -e`, the agent as `bash -c`: the
# `exit 1` fails either. "$dev" is quoted wherever it is used, and so is the router ("$gw", when there is one).
DEFAULT_ROUTE_GUARD = (
    f'dev={DEFAULT_ROUTE_DEV}; [ -n "$dev" ] || {{ echo "wg-mesh: no default route: hook not run" >&2; exit 1; }}; '
)


def endpoint_routes(plan: InterfacePlan) -> list[str]:
    """Peers' endpoints that lie inside some peer's AllowedIPs (a private-path peer's private address is inside its
    own site's CIDRs): without a host route through the NIC's router, wg-quick's route for those AllowedIPs would
    send the encrypted UDP into wg0 itself (docs/underlay.md section 3). As /32 prefixes."""
    allowed = [ipaddress.ip_network(a, strict=False) for p in plan.peers for a in p.allowed_ips]
    hosts = (ipaddress.ip_address(p.endpoint.rpartition(":")[0]) for p in plan.peers if p.endpoint is not None)
    return sorted({f"{h}/32" for h in hosts if any(h in n for n in allowed)}, key=ipaddress.ip_network)


def route_mtus(plan: InterfacePlan) -> list[tuple[str, int]]:
    """(prefix, MTU) for the AllowedIPs of peers whose tunnel MTU is below the interface's, outside wg0's own prefix
    (those routes are wg-quick's; the overlay /32s inside it go by the connected route and the peer's MTU applies to
    its sites' traffic, not to the probe address)."""
    own = ipaddress.ip_interface(plan.address).network
    out = []
    for peer in plan.peers:
        if peer.mtu is None or peer.mtu >= plan.mtu:
            continue
        for entry in peer.allowed_ips:
            network = ipaddress.ip_network(entry, strict=False)
            if not network.subnet_of(own):  # type: ignore[arg-type]
                out.append((str(network), peer.mtu))
    return out


def route_hooks(plan: InterfacePlan) -> tuple[list[str], list[str]]:
    """PostUp / PostDown commands for the routes above: endpoints through the NIC, lower MTUs on internet peers'
    routes (`ip route replace`: idempotent; the agent runs the new ones when the document changes)."""
    gw = f"gw={DEFAULT_ROUTE_GW}; "
    up = [
        f'{DEFAULT_ROUTE_GUARD}{gw}ip -4 route replace {host} ${{gw:+via "$gw"}} dev "$dev"'
        for host in endpoint_routes(plan)
    ]
    down = [f"ip -4 route del {host}" for host in endpoint_routes(plan)]
    up += [f"ip -4 route replace {prefix} dev %i mtu {mtu}" for prefix, mtu in route_mtus(plan)]
    return up, down


DEFAULT_DEV = "%d"  # in a Rule's args: the default route's device (wg-quick: the shell looks it up; the agent: itself)


@dataclass(frozen=True)
class Rule:
    """One iptables rule that wg-quick adds on up and deletes on down, as argument words built from typed values
    (`%i`: the interface, DEFAULT_DEV: the default route's device)."""

    table: str
    chain: str
    args: tuple[str, ...]
    first: bool = False  # insert at the top, so a distribution's trailing DROP cannot shadow it
    guard: str = ""  # shell run before it (DEFAULT_ROUTE_GUARD: the rule names "$dev")

    @property
    def spec(self) -> str:
        # DEFAULT_DEV is "$dev", which the rule's guard (DEFAULT_ROUTE_GUARD) has looked up and checked
        return " ".join('"$dev"' if word == DEFAULT_DEV else word for word in self.args)

    def command(self, up: bool) -> str:
        """wg0.conf's PostUp / PostDown text (for wg-quick at boot; the agent never runs it)."""
        verb = ("-I" if self.first else "-A") if up else "-D"
        return f"{self.guard}iptables -t {self.table} {verb} {self.chain} {self.spec}"

    def argv(self, verb: str, interface: str, default_dev: str | None = None) -> list[str]:
        """The agent's argv (`verb`: -A/-I for `add`, -D, -C, no shell): `%i` and DEFAULT_DEV resolved."""
        if verb == "add":
            verb = "-I" if self.first else "-A"
        words = {"%i": interface, DEFAULT_DEV: default_dev}
        resolved = [words.get(word, word) for word in self.args]
        if None in resolved:
            raise ValueError(f"{self.table} {self.chain}: no default route device")
        return ["iptables", "-t", self.table, verb, self.chain, *(w for w in resolved if w is not None)]


RELAY_CHAIN, RELAY_TO_CHAIN = "WGMESH-RELAY", "WGMESH-RELAY-TO"  # a relay's own chains (filter table)


@dataclass(frozen=True)
class Chain:
    """A chain of wg-mesh's own, created with its rules and removed whole (a relay's, relay_chains)."""

    table: str
    name: str
    rules: tuple[tuple[str, ...], ...]  # each rule's words after `-A NAME`

    def lines(self) -> list[str]:
        """Its rules as `iptables -S NAME` prints them (what the agent compares the running chain with)."""
        return [f"-A {self.name} {' '.join(rule)}" for rule in self.rules]


def relay_chains(relay_ranges: tuple[str, ...]) -> list[Chain]:
    """A relay's chains, in the order they are filled (the first is the second's target): wg0 -> wg0 traffic (the
    FORWARD jump of host_rules) goes to RELAY_CHAIN, which sends a packet from a relayed range on to RELAY_TO_CHAIN
    and drops anything else; RELAY_TO_CHAIN accepts it towards a relayed range (else back, to the DROP). One rule per
    range in each: 2n + 1 rules for n ranges, where a rule per (source, destination) pair grew with n squared.

    It admits every relayed range to every relayed range. The relayed pairs are every two relayed sites
    (wg_mesh.config.relay.relayed_pairs), so that is their flows exactly, plus one site's range to the same site's
    (a relayed site's packets back to itself). Those are harmless: WireGuard on the relay admits a source only from
    the peer whose AllowedIPs hold it, so such a packet comes from that site and returns to it alone, where its
    relay entry does not carry the site's own ranges and WireGuard drops it (docs/security.md section 3)."""
    if not relay_ranges:
        return []
    to = Chain("filter", RELAY_TO_CHAIN, tuple(("-d", r, "-j", "ACCEPT") for r in relay_ranges))
    relay = Chain("filter", RELAY_CHAIN, (*(("-s", r, "-j", RELAY_TO_CHAIN) for r in relay_ranges), ("-j", "DROP")))
    return [to, relay]


def chains_restore(chains: list[Chain]) -> str:
    """`iptables-restore --noflush` input that creates `chains` or, when they exist, empties and refills them, in one
    commit per table (atomic: no packet sees a half-filled chain; the same text again changes nothing)."""
    out: list[str] = []
    for table in dict.fromkeys(c.table for c in chains):
        mine = [c for c in chains if c.table == table]
        out += [f"*{table}", *(f":{c.name} - [0:0]" for c in mine), *(line for c in mine for line in c.lines())]
        out.append("COMMIT")
    return "".join(f"{line}\n" for line in out)


def chains_removal(chains: list[Chain]) -> str:
    """`iptables-restore --noflush` input that empties and deletes `chains` (nothing may jump to them any more)."""
    out: list[str] = []
    for table in dict.fromkeys(c.table for c in chains):
        mine = [c for c in chains if c.table == table]
        out += [f"*{table}", *(f"-F {c.name}" for c in mine), *(f"-X {c.name}" for c in mine), "COMMIT"]
    return "".join(f"{line}\n" for line in out)


def restore_hook(text: str) -> str:
    """A wg-quick hook that feeds `text` to `iptables-restore --noflush` (one process, one commit per table)."""
    words = " ".join(f"'{line}'" for line in text.splitlines())  # chain names, prefixes, targets: no quote, no '#'
    return f"printf '%s\\n' {words} | iptables-restore --noflush"


def host_rules(
    mss: int,
    listen_port: int,
    listen_sources: tuple[str, ...],
    masquerade: bool,
    forward: bool = True,
    relay_ranges: tuple[str, ...] = (),
) -> list[Rule]:
    """The rules that make a gateway forward through wg0 (`%i` is wg-quick's interface name). `forward` False (a single
    host): only what guards the host itself (the link-local drop, the WireGuard port's sources), no FORWARD rule.
    `relay_ranges` (a relay): wg0 -> wg0 goes through the relay's chains (relay_chains), which drop all but these."""
    tcp_syn = ("-p", "tcp", "--tcp-flags", "SYN,RST", "SYN")
    clamp = (*tcp_syn, "-m", "tcpmss", "--mss", f"{mss + 1}:65535", "-j", "TCPMSS", "--set-mss", str(mss))
    pmtu_clamp = (*tcp_syn, "-j", "TCPMSS", "--clamp-mss-to-pmtu")
    forwarding = [
        Rule("filter", "FORWARD", ("-i", "%i", "-j", "ACCEPT"), first=True),
        Rule("filter", "FORWARD", ("-o", "%i", "-j", "ACCEPT"), first=True),
        # Both directions: a 9001-MTU AWS host offers MSS 8961 and must be told the tunnel's.
        Rule("mangle", "FORWARD", ("-o", "%i", *clamp)),
        Rule("mangle", "FORWARD", ("-i", "%i", *clamp)),
        # And to the route's MTU, which is the tunnel's until the path-MTU heal (wg_mesh.gateway.pmtu_heal) lowers
        # the routes to one peer: TCP to that peer then adapts. TCPMSS never raises an MSS, so the constant
        # clamp above stays the upper bound; `-i` uses the MTU of the route back to the sender.
        Rule("mangle", "FORWARD", ("-o", "%i", *pmtu_clamp)),
        Rule("mangle", "FORWARD", ("-i", "%i", *pmtu_clamp)),
    ]
    if forward and relay_ranges:
        # Listed after the ACCEPTs above and inserted first too, so above them: anything that would go out of wg0
        # again goes to the relay's chains, which accept the relayed ranges and drop the rest (the clamps above
        # match it already: -i and -o are wg0).
        forwarding.append(Rule("filter", "FORWARD", ("-i", "%i", "-o", "%i", "-j", RELAY_CHAIN), first=True))
    rules = [
        *(forwarding if forward else []),
        # Nothing that arrives through the tunnel may reach a link-local address (169.254.169.254 is the cloud's
        # metadata server, with the instance's credentials): dropped in raw PREROUTING, before routing, so both the
        # forwarded and the locally delivered path are covered and no filter-table rule can shadow it. The
        # gateway's own requests to the metadata server do not come in on wg0 and are unaffected.
        Rule("raw", "PREROUTING", ("-i", "%i", "-d", LINK_LOCAL, "-j", "DROP"), first=True),
    ]
    if listen_sources:
        # Only the peers' addresses may send to the WireGuard port (static sites: no cloud firewall in front).
        # Inserted first, then each ACCEPT above it; the rest of the host's traffic is untouched.
        port = ("-p", "udp", "--dport", str(listen_port))
        rules.append(Rule("filter", "INPUT", (*port, "-j", "DROP"), first=True))
        rules += [Rule("filter", "INPUT", (*port, "-s", src, "-j", "ACCEPT"), first=True) for src in listen_sources]
    if masquerade and forward:
        rules.append(Rule("nat", "POSTROUTING", ("-o", DEFAULT_DEV, "-j", "MASQUERADE"), guard=DEFAULT_ROUTE_GUARD))
    return rules


def forwarding_rules(plan: InterfacePlan) -> list[Rule]:
    """The plan's rules (host_rules)."""
    return host_rules(plan.mss, plan.listen_port, plan.listen_sources, plan.masquerade, plan.forward, plan.relay_ranges)


def forwarding_chains(plan: InterfacePlan) -> list[Chain]:
    """The plan's own chains (relay_chains; none but on a relay that forwards)."""
    return relay_chains(plan.relay_ranges) if plan.forward else []


def sysctl_settings(plan: InterfacePlan) -> dict[str, str]:
    """The sysctls wg0's PostUp sets: a gateway's (SYSCTL_SETTINGS); none for a single host, which forwards nothing
    and keeps its own settings (ip_forward stays what the host has: wg-mesh does not turn it on, nor off)."""
    return dict(SYSCTL_SETTINGS) if plan.forward else {}


ROLES = ("active", "standby")


def wg_quick_conf(plan: InterfacePlan, private_key: str, role: str = "active") -> str:
    """The wg-quick(8) configuration of one site. `role` (HA sites, docs/ha.md section 3): a `standby` gateway's
    peers have no Endpoint and no PersistentKeepalive, so it never sends a handshake or keepalive and cannot make a
    remote peer roam to it; `active` is the normal configuration (a single gateway is always active). A dynamic peer
    (endpoint None) has no Endpoint line in either role: WireGuard learns its address from its packets; a DNS-named
    one has its name in a comment (its endpoint is wg-mesh-reresolve's to set)."""
    if role not in ROLES:
        raise ValueError(f"role: {role!r} is not active or standby")
    rules, chains = forwarding_rules(plan), forwarding_chains(plan)
    route_up, route_down = route_hooks(plan)
    lines = [
        f"# wg-mesh site {plan.site}: generated, do not edit (changes are overwritten by pulumi up)",
        "[Interface]",
        f"Address = {plan.address}",
        f"ListenPort = {plan.listen_port}",
        f"MTU = {plan.mtu}",
        f"PrivateKey = {private_key}",
        *(f"PostUp = sysctl -q -w {key}={value}" for key, value in sysctl_settings(plan).items()),
        *([f"PostUp = {NO_REDIRECTS_ON_EXISTING_INTERFACES}"] if plan.forward else []),
        # the chains before the rules that jump to them, and removed after those
        *([f"PostUp = {restore_hook(chains_restore(chains))}"] if chains else []),
        *(f"PostUp = {rule.command(up=True)}" for rule in rules),
        *(f"PostUp = {command}" for command in route_up),
        *(f"PostDown = {rule.command(up=False)}" for rule in rules),
        *([f"PostDown = {restore_hook(chains_removal(chains))}"] if chains else []),
        *(f"PostDown = {command}" for command in route_down),
    ]
    for peer in plan.peers:
        lines += [
            "",
            f"# {peer.name}",
            "[Peer]",
            f"PublicKey = {peer.public_key}",
            f"AllowedIPs = {', '.join(peer.allowed_ips)}",
        ]
        if role == "active":
            lines += [f"Endpoint = {peer.endpoint}"] if peer.endpoint is not None else []
            lines += [f"# Endpoint = {peer.endpoint_name} (set by wg-mesh-reresolve)"] if peer.endpoint_name else []
            lines += [f"PersistentKeepalive = {peer.persistent_keepalive}"]
    return "\n".join(lines) + "\n"


def parse_wg_quick_conf(text: str) -> list[tuple[str, dict[str, list[str]]]]:
    """Sections of a wg-quick file as (name, {key: [values]}), for tests, the lab and doctor."""
    sections: list[tuple[str, dict[str, list[str]]]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            sections.append((line[1:-1], {}))
            continue
        key, _, value = line.partition("=")
        if not sections:
            raise ValueError(f"{raw!r} is outside any section")
        sections[-1][1].setdefault(key.strip(), []).append(value.strip())
    return sections
