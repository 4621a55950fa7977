"""The INPUT policy on real kernels (root): the rendered rules, loaded by the unit's own commands, in a gateway
namespace with a real wg0 (wireguard-go, the generated wg0.conf and its forwarding rules).

    site (10.100.0.0/16 hosts, the HA partner, a Prometheus, IAP and prober stand-ins) -- gw (wg0 100.96.0.1)
        -- underlay -- rgw (wg0 100.96.0.2) -- remote (10.20.0.5, a remote Prometheus 10.20.9.9)

The policy is gcp-euw3's of Pulumi.ha.yaml (gateways: 2: /healthz, IAP SSH) with monitoring_cidrs added. The control
run (no policy) reaches every port from everywhere, so each "blocked" below can fail; then wg0 goes down, the policy is
loaded (twice: a restart neither duplicates nor changes it), a site host is refused while wg0 does not exist, wg0
comes back up (a new handshake under the policy) and every admission and refusal is checked, with forwarding both ways.
Cleanup as in tests/test_pmtu_netns.py: the processes in our namespaces by pid, then the namespaces by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

import pytest

from tests.test_pmtu_netns import HOLDER, keypair, pids_in, run
from wg_mesh.gateway.wgconf import InterfacePlan, Peer, wg_quick_conf
from wg_mesh.plan import inputpolicy
from wg_mesh.tools.stackfile import load

TOOLS = ("ip", "iptables", "iptables-restore", "ip6tables-restore", "wg", "wg-quick", "wireguard-go", "nsenter")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or any(shutil.which(t) is None for t in TOOLS) or not Path("/dev/net/tun").exists(),
        reason=f"needs root, /dev/net/tun and {', '.join(TOOLS)}",
    ),
]
REPO = Path(__file__).resolve().parent.parent
GW_LAN, PARTNER, PROMETHEUS, HOST = "10.100.0.10", "10.100.0.11", "10.100.5.5", "10.100.7.5"
IAP, PROBER = "35.235.240.5", "35.191.0.5"
REMOTE, REMOTE_PROMETHEUS, OVERLAY = "10.20.0.5", "10.20.9.9", "100.96.0.1"
PORTS = (22, 9100, 9181)
FORWARDED = 8080
LISTEN = """
import socket, threading
def serve(host, port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen(64)
    while True:
        s.accept()[0].close()
for host, port in {ports}:
    threading.Thread(target=serve, args=(host, port), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
"""
# (source, destination, port) for each line of argv[1] (JSON); prints {"src dst port": connected} as JSON.
PROBE = """
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
def connect(probe):
    src, dst, port = probe
    try:
        socket.create_connection((dst, port), timeout=2, source_address=(src, 0)).close()
        return True
    except OSError:
        return False
probes = json.loads(sys.argv[1])
with ThreadPoolExecutor(len(probes)) as pool:
    print(json.dumps({" ".join(map(str, p)): ok for p, ok in zip(probes, pool.map(connect, probes))}))
"""


@dataclass
class Net:
    names: dict[str, str]
    holders: dict[str, int]

    def ns(self, role: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if role in self.holders:
            return run(["nsenter", f"--target={self.holders[role]}", "--mount", "--net", "--", *argv], check=check)
        return run(["ip", "netns", "exec", self.names[role], *argv], check=check)

    def listen(self, role: str, endpoints: Sequence[tuple[str, int]]) -> None:
        proc = subprocess.Popen(["ip", "netns", "exec", self.names[role], "python3", "-c",
                                 LISTEN.replace("{ports}", repr(list(endpoints)))],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"

    def connects(self, role: str, probes: Sequence[tuple[str, str, int]]) -> dict[str, bool]:
        out = self.ns(role, "python3", "-c", PROBE, json.dumps([list(p) for p in probes])).stdout
        return {key: bool(value) for key, value in json.loads(out).items()}


def policy_text() -> tuple[str, str]:
    cfg = load(REPO / "Pulumi.ha.yaml")
    cfg = cfg.model_copy(update={"monitoring_cidrs": [IPv4Network("10.100.5.0/24"), IPv4Network("10.20.9.0/24")]})
    policy = inputpolicy.policy_for(cfg, "gcp-euw3")
    return inputpolicy.render(policy), inputpolicy.render6(policy)


def unit_commands(rules: str, rules6: str) -> list[list[str]]:
    """The unit's ExecStart lines, with the files where the test put them (its /etc is the host's)."""
    text = inputpolicy.unit_text().replace(inputpolicy.RULES6_PATH, rules6).replace(inputpolicy.RULES_PATH, rules)
    return [shlex.split(line.removeprefix("ExecStart=")) for line in text.splitlines() if line.startswith("ExecStart=")]


@pytest.fixture
def net() -> Iterator[Net]:
    prefix = f"inpol-{secrets.token_hex(3)}"
    names = {role: f"{prefix}-{role}" for role in ("site", "gw", "rgw", "remote")}
    holders: dict[str, int] = {}
    try:
        for name in names.values():
            run(["ip", "netns", "add", name])
            run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])
        for role in ("gw", "rgw"):  # a private /run for each gateway's wireguard-go socket and files
            proc = subprocess.Popen(["ip", "netns", "exec", names[role], "sh", "-c", HOLDER],
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            holders[role] = proc.pid
        net = Net(names, holders)
        links = [
            ("site", "eth0", f"{PARTNER}/16", "gw", "lan", f"{GW_LAN}/16"),
            ("gw", "wan", "203.0.113.1/30", "rgw", "wan", "203.0.113.2/30"),
            ("remote", "eth0", f"{REMOTE}/16", "rgw", "lan", "10.20.0.1/16"),
        ]
        for a, dev_a, addr_a, b, dev_b, addr_b in links:
            run(["ip", "link", "add", dev_a, "netns", names[a], "type", "veth", "peer", "name", dev_b, "netns",
                 names[b]])  # fmt: skip
            for role, dev, addr in ((a, dev_a, addr_a), (b, dev_b, addr_b)):
                net.ns(role, "ip", "address", "add", addr, "dev", dev)
                net.ns(role, "ip", "link", "set", dev, "up")
        for address in (f"{PROMETHEUS}/16", f"{HOST}/16", f"{IAP}/32", f"{PROBER}/32"):
            net.ns("site", "ip", "address", "add", address, "dev", "eth0")
        net.ns("remote", "ip", "address", "add", f"{REMOTE_PROMETHEUS}/16", "dev", "eth0")
        net.ns("site", "ip", "route", "add", "default", "via", GW_LAN)
        net.ns("remote", "ip", "route", "add", "default", "via", "10.20.0.1")
        for cidr in ("35.235.240.0/20", "35.191.0.0/16"):  # Google's ranges, behind the site's router here
            net.ns("gw", "ip", "route", "add", cidr, "via", PARTNER)
        (priv_gw, pub_gw), (priv_rgw, pub_rgw) = keypair(), keypair()
        plans = {
            "gw": InterfacePlan("gcp-euw3", f"{OVERLAY}/24", 51820, 1420, 1380, False,
                                (Peer("remote", pub_rgw, ("100.96.0.2/32", "10.20.0.0/16"), "203.0.113.2:51820", 25),)),
            "rgw": InterfacePlan("remote", "100.96.0.2/24", 51820, 1420, 1380, False,
                                 (Peer("gcp-euw3", pub_gw, (f"{OVERLAY}/32", "10.100.0.0/16"), "203.0.113.1:51820",
                                       25),)),
        }  # fmt: skip
        for role, private in (("gw", priv_gw), ("rgw", priv_rgw)):
            conf = Path(f"/proc/{holders[role]}/root/run/wg0.conf")
            conf.write_text(wg_quick_conf(plans[role], private))
            conf.chmod(0o600)
            net.ns(role, "wg-quick", "up", "/run/wg0.conf")
        net.listen("gw", [("0.0.0.0", port) for port in PORTS])
        net.listen("site", [(HOST, FORWARDED)])
        net.listen("remote", [(REMOTE, FORWARDED)])
        yield net
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


def key(src: str, dst: str, port: int) -> str:
    return f"{src} {dst} {port}"


# (netns, source, destination, port, admitted under the policy)
EXPECTED = [
    *(("remote", REMOTE, dst, port, False) for dst in (GW_LAN, OVERLAY) for port in PORTS),  # nothing from wg0 ...
    ("remote", REMOTE_PROMETHEUS, OVERLAY, 9100, True),  # ... but a Prometheus in monitoring_cidrs, through the mesh
    ("remote", REMOTE_PROMETHEUS, OVERLAY, 22, False),
    ("remote", REMOTE_PROMETHEUS, OVERLAY, 9181, False),
    ("remote", REMOTE, HOST, FORWARDED, True),  # forwarded: not the policy's business
    *(("site", HOST, GW_LAN, port, False) for port in PORTS),  # an ordinary host of the site
    ("site", PARTNER, GW_LAN, 9181, True),  # the HA partner's gateway subnet
    ("site", PARTNER, GW_LAN, 22, False),
    ("site", PARTNER, GW_LAN, 9100, False),
    ("site", PROMETHEUS, GW_LAN, 9100, True),
    ("site", PROMETHEUS, GW_LAN, 22, False),
    ("site", IAP, GW_LAN, 22, True),
    ("site", IAP, GW_LAN, 9100, False),
    ("site", PROBER, GW_LAN, 9181, True),
    ("site", PROBER, GW_LAN, 22, False),
    ("site", HOST, REMOTE, FORWARDED, True),
]


def probe_all(net: Net) -> dict[str, bool]:
    found: dict[str, bool] = {}
    for role in ("remote", "site"):
        found |= net.connects(role, [(src, dst, port) for ns, src, dst, port, _ in EXPECTED if ns == role])
    return found


def test_the_policy_admits_exactly_its_sources_and_forwarding_is_untouched(net: Net, tmp_path: Path) -> None:
    # Control: without the policy everything answers, from the tunnel and from the site alike.
    assert probe_all(net) == {key(src, dst, port): True for _, src, dst, port, _ in EXPECTED}

    net.ns("gw", "wg-quick", "down", "/run/wg0.conf")
    rules, rules6 = policy_text()
    root = Path(f"/proc/{net.holders['gw']}/root/run")
    (root / "input.rules").write_text(rules)
    (root / "input6.rules").write_text(rules6)
    for _ in range(2):  # a restart of the unit: the same chain, one jump
        for argv in unit_commands("/run/input.rules", "/run/input6.rules"):
            net.ns("gw", *argv)
    for tool in ("iptables", "ip6tables"):
        jumps = [line for line in net.ns("gw", tool, "-S", "INPUT").stdout.splitlines() if "WGMESH-INPUT" in line]
        assert jumps == ["-A INPUT -j WGMESH-INPUT"], tool
    chain = net.ns("gw", "iptables", "-S", "WGMESH-INPUT").stdout.splitlines()
    assert chain[-1] == "-A WGMESH-INPUT -j DROP" and len(chain) == len(set(chain))

    # No wg0 at all: the policy already holds.
    assert net.connects("site", [(HOST, GW_LAN, 22)]) == {key(HOST, GW_LAN, 22): False}

    net.ns("gw", "wg-quick", "up", "/run/wg0.conf")  # a fresh handshake, under the policy
    net.ns("remote", "ping", "-c", "1", "-W", "5", HOST)
    net.ns("remote", "ping", "-c", "1", "-W", "5", OVERLAY)  # echo through the tunnel: the agents' probes
    assert probe_all(net) == {key(src, dst, port): admitted for _, src, dst, port, admitted in EXPECTED}
    assert "WGMESH-INPUT" not in net.ns("gw", "iptables", "-S", "FORWARD").stdout
