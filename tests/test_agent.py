"""The gateway agent (wg_mesh/gateway/agent.py, apply.py) against a pretend gateway (tests/agent_fake.py): the exact
commands it runs for each change, what it refuses, its files and metrics, and that no key reaches its logs."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests.agent_fake import (
    SITE,
    TRUST,
    TRUST_JSON,
    FakeHost,
    Keys,
    base_plan,
    body_of,
    doc_text,
    resign,
    with_mtu,
    with_peer,
    without_peer,
)
from wg_mesh.gateway import mapping, wgmetrics
from wg_mesh.gateway.agent import Agent, Config, main
from wg_mesh.gateway.apply import Paths, Result
from wg_mesh.gateway.sources import FetchError, FileSource
from wg_mesh.gateway.wgconf import wg_quick_conf
from wg_mesh.plan import metrics


class Store:
    """The cloud's store as the agent sees it: a document and a private key, counting key fetches."""

    def __init__(self, text: str, key: str) -> None:
        self.text, self.key, self.key_fetches = text, key, 0

    def document(self) -> str:
        if not self.text:
            raise FetchError("GetSecretValue: ResourceNotFoundException")
        return self.text

    def private_key(self) -> str:
        self.key_fetches += 1
        return self.key


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths.under(str(tmp_path))


def make(store: Store, host: FakeHost, paths: Paths, logs: list[str]) -> Agent:
    config = Config(site=SITE, source={"kind": "test"}, trust=TRUST, pmtu_seconds=0)  # the probes: test_pmtu*.py
    return Agent(config, store, host, paths, logs.append, clock=lambda: 1000.0)


def metric(paths: Paths, name: str, **labels: str) -> float:
    want = {"site": SITE, **labels}
    for line in Path(paths.metrics).read_text().splitlines():
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        if match and match[1] == name and dict(re.findall(r'(\w+)="([^"]*)"', match[2])) == want:
            return float(match[3])
    raise AssertionError(f"no {name}{want}")


def applied(keys: Keys, paths: Paths, host: FakeHost, logs: list[str]) -> tuple[Store, Agent]:
    """A gateway that booted with the base document: the agent's first run, then wg-quick up."""
    store = Store(doc_text(base_plan(), keys), keys.private)
    agent = make(store, host, paths, logs)
    assert agent.cycle()
    host.up_from(Path(paths.wg_conf))
    host.calls.clear()
    return store, agent


