"""The path-MTU monitor (wg_mesh/gateway/pmtu*.py) against a model of the network and of wg0's routes: detection
with hysteresis, the search, the heal's exact commands, growing back, unanswered peers, and the metrics."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence

import pytest

from wg_mesh.gateway import agent, pmtu_heal
from wg_mesh.gateway.pmtu import METRIC_NAMES, PathMonitor, PathWatch, overlay_address
from wg_mesh.gateway.pmtu_probe import SMALL_SIZE, Settings, ping_argv, search
from wg_mesh.gateway.wgconf import InterfacePlan, Peer

PLAN = InterfacePlan(
    site="aws-use1",
    address="10.99.0.1/24",
    listen_port=51820,
    mtu=1400,
    mss=1360,
    masquerade=False,
    peers=(
        Peer("gcp-euw3", "K" * 43 + "=", ("10.99.0.2/32", "10.100.0.0/16"), "198.51.100.2:51820", 25),
        Peer("vps-fra", "L" * 43 + "=", ("10.99.0.3/32", "10.30.0.0/16", "10.31.0.0/24"), "198.51.100.3:51820", 25),
    ),
)
WG_QUICK_ROUTES = {"10.99.0.0/24": None, "10.100.0.0/16": None, "10.30.0.0/16": None, "10.31.0.0/24": None}


class Net:
    """The paths (largest size passing per overlay address; 0 = nothing answers) and wg0's routes, as the kernel
    would show them; it answers the monitor's commands and records them."""

    def __init__(self) -> None:
        self.path = {"10.99.0.2": 1400, "10.99.0.3": 1400}
        self.routes: dict[str, int | None] = dict(WG_QUICK_ROUTES)
        self.pings: list[tuple[str, int]] = []
        self.commands: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        argv = list(argv)
        if argv[0] == "ping":
            address, size = argv[-1], int(argv[argv.index("-s") + 1]) + 28
            assert argv == ping_argv(address, size, 1)
            with self.lock:
                self.pings.append((address, size))
            return (0, "") if size <= self.path[address] else (1, "")
        if argv == pmtu_heal.show_routes_argv():
            lines = []
            for prefix, mtu in self.routes.items():
                shown = prefix.removesuffix("/32")
                lines.append(f"{shown} scope link" + (f" mtu lock {mtu}" if mtu else ""))
            return 0, "\n".join(lines) + "\n"
        assert argv[:3] == ["ip", "-4", "route"], argv
        self.commands.append(argv)
        prefix = argv[4]
        if argv[3] == "del":
            del self.routes[prefix]
        else:
            self.routes[prefix] = int(argv[-1]) if "mtu" in argv else None
        return 0, ""


def ticks(monitor: PathMonitor, n: int, start: float = 1000.0) -> list[list[str]]:
    done: list[list[str]] = []
    for i in range(n):
        done += monitor.tick(start + 15 * i)[0]
    return done


