"""Path-MTU black hole, detected and healed on real kernels (root): two gateways running the generated wg0.conf
over wireguard-go, a host behind each, and a router between the gateways whose path to the far gateway drops from
1460 to 1400 mid-transfer while it drops ICMP "fragmentation needed" (the issue's failure).

    host-a 10.10.1.5 -- gw-a (wg0 10.99.0.1) -- mid (router) -- gw-b (wg0 10.99.0.2) -- host-b 10.100.1.7

Each gateway gets its own mount namespace (a holder process with a private /run: wireguard-go's control sockets
in /var/run/wireguard are otherwise shared by every namespace). Everything is removed in `finally`: the processes
living in our namespaces (the holders, wireguard-go, the transfer) by pid, then the namespaces by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from wg_mesh.gateway.pmtu import PathMonitor
from wg_mesh.gateway.pmtu_probe import Runner, Settings
from wg_mesh.gateway.wgconf import InterfacePlan, Peer, wg_quick_conf

TOOLS = ("ip", "iptables", "wg", "wg-quick", "wireguard-go", "ping", "nsenter", "python3")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or any(shutil.which(t) is None for t in TOOLS) or not Path("/dev/net/tun").exists(),
        reason=f"needs root, /dev/net/tun and {', '.join(TOOLS)}",
    ),
]

UNDERLAY_MTU, SHRUNK_UNDERLAY, TUNNEL_MTU = 1460, 1400, 1400
GW_A, GW_B = "203.0.113.1", "203.0.113.6"  # the gateways' public addresses; mid is .2 and .5
HOST_A, HOST_B = "10.10.1.5", "10.100.1.7"
SIZE = 20 * 1024 * 1024
# The largest inner packet that crosses a 1400-byte path: WireGuard pads its plaintext to a multiple of 16 and adds
# 60 bytes (IPv4, UDP, its header and tag), so 1336 would leave as 1344 + 60 = 1404; 1328 leaves as 1388.
HEALED = 1328
TIMESTAMPS = 12  # TCP_MAXSEG is the MSS less the timestamp option Linux sends (net.ipv4.tcp_timestamps = 1)
HOLDER = "mount -t tmpfs -o mode=0755 pmtu-test-run /run && mkdir -p /run/wireguard && echo ready && exec sleep 600"

# Receives one stream; prints whether it completed, its size, the longest gap between arrivals, its SHA-256 and
# the connection's MSS.
SERVER = """
import hashlib, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 5001)); s.listen(1)
print("listening", flush=True)
conn, _ = s.accept(); conn.settimeout(float(sys.argv[1]))
digest, total, last, gap = hashlib.sha256(), 0, time.monotonic(), 0.0
try:
    while chunk := conn.recv(65536):
        now = time.monotonic(); gap = max(gap, now - last); last = now
        digest.update(chunk); total += len(chunk)
    done = "complete"
except socket.timeout:
    done = "stalled"; gap = max(gap, time.monotonic() - last)
mss = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
print(done, total, round(gap, 2), digest.hexdigest(), mss, flush=True)
"""
# Sends the file paced over about `seconds`, so the path can change while it flows.
CLIENT = """
import socket, sys, time
data = open(sys.argv[2], "rb").read(); chunk = len(data) // 100
c = socket.create_connection((sys.argv[1], 5001), timeout=30)
for i in range(0, len(data), chunk):
    c.sendall(data[i:i + chunk]); time.sleep(float(sys.argv[3]) / 100)
