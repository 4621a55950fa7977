"""The agent's apply is transactional and runs typed argv only (issue 20 items 1 and 4), against the pretend gateway:
a failure injected at every mutating step (command or file write) leaves the host and the files exactly as they
were; a failed rollback is loud and counted; a PostDown planted in wg0.conf never runs; the masquerade's device and
the endpoint routes' `via`/`dev` come from the default route the agent parses, and without one it does nothing;
the agent's files are written under unique names and never through a symlink."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.agent_fake import TRUST, FakeHost, Keys, base_plan, doc_text, with_mtu, with_peer, without_peer
from tests.test_agent import Store, metric
from wg_mesh.gateway import apply, files, hostplan, txn
from wg_mesh.gateway.agent import Agent, Config
from wg_mesh.gateway.apply import Paths, Result
from wg_mesh.gateway.wgconf import InterfacePlan, Peer

COMMANDS = {"ip", "wg", "iptables", "iptables-restore", "sysctl"}  # all the agent may run (no shell, no wg-quick)
# What these documents need from agent.json: masquerade allowed, no pinned overlay address and a static site's host
# filter, so that one document can change every part of the host the agent manages (a pinned address is checked in
# tests/test_document_hostile.py, a cloud gateway's refusal of a host filter in tests/hostile_documents.py)
OPEN_TRUST = dataclasses.replace(TRUST, masquerade=True, address=None, cloud="static")


def make(store: Store, host: FakeHost, paths: Paths, logs: list[str]) -> Agent:
    config = Config(site=TRUST.site, source={"kind": "test"}, trust=OPEN_TRUST, pmtu_seconds=0)
    return Agent(config, store, host, paths, logs.append, clock=lambda: 1000.0)


def first_plan() -> InterfacePlan:
    """Everything the agent manages in use: masquerade, a host filter, a private-path peer whose endpoint lies in
    its own AllowedIPs (an endpoint host route) and an internet peer with a lower route MTU."""
    plan = base_plan()
    path = Peer("dc-par", Keys().public, ("10.200.0.7/32", "172.20.0.0/16"), "172.20.0.5:51820", 25)
    slow = dataclasses.replace(plan.peers[1], mtu=plan.mtu - 40)
    peers = (plan.peers[0], slow, path)
    return dataclasses.replace(plan, masquerade=True, listen_sources=("198.51.100.2/32",), peers=peers)


def changed(plan: InterfacePlan, mtu: int) -> InterfacePlan:
    """Every part changes: peers (one in, one out), MTU and MSS, address, host filter, masquerade, endpoint route,
    route MTU."""
    plan = with_mtu(without_peer(with_peer(plan, "site-c", "10.77.0.0/16"), "gcp-euw3"), mtu)
    moved = dataclasses.replace(plan.peers[-2], endpoint="172.20.0.6:51820")  # dc-par: a new endpoint host
    slow = dataclasses.replace(plan.peers[0], mtu=mtu - 60)
    peers = (slow, moved, plan.peers[-1])
    return dataclasses.replace(
        plan, address="10.200.0.9/24", listen_sources=("198.51.100.9/32",), masquerade=False, peers=peers
    )


def file_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "prom" not in p.name
    }


@pytest.fixture(scope="module")
def booted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FakeHost, Keys]:
    """A gateway that booted with first_plan(): the agent's first run, wg-quick up, one more cycle."""
    root, keys, host = tmp_path_factory.mktemp("gw"), Keys(), FakeHost()
    paths = Paths.under(str(root))
    agent = make(Store(doc_text(first_plan(), keys), keys.private), host, paths, [])
    assert agent.cycle()
    host.up_from(Path(paths.wg_conf))
    assert agent.cycle()
    assert ("nat", "POSTROUTING", "-o eth0 -j MASQUERADE") in host.rules
    assert host.main == {"172.20.0.5/32": "via 10.0.0.1 dev eth0"}
    assert host.route_mtu == {"192.168.50.0/24": (first_plan().mtu - 40, False)}
    host.calls.clear()
    return root, host, keys


def clone(booted: tuple[Path, FakeHost, Keys], tmp_path: Path) -> tuple[Paths, FakeHost]:
    root, host, _ = booted
    shutil.copytree(root, tmp_path / "gw", symlinks=True)
    host = copy.deepcopy(host)
    host.mutations = 0
    return Paths.under(str(tmp_path / "gw")), host


