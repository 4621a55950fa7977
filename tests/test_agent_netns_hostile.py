"""Hostile input against the real agent on a real wg0 (root; issue 20 items 4 and 7): wireguard-go in a network and
mount namespace (the harness of tests/test_agent_netns.py), the shipped package run by Debian's python3.

`host_snapshot` is what a gateway is: every iptables table (iptables-save, without its comments and counters),
`ip -d link/addr/route` in the namespace, `wg show wg0 dump` without the private key, handshakes and byte counters,
and the SHA-256 and mode of every file under /etc/wireguard, /etc/wg-mesh and /var/lib/wg-mesh. Each test asserts
the snapshot is byte-identical after the agent ran on what it had to refuse, or after an apply failed halfway and
was rolled back (an `iptables` that fails on its Nth change, early on the PATH in the namespace's own /usr/local).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import time
from typing import Any

import pytest

from tests import hostile_documents as hostile
from tests.agent_fake import TRUST_JSON, Keys, base_plan, doc_text, sign, with_mtu, with_peer, without_peer
from tests.test_agent_netns import Gateway, gateway, install
from wg_mesh.gateway import ship
from wg_mesh.gateway.wgconf import InterfacePlan, Peer

pytestmark = [pytest.mark.integration]
__all__ = ["gateway"]  # the fixture, re-used

MASQUERADING = TRUST_JSON | {"masquerade": True}  # first_plan masquerades: agent.json must allow it
WATCHED = ("/etc/wireguard", "/etc/wg-mesh", "/var/lib/wg-mesh")
SHIM = """#!/bin/sh
# tests/test_agent_netns_hostile.py: the real iptables, but the Nth call that changes a rule fails
case " $* " in *" -C "*|*" -S "*) exec /usr/sbin/iptables "$@";; esac
n=$(( $(cat /run/shim-count 2>/dev/null || echo 0) + 1 ))
echo "$n" > /run/shim-count
if [ "$n" = "$(cat /run/shim-fail 2>/dev/null)" ]; then echo "shim: injected failure $n" >&2; exit 4; fi
exec /usr/sbin/iptables "$@"
"""


def host_snapshot(gw: Gateway) -> dict[str, str]:
    saved = gw.run("iptables-save").stdout
    snap = {"iptables": "\n".join(re.sub(r"\[\d+:\d+\]", "[]", line) for line in saved.splitlines() if line[:1] != "#")}
    for what in ("link", "addr", "route"):
        snap[f"ip {what}"] = gw.run("ip", "-d", what, "show", *(["table", "all"] if what == "route" else [])).stdout
    dump = gw.run("wg", "show", "wg0", "dump").stdout.splitlines()
    peers = []
    for line in dump[1:]:
        key, psk, endpoint, allowed, _handshake, _rx, _tx, keepalive = line.split("\t")
        peers.append("\t".join([key, psk, endpoint, ",".join(sorted(allowed.split(","))), keepalive]))
    snap["wg"] = "\n".join([dump[0].split("\t", 1)[1], *sorted(peers)])  # the private key field dropped unread
    for top in WATCHED:
        listing = gw.run("find", top, "-type", "f", "-printf", "%p %m\n", check=False).stdout
        for entry in sorted(listing.splitlines()):
            path, mode = entry.rsplit(" ", 1)
            if path == ship.DOCUMENT_PATH:  # the input itself (a static site's document file)
                continue
            snap[path] = f"{mode} {hashlib.sha256(gw.path(path).read_bytes()).hexdigest()}"
        snap[f"{top} (symlinks)"] = gw.run("find", top, "-type", "l", check=False).stdout
    return snap


def changes(before: dict[str, str], after: dict[str, str]) -> str:
    """What differs between two snapshots, as unified diffs (empty: nothing)."""
    out = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            old, new = (before.get(key, "").splitlines(), after.get(key, "").splitlines())
            out += [f"--- {key}", *difflib.unified_diff(old, new, lineterm="", n=0)]
    return "\n".join(out)


def first_plan() -> InterfacePlan:
    """The base plan with masquerade and a private-path peer whose endpoint needs a host route via eth0."""
    plan = base_plan()
    path = Peer("dc-par", Keys().public, ("10.200.0.7/32", "172.20.0.0/16"), "172.20.0.5:51820", 25)
    slow = dataclasses.replace(plan.peers[1], mtu=plan.mtu - 40)
    return dataclasses.replace(plan, masquerade=True, peers=(plan.peers[0], slow, path))


def booted(
    gw: Gateway, document: str, private_key: str, trust: dict[str, Any] | None = None, masquerade: bool = True
) -> None:
    """A gateway with a default route (eth0 of a veth pair), the agent's first run, wg-quick up, one more run.
    `trust`: agent.json's (TRUST_JSON, allowing first_plan's masquerade, unless given)."""
    for argv in (
        # no IPv6 in the namespace: a new link's link-local address goes from `tentative` to valid (DAD) a moment
        # later, which the snapshot would see as a change that no agent made (the agent is IPv4 only)
        ("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"),
        ("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"),
        ("ip", "link", "set", "eth0-peer", "up"),
        ("ip", "link", "set", "eth0", "up"),
        ("ip", "address", "add", "10.0.0.5/24", "dev", "eth0"),
        ("ip", "route", "add", "default", "via", "10.0.0.1", "dev", "eth0"),
    ):
        gw.run(*argv)
    install(gw, document, private_key, trust or MASQUERADING)
    first = gw.agent()
    assert first.returncode == 0, first.stderr
    gw.run("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", "wg-quick", "up", "wg0")
    done = gw.agent()
    assert done.returncode == 0, done.stderr
    if masquerade:
        assert "-o eth0 -j MASQUERADE" in gw.run("iptables", "-t", "nat", "-S", "POSTROUTING").stdout
        assert "172.20.0.5 via 10.0.0.1 dev eth0" in gw.run("ip", "-4", "route", "show").stdout


# One document per refusal reason of tests/hostile_documents.py, and the attacks issue 20 names: each one costs an
# agent run on the real host (~1 s), so the whole corpus (160 documents) runs on the pretend gateway instead
# (tests/test_document_hostile.py) and here the classes that reach the host.
ON_THE_REAL_HOST = (
    "name with a newline and an [Interface] PostUp",
    "name with U+2028 (str.splitlines breaks, wg-quick not)",
    "injection in AllowedIPs",
    "a PostUp field in the interface",
    "AllowedIPs 0.0.0.0/0",
    "both halves of the default route on two peers",
    "AllowedIPs 169.254.169.254/32",
    "AllowedIPs 10.10.0.0/16",
    "another peer's prefix",
    "address of the metadata server",
    "masquerade turned on",
    "port ² (a digit to str.isdigit, not to int)",
    "interface.mtu 100000",
    "no peers",
    "100,000-deep nesting",
    "300 KiB document",
    "signed by another key",
    "unsigned: the body alone",
    "format v1 (signed)",
    "wrong site",
    "wrong scope",
    "older serial",
    "expired a second ago",
    "equal serial with other content",
    "generation damaged",
    # issue 33 item 6
    "listen source a peer's /32 on a cloud gateway",
    "endpoint this site's own public address",
    "endpoint in this site's own range",
    "endpoint another peer's",
)


def test_hostile_documents_leave_the_host_byte_identical(gateway: Gateway) -> None:
    """The gateway runs hostile_documents.base (its serial, its key, agent.json's TRUST), then refuses each chosen
    document of the corpus with its reason and changes nothing: not wg0, not a route, not a rule, not a file."""
    gw = gateway
    chosen = {c.name: c for c in hostile.cases(sign)}
    assert {c.reason for c in chosen.values()} <= {chosen[n].reason for n in ON_THE_REAL_HOST}  # every reason
    booted(gw, hostile.base(sign), hostile.PRIVATE_KEY, TRUST_JSON, masquerade=False)
    before = host_snapshot(gw)
    for name in ON_THE_REAL_HOST:
        case = chosen[name]
        gw.path(ship.DOCUMENT_PATH).write_bytes(case.text if isinstance(case.text, bytes) else case.text.encode())
        done = gw.agent("--timeout", "0")
        assert done.returncode == 1 and f"refused ({case.reason})" in done.stderr, (name, done.stderr[-400:])
        assert "Traceback" not in done.stderr and hostile.PRIVATE_KEY not in done.stderr, name
        assert not changes(before, host_snapshot(gw)), (name, changes(before, host_snapshot(gw)))
    assert gw.run("sh", "-c", "ls /tmp/wg-mesh-pwned", check=False).returncode != 0


def test_own_key_rotation_never_gives_a_peer_the_running_key(gateway: Gateway) -> None:
    """Issue 33 item 3 on the real host: the store holds the new key K2, and a signed document announces K2 for ten
    minutes ahead (or at once) while giving a peer the running key K1. Main set K2 at once and let K1 in as that
    peer; the agent refuses it (unsafe): wg0, its key, its files, its rules, byte-identical."""
    gw, new = gateway, Keys()
    booted(gw, hostile.base(sign), hostile.PRIVATE_KEY, TRUST_JSON, masquerade=False)
    gw.write("/etc/wg-mesh/private.key", new.private + "\n", 0o600)  # the store's key: the input, like the document
    before = host_snapshot(gw)
    for key_at in (int(time.time()) + 600, None):
        gw.write(ship.DOCUMENT_PATH, hostile.own_key_as_peer(sign, new.public, key_at))
        done = gw.agent("--timeout", "0")
        assert done.returncode == 1 and "refused (unsafe)" in done.stderr, done.stderr[-400:]
        assert "own public key" in done.stderr and new.private not in done.stderr
        assert not changes(before, host_snapshot(gw)), changes(before, host_snapshot(gw))
    assert gw.run("wg", "show", "wg0", "public-key").stdout.strip() == hostile.PUBLIC_KEY


def test_a_planted_post_down_does_not_run(gateway: Gateway) -> None:
    """wg0.conf with a PostDown and a PostUp added by someone else, and a state file from before that names hooks:
    the next document is applied from typed values, and neither runs."""
    gw, keys = gateway, Keys()
    booted(gw, doc_text(first_plan(), keys), keys.private)
    conf = gw.path("/etc/wireguard/wg0.conf")
    planted = "PostDown = touch /root/pwned-down\nPostUp = touch /root/pwned-up\n"
    conf.write_text(conf.read_text().replace("\n[Peer]", f"\n{planted}[Peer]", 1))
    state = json.loads(gw.path("/var/lib/wg-mesh/agent-state.json").read_text())  # its floor stays readable
    gw.write("/var/lib/wg-mesh/agent-state.json", json.dumps(state | {"hooks": [["touch /root/a"], ["touch /root/b"]]}))
    gw.write(ship.DOCUMENT_PATH, doc_text(with_mtu(first_plan(), 1380), keys))
    done = gw.agent()
    assert done.returncode == 0, done.stderr
    assert gw.run("sh", "-c", "ls /root/pwned-* /root/a /root/b", check=False).returncode != 0
    assert "pwned" not in conf.read_text()


@pytest.mark.parametrize("nth", [1, 2, 5])
def test_a_failed_iptables_change_rolls_the_real_host_back(gateway: Gateway, nth: int) -> None:
    gw, keys = gateway, Keys()
    booted(gw, doc_text(first_plan(), keys), keys.private)
    gw.write("/usr/local/sbin/iptables", SHIM, 0o755)
    gw.write("/run/shim-fail", f"{nth}\n")
    before = host_snapshot(gw)
    changed = with_mtu(without_peer(with_peer(first_plan(), "site-c", "10.77.0.0/16"), "gcp-euw3"), 1380)
    changed = dataclasses.replace(changed, masquerade=False)  # the address is agent.json's (trust.address)
    gw.write(ship.DOCUMENT_PATH, doc_text(changed, keys))
    done = gw.agent("--timeout", "0")
    assert done.returncode == 1, done.stderr
    assert "rolled back to generation" in done.stderr and "step rules failed" in done.stderr, done.stderr
    assert "shim: injected failure" in done.stderr
    assert not changes(before, host_snapshot(gw))
    prom = gw.path("/var/lib/prometheus/node-exporter/wg_mesh_agent.prom").read_text()
    assert 'wgmesh_agent_rollbacks_total{site="aws-use1",step="rules"} 1' in prom
    assert 'wgmesh_agent_rollback_failures_total{site="aws-use1"} 0' in prom

    gw.write("/run/shim-fail", "0\n")  # iptables works again: the same document goes on whole
    assert gw.agent().returncode == 0
    after = host_snapshot(gw)
    assert after != before
    assert "MASQUERADE" not in gw.run("iptables", "-t", "nat", "-S", "POSTROUTING").stdout
    assert "10.77.0.0/16" in after["ip route"] and "mtu 1380" in after["ip link"]