def sample(text: str, name: str, **labels: str) -> str | None:
    want = ",".join(f'{k}="{v}"' for k, v in {"site": "aws-use1", **labels}.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return line.split()[-1]
    return None


def test_a_healthy_mesh_costs_two_pings_a_peer_and_changes_no_route() -> None:
    net = Net()
    monitor = PathMonitor(PLAN, net)
    done, text = monitor.tick(1000.0)
    assert done == [] and net.commands == []
    assert sorted(net.pings) == [("10.99.0.2", 84), ("10.99.0.2", 1400), ("10.99.0.3", 84), ("10.99.0.3", 1400)]
    assert sample(text, "wgmesh_path_mtu_bytes", peer_site="gcp-euw3") == "1400"
    assert sample(text, "wgmesh_path_probe_ok", peer_site="gcp-euw3", size="full") == "1"
    assert sample(text, "wgmesh_path_mtu_healed", peer_site="vps-fra") == "0"
    assert sample(text, "wgmesh_path_black_hole", peer_site="vps-fra") == "0"


def test_a_probe_is_one_df_ping_of_an_exact_ip_packet_size() -> None:
    assert ping_argv("10.99.0.2", 1400, 1) == [
        "ping", "-n", "-q", "-c", "1", "-W", "1", "-M", "do", "-s", "1372", "10.99.0.2",
    ]  # fmt: skip


@pytest.mark.parametrize("pmtu", [1280, 1288, 1336, 1392])
def test_the_search_finds_the_largest_size_on_the_grid_in_few_probes(pmtu: int) -> None:
    tried: list[int] = []

    def passes(size: int) -> bool:
        tried.append(size)
        return size <= pmtu

    assert search(passes, 1280, 1400, 8) == pmtu
    assert len(tried) <= 4  # 15 grid points


def test_the_search_reports_none_when_not_even_the_floor_passes() -> None:
    assert search(lambda size: size <= 1000, 1280, 1400, 8) is None


def test_a_shrunk_path_is_declared_after_n_failures_then_healed_with_exact_commands() -> None:
    net = Net()
    monitor = PathMonitor(PLAN, net)
    ticks(monitor, 1)
    net.path["10.99.0.3"] = 1340  # the internet path toward vps-fra lost 60 bytes; ICMP filtered on the way
    assert ticks(monitor, 2, start=2000) == []  # two failures: suspect, nothing done
    text = monitor.metrics()
    assert sample(text, "wgmesh_path_probe_ok", peer_site="vps-fra", size="full") == "0"
    assert sample(text, "wgmesh_path_black_hole", peer_site="vps-fra") == "0"
    done, text = monitor.tick(3000.0)
    assert done == [
        ["ip", "-4", "route", "replace", "10.30.0.0/16", "dev", "wg0", "mtu", "lock", "1336"],
        ["ip", "-4", "route", "replace", "10.31.0.0/24", "dev", "wg0", "mtu", "lock", "1336"],
    ]
    assert sample(text, "wgmesh_path_mtu_bytes", peer_site="vps-fra") == "1336"
    assert sample(text, "wgmesh_path_mtu_healed", peer_site="vps-fra") == "1"
    assert sample(text, "wgmesh_path_black_hole", peer_site="vps-fra") == "1"
    assert sample(text, "wgmesh_path_probe_ok", peer_site="vps-fra", size="small") == "1"
    # The other peer is untouched.
    assert net.routes["10.100.0.0/16"] is None
    # The probe target keeps its route (the connected /24): the full-size probe still leaves at full size.
    assert "10.99.0.3/32" not in net.routes
    assert sample(text, "wgmesh_path_mtu_healed", peer_site="gcp-euw3") == "0"
    assert sample(text, "wgmesh_path_mtu_bytes", peer_site="gcp-euw3") == "1400"
    # Healed and stable: no more commands, no new search (3 pings a tick for the shrunk peer).
    net.pings.clear()
    assert ticks(monitor, 3, start=4000) == []
    assert sorted(set(net.pings)) == [
        ("10.99.0.2", 84), ("10.99.0.2", 1400), ("10.99.0.3", 84), ("10.99.0.3", 1336), ("10.99.0.3", 1400),
    ]  # fmt: skip


def test_grow_back_restores_the_original_routes_after_m_passes() -> None:
    net = Net()
    monitor = PathMonitor(PLAN, net, Settings(fail_after=2, pass_after=3))
    net.path["10.99.0.3"] = 1300
    ticks(monitor, 2)
    assert net.routes["10.30.0.0/16"] == 1296
    net.path["10.99.0.3"] = 1400
    assert ticks(monitor, 2, start=2000) == []  # not yet: M = 3
    done, text = monitor.tick(3000.0)
    assert done == [
        ["ip", "-4", "route", "replace", "10.30.0.0/16", "dev", "wg0"],
        ["ip", "-4", "route", "replace", "10.31.0.0/24", "dev", "wg0"],
    ]
    assert net.routes == WG_QUICK_ROUTES
    assert sample(text, "wgmesh_path_mtu_healed", peer_site="vps-fra") == "0"
    assert sample(text, "wgmesh_path_mtu_bytes", peer_site="vps-fra") == "1400"


def test_a_single_lost_full_ping_is_not_a_black_hole() -> None:
    net = Net()
    monitor = PathMonitor(PLAN, net)
    for i in range(6):  # fail, pass, fail, pass...
        net.path["10.99.0.2"] = 1300 if i % 2 == 0 else 1400
        monitor.tick(1000.0 + i)
    assert net.commands == []


def test_a_peer_that_answers_no_ping_is_unanswered_not_a_black_hole() -> None:
    net = Net()
    net.path["10.99.0.2"] = 0
    monitor = PathMonitor(PLAN, net)
    done = ticks(monitor, 5)
    assert done == [] and net.commands == []
    text = monitor.metrics()
    assert sample(text, "wgmesh_path_icmp_unanswered", peer_site="gcp-euw3") == "1"
    assert sample(text, "wgmesh_path_black_hole", peer_site="gcp-euw3") == "0"
    assert sample(text, "wgmesh_path_mtu_bytes", peer_site="gcp-euw3") is None  # unknown, not 0
    assert sample(text, "wgmesh_path_icmp_unanswered", peer_site="vps-fra") == "0"


def test_a_path_below_the_floor_is_a_black_hole_that_is_not_healed() -> None:
    net = Net()
    net.path["10.99.0.2"] = 1200
    monitor = PathMonitor(PLAN, net)
    assert ticks(monitor, 3) == []
    text = monitor.metrics()
    assert sample(text, "wgmesh_path_black_hole", peer_site="gcp-euw3") == "1"
    assert sample(text, "wgmesh_path_mtu_bytes", peer_site="gcp-euw3") == "0"


def test_healing_off_reports_but_runs_no_route_command() -> None:
    net = Net()
    net.path["10.99.0.2"] = 1350
    monitor = PathMonitor(PLAN, net, Settings(heal=False))
    assert ticks(monitor, 4) == [] and net.commands == []
    text = monitor.metrics()
    assert sample(text, "wgmesh_path_mtu_bytes", peer_site="gcp-euw3") == "1344"
    assert sample(text, "wgmesh_path_mtu_healed", peer_site="gcp-euw3") == "0"


def test_a_route_reset_by_wg_quick_is_healed_again_and_a_restarted_monitor_adopts_the_heal() -> None:
    net = Net()
    net.path["10.99.0.2"] = 1352
    ticks(PathMonitor(PLAN, net), 3)
    assert net.routes["10.100.0.0/16"] == 1352
    # A new monitor (agent restart) finds the heal in the kernel and keeps it: no flap.
    restarted = PathMonitor(PLAN, net)
    net.commands.clear()
    done, text = restarted.tick(5000.0)
    assert done == [] and sample(text, "wgmesh_path_mtu_healed", peer_site="gcp-euw3") == "1"
    # wg-quick down/up: the routes come back without an MTU; the next tick heals them again.
    net.routes = dict(WG_QUICK_ROUTES)
    assert restarted.tick(5015.0)[0] == [
        ["ip", "-4", "route", "replace", "10.100.0.0/16", "dev", "wg0", "mtu", "lock", "1352"],
    ]


def test_a_prefix_inside_the_overlay_is_added_for_the_heal_and_deleted_on_restore() -> None:
    extra = Peer("gcp-euw3", "K" * 43 + "=", ("10.99.0.2/32", "10.99.0.128/25", "10.100.0.0/16"), "h:1", 25)
    plan = InterfacePlan(**{**PLAN.__dict__, "peers": (extra,)})
    routes: dict[str, int | None] = {"10.99.0.0/24": None, "10.100.0.0/16": None}
    assert pmtu_heal.prefixes(plan, "gcp-euw3") == [("10.99.0.128/25", True), ("10.100.0.0/16", False)]
    assert pmtu_heal.commands(plan, {"gcp-euw3": 1352}, routes) == [
        ["ip", "-4", "route", "replace", "10.99.0.128/25", "dev", "wg0", "mtu", "lock", "1352"],
        ["ip", "-4", "route", "replace", "10.100.0.0/16", "dev", "wg0", "mtu", "lock", "1352"],
    ]
    healed = {**routes, "10.99.0.128/25": 1352, "10.100.0.0/16": 1352}
    assert pmtu_heal.commands(plan, {"gcp-euw3": None}, healed) == [
        ["ip", "-4", "route", "del", "10.99.0.128/25", "dev", "wg0"],  # wg-quick made none: the /24 covers it
        ["ip", "-4", "route", "replace", "10.100.0.0/16", "dev", "wg0"],
    ]
    assert pmtu_heal.commands(plan, {}, routes) == []


def test_a_failed_route_command_is_counted_and_not_reported_healed() -> None:
    net = Net()
    net.path["10.99.0.2"] = 1352

    def runner(argv: Sequence[str]) -> tuple[int, str]:
        return (2, "") if list(argv[:4]) == ["ip", "-4", "route", "replace"] else net(argv)

    monitor = PathMonitor(PLAN, runner)
    ticks(monitor, 3)
    text = monitor.metrics()
    assert sample(text, "wgmesh_path_heal_failures_total") == "1"
    assert sample(text, "wgmesh_path_mtu_healed", peer_site="gcp-euw3") == "0"


def test_the_metrics_text_names_only_the_exported_metrics_each_with_help_and_type() -> None:
    net = Net()
    net.path["10.99.0.2"] = 1352
    monitor = PathMonitor(PLAN, net)
    text = ticks(monitor, 3) and monitor.metrics()
    names = {line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
    assert names == set(METRIC_NAMES)
    for name in METRIC_NAMES:
        assert f"# HELP {name} " in text and f"# TYPE {name} " in text
    assert sample(text, "wgmesh_path_last_probe_timestamp_seconds") == "1030"


def test_the_probe_target_is_the_first_host_route_of_the_peer() -> None:
    assert overlay_address(PLAN, "vps-fra") == "10.99.0.3"
    assert SMALL_SIZE == 84
    bad = InterfacePlan(**{**PLAN.__dict__, "peers": (Peer("x", "K" * 43 + "=", ("10.1.0.0/16",), "h:1", 25),)})
    with pytest.raises(ValueError, match="no /32"):
        PathMonitor(bad, Net())


def test_route_parsing_reads_locked_and_unlocked_mtus() -> None:
    text = (
        "10.99.0.0/24 proto kernel scope link src 10.99.0.1 \n"
        "10.99.0.2 scope link mtu lock 1352 \n"
        "10.100.0.0/16 scope link mtu 1380 \n"
        "default scope link \n"
    )
    assert pmtu_heal.parse_routes(text) == {
        "10.99.0.0/24": None, "10.99.0.2/32": 1352, "10.100.0.0/16": 1380, "0.0.0.0/0": None,
    }  # fmt: skip


def test_a_new_plan_keeps_what_is_known_of_unchanged_peers_and_forgets_the_rest() -> None:
    net = Net()
    net.path["10.99.0.3"] = 1352
    monitor = PathMonitor(PLAN, net)
    ticks(monitor, 3)
    assert monitor.paths["vps-fra"].pmtu == 1352
    newcomer = Peer("aws-euc1", "M" * 43 + "=", ("10.99.0.4/32", "10.40.0.0/16"), "198.51.100.4:51820", 25)
    monitor.update_plan(InterfacePlan(**{**PLAN.__dict__, "peers": (PLAN.peers[1], newcomer)}))
    assert set(monitor.paths) == {"vps-fra", "aws-euc1"}
    assert monitor.paths["vps-fra"].pmtu == 1352 and monitor.paths["aws-euc1"].pmtu is None
    # A new tunnel MTU makes every earlier verdict meaningless.
    monitor.update_plan(InterfacePlan(**{**PLAN.__dict__, "mtu": 1380, "mss": 1340}))
    assert all(path.pmtu is None and path.fails == 0 for path in monitor.paths.values())


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        Settings(fail_after=0)
    with pytest.raises(ValueError, match="floor"):
        Settings(floor=84)


# --- the agent's side: PathWatch ---------------------------------------------------------------------------------


def test_the_watch_follows_the_running_plan_logs_heals_and_writes_the_metrics() -> None:
    net, logs, written = Net(), [], []
    current: list[InterfacePlan | None] = [None]
    watch = PathWatch(lambda: current[0], written.append, logs.append, 15, Settings(fail_after=1, pass_after=1), net)
    watch.tick(1000.0)
    assert (net.pings, written) == ([], [])  # no document applied yet: nothing to probe
    current[0] = PLAN
    net.path["10.99.0.3"] = 1340
    watch.tick(1015.0)
    assert logs == [
        "path to vps-fra: 1400-byte packets vanish, small ones pass: the routes to its AllowedIPs now carry MTU 1336 "
        "(TCP's MSS follows, too big gets ICMP frag-needed)"
    ]
    assert sample(written[-1], "wgmesh_path_mtu_healed", peer_site="vps-fra") == "1"
    net.path["10.99.0.3"] = 1400  # the path grows back
    watch.tick(1030.0)
    assert logs[-1] == "path to vps-fra: full-size packets pass again; its routes carry the tunnel's MTU"
    assert net.routes == WG_QUICK_ROUTES and len(logs) == 2
    # A new document without vps-fra: the monitor follows it.
    current[0] = dataclasses.replace(PLAN, peers=PLAN.peers[:1])
    net.pings.clear()
    watch.tick(1045.0)
    assert sample(written[-1], "wgmesh_path_probe_ok", peer_site="vps-fra", size="full") is None
    assert {address for address, _ in net.pings} == {"10.99.0.2"}


def test_a_failing_tick_is_logged_once_and_the_watch_goes_on() -> None:
    logs: list[str] = []
    calls = {"n": 0}

    def broken() -> InterfacePlan | None:
        calls["n"] += 1
        if calls["n"] >= 4:
            stop.set()
        raise RuntimeError("no plan today")

    watch = PathWatch(broken, lambda text: None, logs.append, 0.01)
    stop = threading.Event()
    watch.seconds = 0
    original_wait = stop.wait
    stop.wait = lambda timeout=None: original_wait(0) or calls["n"] >= 4  # type: ignore[method-assign]
    watch.run(stop)
    assert calls["n"] == 4 and logs == ["path-MTU probe failed: RuntimeError: no plan today"]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"pmtu_seconds": 2}, "pmtu_seconds"),
        ({"pmtu_seconds": True}, "pmtu_seconds"),
        ({"pmtu_heal": "yes"}, "pmtu_heal"),
    ],
)
def test_agent_json_pmtu_settings_are_checked(fields: dict[str, object], problem: str) -> None:
    from tests.agent_fake import TRUST_JSON

    source = {"kind": "file", "document": "/etc/wg-mesh/document.json", "private_key": "/etc/wg-mesh/private.key"}
    base = {"site": "aws-use1", "source": source, "trust": TRUST_JSON}
    assert agent.load_config(json.dumps(base)).pmtu_seconds == agent.PMTU_SECONDS == 15
    assert agent.load_config(json.dumps({**base, "pmtu_seconds": 0, "pmtu_heal": False})).pmtu_seconds == 0
    with pytest.raises(ValueError, match=problem):
        agent.load_config(json.dumps({**base, **fields}))
