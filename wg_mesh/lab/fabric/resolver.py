"""The lab's resolver (issue 24): a DNS server in the lab's internet namespace that serves every DNS-named site's name,
and `repoint` (the roam drill's `dns` change). Each gateway's private /etc (its mount namespace: machine.py) gets a
resolv.conf naming it; the host's /etc/resolv.conf is never touched.

A DNS-named site sits behind a static (1:1) NAT in the internet namespace (roamnat.py, kind static) at an address of
DNS_POOL, 203.0.113.0/24 (TEST-NET-3, RFC 5737: documentation, never routed on the internet), which the name
resolves to. Not the lab's 198.18.0.0/15: that range is benchmarking space (RFC 2544), which the gateways'
re-resolver refuses as an answer by design (wg_mesh.gateway.reresolve.NOT_AN_ENDPOINT), and the lab runs the shipped
code unchanged: no lab-only allowance exists that a config or a fetched document could turn on. TEST-NET-3 is
accepted by that check, as it is by wg_mesh.config.addressing, and nothing outside the lab routes it.

The server: UDP, A records, read per query from a JSON zone file (name -> [addresses], null: NXDOMAIN) that
`repoint` rewrites atomically; started with the lab (its pid in the lab's state, stopped by pid at teardown) by
`serve_dns_sites`, before any gateway starts.
"""

from __future__ import annotations

import json
import os
import subprocess
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from wg_mesh.lab.fabric.netns import LabError, LabState, Node
from wg_mesh.lab.fabric.networks import ip
from wg_mesh.lab.fabric.plan import LabPlan, SitePlan
from wg_mesh.lab.fabric.roamnat import NatFront, NatState

DNS_POOL = IPv4Network("203.0.113.0/24")  # TEST-NET-3: see the module's docstring
RESOLVER_IP = DNS_POOL[254]
ADDRESSES_PER_SITE = 16  # site i's k-th address: DNS_POOL[ADDRESSES_PER_SITE * i + 1 + k]
PYTHON = "/usr/bin/python3"
READY_TIMEOUT_S = 10

# Answers A queries for the names in ZONE (a JSON file: name -> [addresses] or null for NXDOMAIN), read per query;
# bound to ADDRESS:53. Also the UDP server of tests/test_dns_site_netns.py.
DNS_SERVER = r"""
import json, socket, struct, sys
zone, address = sys.argv[1:]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((address, 53))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(512)
    qid, flags, qd = struct.unpack("!HHH", data[:6])
    i, labels = 12, []
    while data[i]:
        labels.append(data[i + 1:i + 1 + data[i]].decode()); i += 1 + data[i]
    qtype = struct.unpack("!H", data[i + 1:i + 3])[0]
    question = data[12:i + 5]
    answers = json.load(open(zone)).get(".".join(labels).lower())
    rcode = 3 if answers is None else 0
    records = [a for a in answers or [] if qtype == 1]
    out = struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, len(records), 0, 0) + question
    for a in records:
        out += struct.pack("!HHHIH", 0xC00C, 1, 1, 0, 4) + socket.inet_aton(a)
    s.sendto(out, peer)
"""


def dns_address(site: SitePlan, k: int) -> IPv4Address:
    """The k-th public address of a DNS-named site (k = 0 at the lab's start, then one per `dns` change)."""
    if not 0 <= k < ADDRESSES_PER_SITE - 1 or ADDRESSES_PER_SITE * (site.index + 1) > int(RESOLVER_IP) - int(
        DNS_POOL[0]
    ):
        raise LabError(f"{site.name}: no DNS-named address {k} in {DNS_POOL}")
    return DNS_POOL[ADDRESSES_PER_SITE * site.index + 1 + k]


def resolv_conf() -> str:
    return f"nameserver {RESOLVER_IP}\noptions timeout:1 attempts:2\n"


def write_resolv_conf(path: Path) -> None:
    """A gateway's /etc/resolv.conf (`path`: through its mount namespace): whatever was there (a symlink too: never
    followed) is replaced in the gateway's private /etc only."""
    if os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(resolv_conf())


class LabResolver:
    """The DNS server in the internet namespace and its zone (a file in the lab's log directory)."""

    def __init__(self, plan: LabPlan, state: LabState) -> None:
        self.netns, self.state = plan.internet_ns, state
        self.zone_path = state.log_dir / "dns-zone.json"
        self.zone: dict[str, list[str]] = {}

    def start(self) -> None:
        self._write()
        ip(self.netns, "address", "add", f"{RESOLVER_IP}/32", "dev", "lo")
        proc: subprocess.Popen[str] = Node(self.netns).popen(
            [PYTHON, "-c", DNS_SERVER, str(self.zone_path), str(RESOLVER_IP)], stdout=subprocess.PIPE
        )
        self.state.track(proc.pid, self.netns, "lab resolver (DNS)")
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server's first line; EOF if it died
        if line.strip() != "ready":
            raise LabError(f"the lab's resolver did not start: {line.strip() or 'exited'}")

    def repoint(self, name: str, address: str) -> None:
        """`name` resolves to `address` from the next query on."""
        self.zone[name] = [address]
        self._write()

    def address_of(self, name: str) -> str:
        return self.zone[name][0]

    def _write(self) -> None:
        tmp = self.zone_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.zone))
        os.replace(tmp, self.zone_path)


def serve_dns_sites(plan: LabPlan, state: LabState) -> tuple[LabResolver | None, dict[str, NatFront]]:
    """Before any gateway starts: every DNS-named site behind its static NAT at its first address, the resolver
    serving its name; (None, {}) for a lab without one."""
    named = [s for s in plan.sites if s.dns_name]
    if not named:
        return None, {}
    resolver, nats = LabResolver(plan, state), {}
    for site in named:
        assert site.dns_name is not None
        nats[site.name] = NatFront(plan.internet_ns, site.index, str(site.public_ip))
        address = str(dns_address(site, 0))
        nats[site.name].apply(NatState(address, "static"))
        resolver.repoint(site.dns_name, address)
    resolver.start()
    return resolver, nats