@pytest.mark.parametrize("mtu", [1380, 1420], ids=["lower", "higher"])
def test_a_failure_at_every_mutating_command_leaves_the_host_as_it_was(
    booted: tuple[Path, FakeHost, Keys], tmp_path: Path, mtu: int
) -> None:
    _, _, keys = booted
    target = doc_text(changed(first_plan(), mtu), keys)
    paths, host = clone(booted, tmp_path / "ok")
    assert make(Store(target, keys.private), host, paths, []).cycle()
    steps = host.mutations
    kinds = {
        argv[0] if argv[0] != "ip" else f"ip {argv[2] if argv[1] == '-4' else argv[1]}" for argv in host.mutating()
    }
    assert kinds >= {"wg", "ip link", "ip address", "ip route", "iptables"} and steps >= 12, host.mutating()
    assert {argv[0] for argv in host.commands} <= COMMANDS
    for n in range(1, steps + 1):
        paths, host = clone(booted, tmp_path / str(n))
        before, disk = host.state(), file_bytes(tmp_path / str(n) / "gw")
        host.fail_at, logs = n, []
        agent = make(Store(target, keys.private), host, paths, logs)
        assert not agent.cycle(), n
        assert host.state() == before, f"mutating command {n} ({host.mutating()[n - 1]}) failed: not restored"
        assert file_bytes(tmp_path / str(n) / "gw") == disk, n
        assert sum("rolled back to generation" in line for line in logs) == 1, logs
        assert {argv[0] for argv in host.commands} <= COMMANDS
        step = next(line for line in logs if "rolled back" in line).split("step ")[1].split()[0]
        assert metric(paths, "wgmesh_agent_rollbacks_total", step=step) == 1
        assert metric(paths, "wgmesh_agent_rollback_failures_total") == 0


