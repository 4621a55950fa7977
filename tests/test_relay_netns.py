"""The relay's own chains for real (root): the shipped agent on the edge example's relay (aws-use1) in a network
namespace with wireguard-go, its wg0 brought up by wg-quick from what the agent wrote. wg-quick's PostUp and the
agent write the same chains (the agent's next run changes nothing: `iptables -S` prints what wgconf.Chain.lines
says), a flushed chain is refilled, new ranges rewrite the chains, a relay that stops relaying removes them, and
wg-quick down leaves nothing of them. The fixture and helpers: tests/test_agent_netns.py."""

from __future__ import annotations

import dataclasses

from tests import test_agent_netns
from tests.agent_fake import TRUST
from tests.test_agent_netns import Gateway, gateway, install
from tests.test_relay_hostile import CFG, KEYS, RELAY, signed
from wg_mesh.gateway import ship
from wg_mesh.gateway.wgconf import RELAY_CHAIN, RELAY_TO_CHAIN, relay_chains
from wg_mesh.plan import live

__all__ = ["gateway"]  # the fixture, used by name
pytestmark = test_agent_netns.pytestmark


def chains(gw: Gateway) -> list[str]:
    """The filter table's lines that name the relay's chains."""
    return [line for line in gw.run("iptables", "-t", "filter", "-S").stdout.splitlines() if "WGMESH" in line]


def expected(ranges: tuple[str, ...]) -> list[str]:
    built = relay_chains(ranges)
    return [
        f"-N {RELAY_CHAIN}",
        f"-N {RELAY_TO_CHAIN}",
        f"-A FORWARD -i wg0 -o wg0 -j {RELAY_CHAIN}",
        *built[1].lines(),
        *built[0].lines(),
    ]


def test_the_relays_chains_on_a_real_host(gateway: Gateway) -> None:
    gw = gateway
    trust = live.trust(CFG, CFG.site("aws-use1"), "wg-mesh", "edge", TRUST.signing_key)
    install(gw, signed(RELAY, 1_700_000_100), KEYS.private, trust=trust)
    assert gw.agent().returncode == 0
    gw.run("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", "wg-quick", "up", "wg0")
    assert chains(gw) == expected(RELAY.relay_ranges)  # wg-quick's PostUp
    again = gw.agent()  # the chains and the jump are the agent's: nothing to do
    assert again.returncode == 0 and "applied" not in again.stderr, again.stderr

    gw.run("iptables", "-t", "filter", "-F", RELAY_TO_CHAIN)  # drift
    assert gw.agent().returncode == 0
    assert chains(gw) == expected(RELAY.relay_ranges)

    fewer = dataclasses.replace(RELAY, relay_ranges=RELAY.relay_ranges[:2])
    gw.write(ship.DOCUMENT_PATH, signed(fewer, 1_700_000_200))
    assert gw.agent().returncode == 0
    assert chains(gw) == expected(fewer.relay_ranges)

    gw.write(ship.DOCUMENT_PATH, signed(RELAY, 1_700_000_300))  # back, then wg-quick down with the agent's wg0.conf
    assert gw.agent().returncode == 0
    gw.run("wg-quick", "down", "wg0")
    assert chains(gw) == []

    gw.run("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", "wg-quick", "up", "wg0")
    gw.write(ship.DOCUMENT_PATH, signed(dataclasses.replace(RELAY, relay_ranges=()), 1_700_000_400))
    assert gw.agent().returncode == 0
    assert chains(gw) == []
