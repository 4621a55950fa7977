"""The agent on a real WireGuard interface (root): wireguard-go in a network namespace, brought up by wg-quick from
what the agent wrote, then changed by the agent alone (peers, routes, MTU, MSS rules, key rotation, a refused
document) without restarting wireguard-go.

The gateway is a network namespace plus a private mount namespace (a fresh /run for wireguard-go's socket,
copy-on-write /etc, /usr/local and /var/lib), so the shipped package runs exactly as on a gateway: Debian's python3,
`python3 -m wgmesh_gateway.agent --config /etc/wg-mesh/agent.json`, default paths. Teardown in `finally`: the
processes in our namespace by pid, the holder by pid, the namespace by name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.agent_fake import TRUST_JSON, Keys, base_plan, doc_text, with_mtu, with_peer, without_peer
from wg_mesh.gateway import ship
from wg_mesh.gateway.wgconf import WG_CONF_PATH, wg_quick_conf
from wg_mesh.lab.fabric.netns import pids_in_netns, proc_start_time

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "wg", "wg-quick", "wireguard-go", "nsenter")),
        reason="needs root, ip, wg, wg-quick, wireguard-go and nsenter",
    ),
]

HOLDER = """set -e
mount -t tmpfs -o mode=0755,size=16m wg-agent-test-run /run
mkdir -p /run/wireguard
for dir in /etc /usr/local /var/lib; do
  layer=/run/.layer$(echo "$dir" | tr / -)
  mkdir -p "$layer/upper" "$layer/work"
  mount -t overlay -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" wg-agent-test "$dir"
done
echo ready
exec sleep infinity
"""
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


class Gateway:
    def __init__(self, netns: str, holder: int) -> None:
        self.netns, self.holder = netns, holder

    def path(self, inside: str) -> Path:
        return Path(f"/proc/{self.holder}/root") / inside.lstrip("/")

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        full = ["nsenter", f"--target={self.holder}", "--mount", "--net", "--", "env", *argv]
        done = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=ENV, check=False)
        if check and done.returncode:
            raise AssertionError(f"{argv}: {done.returncode}\n{done.stdout}{done.stderr}")
        return done

    def agent(self, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [f"PYTHONPATH={ship.LIB_DIR}", "/usr/bin/python3", "-m", f"{ship.PACKAGE}.agent"]
        return self.run(*argv, "--config", ship.CONFIG_PATH, "--once", *extra, check=False)

    def write(self, inside: str, text: str, mode: int = 0o644) -> None:
        target = self.path(inside)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)

    def wireguard_go(self) -> list[tuple[int, int | None]]:
        """(pid, start time) of the wireguard-go processes in our own namespace."""
        pids = [p for p in pids_in_netns(self.netns) if Path(f"/proc/{p}/comm").read_text().strip() == "wireguard-go"]
        return [(p, proc_start_time(p)) for p in pids]


def stop(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    netns = f"wgagent-{secrets.token_hex(3)}"
    holder: subprocess.Popen[str] | None = None
    try:
        subprocess.run(["ip", "netns", "add", netns], check=True)
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        holder = subprocess.Popen(
            ["ip", "netns", "exec", netns, "sh", "-c", HOLDER],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        yield Gateway(netns, holder.pid)
    finally:
        stop([p for p in pids_in_netns(netns) if holder is None or p != holder.pid])
        if holder is not None:
            holder.kill()
            holder.wait(timeout=10)
        subprocess.run(["ip", "netns", "delete", netns], capture_output=True, check=False)


def install(gw: Gateway, document: str, private_key: str, trust: dict[str, Any] | None = None) -> None:
    """The package, agent.json (`trust`: its trust object, tests/agent_fake.TRUST_JSON unless given), the document
    and the private key, where a static site's agent reads them."""
    for path, text, _mode in ship.package_files("file"):
        gw.write(path, text)
    gw.write(ship.CONFIG_PATH, ship.agent_config("aws-use1", ship.file_source(), trust=trust or TRUST_JSON))
    gw.write(ship.DOCUMENT_PATH, document)
    gw.write(ship.PRIVATE_KEY_PATH, private_key + "\n", 0o600)