c.shutdown(socket.SHUT_WR)
"""


def run(argv: Sequence[str], check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C",
           "WG_QUICK_USERSPACE_IMPLEMENTATION": "wireguard-go"}  # fmt: skip
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check, env=env)


@dataclass
class Lab:
    names: dict[str, str]  # role -> netns name
    holders: dict[str, int]  # gateway role -> holder pid
    plans: dict[str, InterfacePlan] = field(default_factory=dict)  # gateway role -> its interface plan

    def ns(self, role: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if role in self.holders:
            return run(["nsenter", f"--target={self.holders[role]}", "--mount", "--net", "--", *argv], check=check)
        return run(["ip", "netns", "exec", self.names[role], *argv], check=check)

    def runner(self, role: str) -> Runner:
        def runner(argv: Sequence[str]) -> tuple[int, str]:
            done = run(["nsenter", f"--target={self.holders[role]}", "--net", "--", *argv], check=False)
            return done.returncode, done.stdout

        return runner

    def popen(self, role: str, *argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["ip", "netns", "exec", self.names[role], *argv],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip

    def shrink(self, on: bool) -> None:
        """The router's path to each far gateway carries 1400 bytes (on) or its links' 1460 (off)."""
        for peer, dev in ((GW_B, "to-b"), (GW_A, "to-a")):
            mtu = ["mtu", "lock", str(SHRUNK_UNDERLAY)] if on else []
            self.ns("mid", "ip", "route", "replace", f"{peer}/32", "dev", dev, *mtu)


def plan(site: str, address: str, peer: Peer) -> InterfacePlan:
    return InterfacePlan(site, f"{address}/24", 51820, TUNNEL_MTU, TUNNEL_MTU - 40, False, (peer,))


def keypair() -> tuple[str, str]:
    private = run(["wg", "genkey"]).stdout.strip()
    return private, subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True).stdout.strip()


def pids_in(netns: str) -> list[int]:
    """The processes living in a namespace of ours (ip netns pids), found by the namespace's identity."""
    try:
        st = os.stat(f"/run/netns/{netns}")
    except OSError:
        return []
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            own = os.stat(f"/proc/{entry}/ns/net")
            if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
                pids.append(int(entry))
        except OSError:
            continue
    return pids


