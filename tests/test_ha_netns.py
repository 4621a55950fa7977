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

from mesh.gateway import ship
from tests.agent_fake import Keys, base_plan, doc_text
from tests.test_agent_netns import Gateway, install, pytestmark  # noqa: F401 (the same root/tool skips)
from tests.test_agent_netns import gateway as gateway  # the fixture
from tests.test_ha_machine import AWS

SNIPPET = """
import json, sys, time
from wgmesh_gateway.agent import Agent, load_config
from wgmesh_gateway.sources import make_source
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
    config = json.loads(ship.agent_config("aws-use1", ship.file_source()))
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