def test_first_run_without_wg0_writes_the_files_only(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store = Store(doc_text(base_plan(), keys), keys.private)
    agent = make(store, host, paths, logs)
    assert agent.cycle()
    assert host.mutating() == []
    assert store.key_fetches == 1
    conf = Path(paths.wg_conf)
    assert conf.read_text() == wg_quick_conf(base_plan(), keys.private)
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert Path(paths.mapping).read_text() == mapping.peer_mapping(base_plan())
    assert mapping.MAPPING_PATH == wgmetrics.MAPPING_PATH == metrics.MAPPING_PATH
    generation = body_of(store.text)["generation"]
    assert metric(paths, "wgmesh_agent_applied_generation") == generation
    assert metric(paths, "wgmesh_agent_desired_generation") == generation
    assert metric(paths, "wgmesh_agent_last_apply_success") == 1
    assert metric(paths, "wgmesh_agent_peers") == len(base_plan().peers)
    assert json.loads(Path(paths.state).read_text())["applied_generation"] == generation


def test_the_same_document_again_runs_no_mutating_command(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    before = [Path(p).stat().st_mtime_ns for p in (paths.wg_conf, paths.mapping, paths.state)]
    assert agent.cycle()
    assert agent.cycle()
    assert host.mutating() == []
    assert store.key_fetches == 1  # the key of wg0.conf still matches: the store is not asked again
    assert [Path(p).stat().st_mtime_ns for p in (paths.wg_conf, paths.mapping, paths.state)] == before


def test_adding_and_removing_a_peer_syncs_and_routes_without_restarting(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    added = with_peer(base_plan(), "site-c", "10.77.0.0/16")
    store.text = doc_text(added, keys)
    assert agent.cycle()
    # `wg set` for the new peer alone: a `wg syncconf` re-sets every peer's AllowedIPs (wg_mesh.gateway.peerset)
    new = added.peers[-1]
    assert host.mutating() == [
        ["wg", "set", "wg0", "peer", new.public_key, "allowed-ips", "10.77.0.0/16", "persistent-keepalive",
         str(new.persistent_keepalive), "endpoint", new.endpoint],
        ["ip", "-4", "route", "add", "10.77.0.0/16", "dev", "wg0"],
    ]  # fmt: skip
    assert host.peers[added.peers[-1].public_key][0] == ["10.77.0.0/16"]
    assert Path(paths.wg_conf).read_text() == wg_quick_conf(added, keys.private)
    assert "site-c" in Path(paths.mapping).read_text()

    host.calls.clear()
    removed = without_peer(added, "gcp-euw3")
    store.text = doc_text(removed, keys)
    assert agent.cycle()
    gone = next(p.public_key for p in added.peers if p.name == "gcp-euw3")
    assert host.mutating() == [
        ["wg", "set", "wg0", "peer", gone, "remove"],
        ["ip", "-4", "route", "del", "10.100.0.0/16", "dev", "wg0"],
    ]
    assert set(host.peers) == {p.public_key for p in removed.peers}
    assert "10.100.0.0/16" not in host.routes and "10.77.0.0/16" in host.routes
    assert store.key_fetches == 1
    assert not any(argv[0] == "wg-quick" and argv[1] in ("up", "down") for argv in host.commands)


def test_a_larger_mtu_goes_on_after_the_routes_and_hooks(keys: Keys, paths: Paths) -> None:
    """A private path raising wg0 to a jumbo MTU (docs/underlay.md): the internet peers' route MTUs (PostUp hooks)
    are in place before the link carries the larger MTU; a smaller MTU goes on first (the test below)."""
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    store.text = doc_text(with_mtu(base_plan(), 1420), keys)
    assert agent.cycle()
    mutating = host.mutating()
    assert mutating[-1] == ["ip", "link", "set", "dev", "wg0", "mtu", "1420"]
    assert [argv[:1] for argv in mutating[:-1]] == [["iptables"]] * 4  # the MSS clamp swapped before
    assert host.mtu == 1420


def test_an_mtu_change_sets_the_link_and_swaps_the_mss_clamp(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    old_mss = base_plan().mss
    store.text = doc_text(with_mtu(base_plan(), 1380), keys)
    assert agent.cycle()
    mutating = host.mutating()
    assert mutating[0] == ["ip", "link", "set", "dev", "wg0", "mtu", "1380"]  # the peers are unchanged: no sync
    clamp = "-p tcp --tcp-flags SYN,RST SYN -m tcpmss --mss {}:65535 -j TCPMSS --set-mss {}"
    old, new = clamp.format(old_mss + 1, old_mss).split(), clamp.format(1341, 1340).split()
    assert mutating[1:] == [  # argv words, no shell
        ["iptables", "-t", "mangle", "-D", "FORWARD", "-o", "wg0", *old],
        ["iptables", "-t", "mangle", "-D", "FORWARD", "-i", "wg0", *old],
        ["iptables", "-t", "mangle", "-A", "FORWARD", "-o", "wg0", *new],
        ["iptables", "-t", "mangle", "-A", "FORWARD", "-i", "wg0", *new],
    ]
    assert host.mtu == 1380
    host.calls.clear()
    assert agent.cycle()
    assert host.mutating() == []  # the rules changed once: the record of the applied plan says they are in place
    assert not any(argv[0] in ("bash", "sh") for argv in host.commands)


def test_rotation_waits_for_the_store_then_applies_the_new_key(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    old_conf = Path(paths.wg_conf).read_text()
    new = Keys()
    store.text = doc_text(base_plan(), new)  # the document moved on, the store still holds the old key
    assert not agent.cycle()
    assert store.key_fetches == 2
    assert host.mutating() == []
    assert Path(paths.wg_conf).read_text() == old_conf
    assert metric(paths, "wgmesh_agent_apply_failures_total", reason="key") == 1
    assert metric(paths, "wgmesh_agent_last_apply_success") == 0
    assert metric(paths, "wgmesh_agent_desired_generation") == body_of(store.text)["generation"]
    assert metric(paths, "wgmesh_agent_applied_generation") != body_of(store.text)["generation"]

    store.key = new.private
    assert agent.cycle()
    assert host.mutating() == [["wg", "syncconf", "wg0", "/dev/stdin"]]
    assert host.private_key == new.private
    assert metric(paths, "wgmesh_agent_last_apply_success") == 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{corrupt", "parse"), ("GENERATION", "generation"), ("SITE", "site"), ("PEERLESS", "no_peers")],
)
def test_a_refused_document_keeps_the_running_config(keys: Keys, paths: Paths, text: str, reason: str) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    files = {p: Path(p).read_bytes() for p in (paths.wg_conf, paths.mapping, paths.state)}
    body = body_of(store.text)
    if text == "GENERATION":
        text = resign({**body, "generation": body["generation"] + 1}, reseal=False)
    elif text == "SITE":
        text = resign({**body_of(doc_text(base_plan(), keys)), "site": "gcp-euw3"})
    elif text == "PEERLESS":
        text = doc_text(without_peer(without_peer(base_plan(), "gcp-euw3"), "vps-fra"), keys)
    store.text = text
    assert not agent.cycle()
    assert host.mutating() == []
    assert {p: Path(p).read_bytes() for p in files} == files
    assert metric(paths, "wgmesh_agent_apply_failures_total", reason=reason) == 1
    assert metric(paths, "wgmesh_agent_last_apply_success") == 0
    assert metric(paths, "wgmesh_agent_applied_generation") == body["generation"]
    assert any(f"refused ({reason})" in line for line in logs)


def test_drift_is_repaired(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    _, agent = applied(keys, paths, host, logs)
    gone = base_plan().peers[0]
    del host.peers[gone.public_key]  # `wg set wg0 peer ... remove` by hand
    host.routes.discard("10.100.0.0/16")
    host.routes.add("10.99.0.0/16")  # a stray route on wg0
    host.mtu = 1500
    clamp = next(rule for rule in host.rules if rule[0] == "mangle")
    host.rules.remove(clamp)  # a firewall reload dropped the MSS clamp
    assert agent.cycle()
    assert host.mutating() == [
        ["wg", "set", "wg0", "peer", gone.public_key, "allowed-ips", ",".join(sorted(gone.allowed_ips)),
         "persistent-keepalive", str(gone.persistent_keepalive), "endpoint", gone.endpoint],
        ["ip", "link", "set", "dev", "wg0", "mtu", str(base_plan().mtu)],
        ["ip", "-4", "route", "add", "10.100.0.0/16", "dev", "wg0"],
        ["ip", "-4", "route", "del", "10.99.0.0/16", "dev", "wg0"],
        ["iptables", "-t", "mangle", "-A", clamp[1], *clamp[2].split()],
    ]  # fmt: skip
    assert gone.public_key in host.peers and clamp in host.rules


def test_a_failed_command_is_an_apply_failure_and_is_retried(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    plan = with_peer(base_plan(), "site-c", "10.77.0.0/16")
    first = plan.peers[0]  # and a staying peer's AllowedIPs change: `wg syncconf` (wg_mesh.gateway.peerset)
    changed = dataclasses.replace(first, allowed_ips=(*first.allowed_ips, "10.78.0.0/16"))
    store.text = doc_text(dataclasses.replace(plan, peers=(changed, *plan.peers[1:])), keys)
    host.fail["wg syncconf"] = Result(1, "", "Line unrecognized: `PrivateKey=" + keys.private + "'\n")
    assert not agent.cycle()
    assert metric(paths, "wgmesh_agent_apply_failures_total", reason="apply") == 1
    del host.fail["wg syncconf"]
    assert agent.cycle()  # wg0.conf is already new: the running peers still differ, so syncconf runs again
    assert ["wg", "syncconf", "wg0", "/dev/stdin"] in host.mutating()[-3:]
    assert "10.77.0.0/16" in host.routes


def test_fetch_failures_are_counted_and_not_fatal(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    store.text = ""
    assert not agent.cycle()
    assert not agent.cycle()
    assert metric(paths, "wgmesh_agent_fetch_failures_total") == 2
    assert metric(paths, "wgmesh_agent_last_apply_success") == 1  # the last fetched document still runs


def test_no_key_reaches_logs_metrics_or_state(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    new = Keys()
    store.text, store.key = doc_text(base_plan(), new), keys.private
    agent.cycle()  # refused: key mismatch
    store.key = new.private
    host.fail["wg syncconf"] = Result(1, "", f"Key is not the correct length or format: `{new.private}'\n")
    agent.cycle()  # fails, wg quoting the key
    del host.fail["wg syncconf"]
    agent.cycle()
    assert len(logs) >= 3
    texts = [*logs, *(Path(p).read_text() for p in (paths.mapping, paths.state, paths.metrics))]
    for text in texts:
        assert keys.private not in text and new.private not in text
    assert "(key redacted)" in "\n".join(logs)
    assert all(stdin is None or argv[:2] in (["wg", "pubkey"], ["wg", "syncconf"]) for argv, stdin in host.calls)


def test_command_line_once_with_a_file_source(keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "document.json").write_text(doc_text(base_plan(), keys))
    (tmp_path / "private.key").write_text(keys.private + "\n")
    os.chmod(tmp_path / "private.key", 0o600)
    config = tmp_path / "agent.json"
    source = {"kind": "file", "document": str(tmp_path / "document.json"), "private_key": str(tmp_path / "private.key")}
    config.write_text(json.dumps({"site": SITE, "poll_seconds": 10, "source": source, "trust": TRUST_JSON}))
    root = tmp_path / "root"
    host = FakeHost()
    assert main(["--config", str(config), "--once", "--root", str(root)], runner=host) == 0
    assert (root / "etc/wireguard/wg0.conf").read_text() == wg_quick_conf(base_plan(), keys.private)
    (tmp_path / "document.json").write_text("{}")
    assert main(["--config", str(config), "--once", "--timeout", "0", "--root", str(root)], runner=host) == 1
    assert "refused (signature)" in capsys.readouterr().err
    config.write_text(json.dumps({"site": SITE, "poll_seconds": 0, "source": source, "trust": TRUST_JSON}))
    assert main(["--config", str(config), "--once"], runner=host) == 2
    assert "poll_seconds" in capsys.readouterr().err


def test_the_daemon_polls_its_source_every_poll_interval(keys: Keys, paths: Paths) -> None:
    """Every source is polled (GCP's document is a Secret Manager secret too, no metadata push): a cycle, then the
    rest of poll_seconds, also after a failed fetch."""
    host, logs, sleeps = FakeHost(), [], []
    agent = make(Store(doc_text(base_plan(), keys), keys.private), host, paths, logs)

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise StopIteration

    with pytest.raises(StopIteration):
        agent.forever(sleep)
    assert len(sleeps) == 3 and all(9.0 < s <= 10.0 for s in sleeps)
    sleeps.clear()
    with pytest.raises(StopIteration):
        make(Store("", keys.private), host, paths, logs).forever(sleep)
    assert all(9.0 < s <= 10.0 for s in sleeps)


def test_file_source_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="cannot read"):
        FileSource(str(tmp_path / "none.json"), str(tmp_path / "none.key")).document()


def test_a_new_overlay_address_replaces_the_old_one(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    moved = dataclasses.replace(base_plan(), address="10.200.0.9/24")
    store.text = doc_text(moved, keys)
    assert not agent.cycle() and host.mutating() == []  # agent.json pins the address: refused (unsafe)
    assert metric(paths, "wgmesh_agent_apply_failures_total", reason="unsafe") == 1
    # re-addressed in the stack: the user data (agent.json) changes too, and the agent restarts with it
    agent.config = dataclasses.replace(agent.config, trust=dataclasses.replace(TRUST, address="10.200.0.9/24"))
    assert agent.cycle()
    assert host.mutating() == [
        ["ip", "-4", "address", "add", "10.200.0.9/24", "dev", "wg0"],
        ["sysctl", "-q", "-w", "net.ipv4.conf.wg0.promote_secondaries=1"],  # or the new address and the routes go
        ["ip", "-4", "address", "del", "10.200.0.1/24", "dev", "wg0"],
    ]
    assert host.addresses == ["10.200.0.9/24"]


def test_an_unusable_ip_command_is_not_taken_for_a_missing_wg0(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    host.fail["ip -o"] = Result(127, "", "[Errno 2] No such file or directory: 'ip'")
    store.text = doc_text(with_peer(base_plan(), "site-c", "10.77.0.0/16"), keys)
    assert not agent.cycle()
    assert metric(paths, "wgmesh_agent_apply_failures_total", reason="apply") == 1


def test_a_repeated_failure_is_logged_once_and_counted_every_time(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    store.text = "{corrupt"
    for _ in range(3):
        assert not agent.cycle()
    assert metric(paths, "wgmesh_agent_apply_failures_total", reason="parse") == 3
    assert sum("refused (parse)" in line for line in logs) == 1
    store.text = doc_text(base_plan(), keys)
    assert agent.cycle()
    assert "runs again" in logs[-1]


def test_rules_that_failed_halfway_are_rolled_back_then_applied_whole(keys: Keys, paths: Paths) -> None:
    host, logs = FakeHost(), []
    store, agent = applied(keys, paths, host, logs)
    before = host.state()
    store.text = doc_text(with_mtu(base_plan(), 1380), keys)
    original = host._iptables
    calls = {"n": 0}

    def flaky(argv: list[str]) -> Result:  # the first new rule goes in, then iptables fails
        if argv[3] == "-A" and "1340" in argv:
            calls["n"] += 1
            if calls["n"] == 2:
                return Result(4, "", "iptables: Resource temporarily unavailable.\n")
        return original(argv)

    host._iptables = flaky  # type: ignore[method-assign]
    assert not agent.cycle()
    assert host.state() == before  # the MTU, the old clamp (in its place) and everything else as it was
    assert any("rolled back to generation" in line and "step rules failed" in line for line in logs)
    assert metric(paths, "wgmesh_agent_rollbacks_total", step="rules") == 1
    assert metric(paths, "wgmesh_agent_half_applied") == 0
    assert agent.cycle()
    mangle = sorted(spec for table, _, spec in host.rules if table == "mangle")
    mss = [spec for spec in mangle if "--set-mss" in spec]  # the constant clamp; --clamp-mss-to-pmtu stays as it was
    assert len(mss) == 2 and all("--set-mss 1340" in spec for spec in mss)
    assert len(mangle) == 4
    host.calls.clear()
    assert agent.cycle()
    assert host.mutating() == []