def test_a_failure_at_every_file_write_leaves_the_host_as_it_was(
    booted: tuple[Path, FakeHost, Keys], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, keys = booted
    target = doc_text(changed(first_plan(), 1380), keys)
    real, writes = apply.atomic_write, {"n": 0, "fail": 0}

    def write(path: str, text: str | bytes, mode: int) -> None:
        writes["n"] += 1
        if writes["n"] == writes["fail"]:
            raise OSError(28, "No space left on device")
        real(path, text, mode)

    monkeypatch.setattr(apply, "atomic_write", write)
    for n in (1, 2, 3):  # wg0.conf, the mapping, the record
        paths, host = clone(booted, tmp_path / str(n))
        before, disk = host.state(), file_bytes(tmp_path / str(n) / "gw")
        writes.update(n=0, fail=n)
        logs: list[str] = []
        assert not make(Store(target, keys.private), host, paths, logs).cycle()
        assert host.state() == before and file_bytes(tmp_path / str(n) / "gw") == disk, n
        assert any("rolled back" in line and "No space left" in line for line in logs), logs


def test_a_rollback_that_fails_is_loud_and_counted(booted: tuple[Path, FakeHost, Keys], tmp_path: Path) -> None:
    _, _, keys = booted
    store = Store(doc_text(changed(first_plan(), 1380), keys), keys.private)
    paths, host = clone(booted, tmp_path / "ok")
    assert make(store, host, paths, []).cycle()
    first_rule = next(i for i, argv in enumerate(host.mutating()) if argv[0] == "iptables")
    paths, host = clone(booted, tmp_path)
    logs: list[str] = []
    agent = make(store, host, paths, logs)
    host.fail_at = first_rule + 2  # the second rule: the first one changed a chain, which must go back
    host.fail["iptables-restore --noflush"] = Result(4, "", "iptables-restore: unable to initialize table\n")
    assert not agent.cycle()
    assert any(line.startswith("ERROR applying generation") and "ROLLBACK FAILED" in line for line in logs), logs
    assert metric(paths, "wgmesh_agent_rollback_failures_total") == 1
    assert metric(paths, "wgmesh_agent_half_applied") == 1
    del host.fail["iptables-restore --noflush"]
    assert agent.cycle()
    assert metric(paths, "wgmesh_agent_half_applied") == 0


def test_a_planted_post_down_never_runs(booted: tuple[Path, FakeHost, Keys], tmp_path: Path) -> None:
    """wg0.conf and the old state file say what to run on the way down: the agent reads neither for commands."""
    _, _, keys = booted
    paths, host = clone(booted, tmp_path)
    conf = Path(paths.wg_conf)
    planted = "PostDown = touch /tmp/pwned\nPostUp = bash -c 'id > /tmp/pwned'\n"
    conf.write_text(conf.read_text().replace("[Peer]", planted + "[Peer]", 1))
    state = json.loads(Path(paths.state).read_text())  # its floor stays readable
    Path(paths.state).write_text(json.dumps(state | {"hooks": [["touch /tmp/a"], ["touch /tmp/b"]]}))
    assert make(Store(doc_text(changed(first_plan(), 1380), keys), keys.private), host, paths, []).cycle()
    assert {argv[0] for argv in host.commands} <= COMMANDS
    assert not any("touch" in word or "pwned" in word for argv in host.commands for word in argv)
    assert "pwned" not in conf.read_text()


def test_the_masquerade_follows_the_default_route_and_without_one_nothing_happens(
    booted: tuple[Path, FakeHost, Keys], tmp_path: Path
) -> None:
    _, _, keys = booted
    paths, host = clone(booted, tmp_path)
    store = Store(doc_text(first_plan(), keys), keys.private)
    agent = make(store, host, paths, [])
    host.default = "via 10.0.0.254 dev ens5"
    assert agent.cycle()
    assert ("nat", "POSTROUTING", "-o ens5 -j MASQUERADE") in host.rules
    assert ("nat", "POSTROUTING", "-o eth0 -j MASQUERADE") not in host.rules  # the record said eth0: removed
    assert host.main == {"172.20.0.5/32": "via 10.0.0.254 dev ens5"}

    host.default, logs = None, []
    before, disk = host.state(), file_bytes(tmp_path / "gw")
    host.calls.clear()
    text = doc_text(dataclasses.replace(changed(first_plan(), 1380), masquerade=True), keys)
    assert not make(Store(text, keys.private), host, paths, logs).cycle()
    assert host.mutating() == [] and host.state() == before and file_bytes(tmp_path / "gw") == disk
    assert any("refusing to act: no usable default route" in line for line in logs), logs


def test_the_record_of_the_last_apply_is_parsed_strictly() -> None:
    record = hostplan.managed(first_plan(), 7, ("10.0.0.1", "eth0"))
    assert hostplan.parse_managed(record.to_json()) == record
    raw = json.loads(record.to_json())
    for field, bad in [
        ("masquerade_dev", "eth0 -j ACCEPT"),
        ("masquerade_dev", "../x"),
        ("listen_sources", ["1.2.3.4/32 -j ACCEPT"]),
        ("endpoint_routes", [["172.20.0.5/32", "10.0.0.1; id", "eth0"]]),
        ("endpoint_routes", [["172.20.0.0/16", None, "eth0"]]),
        ("mss", True),
        ("mss", "1360"),
        ("route_mtus", [["10.0.0.0/8", 10**9]]),
    ]:
        with pytest.raises(ValueError):
            hostplan.parse_managed(json.dumps({**raw, field: bad}))
    for text in ("", "[]", "{" * 100_000, '{"mss": 1}'):
        with pytest.raises(ValueError):
            hostplan.parse_managed(text)
    bare = dataclasses.replace(first_plan(), listen_sources=("198.51.100.2",))  # normalised as it is read back
    assert hostplan.managed(bare, 7, ("10.0.0.1", "eth0")).listen_sources == ("198.51.100.2/32",)


def test_no_key_in_the_snapshots_reprs(booted: tuple[Path, FakeHost, Keys], tmp_path: Path) -> None:
    _, host, keys = booted
    state = txn.parse_dump(host.dump())
    assert state.private_key == keys.private and keys.private not in repr(state)
    paths, _ = clone(booted, tmp_path)
    saved = txn.save_file(paths.wg_conf, 0o600)
    assert saved.data is not None and keys.private.encode() in saved.data and keys.private not in repr(saved)
    assert keys.private in state.config()  # the rollback's `wg syncconf` input: on stdin only


def test_route_and_default_route_lines_parse_into_typed_values() -> None:
    assert hostplan.default_route("default via 10.0.0.1 dev ens5 proto dhcp src 10.0.0.9 metric 100\n") == (
        "10.0.0.1",
        "ens5",
    )
    assert hostplan.default_route("default dev ppp0 scope link\n") == (None, "ppp0")
    assert hostplan.default_route("") is None
    assert hostplan.default_route("default via 10.0.0.1 dev $(id)\n") is None
    route = hostplan.parse_route("10.20.0.0/16 dev wg0 scope link mtu lock 1352")
    assert route == hostplan.KernelRoute("10.20.0.0/16", "wg0", None, 1352, True)
    assert route.replace_argv() == ["ip", "-4", "route", "replace", "10.20.0.0/16", "dev", "wg0", "mtu", "lock", "1352"]
    assert hostplan.parse_route("172.20.0.5 via 10.0.0.1 dev eth0") == hostplan.KernelRoute(
        "172.20.0.5/32", "eth0", "10.0.0.1"
    )
    assert hostplan.parse_route("default via 10.0.0.1 dev eth0") is None


def test_atomic_write_never_follows_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "etc" / "wg0.conf"
    target.parent.mkdir()
    (tmp_path / "etc" / "wg0.conf.tmp").symlink_to(victim)  # the old fixed temporary name
    target.symlink_to(victim)
    old = os.umask(0)
    try:
        files.atomic_write(str(target), "PrivateKey = x\n", 0o600)
    finally:
        os.umask(old)
    assert victim.read_text() == "untouched"
    assert not target.is_symlink() and target.read_text() == "PrivateKey = x\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["wg0.conf", "wg0.conf.tmp"]  # no temporary left
    with pytest.raises(OSError):
        files.read_bytes(str(tmp_path / "etc" / "wg0.conf.tmp"))


def test_a_symlink_at_the_agents_own_file_is_refused(booted: tuple[Path, FakeHost, Keys], tmp_path: Path) -> None:
    _, _, keys = booted
    paths, host = clone(booted, tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    os.unlink(paths.mapping)
    os.symlink(victim, paths.mapping)
    logs: list[str] = []
    assert not make(Store(doc_text(changed(first_plan(), 1380), keys), keys.private), host, paths, logs).cycle()
    assert victim.read_text() == "untouched" and host.mutating() == []
    assert any("not the agent's regular file" in line for line in logs), logs
