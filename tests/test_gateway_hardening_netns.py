"""The rendered host rules, run for real in network namespaces (root): a static site's WireGuard port admits only
its peers, and nothing that arrives on wg0 reaches a link-local address such as the metadata server.

Two namespaces joined by a veth pair whose gateway end is named `wg0` (the rules match on the interface name, so
the real WireGuard interface is not needed to test them). Both namespaces are removed by name in `finally`, and the
listener this test starts is stopped by its pid.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.test_render import REPO, fake_public_key
from wg_mesh.plan import render
from wg_mesh.plan.topology import PeerAddress, interface_plan
from wg_mesh.tools.stackfile import load

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("iptables") is None or shutil.which("ip") is None,
        reason="needs root, ip and iptables",
    ),
]

GATEWAY_IP, PEER_IP, STRANGER_IP = "10.9.0.1", "10.9.0.2", "10.9.0.3"
METADATA_IP = "169.254.169.254"
PORT = 51820


def sh(netns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, check=check)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    suffix = secrets.token_hex(3)
    gateway, peer = f"wghard-{suffix}-gw", f"wghard-{suffix}-peer"
    try:
        for ns in (gateway, peer):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            sh(ns, "ip", "link", "set", "lo", "up")
        subprocess.run(
            ["ip", "link", "add", "wg0", "netns", gateway, "type", "veth", "peer", "eth0", "netns", peer], check=True
        )
        sh(gateway, "ip", "address", "add", f"{GATEWAY_IP}/24", "dev", "wg0")
        sh(gateway, "ip", "link", "set", "wg0", "up")
        sh(gateway, "ip", "address", "add", f"{METADATA_IP}/32", "dev", "lo")  # stands in for the metadata server
        for address in (PEER_IP, STRANGER_IP):
            sh(peer, "ip", "address", "add", f"{address}/24", "dev", "eth0")
        sh(peer, "ip", "link", "set", "eth0", "up")
        sh(peer, "ip", "route", "add", f"{METADATA_IP}/32", "via", GATEWAY_IP)
        yield gateway, peer
    finally:
        for ns in (gateway, peer):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)


def static_site_rules() -> list[str]:
    """vps-fra's PostUp iptables commands, rendered with the test peer as one of its peers."""
    cfg = load(REPO / "Pulumi.prod.yaml")
    directory = {s.name: PeerAddress(f"198.51.100.{i + 1}", fake_public_key(s.name)) for i, s in enumerate(cfg.sites)}
    directory["aws-use1"] = PeerAddress(PEER_IP, fake_public_key("aws-use1"))
    plan = interface_plan(cfg, "vps-fra", directory)
    assert plan.listen_port == PORT
    return [rule.command(up=True).replace("%i", "wg0") for rule in render.forwarding_rules(plan)]


LISTENER = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", {PORT}))
s.settimeout(3)
seen = set()
try:
    while True:
        seen.add(s.recvfrom(100)[1][0])
except socket.timeout:
    pass
print(" ".join(sorted(seen)))
"""
SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0))
s.sendto(b"x", (sys.argv[2], int(sys.argv[3])))
"""


def received_from(gateway: str, peer: str) -> set[str]:
    listener = subprocess.Popen(
        ["ip", "netns", "exec", gateway, "python3", "-c", LISTENER], stdout=subprocess.PIPE, text=True
    )
    try:
        wait = f"for i in $(seq 50); do ss -lun | grep -q :{PORT} && exit 0; sleep 0.1; done; exit 1"
        sh(gateway, "sh", "-c", wait)
        for source in (PEER_IP, STRANGER_IP):
            sh(peer, "python3", "-c", SENDER, source, GATEWAY_IP, str(PORT))
        out, _ = listener.communicate(timeout=10)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    return set(out.split())


def test_the_rendered_rules_admit_only_peers_and_keep_the_metadata_address_out_of_reach(
    namespaces: tuple[str, str],
) -> None:
    gateway, peer = namespaces
    # Control: without the rules, both senders and the "metadata server" are reachable through wg0.
    assert received_from(gateway, peer) == {PEER_IP, STRANGER_IP}
    assert sh(peer, "ping", "-c", "1", "-W", "1", METADATA_IP, check=False).returncode == 0

    for command in static_site_rules():
        sh(gateway, *command.split())
    assert received_from(gateway, peer) == {PEER_IP}
    assert sh(peer, "ping", "-c", "1", "-W", "1", METADATA_IP, check=False).returncode != 0
    # The gateway itself still reaches its metadata address, and the peer still reaches the gateway.
    assert sh(gateway, "ping", "-c", "1", "-W", "1", METADATA_IP, check=False).returncode == 0
    assert sh(peer, "ping", "-c", "1", "-W", "1", GATEWAY_IP, check=False).returncode == 0