@pytest.fixture
def lab() -> Iterator[Lab]:
    prefix = f"pmtu-{secrets.token_hex(3)}"
    names = {role: f"{prefix}-{role}" for role in ("ha", "ga", "mid", "gb", "hb")}
    holders: dict[str, int] = {}
    try:
        for name in names.values():
            run(["ip", "netns", "add", name])
            run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])
        for role in ("ga", "gb"):  # a private /run for each gateway's wireguard-go socket
            proc = subprocess.Popen(["ip", "netns", "exec", names[role], "sh", "-c", HOLDER],
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            holders[role] = proc.pid
        lab = Lab(names, holders)
        links = [  # (a, dev in a, address, b, dev in b, address, mtu)
            ("ha", "eth0", f"{HOST_A}/24", "ga", "lan", "10.10.1.1/24", 1500),
            ("ga", "wan", f"{GW_A}/30", "mid", "to-a", "203.0.113.2/30", UNDERLAY_MTU),
            ("gb", "wan", f"{GW_B}/30", "mid", "to-b", "203.0.113.5/30", UNDERLAY_MTU),
            ("hb", "eth0", f"{HOST_B}/24", "gb", "lan", "10.100.1.1/24", 1500),
        ]
        for a, dev_a, addr_a, b, dev_b, addr_b, mtu in links:
            run(["ip", "link", "add", dev_a, "netns", names[a], "mtu", str(mtu), "type", "veth",
                 "peer", "name", dev_b, "netns", names[b], "mtu", str(mtu)])  # fmt: skip
            for role, dev, addr in ((a, dev_a, addr_a), (b, dev_b, addr_b)):
                lab.ns(role, "ip", "address", "add", addr, "dev", dev)
                lab.ns(role, "ip", "link", "set", dev, "up")
        lab.ns("ha", "ip", "route", "add", "default", "via", "10.10.1.1")
        lab.ns("hb", "ip", "route", "add", "default", "via", "10.100.1.1")
        lab.ns("ga", "ip", "route", "add", "default", "via", "203.0.113.2")
        lab.ns("gb", "ip", "route", "add", "default", "via", "203.0.113.5")
        lab.ns("mid", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        for rule in (["FORWARD"], ["OUTPUT"]):  # ICMP "fragmentation needed" never leaves the router
            lab.ns("mid", "iptables", "-A", *rule, "-p", "icmp", "--icmp-type", "fragmentation-needed", "-j", "DROP")
        (priv_a, pub_a), (priv_b, pub_b) = keypair(), keypair()
        peer_b = Peer("site-b", pub_b, ("10.99.0.2/32", "10.100.0.0/16"), f"{GW_B}:51820", 25)
        peer_a = Peer("site-a", pub_a, ("10.99.0.1/32", "10.10.0.0/16"), f"{GW_A}:51820", 25)
        lab.plans = {"ga": plan("site-a", "10.99.0.1", peer_b), "gb": plan("site-b", "10.99.0.2", peer_a)}
        for role, private in (("ga", priv_a), ("gb", priv_b)):
            conf = Path(f"/proc/{holders[role]}/root/run/wg0.conf")
            conf.write_text(wg_quick_conf(lab.plans[role], private))
            conf.chmod(0o600)
            lab.ns(role, "wg-quick", "up", "/run/wg0.conf")
        lab.ns("ha", "ping", "-c", "1", "-W", "5", HOST_B)  # handshake done, both ways routed
        yield lab
    finally:
        pids = [pid for name in names.values() for pid in pids_in(name)] + list(holders.values())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in holders.values():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for name in names.values():
            run(["ip", "netns", "delete", name], check=False)


def start_transfer(lab: Lab, data: Path, stall_timeout: float, seconds: float) -> subprocess.Popen[str]:
    """host-a streams `data` to host-b over about `seconds`; returns the receiver."""
    server = lab.popen("hb", "python3", "-c", SERVER, str(stall_timeout))
    assert server.stdout is not None and server.stdout.readline().strip() == "listening"
    lab.popen("ha", "python3", "-c", CLIENT, HOST_B, str(data), str(seconds))
    return server


def outcome(server: subprocess.Popen[str]) -> tuple[str, int, float, str, int]:
    out, _ = server.communicate(timeout=60)
    state, total, gap, digest, mss = out.split()
    return state, int(total), float(gap), digest, int(mss)


def tick_until(monitors: dict[str, PathMonitor], done: Callable[[], bool], limit: float) -> float:
    """Tick every gateway's monitor (in parallel, back to back) until `done`; seconds it took."""
    start = time.monotonic()
    with ThreadPoolExecutor(len(monitors)) as pool:
        while not done():
            assert time.monotonic() - start < limit, "not detected in time"
            list(pool.map(lambda m: m.tick(time.time()), monitors.values()))
    return time.monotonic() - start


def routes(lab: Lab, role: str) -> str:
    return lab.ns(role, "ip", "-4", "route", "show", "dev", "wg0").stdout


def test_a_black_hole_is_detected_and_healed_and_a_bulk_transfer_survives(lab: Lab, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(os.urandom(SIZE))
    expected = hashlib.sha256(data.read_bytes()).hexdigest()
    full_df = ["ping", "-n", "-c", "1", "-W", "2", "-M", "do", "-s", str(TUNNEL_MTU - 28), HOST_B]
    assert lab.ns("ha", *full_df, check=False).returncode == 0  # healthy: a full-size DF packet crosses
    original = routes(lab, "ga")

    # Without the heal: the probe sees it, the host gets silence, and TCP stalls.
    watch = {role: PathMonitor(lab.plans[role], lab.runner(role), Settings(heal=False)) for role in ("ga", "gb")}
    for monitor in watch.values():
        assert monitor.tick(time.time())[0] == []
    assert 'wgmesh_path_probe_ok{site="site-a",peer_site="site-b",size="full"} 1' in watch["ga"].metrics()
    server = start_transfer(lab, data, stall_timeout=5, seconds=4)
    time.sleep(1)
    lab.shrink(True)
    black_hole = 'wgmesh_path_black_hole{site="site-a",peer_site="site-b"} 1'
    detect_off = tick_until(watch, lambda: black_hole in watch["ga"].metrics(), 20)
    silent = lab.ns("ha", *full_df, check=False)
    state_off, total_off, gap_off, _, mss_off = outcome(server)
    assert silent.returncode != 0 and "Frag needed" not in silent.stdout, silent.stdout
    assert state_off == "stalled" and total_off < SIZE, (state_off, total_off)
    assert mss_off == TUNNEL_MTU - 40 - TIMESTAMPS  # the constant clamp
    assert "mtu" not in routes(lab, "ga")
    text = watch["ga"].metrics()
    assert 'wgmesh_path_probe_ok{site="site-a",peer_site="site-b",size="small"} 1' in text
    assert 'wgmesh_path_probe_ok{site="site-a",peer_site="site-b",size="full"} 0' in text
    assert f'wgmesh_path_mtu_bytes{{site="site-a",peer_site="site-b"}} {HEALED}' in text, text
    lab.shrink(False)
    time.sleep(1)

    # With the heal (the default): the routes to the peer get the path's MTU, the transfer completes.
    heal = {role: PathMonitor(lab.plans[role], lab.runner(role)) for role in ("ga", "gb")}
    for monitor in heal.values():
        assert monitor.tick(time.time())[0] == []
    server = start_transfer(lab, data, stall_timeout=30, seconds=4)
    time.sleep(1)
    lab.shrink(True)
    detect_on = tick_until(heal, lambda: all(f"mtu lock {HEALED}" in routes(lab, gw) for gw in ("ga", "gb")), 20)
    state_on, total_on, gap_on, digest, _ = outcome(server)
    assert (state_on, total_on, digest) == ("complete", SIZE, expected)
    shown = routes(lab, "ga")
    assert f"10.100.0.0/16 scope link mtu lock {HEALED}" in shown, shown
    # host-a learned the path MTU from the gateway's ICMP during the transfer; forgotten, it is told again.
    assert f"mtu {HEALED}" in lab.ns("ha", "ip", "route", "get", HOST_B).stdout
    lab.ns("ha", "ip", "route", "flush", "cache")
    told = lab.ns("ha", *full_df, check=False)
    assert f"Frag needed and DF set (mtu = {HEALED})" in told.stdout and "From 10.10.1.1" in told.stdout, told.stdout
    # A new connection is clamped to the lowered route's MTU by the gateway: it completes even for a host that
    # drops every ICMP "fragmentation needed" (an AWS security group that does not admit it).
    lab.ns("ha", "iptables", "-A", "INPUT", "-p", "icmp", "--icmp-type", "fragmentation-needed", "-j", "DROP")
    lab.ns("ha", "ip", "route", "flush", "cache")
    small = tmp_path / "small"
    small.write_bytes(os.urandom(SIZE // 8))
    state, total, _, digest, mss = outcome(start_transfer(lab, small, stall_timeout=10, seconds=0))
    assert (state, total, digest) == ("complete", SIZE // 8, hashlib.sha256(small.read_bytes()).hexdigest())
    assert mss == HEALED - 40 - TIMESTAMPS
    print(
        f"\ndetection without heal {detect_off:.1f} s, with heal (routes lowered) {detect_on:.1f} s; "
        f"transfer without heal: {state_off} after {total_off} of {SIZE} bytes (no byte for {gap_off:.1f} s); "
        f"with heal: complete, SHA-256 verified, longest stall {gap_on:.1f} s"
    )

    # The path grows back: after M passes of the full size the original routes return.
    lab.shrink(False)
    tick_until(heal, lambda: all("mtu" not in routes(lab, gw) for gw in ("ga", "gb")), 20)
    assert routes(lab, "ga") == original  # exactly as wg-quick made them
    assert 'wgmesh_path_mtu_healed{site="site-a",peer_site="site-b"} 0' in heal["ga"].metrics()