def test_the_agent_changes_a_running_wireguard_go_without_restarting_it(gateway: Gateway) -> None:
    gw, keys = gateway, Keys()
    first = base_plan()
    install(gw, doc_text(first, keys), keys.private)
    done = gw.agent()
    assert done.returncode == 0, done.stderr
    assert gw.run("ip", "link", "show", "wg0", check=False).returncode != 0  # files only: wg0 is not up yet
    gw.run("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", "wg-quick", "up", "wg0")
    (go,) = gw.wireguard_go()

    changed = with_mtu(without_peer(with_peer(first, "site-c", "10.77.0.0/16"), "gcp-euw3"), 1380)
    gw.write(ship.DOCUMENT_PATH, doc_text(changed, keys))
    done = gw.agent()
    assert done.returncode == 0, done.stderr
    assert gw.wireguard_go() == [go]
    assert set(gw.run("wg", "show", "wg0", "peers").stdout.split()) == {p.public_key for p in changed.peers}
    routes = gw.run("ip", "-4", "route", "show", "dev", "wg0").stdout
    assert "10.77.0.0/16" in routes and "10.100.0.0/16" not in routes and "192.168.50.0/24" in routes
    assert " mtu 1380 " in gw.run("ip", "-o", "link", "show", "dev", "wg0").stdout
    mangle = gw.run("iptables", "-t", "mangle", "-S", "FORWARD").stdout
    assert mangle.count("--set-mss 1340") == 2 and f"--set-mss {first.mss}" not in mangle
    conf = gw.path(WG_CONF_PATH)
    assert conf.stat().st_mode & 0o777 == 0o600
    assert conf.read_text() == wg_quick_conf(changed, keys.private)
    assert keys.private not in done.stderr + done.stdout

    again = gw.agent()  # the same document: nothing to do, nothing logged
    assert again.returncode == 0 and "applied" not in again.stderr, again.stderr

    gw.run("wg", "set", "wg0", "peer", changed.peers[0].public_key, "remove")  # drift: by hand,
    gw.run("iptables", "-t", "mangle", "-F", "FORWARD")  # and a firewall reload
    assert gw.agent().returncode == 0
    assert set(gw.run("wg", "show", "wg0", "peers").stdout.split()) == {p.public_key for p in changed.peers}
    assert gw.run("iptables", "-t", "mangle", "-S", "FORWARD").stdout.count("--set-mss 1340") == 2
    assert "10.77.0.0/16" in gw.run("ip", "-4", "route", "show", "dev", "wg0").stdout

    new = Keys()  # rotation: the document first, the store later
    gw.write(ship.DOCUMENT_PATH, doc_text(changed, new))
    refused = gw.agent("--timeout", "0")
    assert refused.returncode == 1 and "refused (key)" in refused.stderr
    assert gw.run("wg", "show", "wg0", "public-key").stdout.strip() == keys.public
    gw.write(ship.PRIVATE_KEY_PATH, new.private + "\n", 0o600)
    assert gw.agent().returncode == 0
    assert gw.run("wg", "show", "wg0", "public-key").stdout.strip() == new.public
    assert conf.read_text() == wg_quick_conf(changed, new.private)

    gw.write(ship.DOCUMENT_PATH, "{corrupt")
    assert gw.agent("--timeout", "0").returncode == 1
    assert conf.read_text() == wg_quick_conf(changed, new.private)
    prom = gw.path("/var/lib/prometheus/node-exporter/wg_mesh_agent.prom").read_text()
    assert 'wgmesh_agent_apply_failures_total{site="aws-use1",reason="parse"} 1' in prom
    assert gw.wireguard_go() == [go]
    for text in (refused.stderr, prom, gw.path("/etc/wg-mesh/peers.json").read_text()):
        assert keys.private not in text and new.private not in text


def test_the_daemon_follows_the_document(gateway: Gateway, tmp_path: Path) -> None:
    """The service's own loop (no --once): a changed file source is applied within a poll interval."""
    gw, keys = gateway, Keys()
    install(gw, doc_text(base_plan(), keys), keys.private)
    gw.write(ship.CONFIG_PATH, ship.agent_config("aws-use1", ship.file_source(), poll_seconds=1, trust=TRUST_JSON))
    assert gw.agent().returncode == 0
    gw.run("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", "wg-quick", "up", "wg0")
    argv = [
        f"PYTHONPATH={ship.LIB_DIR}",
        "/usr/bin/python3",
        "-m",
        f"{ship.PACKAGE}.agent",
        "--config",
        ship.CONFIG_PATH,
    ]
    nsenter = ["nsenter", f"--target={gw.holder}", "--mount", "--net", "--", "env", *argv]
    log = tmp_path / "agent.log"
    with log.open("w") as sink:
        daemon = subprocess.Popen(nsenter, stdout=sink, stderr=subprocess.STDOUT, text=True, env=ENV)
    try:
        added = with_peer(base_plan(), "site-c", "10.77.0.0/16")
        gw.write(ship.DOCUMENT_PATH, doc_text(added, keys))
        deadline = time.monotonic() + 15
        # the log line follows the routes and peers it reports: wait for all three (a slow machine shows the gap)
        while not (
            "10.77.0.0/16" in gw.run("ip", "-4", "route", "show", "dev", "wg0").stdout
            and "applied generation" in log.read_text()
        ):
            assert time.monotonic() < deadline, f"the daemon did not apply the new document: {log.read_text()}"
            time.sleep(0.2)
        assert added.peers[-1].public_key in gw.run("wg", "show", "wg0", "peers").stdout
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
    assert keys.private not in log.read_text()
