"""A DNS-named peer on real WireGuard (root): two network namespaces joined by a veth, wireguard-go in each, a tiny DNS
server (the lab's, wg_mesh/lab/fabric/resolver.py: UDP, answering from a JSON file the test rewrites), and the
shipped wg-mesh-reresolve script (the compact text the user data carries) run as its timer would run it, every
INTERVAL seconds, with resolv.conf pointed at that server in a private mount namespace (nothing of the host's /etc
changes).

"gw" is the gateway that peers with the DNS-named "site"; "site" is passive (no endpoint, no keepalive: only the
re-resolver can tell "gw" where it is). Shown: the name resolves and the tunnel comes up; a hostile answer (a private
address, two addresses, no such name) leaves the endpoint as it was; when "site" moves to a new address and the name
is re-pointed, "gw" follows at its next run, within one interval (the time is measured and printed, not asserted).
Teardown in `finally`: our processes by pid, our namespaces by name.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wg_mesh.lab.fabric.resolver import DNS_SERVER  # the lab's DNS server, bound to loopback here
from wg_mesh.plan import reresolveunit, wgkey

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "wg", "wireguard-go", "unshare")),
        reason="needs root, ip, wg, wireguard-go and unshare",
    ),
]

INTERVAL = 2.0  # the timer's period here (reresolve_seconds: 2, the config's minimum)
NAME = "site.wg-mesh-dns.test"
OLD, NEW, GW = "203.0.113.2", "203.0.113.3", "203.0.113.1"
OWN_PUBLIC, OTHER_PEER = "203.0.113.50", "203.0.113.77"  # the site's public address (peers.json), another peer's
PORT = 51820
ENV = {"PATH": "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, env=ENV, timeout=30)


def ns(name: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", name, *argv, check=check)


class Pair:
    def __init__(self, tmp: Path) -> None:
        tag = secrets.token_hex(3)
        self.gw, self.site = f"wgdns-gw-{tag}", f"wgdns-st-{tag}"
        self.wg_gw, self.wg_site = f"wgdg{tag}", f"wgds{tag}"  # wireguard-go's UAPI sockets are named by interface
        self.tmp, self.procs = tmp, []  # type: list[subprocess.Popen[str]]
        self.zone = tmp / "zone.json"
        self.keys = {n: wgkey.generate_private_key() for n in ("gw", "site")}

    def up(self) -> None:
        for name in (self.gw, self.site):
            sh("ip", "netns", "add", name)
            ns(name, "ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "veth-g", "netns", self.gw, "type", "veth", "peer", "veth-s", "netns", self.site)
        ns(self.gw, "ip", "address", "add", f"{GW}/24", "dev", "veth-g")
        ns(self.site, "ip", "address", "add", f"{OLD}/24", "dev", "veth-s")
        for name, dev in ((self.gw, "veth-g"), (self.site, "veth-s")):
            ns(name, "ip", "link", "set", dev, "up")
        for name, wg, overlay, key in ((self.gw, self.wg_gw, "10.99.0.1/24", "gw"),
                                       (self.site, self.wg_site, "10.99.0.2/24", "site")):  # fmt: skip
            self.spawn(name, "wireguard-go", "-f", wg)
            self._wait(lambda wg=wg: Path(f"/var/run/wireguard/{wg}.sock").exists())
            (self.tmp / key).write_text(self.keys[key])
            ns(name, "wg", "set", wg, "private-key", str(self.tmp / key), "listen-port", str(PORT))
            ns(name, "ip", "address", "add", overlay, "dev", wg)
            ns(name, "ip", "link", "set", wg, "up")
        public = {k: wgkey.public_key(v) for k, v in self.keys.items()}
        ns(self.gw, "wg", "set", self.wg_gw, "peer", public["site"], "allowed-ips", "10.99.0.2/32",
           "persistent-keepalive", "1")  # fmt: skip
        ns(self.site, "wg", "set", self.wg_site, "peer", public["gw"], "allowed-ips", "10.99.0.1/32")
        other = wgkey.public_key(wgkey.generate_private_key())  # another peer of the gateway, at its endpoint
        ns(self.gw, "wg", "set", self.wg_gw, "peer", other, "allowed-ips", "10.99.0.3/32", "endpoint",
           f"{OTHER_PEER}:{PORT}")  # fmt: skip
        self.point([OLD])
        self.spawn(self.gw, "/usr/bin/python3", "-c", DNS_SERVER, str(self.zone), "127.0.0.1")
        (self.tmp / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        peers = [{"name": "site", "public_key": public["site"], "endpoint_name": f"{NAME}:{PORT}", "reresolve_s": 2}]
        own = {f"{OWN_PUBLIC}/32": "this site's own public address"}  # reresolveunit.peers_file writes it
        (self.tmp / "peers.json").write_text(json.dumps({"interface": self.wg_gw, "peers": peers, "own": own}))
        (self.tmp / "reresolve").write_text(reresolveunit.script_source())

    def spawn(self, netns: str, *argv: str) -> None:
        proc = subprocess.Popen(["ip", "netns", "exec", netns, *argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, env=ENV)  # fmt: skip
        self.procs.append(proc)

    @staticmethod
    def _wait(ready: object, timeout: float = 10.0) -> None:
        give_up = time.monotonic() + timeout
        while not ready():  # type: ignore[operator]
            assert time.monotonic() < give_up, "not ready in time"
            time.sleep(0.05)

    def point(self, answers: list[str] | None) -> None:
        self.zone.write_text(json.dumps({NAME: answers}))

    def reresolve(self) -> str:
        """One run of the shipped script, as its timer runs it, with resolv.conf at the lab's server."""
        script = (f"mount --bind {self.tmp / 'resolv.conf'} /etc/resolv.conf && exec /usr/bin/python3 "
                  f"{self.tmp / 'reresolve'} {self.tmp / 'peers.json'} {self.tmp / 'state.json'}")  # fmt: skip
        done = ns(self.gw, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, check=False)
        assert done.returncode == 0, done.stderr
        return done.stderr

    def endpoint(self) -> str:
        """The DNS-named peer's endpoint on the gateway's wg."""
        out = ns(self.gw, "wg", "show", self.wg_gw, "endpoints").stdout
        site = wgkey.public_key(self.keys["site"])
        return next(line.split("\t", 1)[1].strip() for line in out.splitlines() if line.startswith(site))

    def pings(self) -> float | None:
        """Seconds to the first reply through the tunnel (a ping every 0.2 s for up to 8 s), or None. At the first
        set the gateway's first handshake attempt (at `wg set`, before any endpoint) has failed, and wireguard-go
        retries after REKEY_TIMEOUT (5 s): up to that long."""
        started = time.monotonic()
        done = ns(self.gw, "ping", "-c", "1", "-i", "0.2", "-w", "8", "10.99.0.2", check=False)
        return time.monotonic() - started if done.returncode == 0 else None

    def down(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        for name in (self.gw, self.site):
            sh("ip", "netns", "delete", name, check=False)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    os.environ.setdefault("WG_MESH_TEST", "1")
    made = Pair(tmp_path)
    try:
        made.up()
        yield made
    finally:
        made.down()


def test_a_dns_named_peer_is_resolved_followed_and_never_misdirected(pair: Pair) -> None:
    started = time.monotonic()
    assert pair.endpoint() == "(none)"  # no Endpoint line for a DNS-named peer: the re-resolver sets it
    log = pair.reresolve()
    assert f"-> {OLD}:{PORT} ({NAME})" in log, log
    assert pair.endpoint() == f"{OLD}:{PORT}"  # the name resolves
    first = pair.pings()
    assert first is not None  # the tunnel is up

    # refused: the host does not change (the last three: issue 33 item 6, this gateway's own address on its NIC, the
    # site's public address, another peer's endpoint)
    for hostile in (["10.1.2.3"], [NEW, "203.0.113.9"], None, ["127.0.0.1"], [GW], [OWN_PUBLIC], [OTHER_PEER]):
        pair.point(hostile)
        log = pair.reresolve()
        assert "its endpoint stays" in log and pair.endpoint() == f"{OLD}:{PORT}", (hostile, log)

    # the site moves: its old address is gone, the name is re-pointed; the timer's next run follows it
    ns(pair.site, "ip", "address", "delete", f"{OLD}/24", "dev", "veth-s")  # first: a primary takes its secondaries
    ns(pair.site, "ip", "address", "add", f"{NEW}/24", "dev", "veth-s")
    pair.point([NEW])
    moved = time.monotonic()
    followed = None
    while followed is None and time.monotonic() - moved < 3 * INTERVAL:
        time.sleep(max(0.0, INTERVAL - (time.monotonic() - moved) % INTERVAL))  # the timer's cadence
        pair.reresolve()
        if pair.endpoint() == f"{NEW}:{PORT}":
            followed = time.monotonic() - moved
    assert followed is not None, "the re-pointed name was not followed"
    after = pair.pings()
    assert after is not None
    print(
        f"\n  first reply {first:.2f} s after the first set; re-pointed name followed after {followed:.2f} s "
        f"(interval {INTERVAL:g} s), a reply {after:.2f} s later; whole test {time.monotonic() - started:.1f} s"
    )
