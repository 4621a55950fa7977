"""An HA gateway's wg0 on a real wireguard-go (root, a network namespace, the shipped package under Debian's
python3): the first boot renders the standby role (peers without endpoint or keepalive), promotion and demotion
change the running interface through the agent's applier without restarting wireguard-go (demotion really clears the
endpoints: `wg syncconf` alone would keep them), and the health check sees a SIGSTOPped wireguard-go within its
1 s timeout (docs/ha.md sections 3 and 4)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.agent_fake import TRUST_JSON, Keys, base_plan, doc_text
from tests.test_agent_netns import Gateway, install, pytestmark  # noqa: F401 (the same root/tool skips)
from tests.test_agent_netns import gateway as gateway  # the fixture
from tests.test_ha_machine import AWS
from wg_mesh.gateway import ship
from wg_mesh.gateway.pmtu_heal import overlay_address

SNIPPET = """
import json, sys, time
from wgmesh_gateway.agent import Agent, load_config, make_source
from wgmesh_gateway.ha_health import LocalChecks
if sys.argv[1:] == ["check"]:  # the health sample alone (a document cycle would wait on a hung wg for 30 s)
    started = time.monotonic()
    print(json.dumps([LocalChecks(lambda: True).sample(), round(time.monotonic() - started, 2)]))
    sys.exit(0)
config = load_config(open("/etc/wg-mesh/agent.json").read())
agent = Agent(config, make_source(config.source), log=lambda m: None)
assert agent.cycle()
for role in sys.argv[1:]:
    agent.set_role(role)
"""


def endpoints(gw: Gateway) -> dict[str, str]:
    return dict(line.split("\t") for line in gw.run("wg", "show", "wg0", "endpoints").stdout.splitlines())


def keepalives(gw: Gateway) -> set[str]:
    return {line.split("\t")[1] for line in gw.run("wg", "show", "wg0", "persistent-keepalive").stdout.splitlines()}


def agent(gw: Gateway, *roles: str) -> str:
    gw.write("/root/ha_snippet.py", SNIPPET)
    done = gw.run(f"PYTHONPATH={ship.LIB_DIR}", "/usr/bin/python3", "/root/ha_snippet.py", *roles, timeout=30)
    return done.stdout


@pytest.fixture
def standby(gateway: Gateway) -> Iterator[Gateway]:
    keys = Keys()
    install(gateway, doc_text(base_plan(), keys), keys.private)
    config = json.loads(ship.agent_config("aws-use1", ship.file_source(), trust=TRUST_JSON))
    gateway.write(ship.CONFIG_PATH, json.dumps({**config, "ha": AWS}))
    done = gateway.agent()
    assert done.returncode == 0, done.stderr
    gateway.run("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", "wg-quick", "up", "wg0")
    yield gateway


def test_first_boot_is_standby_then_promotion_and_demotion_change_the_running_wg0(standby: Gateway) -> None:
    gw = standby
    (go,) = gw.wireguard_go()
    peers = {p.public_key: p for p in base_plan().peers}
    assert set(endpoints(gw)) == set(peers) and set(endpoints(gw).values()) == {"(none)"}
    assert keepalives(gw) == {"off"}

    agent(gw, "active")
    assert endpoints(gw) == {k: p.endpoint for k, p in peers.items()}
    assert keepalives(gw) == {str(p.persistent_keepalive) for p in peers.values()}

    agent(gw, "standby")
    assert set(endpoints(gw)) == set(peers) and set(endpoints(gw).values()) == {"(none)"}
    assert keepalives(gw) == {"off"}
    assert "10.100.0.0/16" in gw.run("ip", "-4", "route", "show", "dev", "wg0").stdout  # routes stay
    assert gw.wireguard_go() == [go]


def test_health_check_sees_a_hung_wireguard_go(standby: Gateway) -> None:
    gw = standby
    ((go, _),) = gw.wireguard_go()
    failed, took = json.loads(agent(gw, "check"))
    assert failed == "" and took < 1
    os.kill(go, signal.SIGSTOP)
    try:
        started = time.monotonic()
        failed, took = json.loads(agent(gw, "check"))
        assert failed == "wg hung (no answer in 1 s)", failed
        assert 0.9 <= took < 2.0 and time.monotonic() - started < 20
    finally:
        os.kill(go, signal.SIGCONT)
    gw.run("sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
    assert json.loads(agent(gw, "check"))[0] == "forwarding off"
    gw.run("ip", "link", "set", "wg0", "down")
    assert json.loads(agent(gw, "check"))[0] == "wg0 down"


KICK = """
import json, subprocess, sys
from wgmesh_gateway.agent import Agent, load_config, make_source
config = load_config(open("/etc/wg-mesh/agent.json").read())
agent = Agent(config, make_source(config.source), log=lambda m: None)
assert agent.cycle()
tried, untried, address = sys.argv[1:]
def tx():
    out = subprocess.run(["wg", "show", "wg0", "transfer"], capture_output=True, text=True).stdout
    return {f[0]: int(f[2]) for f in (line.split("\\t") for line in out.splitlines())}
def ping():
    subprocess.run(["ping", "-n", "-q", "-c", "1", "-W", "1", address], capture_output=True)
ping()  # standby: a packet into wg0 for a peer without endpoint: an initiation attempt that cannot be sent
seen = [tx()]
agent.set_role("active")
ping()  # the promotion's ping
seen.append(tx())
agent.rearm([tried])
ping()
seen.append(tx())
print(json.dumps([[s[tried], s[untried]] for s in seen]))
"""


def test_a_standby_attempt_holds_the_promotions_initiation_back_and_rearm_releases_it(standby: Gateway) -> None:
    """wireguard-go (device/send.go) sends an initiation only 5 s (REKEY_TIMEOUT) after its last attempt for that
    peer, and a packet routed into a standby's wg0 is an attempt (it fails: no endpoint). So the promotion's ping does
    not initiate to that peer (0 bytes sent, an initiation is 148) while it does to a peer never tried; removing and
    re-adding the peer (`Agent.rearm`, the kick of wg_mesh/gateway/ha_kick.py) makes the next one leave at once."""
    gw = standby
    (go,) = gw.wireguard_go()
    for argv in (("link", "add", "v0", "type", "veth", "peer", "name", "v1"), ("link", "set", "v1", "up"),
                 ("address", "add", "192.0.2.1/24", "dev", "v0"), ("link", "set", "v0", "up"),
                 ("route", "add", "default", "dev", "v0")):  # fmt: skip
        gw.run("ip", *argv)  # the endpoints get a route: a sent initiation is counted, then lost
    plan = base_plan()
    tried, untried = plan.peers[0], plan.peers[1]
    gw.write("/root/kick_snippet.py", KICK)
    done = gw.run(
        f"PYTHONPATH={ship.LIB_DIR}", "/usr/bin/python3", "/root/kick_snippet.py",
        tried.public_key, untried.public_key, overlay_address(plan, tried.name), timeout=30,
    )  # fmt: skip
    standby_tx, promoted_tx, rearmed_tx = json.loads(done.stdout)
    assert standby_tx == [0, 0]
    assert promoted_tx == [0, 148]  # the untried peer initiated (the keepalive `wg syncconf` queues), the tried not
    assert rearmed_tx == [148, 148]  # re-armed: a new peer, its first initiation sent at once
    assert gw.wireguard_go() == [go]
