"""The relay's own chains under the agent (delivery: live; wg_mesh.gateway.wgconf.relay_chains), on the pretend
gateway: wg-quick's PostUp and the agent write the same chains (nothing to do after a boot), drift in them or in the
jump to them is repaired (a chain whole, in one commit; the jump above wg0's ACCEPTs), new ranges rewrite the chains
in one commit, a relay that stops relaying leaves no chain, and a failure at any step puts the host back as it was,
chains included. User data (wg-quick's hooks for real): tests/test_relay.py and the lab (tests/test_lab_dynamic.py)."""

from __future__ import annotations

import copy
import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agent_fake import FakeHost
from tests.test_agent import Store
from tests.test_relay_hostile import KEYS, RELAY, signed, trust_of
from wg_mesh.gateway.agent import Agent, Config
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.wgconf import RELAY_CHAIN, RELAY_TO_CHAIN, InterfacePlan

CHAINS = [("filter", RELAY_CHAIN), ("filter", RELAY_TO_CHAIN)]
JUMP = ("filter", "FORWARD", f"-i wg0 -o wg0 -j {RELAY_CHAIN}")
_serial = iter(range(1_700_000_100, 1_800_000_000))


def make(store: Store, host: FakeHost, paths: Paths) -> Agent:
    config = Config(site="aws-use1", source={"kind": "test"}, trust=trust_of("aws-use1"), pmtu_seconds=0)
    return Agent(config, store, host, paths, lambda line: None, clock=lambda: 1000.0)


def store(plan: InterfacePlan) -> Store:
    return Store(signed(plan, next(_serial)), KEYS.private)


@pytest.fixture(scope="module")
def booted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FakeHost]:
    """The relay after its first boot: the agent's first run, wg-quick up (its PostUp writes the chains), one more
    cycle, which finds nothing to change."""
    root, host = tmp_path_factory.mktemp("relay"), FakeHost()
    paths = Paths.under(str(root))
    agent = make(store(RELAY), host, paths)
    assert agent.cycle()
    host.up_from(Path(paths.wg_conf))
    mutations = len(host.mutating())
    assert agent.cycle()
    assert host.mutating()[mutations:] == []  # the chains and the jump wg-quick's PostUp wrote are the agent's
    assert sorted(host.own) == CHAINS and JUMP in host.rules
    host.calls.clear()
    return root, host


def clone(booted: tuple[Path, FakeHost], tmp_path: Path) -> tuple[Paths, FakeHost]:
    root, host = booted
    shutil.copytree(root, tmp_path / "gw", symlinks=True)
    host = copy.deepcopy(host)
    host.mutations = 0
    return Paths.under(str(tmp_path / "gw")), host


def _emptied(host: FakeHost) -> None:
    host.rules = [r for r in host.rules if r[1] != RELAY_TO_CHAIN]


def _edited(host: FakeHost) -> None:
    host.rules = [(t, c, "-j ACCEPT") if spec == "-j DROP" and c == RELAY_CHAIN else (t, c, spec)
                  for t, c, spec in host.rules]  # fmt: skip


def _reloaded(host: FakeHost) -> None:  # a firewall tool flushed the filter table and deleted its user chains
    host.rules = [r for r in host.rules if r[0] != "filter"]
    host.own.clear()


def _no_jump(host: FakeHost) -> None:
    host.rules.remove(JUMP)


def _accept_gone(host: FakeHost) -> None:
    host.rules.remove(("filter", "FORWARD", "-o wg0 -j ACCEPT"))


DRIFT: dict[str, tuple[Callable[[FakeHost], None], int]] = {  # the drift, and the iptables-restore runs that repair it
    "a chain emptied": (_emptied, 1),
    "a chain's DROP made an ACCEPT": (_edited, 1),
    "the filter table reloaded": (_reloaded, 1),
    "the jump deleted": (_no_jump, 0),
    "wg0's ACCEPT deleted (re-inserted above the jump)": (_accept_gone, 0),
}


@pytest.mark.parametrize("name", list(DRIFT))
def test_drift_in_the_relays_chains_is_repaired(booted: tuple[Path, FakeHost], tmp_path: Path, name: str) -> None:
    paths, host = clone(booted, tmp_path)
    want = host.state()
    drift, restores = DRIFT[name]
    drift(host)
    assert host.state() != want
    assert make(store(RELAY), host, paths).cycle()
    assert host.state() == want  # every chain in its order, the jump above wg0's ACCEPTs
    assert sum(argv[0] == "iptables-restore" for argv in host.mutating()) == restores
    host.calls.clear()
    assert make(store(RELAY), host, paths).cycle() and host.mutating() == []


def test_new_ranges_rewrite_the_chains_in_one_commit(booted: tuple[Path, FakeHost], tmp_path: Path) -> None:
    paths, host = clone(booted, tmp_path)
    office_only = dataclasses.replace(RELAY, relay_ranges=RELAY.relay_ranges[:2])
    assert make(store(office_only), host, paths).cycle()
    assert [argv for argv in host.mutating() if argv[0].startswith("iptables")] == [["iptables-restore", "--noflush"]]
    assert [spec for _, c, spec in host.rules if c == RELAY_TO_CHAIN] == [
        f"-d {r} -j ACCEPT" for r in RELAY.relay_ranges[:2]
    ]


def test_a_relay_that_stops_relaying_leaves_no_chain(booted: tuple[Path, FakeHost], tmp_path: Path) -> None:
    paths, host = clone(booted, tmp_path)
    assert make(store(dataclasses.replace(RELAY, relay_ranges=())), host, paths).cycle()
    assert host.own == [] and not any("WGMESH" in spec or c.startswith("WGMESH") for _, c, spec in host.rules)
    assert ("filter", "FORWARD", "-i wg0 -j ACCEPT") in host.rules  # a gateway's rules stay


TARGETS = {
    "new ranges": dataclasses.replace(RELAY, relay_ranges=RELAY.relay_ranges[2:]),
    "no longer a relay": dataclasses.replace(RELAY, relay_ranges=()),
}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("way", ["from the relay", "to the relay"])
def test_a_failure_at_every_mutating_command_leaves_the_host_as_it_was(
    booted: tuple[Path, FakeHost], tmp_path: Path, target: str, way: str
) -> None:
    """From the relay's running state to `target`, and back to it (its chains created, or refilled)."""
    start, plan = (RELAY, TARGETS[target]) if way == "from the relay" else (TARGETS[target], RELAY)
    first, text = signed(start, next(_serial)), signed(plan, next(_serial))

    def host_at_start(n: int) -> tuple[Paths, FakeHost]:
        paths, host = clone(booted, tmp_path / str(n))
        if start is not RELAY:
            assert make(Store(first, KEYS.private), host, paths).cycle()
        host.mutations = 0
        return paths, host

    paths, host = host_at_start(0)
    assert make(Store(text, KEYS.private), host, paths).cycle()
    steps = host.mutations
    assert any(argv[0] == "iptables-restore" for argv in host.mutating())
    for n in range(1, steps + 1):
        paths, host = host_at_start(n)
        before, host.fail_at = host.state(), n
        assert not make(Store(text, KEYS.private), host, paths).cycle(), n
        assert host.state() == before, f"mutating command {n} ({host.mutating()[n - 1]}) failed: not restored"
