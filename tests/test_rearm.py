"""A dynamic-address site's re-arm watchdog (wg_mesh.gateway.rearm): the dump's parsing with bounds, the pure
decision (silent while we send -> re-arm; receiving -> never; at most one per peer per gap), the thin shell's argv
lists, and what the site's cloud-init ships (wg_mesh.plan.rearmunit): only a dynamic site gets it."""

from __future__ import annotations

import ipaddress
import itertools
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from tests.test_dynamic_site import raw_mesh
from tests.test_render import directory, fake_public_key, redacted
from tests.test_shellcheck import fragments, needs_shellcheck, shellcheck
from tests.test_units_sandbox import exposure, gateway_root, needs_offline
from wg_mesh.config import MeshConfig, parse_mesh
from wg_mesh.gateway import rearm, ship
from wg_mesh.gateway.wgconf import WG_CONF_PATH
from wg_mesh.lab.machines import cloudinit
from wg_mesh.plan import live, metrics, rearmunit, render, topology, userdata
from wg_mesh.tools.stackfile import read_raw

REPO = Path(__file__).resolve().parent.parent
A, B = fake_public_key("aws-use1"), fake_public_key("gcp-euw3")
HEAD = "PRIVATE\tPUBLIC\t51820\toff\n"


def line(key: str, rx: int, tx: int, keepalive: str = "10", endpoint: str = "198.51.100.1:51820") -> str:
    return f"{key}\t(none)\t{endpoint}\t10.10.0.0/16,10.200.0.1/32\t1700000000\t{rx}\t{tx}\t{keepalive}\n"


def dump(*lines: str) -> str:
    return HEAD + "".join(lines)


# --- parsing ------------------------------------------------------------------------------------------------------


def test_parse_dump_keeps_each_peers_fields_and_no_preshared_key() -> None:
    text = dump(line(A, 5, 6), line(B, 0, 0, "off", "(none)").replace("(none)", "c2VjcmV0", 1))
    peers = rearm.parse_dump(text)
    assert peers[A] == rearm.PeerLine(A, "198.51.100.1:51820", ("10.10.0.0/16", "10.200.0.1/32"), 5, 6, 10)
    assert peers[B].endpoint == "" and peers[B].keepalive == 0
    assert "c2VjcmV0" not in repr(peers)


@pytest.mark.parametrize(
    "bad",
    [
        line("not-a-key", 1, 1),
        line(A, -1, 1),
        line(A, 1, 2**64),
        line(A, 1, 1, "70000"),
        line(A, 1, 1, endpoint="evil;rm -rf /"),
        line(A, 1, 1).replace("10.10.0.0/16", "--help"),
        line(A, 1, 1).replace("\t1700000000", ""),
        line(A, 1, 1).rstrip("\n") + "x" * rearm.MAX_LINE + "\n",
    ],
)
def test_a_line_that_does_not_parse_is_left_out(bad: str) -> None:
    assert rearm.parse_dump(dump(bad, line(B, 1, 1))).keys() == {B}


def test_at_most_max_peers_are_read() -> None:
    many = "".join(line(fake_public_key(str(i)), 1, 1) for i in range(rearm.MAX_PEERS + 5))
    assert len(rearm.parse_dump(dump(many))) == rearm.MAX_PEERS


# --- the decision -------------------------------------------------------------------------------------------------

K = 10  # persistent_keepalive
PROBE = K + rearm.MARGIN_S  # quiet this long: probed
ANSWER = rearm.KEEPALIVE_TIMEOUT_S + rearm.MARGIN_S  # no answer this long after the probe: re-armed


def run_ticks(watchdog: rearm.Watchdog, samples: Sequence[tuple[float, str]]) -> list[tuple[float, rearm.Actions]]:
    return [(now, got) for now, text in samples if (got := watchdog.due(now, text)) != rearm.Actions()]


def test_a_quiet_peer_is_probed_then_re_armed_when_the_probe_gets_no_answer() -> None:
    w = rearm.Watchdog()
    samples = [(float(t), dump(line(A, 100, 100 + t))) for t in range(0, 40)]  # rx frozen
    assert run_ticks(w, samples) == [
        (14.0, rearm.Actions(probe=((A, "10.200.0.1"),))),  # first tick past 13 s
        (28.0, rearm.Actions(rearm=(A,))),  # first tick past 14 + 13 s; then its watch starts again
    ]
    again = [(float(t), dump(line(A, 100, 200 + t))) for t in range(40, 60)]
    assert [now for now, _ in run_ticks(w, again)] == [42.0, 56.0]  # a full cycle again, not sooner


