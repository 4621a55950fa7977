"""Freshness on the pretend gateway (issue 33 items 1 and 2; docs/security.md, "Freshness"): the shipped agent with a
store an attacker writes (genuine documents only: no signing key), a damaged state directory, a fresh gateway, an
expired document, and the operator's way back from a lost floor.

Each case runs the real Agent (wg_mesh.gateway.agent) on tests/agent_fake's host: a refusal changes no command and no
file. On 58f58f7 the floor lived only in agent-state.json and fell back to 0 when the file was damaged, and agent.json
pinned none: these tests fail there (a superseded document applied), except the first, which guards the intact case.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agent_fake import SCOPE, TRUST, FakeHost, Keys, base_plan, sign, with_mtu, without_peer
from tests.test_agent import Store, metric
from wg_mesh.config import AwsSite
from wg_mesh.gateway import floor
from wg_mesh.gateway.agent import Agent, Config, main
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.document import MAX_SERIAL_JUMP, Trust, encode_body
from wg_mesh.gateway.wgconf import InterfacePlan
from wg_mesh.plan import live
from wg_mesh.tools.stackfile import load

DAY = 86400
SERIAL = 41  # a counter's (wg_mesh.tools.serial)
WITH_PEER, REMOVED = base_plan(), without_peer(base_plan(), "gcp-euw3")  # the superseded one has a removed site


def document(plan: InterfacePlan, keys: Keys, serial: int, not_after: int | None = None) -> str:
    """The site's document as the program signs it (no generation of its own: the content's)."""
    text: str = sign(encode_body(plan, keys.public, scope=SCOPE, serial=serial, not_after=not_after))
    return text


def agent(store: Store, host: FakeHost, paths: Paths, logs: list[str], trust: Trust = TRUST) -> Agent:
    return Agent(Config("aws-use1", {"kind": "test"}, trust, pmtu_seconds=0), store, host, paths, logs.append)


@pytest.fixture
def running(tmp_path: Path) -> tuple[Store, FakeHost, Paths, Keys]:
    """A gateway that applied the site's document with gcp-euw3 (serial SERIAL), then the one without it (SERIAL+1):
    its state file says SERIAL+1. The store now holds the superseded one again (its writer replays it)."""
    keys, host, paths = Keys(), FakeHost(), Paths.under(str(tmp_path))
    store = Store(document(WITH_PEER, keys, SERIAL), keys.private)
    first = agent(store, host, paths, [])
    assert first.cycle()
    host.up_from(Path(paths.wg_conf))
    store.text = document(REMOVED, keys, SERIAL + 1)
    assert first.cycle()
    assert json.loads(Path(paths.state).read_text())["applied_serial"] == SERIAL + 1
    store.text = document(WITH_PEER, keys, SERIAL)  # the replay
    host.calls.clear()
    return store, host, paths, keys


def test_a_replayed_superseded_document_is_refused_by_a_restarted_agent(
    running: tuple[Store, FakeHost, Paths, Keys],
) -> None:
    store, host, paths, _ = running
    logs: list[str] = []
    assert not agent(store, host, paths, logs).cycle()  # a restart: the floor read back from the state file
    assert "refused (replay)" in logs[-1] and host.mutating() == []


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _symlink(path: Path) -> None:
    elsewhere = path.with_name("elsewhere.json")
    path.rename(elsewhere)  # a good floor behind the link: the agent must not follow it
    path.symlink_to(elsewhere)


DAMAGE: dict[str, Callable[[Path], object]] = {
    "deleted": Path.unlink,
    "truncated": lambda p: p.write_text(p.read_text()[:9]),
    "true": lambda p: p.write_text("true\n"),
    "-5": lambda p: p.write_text("-5\n"),
    "a directory": _directory,
    "a symlink": _symlink,
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_state_fails_closed_until_the_operator_resets_the_floor(
    running: tuple[Store, FakeHost, Paths, Keys], damage: str
) -> None:
    store, host, paths, keys = running
    DAMAGE[damage](Path(paths.state))
    watched = [paths.wg_conf, paths.mapping, paths.applied]
    files = {p: Path(p).read_bytes() for p in watched}
    logs: list[str] = []
    restarted = agent(store, host, paths, logs)
    assert not restarted.cycle()  # the replay: on 58f58f7 the floor fell to 0 and it ran
    assert "refused (state)" in logs[-1] and "ERROR the replay floor is unknown" in logs[-1], logs
    assert host.mutating() == [] and {p: Path(p).read_bytes() for p in watched} == files
    assert metric(paths, "wgmesh_agent_state_lost") == 1 and metric(paths, "wgmesh_agent_replay_floor") == 0
    assert metric(paths, "wgmesh_agent_apply_failures_total", reason="state") == 1
    store.text = document(REMOVED, keys, SERIAL + 2)  # even the current one: the floor is unknown, not 0
    assert not restarted.cycle() and host.mutating() == []

    # the operator, having checked the current document's serial: --reset-floor (the agent reads it next cycle)
    if damage in ("a directory", "a symlink"):
        target = Path(paths.state)
        target.rmdir() if target.is_dir() else target.unlink()
    assert floor.reset_command(TRUST, paths, SERIAL + 1) == 0
    store.text = document(WITH_PEER, keys, SERIAL)
    assert not restarted.cycle() and "refused (replay)" in logs[-1]
    store.text = document(REMOVED, keys, SERIAL + 2)
    assert restarted.cycle() and "known again" in " ".join(logs)
    assert metric(paths, "wgmesh_agent_state_lost") == 0 and metric(paths, "wgmesh_agent_replay_floor") == SERIAL + 2


def test_a_fresh_gateway_refuses_a_week_old_document(tmp_path: Path) -> None:
    """Made when the site's document had serial SERIAL+5 (agent.json's trust.floor): no state, no wg0.conf. The store
    offers a document superseded a week ago (serial SERIAL), then the current one."""
    keys, host, paths = Keys(), FakeHost(), Paths.under(str(tmp_path))
    pinned = dataclasses.replace(TRUST, floor=SERIAL + 5)
    store, logs = Store(document(WITH_PEER, keys, SERIAL), keys.private), list[str]()
    fresh = agent(store, host, paths, logs, pinned)
    assert not fresh.cycle() and "refused (replay)" in logs[-1] and "agent.json's" in logs[-1]
    assert metric(paths, "wgmesh_agent_replay_floor") == SERIAL + 5 and host.mutating() == []
    assert not Path(paths.wg_conf).exists() and not Path(paths.state).exists()
    store.text = document(REMOVED, keys, SERIAL + 5)
    assert fresh.cycle()
    assert json.loads(Path(paths.state).read_text()) == {
        "applied_generation": fresh.status.applied_generation, "applied_serial": SERIAL + 5,
        **floor.owner(pinned),
    }  # fmt: skip


def test_a_state_written_under_another_agent_json_is_set_aside(running: tuple[Store, FakeHost, Paths, Keys]) -> None:
    """A static site set up again: a new agent.json (another floor) over an old state file; its own floor rules."""
    store, host, paths, keys = running
    again = dataclasses.replace(TRUST, floor=3)
    store.text = document(WITH_PEER, keys, 5)
    logs: list[str] = []
    assert agent(store, host, paths, logs, again).cycle()
    assert "written under another agent.json" in logs[0]


def test_a_cloud_gateway_applies_no_document_that_expired_or_never_expires(tmp_path: Path) -> None:
    keys, host, paths = Keys(), FakeHost(), Paths.under(str(tmp_path))
    cloud = dataclasses.replace(TRUST, expiring=True)
    now = int(time.time())
    logs: list[str] = []
    store = Store(document(WITH_PEER, keys, SERIAL), keys.private)  # no not_after: from before expiry, or forged old
    gateway = agent(store, host, paths, logs, cloud)
    assert not gateway.cycle() and "refused (expired)" in logs[-1]
    store.text = document(WITH_PEER, keys, SERIAL, not_after=now - 1)
    assert not gateway.cycle() and "refused (expired), the running config stays: expired at" in logs[-1]
    store.text = document(WITH_PEER, keys, SERIAL, not_after=live.expires(_cloud_site(), now))
    assert gateway.cycle()
    assert metric(paths, "wgmesh_agent_document_expiry_timestamp_seconds") >= now + 60 * DAY


def _cloud_site() -> AwsSite:
    site = load(Path(__file__).resolve().parents[1] / "Pulumi.prod.yaml").site("aws-use1")
    assert isinstance(site, AwsSite)
    return site


def test_the_running_content_signed_again_with_a_lower_serial_changes_nothing(
    running: tuple[Store, FakeHost, Paths, Keys],
) -> None:
    """A state restored from an older checkpoint signs the running content again under a lower serial: applied as
    the same configuration, no command, the floor stays."""
    store, host, paths, keys = running
    store.text = document(REMOVED, keys, SERIAL)
    logs: list[str] = []
    assert agent(store, host, paths, logs).cycle() and host.mutating() == []
    assert json.loads(Path(paths.state).read_text())["applied_serial"] == SERIAL + 1


def test_a_serial_far_past_the_floor_is_refused(running: tuple[Store, FakeHost, Paths, Keys]) -> None:
    store, host, paths, keys = running
    store.text = document(with_mtu(REMOVED, 1380), keys, SERIAL + 1 + MAX_SERIAL_JUMP + 1)
    logs: list[str] = []
    assert not agent(store, host, paths, logs).cycle() and "past the floor" in logs[-1]
    store.text = document(with_mtu(REMOVED, 1380), keys, SERIAL + 1 + MAX_SERIAL_JUMP)
    assert agent(store, host, paths, logs).cycle()


def test_reset_floor_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "agent.json"
    trust = dataclasses.asdict(TRUST) | {"cidrs": list(TRUST.cidrs), "floor": 7}
    source = {"kind": "file", "document": "/etc/wg-mesh/document.json", "private_key": "/etc/wg-mesh/private.key"}
    config.write_text(json.dumps({"site": "aws-use1", "source": source, "trust": trust}))
    assert main(["--config", str(config), "--root", str(tmp_path), "--reset-floor", "12"]) == 0
    state = json.loads((tmp_path / "var/lib/wg-mesh/agent-state.json").read_text())
    assert state["applied_serial"] == 12 and state["pin"] == 7 and state["applied_generation"] is None
    assert main(["--config", str(config), "--root", str(tmp_path), "--reset-floor", "3"]) == 0  # agent.json's wins
    assert json.loads((tmp_path / "var/lib/wg-mesh/agent-state.json").read_text())["applied_serial"] == 7
    assert main(["--config", str(config), "--root", str(tmp_path), "--reset-floor", "0"]) == 2
    assert "not a serial" in capsys.readouterr().err
    assert os.stat(tmp_path / "var/lib/wg-mesh/agent-state.json").st_mode & 0o777 == 0o644


@pytest.mark.parametrize("shift", [-300, DAY], ids=["5 minutes behind", "a day ahead"])
def test_a_deployer_clock_off_moves_no_serial(tmp_path: Path, shift: int) -> None:
    """Three `pulumi up`s, the middle one on a deployer whose clock is off: the `-serial` Command's texts run as
    pulumi-command runs them (create, then update with the previous output), with that deployer's `date` on the PATH,
    and each document signed with the serial they print and the expiry that deployer computes. A cloud gateway applies
    every one in turn. On 58f58f7 the serial was that clock: 5 minutes behind was a replay, a day ahead the floor that
    refused the next correct document."""
    from tests.test_gate_command import run_text
    from wg_mesh.tools import serial as program_serial

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "date").write_text(f"#!/bin/sh\necho $(( $(/bin/date +%s) + {shift} ))\n")
    (bin_dir / "date").chmod(0o755)
    keys, host, paths, now = Keys(), FakeHost(), Paths.under(str(tmp_path / "gw")), time.time()
    site, logs = _cloud_site(), list[str]()
    gateway = agent(Store("", keys.private), host, paths, logs, dataclasses.replace(TRUST, expiring=True))
    previous = ""
    for step, (plan, offset) in enumerate(((WITH_PEER, 0), (REMOVED, shift), (with_mtu(REMOVED, 1380), 0))):
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "WG_MESH_CONTENT": f"digest-{step}"}
        text = program_serial.COUNTER_UPDATE if previous else program_serial.COUNTER_CREATE
        printed = run_text(text, tmp_path, **env, **({"PULUMI_COMMAND_STDOUT": previous} if previous else {}))
        previous = printed.stdout.strip()
        number, _ = program_serial.parse_counter(previous)
        gateway.source = Store(document(plan, keys, number, live.expires(site, now + offset)), keys.private)
        assert gateway.cycle(), (step, logs[-1:])
    assert metric(paths, "wgmesh_agent_replay_floor") == 3
