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
import hashlib
import json
import re
from collections.abc import Callable

import pytest

from tests.agent_fake import Keys, base_plan, doc_text, with_mtu, with_peer, without_peer
from tests.test_agent_netns import Gateway, gateway, install
from wg_mesh.gateway import ship
from wg_mesh.gateway.wgconf import InterfacePlan, Peer

pytestmark = [pytest.mark.integration]
__all__ = ["gateway"]  # the fixture, re-used

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


def first_plan() -> InterfacePlan:
    """The base plan with masquerade and a private-path peer whose endpoint needs a host route via eth0."""
    plan = base_plan()
    path = Peer("dc-par", Keys().public, ("10.200.0.7/32", "172.20.0.0/16"), "172.20.0.5:51820", 25)
    slow = dataclasses.replace(plan.peers[1], mtu=plan.mtu - 40)
    return dataclasses.replace(plan, masquerade=True, peers=(plan.peers[0], slow, path))


def booted(gw: Gateway, keys: Keys) -> None:
    """A gateway with a default route (eth0 of a veth pair), the agent's first run, wg-quick up, one more run."""
    for argv in (
        ("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"),
        ("ip", "link", "set", "eth0-peer", "up"),
        ("ip", "link", "set", "eth0", "up"),
        ("ip", "address", "add", "10.0.0.5/24", "dev", "eth0"),
        ("ip", "route", "add", "default", "via", "10.0.0.1", "dev", "eth0"),
    ):
        gw.run(*argv)
    install(gw, doc_text(first_plan(), keys), keys.private)
    assert gw.agent().returncode == 0
    gw.run("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", "wg-quick", "up", "wg0")
    done = gw.agent()
    assert done.returncode == 0, done.stderr
    assert "-o eth0 -j MASQUERADE" in gw.run("iptables", "-t", "nat", "-S", "POSTROUTING").stdout
    assert "172.20.0.5 via 10.0.0.1 dev eth0" in gw.run("ip", "-4", "route", "show").stdout


def _edited(keys: Keys, edit: Callable[[dict[str, object]], None]) -> str:
    from wg_mesh.gateway.document import generation_of  # today's format (LOCAL_CORPUS)

    body = json.loads(doc_text(first_plan(), keys))
    edit(body)
    body.pop("generation")
    return json.dumps({**body, "generation": generation_of(body)})


def _peer0(field: str, value: object) -> Callable[[dict[str, object]], None]:
    def edit(body: dict[str, object]) -> None:
        body["interface"]["peers"][0][field] = value  # type: ignore[index]

    return edit


def _interface(field: str, value: object) -> Callable[[dict[str, object]], None]:
    def edit(body: dict[str, object]) -> None:
        body["interface"][field] = value  # type: ignore[index]

    return edit


def local_corpus(keys: Keys) -> list[tuple[str, str | bytes]]:
    """LOCAL_CORPUS: a few hostile documents in TODAY's (unsigned, v1) format, each refused by today's agent. Replaced
    by helper A's tests/hostile_documents.py `corpus(sign)` (document v2) when that branch is merged: the
    coordinator switches `documents` below to it."""
    good = doc_text(first_plan(), keys)
    return [
        ("not JSON", "{corrupt"),
        ("not UTF-8", b"\xff\xfe{}"),
        ("another site", good.replace('"site":"aws-use1"', '"site":"gcp-euw3"')),
        ("generation does not match", good.replace('"mtu":1400', '"mtu":1380', 1)),
        ("a key of 3 bytes", _edited(keys, _peer0("public_key", "AAAA"))),
        ("an argument in listen_sources", _edited(keys, _interface("listen_sources", ["1.2.3.4/32 -j ACCEPT"]))),
        ("an MTU of 100", _edited(keys, _interface("mtu", 100))),
        ("no peers", _edited(keys, _interface("peers", []))),
    ]


def documents(keys: Keys) -> list[tuple[str, str | bytes]]:
    return local_corpus(keys)


def test_hostile_documents_leave_the_host_byte_identical(gateway: Gateway) -> None:
    gw, keys = gateway, Keys()
    booted(gw, keys)
    before = host_snapshot(gw)
    assert before["wg"].count("\n") == len(first_plan().peers)
    for name, text in documents(keys):
        target = gw.path(ship.DOCUMENT_PATH)
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
        done = gw.agent("--timeout", "0")
        said = "refused (" in done.stderr or "fetching the peer document failed" in done.stderr
        assert done.returncode == 1 and said and "Traceback" not in done.stderr, (name, done)
        assert host_snapshot(gw) == before, name
        assert keys.private not in done.stderr


def test_a_planted_post_down_does_not_run(gateway: Gateway) -> None:
    """wg0.conf with a PostDown and a PostUp added by someone else, and a state file from before that names hooks:
    the next document is applied from typed values, and neither runs."""
    gw, keys = gateway, Keys()
    booted(gw, keys)
    conf = gw.path("/etc/wireguard/wg0.conf")
    planted = "PostDown = touch /root/pwned-down\nPostUp = touch /root/pwned-up\n"
    conf.write_text(conf.read_text().replace("\n[Peer]", f"\n{planted}[Peer]", 1))
    gw.write("/var/lib/wg-mesh/agent-state.json", json.dumps({"hooks": [["touch /root/a"], ["touch /root/b"]]}))
    gw.write(ship.DOCUMENT_PATH, doc_text(with_mtu(first_plan(), 1380), keys))
    done = gw.agent()
    assert done.returncode == 0, done.stderr
    assert gw.run("sh", "-c", "ls /root/pwned-* /root/a /root/b", check=False).returncode != 0
    assert "pwned" not in conf.read_text()


@pytest.mark.parametrize("nth", [1, 2, 5])
def test_a_failed_iptables_change_rolls_the_real_host_back(gateway: Gateway, nth: int) -> None:
    gw, keys = gateway, Keys()
    booted(gw, keys)
    gw.write("/usr/local/sbin/iptables", SHIM, 0o755)
    gw.write("/run/shim-fail", f"{nth}\n")
    before = host_snapshot(gw)
    changed = with_mtu(without_peer(with_peer(first_plan(), "site-c", "10.77.0.0/16"), "gcp-euw3"), 1380)
    changed = dataclasses.replace(changed, masquerade=False, address="10.200.0.9/24")
    gw.write(ship.DOCUMENT_PATH, doc_text(changed, keys))
    done = gw.agent("--timeout", "0")
    assert done.returncode == 1, done.stderr
    assert "rolled back to generation" in done.stderr and "step rules failed" in done.stderr, done.stderr
    assert "shim: injected failure" in done.stderr
    assert host_snapshot(gw) == before
    prom = gw.path("/var/lib/prometheus/node-exporter/wg_mesh_agent.prom").read_text()
    assert 'wgmesh_agent_rollbacks_total{site="aws-use1",step="rules"} 1' in prom
    assert 'wgmesh_agent_rollback_failures_total{site="aws-use1"} 0' in prom

    gw.write("/run/shim-fail", "0\n")  # iptables works again: the same document goes on whole
    assert gw.agent().returncode == 0
    after = host_snapshot(gw)
    assert after != before
    assert "MASQUERADE" not in gw.run("iptables", "-t", "nat", "-S", "POSTROUTING").stdout
    assert "10.200.0.9/24" in after["ip addr"] and "10.77.0.0/16" in after["ip route"]