def test_a_peer_that_answers_the_probe_is_never_re_armed() -> None:
    """Healthy and idle, silent by WireGuard's keepalive race: its answer to our probe (a keepalive, at the latest
    KEEPALIVE_TIMEOUT later) comes, and nothing else ever does."""
    w, rx, answers, rearmed = rearm.Watchdog(), 100, set(), []  # type: ignore[var-annotated]
    for t in range(0, 300):
        rx += 32 * (t in answers)
        actions = w.due(float(t), dump(line(A, rx, 100 + t)))
        answers |= {t + int(rearm.KEEPALIVE_TIMEOUT_S) for _ in actions.probe}
        rearmed += actions.rearm
    assert len(answers) >= 10 and rearmed == []


def test_a_receiving_peer_is_never_probed_nor_touched() -> None:
    w = rearm.Watchdog()
    samples = [(float(t), dump(line(A, 100 + (t // K) * 32, 100 + t))) for t in range(0, 200)]
    assert run_ticks(w, samples) == []


def test_the_probe_goes_to_the_peers_overlay_address() -> None:
    peer = rearm.parse_dump(dump(line(A, 1, 1).replace("10.10.0.0/16,", "10.10.0.7/32,")))[A]
    assert rearm.probe_address(peer, ipaddress.IPv4Network("10.200.0.0/24")) == "10.200.0.1"
    assert rearm.probe_address(peer, None) == "10.10.0.7"
    assert rearm.probe_address(peer, ipaddress.IPv4Network("10.201.0.0/24")) is None


# --- a relayed site's relay entry: its partners' overlay /32s too, probed only as a last resort ---------------------

EDGE = REPO / "examples" / "edge" / "Pulumi.edge.yaml"
OVERLAY = ipaddress.IPv4Network("10.200.0.0/24")
RELAY_ENTRY = "10.200.0.4/32,192.168.60.0/24,10.10.0.0/16,10.200.0.1/32"  # home's first, as `wg show` may list them
HOME = frozenset({ipaddress.IPv4Network("10.200.0.4/32"), ipaddress.IPv4Network("192.168.60.0/24")})


def edge(delivery: str = "user-data") -> MeshConfig:
    return parse_mesh({**read_raw(EDGE), "delivery": delivery})


def office_agent_json(cfg: MeshConfig, site: str = "office") -> str:
    trust = userdata.estimate_trust(cfg, cfg.site(site), "wg-mesh", "stack")  # type: ignore[arg-type]
    return ship.agent_config(site, live.agent_source(cfg.site(site), "wg-mesh", "stack"), trust=trust)


def test_the_relays_own_address_is_probed_not_a_partners() -> None:
    entry = rearm.parse_dump(dump(line(A, 1, 1).replace("10.10.0.0/16,10.200.0.1/32", RELAY_ENTRY)))[A]
    assert rearm.probe_address(entry, OVERLAY, HOME) == "10.200.0.1"
    assert rearm.probe_address(entry, OVERLAY) == "10.200.0.4"  # nothing known locally: the first (still answered)
    everything = frozenset({OVERLAY})  # a file that lies: the first, never nothing
    assert rearm.probe_address(entry, OVERLAY, everything) == "10.200.0.4"
    w = rearm.Watchdog(OVERLAY)
    w.relayed = HOME
    text = dump(line(A, 1, 1).replace("10.10.0.0/16,10.200.0.1/32", RELAY_ENTRY))
    assert [a.probe for _, a in run_ticks(w, [(0.0, text), (PROBE + 1, text)])] == [((A, "10.200.0.1"),)]


def test_a_relayed_sites_partners_are_read_from_its_rendered_config_and_its_pinned_trust() -> None:
    cfg = edge()
    conf = render.wg_quick_conf(topology.interface_plan(cfg, "office", directory(cfg)), redacted("office"))
    assert rearm.relayed_from_conf(conf, OVERLAY) == {ipaddress.IPv4Network("10.200.0.4/32")}  # home's overlay /32
    assert rearm.relayed_from_agent(office_agent_json(edge("live"))) == HOME  # trust.relay: home's ranges
    # a site that is not relayed: nothing to avoid, from either source
    aws_conf = render.wg_quick_conf(topology.interface_plan(cfg, "aws-use1", directory(cfg)), redacted("aws-use1"))
    assert rearm.relayed_from_conf(aws_conf, OVERLAY) == frozenset()
    assert rearm.relayed_from_agent(office_agent_json(edge("live"), "gcp-euw3")) == frozenset()


@pytest.mark.parametrize(
    "text", ["", "[]", "{", '{"trust": 1}', '{"trust": {"relay": {"partners": {"home": ["10.200.0.4/24"]}}}}',
             '{"trust": {"relay": {"partners": {"home": "10.200.0.4/32"}}}}', '{"trust": {"relay": []}}'],
)  # fmt: skip
def test_an_agent_json_that_does_not_parse_is_as_none(text: str) -> None:
    assert rearm.relayed_from_agent(text) is None


def test_a_conf_line_that_does_not_parse_is_left_out_and_only_allowed_ips_count() -> None:
    text = "[Peer]\nAllowedIPs = 10.200.0.1/32, 10.200.0.9/32\nAllowedIPs = 10.200.0.1/32, nonsense\nAddress = " \
           "10.200.0.3/32, 10.200.0.8/32\n# AllowedIPs = 10.200.0.1/32, 10.200.0.7/32\n"  # fmt: skip
    assert rearm.relayed_from_conf(text, OVERLAY) == {ipaddress.IPv4Network("10.200.0.9/32")}


def test_the_shell_reads_agent_json_first_then_the_rendered_config_and_again_when_one_changes(tmp_path: Path) -> None:
    cfg = edge()
    agent, conf_dir = tmp_path / "agent.json", tmp_path / "wireguard"
    conf_dir.mkdir()
    local = rearm.LocalRanges("wg0", OVERLAY, agent_config=str(agent), conf_dir=str(conf_dir))
    assert local.get() == frozenset()  # neither file: nothing known
    conf = render.wg_quick_conf(topology.interface_plan(cfg, "office", directory(cfg)), redacted("office"))
    (conf_dir / "wg0.conf").write_text(conf)
    assert local.get() == {ipaddress.IPv4Network("10.200.0.4/32")}  # user-data: the rendered config
    agent.write_text(office_agent_json(edge("live")))
    assert local.get() == HOME  # live: the pinned trust wins
    agent.write_text("{not json")
    assert local.get() == {ipaddress.IPv4Network("10.200.0.4/32")}  # unreadable trust: the config again


def test_the_scripts_paths_are_the_agents_and_wg_quicks() -> None:
    assert rearm.AGENT_CONFIG == ship.CONFIG_PATH
    assert f"{rearm.WG_CONF_DIR}/{rearm.INTERFACE}.conf" == WG_CONF_PATH


def test_no_endpoint_no_keepalive_or_no_overlay_address_is_never_watched() -> None:
    w = rearm.Watchdog(ipaddress.IPv4Network("10.200.0.0/24"))
    no_32 = line(fake_public_key("c"), 1, 1).replace("10.10.0.0/16,10.200.0.1/32", "10.10.0.0/16")
    samples = [
        (float(t), dump(line(A, 1, 1 + t, endpoint="(none)"), line(B, 1, 1 + t, keepalive="off"), no_32))
        for t in range(99)
    ]
    assert run_ticks(w, samples) == []


def test_restarted_counters_start_a_new_watch_and_removed_peers_are_forgotten() -> None:
    w = rearm.Watchdog()
    assert w.due(0.0, dump(line(A, 500, 500))) == rearm.Actions()
    assert w.due(20.0, dump(line(A, 0, 50))) == rearm.Actions()  # counters went down: a re-add; watched from 20 s
    assert w.due(20.0 + PROBE, dump(line(A, 0, 90))) == rearm.Actions()
    assert w.due(21.0 + PROBE, dump(line(A, 0, 95))).probe == ((A, "10.200.0.1"),)
    assert w.due(50.0, dump(line(B, 1, 1))) == rearm.Actions() and set(w.watch) == {B}


def test_never_two_re_arms_of_one_peer_within_the_minimum_gap() -> None:
    w = rearm.Watchdog(margin_s=0.0, min_gap_s=30.0)
    samples = [(float(t), dump(line(A, 1, 1, keepalive="1"))) for t in range(0, 120)]
    times = [now for now, got in run_ticks(w, samples) if got.rearm]
    assert len(times) >= 2 and all(b - a >= 30.0 for a, b in itertools.pairwise(times))


# --- the shell ----------------------------------------------------------------------------------------------------


class FakeWg:
    def __init__(self, text: str, fail: str = "") -> None:
        self.text, self.fail, self.calls = text, fail, []  # type: ignore[var-annotated]

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        failed = bool(self.fail) and self.fail in argv
        out = self.text if argv[:2] == ["wg", "show"] else ""
        return subprocess.CompletedProcess(list(argv), 1 if failed else 0, out, "boom" if failed else "")


def quiet_until_rearm(w: rearm.Watchdog, probes: list[str], logs: list[str]) -> float:
    """Ticks with rx frozen until the re-arm is due; the time it is."""
    rearm.tick(w, "wg0", 0.0, FakeWg(dump(line(A, 1, 1))), logs.append, probes.append)
    rearm.tick(w, "wg0", PROBE + 1, FakeWg(dump(line(A, 1, 5))), logs.append, probes.append)
    return PROBE + ANSWER + 2


def test_the_shell_probes_then_removes_and_re_adds_the_peer_with_its_own_settings_as_argv_lists() -> None:
    w, probes, logs = rearm.Watchdog(), [], []  # type: ignore[var-annotated]
    at = quiet_until_rearm(w, probes, logs)
    assert probes == ["10.200.0.1"]
    wg = FakeWg(dump(line(A, 1, 9)))
    assert rearm.tick(w, "wg0", at, wg, logs.append, probes.append).rearm == (A,)
    assert wg.calls == [
        ["wg", "show", "wg0", "dump"],
        ["wg", "set", "wg0", "peer", A, "remove"],
        ["wg", "set", "wg0", "peer", A, "endpoint", "198.51.100.1:51820", "persistent-keepalive", "10",
         "allowed-ips", "10.10.0.0/16,10.200.0.1/32"],
    ]  # fmt: skip
    assert logs and "re-armed" in logs[0]


def test_a_failed_wg_call_is_logged_and_the_re_add_not_attempted_after_a_failed_remove() -> None:
    w, probes, logs = rearm.Watchdog(), [], []  # type: ignore[var-annotated]
    at = quiet_until_rearm(w, probes, logs)
    wg = FakeWg(dump(line(A, 1, 9)), fail="remove")
    rearm.tick(w, "wg0", at, wg, logs.append, probes.append)
    assert len(wg.calls) == 2 and "failed: boom" in logs[0]


def test_a_failed_probe_is_logged_and_wg_show_failing_or_missing_changes_nothing() -> None:
    w, logs = rearm.Watchdog(), []  # type: ignore[var-annotated]

    def missing(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError("wg")

    def unreachable(address: str) -> None:
        raise OSError("Network is unreachable")

    assert rearm.tick(w, "wg0", 0.0, missing, logs.append) == rearm.Actions() and "wg" in logs[0]
    assert rearm.tick(w, "wg0", 1.0, FakeWg("", fail="show"), logs.append) == rearm.Actions()
    rearm.tick(w, "wg0", 2.0, FakeWg(dump(line(A, 1, 1))), logs.append, unreachable)
    rearm.tick(w, "wg0", 3.0 + PROBE, FakeWg(dump(line(A, 1, 1))), logs.append, unreachable)
    assert "unreachable" in logs[-1]


# --- what the site ships ------------------------------------------------------------------------------------------


def test_committed_packed_script_is_the_source() -> None:
    """wg_mesh/gateway/rearm.py.gz.b64 is what ships; regenerate it with WG_MESH_UPDATE_GOLDEN=1."""
    packed = REPO / "wg_mesh" / "gateway" / rearmunit.PACKED_SCRIPT
    source = rearmunit.script_source()
    if os.environ.get("WG_MESH_UPDATE_GOLDEN") == "1" and metrics.unpack(packed.read_text()) != source:
        packed.write_text(metrics.pack(source))
    assert metrics.unpack(rearmunit.packed_script()) == source, f"{packed} is stale: regenerate and commit it"


def user_data(site: str, delivery: str) -> str:
    cfg = parse_mesh({**raw_mesh(), "delivery": delivery})
    if delivery == "live":
        source = live.agent_source(cfg.site(site), "wg-mesh", "stack")
        trust = userdata.estimate_trust(cfg, cfg.site(site), "wg-mesh", "stack")
        return userdata.render_live_user_data(cfg, site, source, trust=trust)
    conf = render.wg_quick_conf(topology.interface_plan(cfg, site, directory(cfg)), redacted(site))
    return userdata.render_user_data(cfg, site, conf, directory(cfg))


@pytest.mark.parametrize("delivery", ["user-data", "live"])
def test_only_the_dynamic_site_ships_the_watchdog_started_after_wg0(delivery: str) -> None:
    cfg = parse_mesh(raw_mesh())
    assert rearmunit.rearm_extras(cfg, "vps-fra") == render.CloudInitExtras()
    for site in ("aws-use1", "gcp-euw3", "vps-fra"):
        assert "wg-mesh-rearm" not in user_data(site, delivery)
    doc = yaml.safe_load(user_data("office", delivery))
    files = {f["path"]: f for f in doc["write_files"]}
    script = files[rearmunit.SCRIPT_PATH]
    assert (script["encoding"], script["permissions"]) == ("gz+b64", "0755")
    assert metrics.unpack(script["content"]) == rearmunit.script_source()
    runcmd = doc["runcmd"]
    started = ["systemctl", "enable", "--now", rearmunit.UNIT_NAME]
    assert runcmd.index(started) > runcmd.index(["systemctl", "enable", "--now", "wg-quick@wg0"])
    assert rearmunit.UNIT_NAME in runcmd[-1]  # cloud-init fails unless it runs


def test_the_service_is_sandboxed_with_cap_net_admin_alone_and_no_ip() -> None:
    unit = rearmunit.service_unit("10.200.0.0/24")
    assert (
        "CapabilityBoundingSet=CAP_NET_ADMIN\n" in unit and "IPAddressDeny=any\nIPAddressAllow=10.200.0.0/24\n" in unit
    )
    assert f"ExecStart=/usr/bin/python3 {rearmunit.SCRIPT_PATH} --interface wg0 --overlay 10.200.0.0/24\n" in unit


@needs_offline
def test_the_service_scores_at_most_the_agents_limit(tmp_path: Path) -> None:
    root, units = gateway_root(tmp_path, yaml.safe_load(user_data("office", "user-data")))
    assert rearmunit.UNIT_NAME in units
    assert exposure(root, rearmunit.UNIT_NAME) <= 4.0


@needs_shellcheck
def test_the_dynamic_sites_user_data_is_shellcheck_clean() -> None:
    found = fragments(yaml.safe_load(user_data("office", "user-data")))
    assert not [report for _, shell, text in found if (report := shellcheck(shell, text))]


@pytest.mark.skipif(not Path("/usr/bin/cloud-init").exists(), reason="cloud-init not installed")
@pytest.mark.parametrize("delivery", ["user-data", "live"])
def test_the_dynamic_sites_user_data_passes_cloud_init_schema(delivery: str, tmp_path: Path) -> None:
    path = tmp_path / "user-data"
    path.write_text(user_data("office", delivery))
    done = subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "Valid" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("delivery", ["user-data", "live"])
def test_the_lab_runs_the_watchdog_as_a_daemon_after_wg0(delivery: str) -> None:
    setup = cloudinit.interpret(user_data("office", delivery))
    kinds = [(step.kind, step.argv) for step in setup.steps if step.kind in ("wg-quick", "service")]
    watchdog = (
        "service",
        ("/usr/bin/python3", rearmunit.SCRIPT_PATH, "--interface", "wg0", "--overlay", "10.200.0.0/24"),
    )
    assert kinds.index(watchdog) > kinds.index(("wg-quick", ("wg0",)))
    assert not [note for note in setup.notes if f"enable --now {rearmunit.UNIT_NAME}" in note]
