"""DNS-named static sites (issue 24): the config's rules (good and hostile names, the re-resolve interval), the plan
and wg0.conf of their peers, the firewalls' sources, the signed document's new fields (and hostile ones), the
re-resolver as pure functions with a fake resolver and a fake `wg` (changed, unchanged, failure, a private answer,
many answers, two addresses, a timeout, a roam), and user-data mode's shipped script, file and units. The real
`wg` in a namespace is tests/test_dns_site_netns.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import hostile_documents as hostile
from tests.agent_fake import TRUST, fake_public_key, sign
from tests.conftest import ProgramRun, run_program
from tests.signed import verified_body
from tests.test_dynamic_site import problems, raw_mesh
from tests.test_program import AWS_SG
from tests.test_program_live import agent_json, stored_document
from tests.test_shellcheck import fragments, needs_shellcheck, shellcheck
from tests.test_units_sandbox import exposure, gateway_root, needs_offline
from wg_mesh.config import MeshConfig, StaticSite, addressing, dnsname, parse_mesh
from wg_mesh.config.reach import address_unknown, dns_name, is_dynamic
from wg_mesh.gateway import document, reresolve, ship
from wg_mesh.gateway.document import DocumentError, decode
from wg_mesh.gateway.reresolve import Reresolver, Target, decide
from wg_mesh.gateway.wgconf import parse_wg_quick_conf, wg_quick_conf
from wg_mesh.plan import metrics, reresolveunit, topology, userdata
from wg_mesh.plan.topology import PeerAddress, interface_plan

NAME = "vpn.example.com"


def dns_mesh(**office: Any) -> dict[str, Any]:
    """tests/test_dynamic_site's mesh with the office at a DNS name."""
    return raw_mesh(**({"endpoint": NAME} | office))


def directory(cfg: MeshConfig) -> dict[str, PeerAddress]:
    return {
        s.name: PeerAddress(str(s.endpoint) if isinstance(s, StaticSite) else f"198.51.100.{i + 1}",
                            fake_public_key(s.name))
        for i, s in enumerate(cfg.sites)
    }  # fmt: skip


# --- config -------------------------------------------------------------------------------------------------------


def test_a_static_site_may_be_a_dns_name_kept_lower_case_without_the_final_dot() -> None:
    cfg = parse_mesh(dns_mesh(endpoint="VPN.Example.COM."))
    office = cfg.site("office")
    assert office.endpoint == NAME and dns_name(office) == NAME  # type: ignore[union-attr]
    assert address_unknown(office) and not is_dynamic(office)
    assert cfg.reresolve_seconds == dnsname.DEFAULT_RERESOLVE_SECONDS == 30
    fixed = cfg.site("vps-fra")
    assert dns_name(fixed) is None and not address_unknown(fixed)
    assert parse_mesh(dns_mesh(endpoint="xn--bcher-kva.example")).site("office").endpoint == "xn--bcher-kva.example"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("vpn", "'vpn' is neither an IPv4 address, 'dynamic' (a site with no fixed address) nor a fully qualified"),
        ("Dynamic", "'Dynamic' is neither an IPv4 address, 'dynamic'"),
        ("1.2.3", "'1.2.3' is neither an IPv4 address"),
        ("10.0.0.300", "'10.0.0.300' is neither an IPv4 address"),
        ("vpn.example.123", "'vpn.example.123' is not a DNS name a site can have: looks like an IPv4 address"),
        ("vpn.example.com:51820", "is not a DNS name a site can have: a DNS name has letters, digits, '-' and '.' "
         "only, not a port: every gateway listens on listen_port"),
        ("vpn.example.com/x", "not '/'"),
        ("https://vpn.example.com", "a URL: write the host name alone"),
        ("vpn.example.com\n[Interface]", "not '\\n'"),
        ("ex ample.com", "not ' '"),
        ("vpn_1.example.com", "not '_'"),
        ("vpn.exämple.com", "not 'ä'"),
        ("-vpn.example.com", "the label '-vpn' starts or ends with '-'"),
        ("vpn-.example.com", "the label 'vpn-' starts or ends with '-'"),
        ("vpn..example.com", "an empty label"),
        (".example.com", "an empty label"),
        ("vpn.example.com..", "an empty label"),
        ("a" * 64 + ".example.com", "a label has at most 63 characters"),
        (".".join(["a" * 63] * 4), "a DNS name has at most 253 characters (this one 255)"),
    ],
)  # fmt: skip
def test_a_hostile_or_mistyped_name_is_one_problem_at_its_field(value: str, message: str) -> None:
    (problem,) = problems(dns_mesh(endpoint=value))
    assert problem.startswith("sites[3].endpoint: ") and message in problem, problem
    assert "\n" not in problem


def test_the_name_rules_of_the_config_and_of_the_gateway_agree() -> None:
    """The agent checks every name of a document again with its own standard-library copy of the rules."""
    names = ["vpn.example.com", "a.b", "xn--bcher-kva.example", "1.example.com", "a-b.c-d.example", "vpn",
             "vpn.example.123", "-a.example.com", "a-.example.com", "a..b", ".a.b", "a_b.example", "a b.example",
             "a" * 64 + ".com", "a" * 63 + ".com", ".".join(["a" * 63] * 4), ".".join(["a" * 63] * 3 + ["a" * 61]),
             "ä.example", "vpn.example.com\n", "vpn.example.com:1", "VPN.example.com"]  # fmt: skip
    for name in names:
        assert (dnsname.name_problem(name) is None) == (reresolve.name_problem(name) is None), name


def test_the_gateway_refuses_the_answers_the_config_refuses_as_an_endpoint() -> None:
    config_ranges = [net for net, _ in (*addressing.SPECIAL_PURPOSE, *addressing.NOT_INTERNET_REACHABLE)]
    assert sorted(reresolve.NOT_AN_ENDPOINT) == sorted(config_ranges)


@pytest.mark.parametrize("seconds", [1, 0, -5, 3601, "30s", True])
def test_the_reresolve_interval_is_bounded(seconds: object) -> None:
    (problem,) = problems(dns_mesh() | {"reresolve_seconds": seconds})
    assert problem.startswith("reresolve_seconds: "), problem


def test_endpoint_ranges_apply_to_a_dns_named_site_and_it_may_peer_with_a_dynamic_one() -> None:
    ranged = parse_mesh(dns_mesh(endpoint_ranges=["198.51.100.0/24"])).site("office")
    assert [str(r) for r in ranged.endpoint_ranges or []] == ["198.51.100.0/24"]  # type: ignore[union-attr]
    raw = dns_mesh()
    raw["sites"].append({"name": "home", "cloud": "static", "endpoint": "dynamic", "overlay_ip": "10.200.0.5",
                         "cidrs": ["10.60.0.0/24"]})  # fmt: skip
    assert is_dynamic(parse_mesh(raw).site("home"))


def test_a_dns_named_site_on_a_private_path_is_refused() -> None:
    raw = dns_mesh(private_ip="10.50.0.1") | {"delivery": "live"}
    raw["private_paths"] = [{"name": "wan", "sites": ["aws-use1", "office"], "kind": "wan"}]
    assert any(p.startswith("sites[3].endpoint: a DNS name, and office is on a private path") for p in problems(raw))


# --- the plan, wg0.conf, the firewalls ----------------------------------------------------------------------------


def test_its_peers_get_the_name_and_no_endpoint_and_its_own_plan_is_a_fixed_sites() -> None:
    cfg = parse_mesh(dns_mesh() | {"reresolve_seconds": 10})
    found = directory(cfg)
    (office,) = [p for p in interface_plan(cfg, "aws-use1", found).peers if p.name == "office"]
    assert (office.endpoint, office.endpoint_name, office.reresolve_s) == (None, f"{NAME}:51820", 10)
    others = [p for p in interface_plan(cfg, "aws-use1", found).peers if p.name != "office"]
    assert all(p.endpoint is not None and p.endpoint_name is None and p.reresolve_s is None for p in others)
    own = interface_plan(cfg, "office", found)
    assert all(p.endpoint is not None and p.endpoint_name is None for p in own.peers)
    text = wg_quick_conf(interface_plan(cfg, "vps-fra", found), "(key)")
    (section,) = [v for name, v in parse_wg_quick_conf(text)[1:] if v["PublicKey"] == [office.public_key]]
    assert "Endpoint" not in section and f"# Endpoint = {NAME}:51820 (set by wg-mesh-reresolve)" in text
    assert NAME not in topology.static_endpoints(cfg).values() and "office" not in topology.static_endpoints(cfg)


def test_the_firewalls_admit_its_ranges_or_anywhere_and_every_other_rule_stays_a_slash_32() -> None:
    cfg = parse_mesh(dns_mesh())
    found = directory(cfg)
    sources = topology.peer_source_ranges(cfg, "aws-use1", found)
    assert topology.ANYWHERE in sources and all(s.endswith("/32") for s in sources if s != topology.ANYWHERE)
    assert topology.listen_sources(cfg, "vps-fra", found) == ()  # a static host's filter: none when anywhere
    ranged = parse_mesh(dns_mesh(endpoint_ranges=["198.51.100.0/24"]))
    sources = topology.peer_source_ranges(ranged, "aws-use1", directory(ranged))
    assert "198.51.100.0/24" in sources and topology.ANYWHERE not in sources
    assert "198.51.100.0/24" in topology.listen_sources(ranged, "vps-fra", directory(ranged))
    assert not any(NAME in s for s in sources)


# --- the signed document ------------------------------------------------------------------------------------------


def _named_body(**office: object) -> dict[str, Any]:
    body = json.loads(json.dumps(hostile.base_body()))
    body["serial"] = hostile.SERIAL + 1
    peer = body["interface"]["peers"][0]
    peer.update({"endpoint": None, "endpoint_name": f"{NAME}:51820", "reresolve_s": 30} | office)
    return {k: v for k, v in body.items()}


def _decode(body: dict[str, Any]) -> document.Document:
    body = dict(body)
    body["generation"] = document.generation_of(body)
    text = sign(document.canonical(body))
    return decode(text, TRUST, min_serial=hostile.SERIAL, applied_generation=hostile.base_generation())


def test_a_document_carries_a_dns_named_peer_and_the_same_plan_comes_back() -> None:
    cfg = parse_mesh(dns_mesh())
    plan = interface_plan(cfg, "aws-use1", directory(cfg))
    body = json.loads(document.encode_body(plan, fake_public_key("aws-use1"), scope="p/s", serial=5))
    (office,) = [p for p in body["interface"]["peers"] if p["name"] == "office"]
    assert office["endpoint"] is None and office["endpoint_name"] == f"{NAME}:51820" and office["reresolve_s"] == 30
    others = [p for p in body["interface"]["peers"] if p["name"] != "office"]
    assert all("endpoint_name" not in p and "reresolve_s" not in p for p in others)  # other meshes keep their bytes
    peer = _decode(_named_body()).plan.peers[0]
    assert (peer.endpoint, peer.endpoint_name, peer.reresolve_s) == (None, f"{NAME}:51820", 30)


@pytest.mark.parametrize(
    "change",
    [
        {"endpoint_name": "vpn.example.com\n[Interface]\nPostUp = id:51820"},
        {"endpoint_name": "vpn.example.com"},
        {"endpoint_name": "vpn.example.com:0"},
        {"endpoint_name": "vpn.example.com:65536"},
        {"endpoint_name": "vpn.example.com:051820"},
        {"endpoint_name": "VPN.example.com:51820"},
        {"endpoint_name": "vpn:51820"},
        {"endpoint_name": "198.51.100.7:51820"},
        {"endpoint_name": "-x.example.com:51820"},
        {"endpoint_name": 5},
        {"endpoint_name": None},
        {"reresolve_s": None},
        {"reresolve_s": 1},
        {"reresolve_s": 3601},
        {"reresolve_s": True},
        {"endpoint": "198.51.100.7:51820"},
    ],
)
def test_a_hostile_dns_named_peer_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(DocumentError) as caught:
        _decode(_named_body(**change))
    assert caught.value.reason in (document.INVALID, document.UNSAFE)


# --- the re-resolver: pure --------------------------------------------------------------------------------------

NOW = 1_800_000_000.0
KEY = fake_public_key("office")
OTHER = fake_public_key("vps-fra")


def answers(*addresses: str) -> Any:
    def lookup(name: str, *_: object) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_DGRAM, 17, "", (a, 0)) for a in addresses]

    return lookup


def failing(name: str, *_: object) -> list[Any]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


@pytest.mark.parametrize(
    ("last", "endpoint", "handshake", "expected"),
    [
        (None, None, 0, "198.51.100.7:51820"),  # no endpoint yet (boot, a new peer, a promotion)
        (None, "198.51.100.7:51820", NOW - 5, None),  # already there
        ("198.51.100.7", "198.51.100.7:51820", NOW - 5, None),
        ("198.51.100.9", "198.51.100.9:51820", NOW - 5, "198.51.100.7:51820"),  # the name moved
        ("198.51.100.7", "203.0.113.5:40000", NOW - 5, None),  # WireGuard roamed, the name did not change: the roam
        (None, "203.0.113.5:40000", NOW - 5, None),  # the same after a restart (no memory)
        ("198.51.100.7", "203.0.113.5:40000", NOW - 200, "198.51.100.7:51820"),  # a dead session: the name is tried
        ("198.51.100.7", "203.0.113.5:40000", 0, "198.51.100.7:51820"),
    ],
)
def test_decide_settles_the_name_against_the_roam(
    last: str | None, endpoint: str | None, handshake: float, expected: str | None
) -> None:
    assert decide("198.51.100.7", 51820, last, endpoint, int(handshake), NOW) == expected


HOST_ADDRESS = "192.0.2.44"  # this gateway's public address on its NIC (a static host's, the lab's)


class FakeWg:
    """`wg show wg0 dump` and `wg set`: the peers' endpoints, changed only by `wg set`; `ip -4 -o address show`: the
    host's addresses."""

    def __init__(self, peers: dict[str, tuple[str, int]]) -> None:
        self.peers = dict(peers)  # key -> (endpoint or "(none)", handshake)
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        self.calls.append(list(argv))
        if list(argv) == ["ip", "-4", "-o", "address", "show"]:
            return 0, (
                "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
                f"2: eth0    inet {HOST_ADDRESS}/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n"
            )
        if list(argv[:3]) == ["wg", "show", "wg0"]:
            lines = ["(private)\t(public)\t51820\toff"]
            lines += [
                f"{k}\t(none)\t{e}\t10.50.0.0/24,10.200.0.4/32\t{h}\t0\t0\t25" for k, (e, h) in self.peers.items()
            ]
            return 0, "\n".join(lines) + "\n"
        assert argv[:3] == ["wg", "set", "wg0"] and argv[3] == "peer" and argv[5] == "endpoint" and len(argv) == 7
        assert argv[4] in self.peers, "a wg set that would create a peer"
        self.peers[argv[4]] = (argv[6], self.peers[argv[4]][1])
        return 0, ""

    def sets(self) -> list[list[str]]:
        return [c for c in self.calls if c[1] == "set"]


TARGET = Target("office", KEY, NAME, 51820, 30)
OWN_PUBLIC, OWN_RANGE_ADDRESS, CONFIGURED = "198.51.100.1", "203.0.114.9", "198.51.100.3"  # (what the plan says)


def fresh(lookup: Any, peers: dict[str, tuple[str, int]] | None = None) -> tuple[Reresolver, FakeWg]:
    wg = FakeWg(peers or {KEY: ("(none)", 0), OTHER: ("203.0.113.10:51820", int(NOW))})
    rr = Reresolver("wg0", wg, lookup, timeout_s=2.0)
    # what the running document and agent.json say (reresolve.taken_by): a public range of the site's own, and a peer
    # whose configured endpoint is not up in wg0 yet
    rr.taken = reresolve.own_addresses(OWN_PUBLIC, ["203.0.114.0/24"]) | reresolve.peer_endpoints(
        {"planned": f"{CONFIGURED}:51820"}, ""
    )
    return rr, wg


def test_a_new_peer_gets_the_answer_and_only_its_own_endpoint_is_set() -> None:
    rr, wg = fresh(answers("198.51.100.7"))
    assert rr.tick([TARGET], NOW) == [f"office: endpoint (none) -> 198.51.100.7:51820 ({NAME}): status 0"]
    assert wg.sets() == [["wg", "set", "wg0", "peer", KEY, "endpoint", "198.51.100.7:51820"]]
    assert wg.peers[OTHER] == ("203.0.113.10:51820", int(NOW))
    assert rr.changes == {"office": 1} and not rr.failures


def test_unchanged_is_nothing_and_a_change_is_followed_at_the_next_due_tick() -> None:
    rr, wg = fresh(answers("198.51.100.7"))
    rr.tick([TARGET], NOW)
    assert rr.tick([TARGET], NOW + 1) == []  # not due yet: not even a lookup
    assert rr.tick([TARGET], NOW + 30) == [] and len(wg.sets()) == 1  # due, unchanged
    rr.lookup = answers("198.51.100.8")
    rr.tick([TARGET], NOW + 60)
    assert wg.peers[KEY][0] == "198.51.100.8:51820" and rr.changes == {"office": 2}


def test_a_roam_is_never_overwritten_by_an_unchanged_name() -> None:
    rr, wg = fresh(answers("198.51.100.7"), {KEY: ("198.51.100.7:51820", int(NOW))})
    rr.tick([TARGET], NOW)
    wg.peers[KEY] = ("203.0.113.99:40001", int(NOW + 20))  # WireGuard followed the site's packets
    rr.tick([TARGET], NOW + 30)
    assert wg.sets() == [] and wg.peers[KEY][0] == "203.0.113.99:40001"


HOSTILE_ANSWERS = {
    "no such name": failing,
    "a private answer": answers("10.1.2.3"),
    "loopback": answers("127.0.0.1"),
    "the metadata service": answers("169.254.169.254"),
    "CGNAT": answers("100.64.1.1"),
    "multicast": answers("224.0.0.1"),
    "this network": answers("0.0.0.0"),
    "two addresses": answers("198.51.100.7", "198.51.100.8"),
    "many answers": answers(*(f"198.51.100.{i}" for i in range(1, 40))),
    "not an address": answers("evil\n[Interface]"),
    "inside a peer's AllowedIPs": answers("10.50.0.9"),
    # issue 33 item 6: never this gateway's own address, another peer's, or an address the site owns
    "another peer's endpoint": answers("203.0.113.10"),
    "an address of this host": answers(HOST_ADDRESS),
    "this site's own public address": answers(OWN_PUBLIC),
    "in this site's own range": answers(OWN_RANGE_ADDRESS),
    "another peer's configured endpoint": answers(CONFIGURED),
}


@pytest.mark.parametrize("lookup", HOSTILE_ANSWERS.values(), ids=HOSTILE_ANSWERS.keys())
def test_a_hostile_or_failed_answer_keeps_the_endpoint_and_is_counted(lookup: Any) -> None:
    rr, wg = fresh(lookup, {KEY: ("198.51.100.7:51820", int(NOW)), OTHER: ("203.0.113.10:51820", int(NOW))})
    before = dict(wg.peers)
    (line,) = rr.tick([TARGET], NOW)
    assert line.startswith("office: ") and line.endswith("; its endpoint stays")
    assert wg.sets() == [] and wg.peers == before and rr.failures == {"office": 1}
    assert 'wgmesh_reresolve_failures_total{peer="office"} 1' in rr.metrics([TARGET])


def test_a_resolver_that_hangs_is_a_failure_after_the_timeout() -> None:
    release = threading.Event()

    def hanging(name: str, *_: object) -> list[Any]:
        release.wait()
        return []

    rr, wg = fresh(hanging, {KEY: ("198.51.100.7:51820", int(NOW))})
    rr.timeout_s = 0.05
    try:
        (line,) = rr.tick([TARGET], NOW)
    finally:
        release.set()
    assert "no answer within 0.05 s" in line and wg.sets() == []


def test_a_peer_wg0_does_not_have_is_never_created_and_a_failed_dump_sets_nothing() -> None:
    rr, wg = fresh(answers("198.51.100.7"), {OTHER: ("203.0.113.10:51820", int(NOW))})
    assert rr.tick([TARGET], NOW) == [] and wg.sets() == []
    broken = Reresolver("wg0", lambda argv: (1, ""), answers("198.51.100.7"))
    assert broken.tick([TARGET], NOW) == ["wg show wg0 dump failed: no endpoint checked"]


def test_the_state_survives_a_run_and_a_damaged_one_is_ignored() -> None:
    rr, _ = fresh(answers("198.51.100.7"))
    rr.tick([TARGET], NOW)
    again, _ = fresh(answers("198.51.100.7"))
    again.restore(json.loads(json.dumps({"last": rr.last, "failures": rr.failures, "changes": rr.changes})))
    assert again.last == {KEY: "198.51.100.7"} and again.changes == {"office": 1}
    damaged, _ = fresh(answers("198.51.100.7"))
    damaged.restore({"last": {KEY: 5}, "failures": {"office": "x"}, "changes": [1]})
    damaged.restore("garbage")
    assert damaged.last == {} and damaged.failures == {} and damaged.changes == {}


# --- the agent's thread -------------------------------------------------------------------------------------------


class _Stop(Exception):
    pass


def test_the_agents_watch_sets_endpoints_in_the_active_role_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = parse_mesh(dns_mesh())
    plan = interface_plan(cfg, "aws-use1", directory(cfg))
    office = next(p for p in plan.peers if p.name == "office")
    wg = FakeWg({office.public_key: ("(none)", 0)})

    @dataclasses.dataclass
    class Result:
        returncode: int
        stdout: str

    applier = type("Applier", (), {"role": "standby", "run": lambda self, argv, stdin: Result(*wg(argv))})()
    agent = type("Agent", (), {})()
    agent.applier, agent.plan, agent.apply_lock, agent.logs = applier, plan, threading.Lock(), []
    agent.config = type("Config", (), {"interface": "wg0", "trust": TRUST})()
    agent.paths = type("Paths", (), {"path_metrics": str(tmp_path / "wg_mesh_path.prom")})()
    agent.log = agent.logs.append
    monkeypatch.setattr(reresolve.socket, "getaddrinfo", answers("198.51.100.7"))

    def one_tick(seconds: float) -> None:
        raise _Stop

    monkeypatch.setattr(reresolve.time, "sleep", one_tick)
    with pytest.raises(_Stop):
        reresolve.watch(agent).run()  # one tick in this thread: a standby sets nothing
    assert wg.sets() == []
    applier.role = "active"
    with pytest.raises(_Stop):
        reresolve.watch(agent).run()
    assert wg.sets() == [["wg", "set", "wg0", "peer", office.public_key, "endpoint", "198.51.100.7:51820"]]
    assert 'wgmesh_reresolve_changes_total{peer="office"} 1' in (tmp_path / "wg_mesh_reresolve.prom").read_text()


def test_the_agent_ships_the_module() -> None:
    assert "reresolve.py" in ship.MODULES


# --- user-data mode ---------------------------------------------------------------------------------------------


def _user_data(cfg: MeshConfig, site: str) -> dict[str, Any]:
    found = directory(cfg)
    conf = wg_quick_conf(interface_plan(cfg, site, found), "(key)")
    doc = yaml.safe_load(userdata.render_user_data(cfg, site, conf, found))
    assert isinstance(doc, dict)
    return doc


def test_the_user_data_of_its_peers_ships_the_script_its_peers_file_and_timer() -> None:
    cfg = parse_mesh(dns_mesh() | {"reresolve_seconds": 7})
    doc = _user_data(cfg, "aws-use1")
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    assert files[reresolveunit.SCRIPT_PATH] == reresolveunit.script_source()  # files.py inlined (ship.standalone)
    interface, targets, taken = reresolve.load_peers(files[reresolveunit.CONFIG_PATH])
    assert interface == "wg0" and targets == [Target("office", fake_public_key("office"), NAME, 51820, 7)]
    own = interface_plan(cfg, "aws-use1", directory(cfg)).public_ip
    assert taken == reresolve.own_addresses(own, [str(c) for c in cfg.site("aws-use1").cidrs]) and own is not None
    assert "OnUnitActiveSec=7s" in files[reresolveunit.TIMER_PATH]
    assert (
        f"ExecStart=/usr/bin/python3 {reresolveunit.SCRIPT_PATH} /etc/wg-mesh/reresolve.json"
        in files[reresolveunit.SERVICE_PATH]
    )
    assert ["systemctl", "enable", "--now", "wg-mesh-reresolve.timer"] in doc["runcmd"]
    # the DNS-named site itself has no DNS-named peer: none of it
    assert reresolveunit.SCRIPT_PATH not in {f["path"] for f in _user_data(cfg, "office")["write_files"]}


def test_the_shipped_script_runs_once_as_the_timer_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = parse_mesh(dns_mesh())
    plan = interface_plan(cfg, "aws-use1", directory(cfg))
    config, state = tmp_path / "reresolve.json", tmp_path / "state.json"
    config.write_text(reresolveunit.peers_file(plan) or "")
    key = fake_public_key("office")
    wg = FakeWg({key: ("(none)", 0)})
    monkeypatch.setattr(reresolve.socket, "getaddrinfo", answers("198.51.100.7"))
    monkeypatch.setattr(reresolve, "METRICS_PATH", str(tmp_path / "reresolve.prom"))
    assert reresolve.main([str(config), str(state)], wg) == 0
    assert wg.peers[key][0] == "198.51.100.7:51820"
    assert json.loads(state.read_text())["last"] == {key: "198.51.100.7"}
    assert reresolve.main([str(config), str(state)], wg) == 0
    assert len(wg.sets()) == 1  # unchanged on the second run: the state remembered it
    config.write_text('{"interface": "wg0; reboot", "peers": []}')
    assert reresolve.main([str(config), str(state)], wg) == 2


def test_a_mesh_without_dns_names_ships_none_of_it() -> None:
    cfg = parse_mesh(raw_mesh() | {"sites": raw_mesh()["sites"][:3]})
    for site in cfg.sites:
        assert reresolveunit.peers_file(interface_plan(cfg, site.name, directory(cfg))) is None


def _user_data_text(cfg: MeshConfig, site: str) -> str:
    found = directory(cfg)
    return userdata.render_user_data(cfg, site, wg_quick_conf(interface_plan(cfg, site, found), "(key)"), found)


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init not installed")
def test_the_user_data_with_the_reresolver_passes_cloud_init_schema(tmp_path: Path) -> None:
    path = tmp_path / "aws.yaml"
    path.write_text(_user_data_text(parse_mesh(dns_mesh()), "aws-use1"))
    done = subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_shellcheck
def test_every_fragment_of_that_user_data_is_shellcheck_clean() -> None:
    found = fragments(yaml.safe_load(_user_data_text(parse_mesh(dns_mesh()), "vps-fra")))
    problems = [f"{what} ({shell}):\n{report}" for what, shell, text in found if (report := shellcheck(shell, text))]
    assert not problems, "\n\n".join(problems)


@needs_offline
def test_the_reresolve_service_is_sandboxed(tmp_path: Path) -> None:
    """As tests/test_units_sandbox.py rates every shipped unit: at most 4.0, as the agent's and the metrics'."""
    doc = yaml.safe_load(_user_data_text(parse_mesh(dns_mesh()), "gcp-euw3"))
    root, units = gateway_root(tmp_path, doc)
    assert "wg-mesh-reresolve.service" in units
    assert exposure(root, "wg-mesh-reresolve.service") <= 4.0


def test_the_aws_user_data_with_the_reresolver_fits_ec2s_limit() -> None:
    cfg = parse_mesh(dns_mesh())
    size = userdata.estimated_size(cfg, "aws-use1", exact=True)
    without = userdata.estimated_size(parse_mesh(raw_mesh()), "aws-use1", exact=True)
    print(f"\n  AWS user data gzip'd: {size} bytes with a DNS-named peer, {without} with a dynamic one instead")
    assert size < userdata.AWS_USER_DATA_LIMIT


# --- the program under mocks --------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["user-data", "live"])
def applied_named(request: pytest.FixtureRequest) -> ProgramRun:
    run = run_program(dns_mesh() | {"delivery": request.param}, preview=False, stack="edge")
    assert run.error is None, run.error
    return run


def test_the_program_keeps_the_name_opens_the_port_and_never_checks_it_as_an_address(applied_named: ProgramRun) -> None:
    assert applied_named.exports["sites"].value["office"]["public_ip"] == NAME  # not refused as an IPv4 address
    sg = applied_named.named(AWS_SG, "aws-use1-sg")
    (udp,) = [rule for rule in sg.inputs["ingress"] if rule["protocol"] == "udp"]
    assert "0.0.0.0/0" in udp["cidrBlocks"] and all(c.endswith("/32") for c in udp["cidrBlocks"] if c != "0.0.0.0/0")
    assert all("0.0.0.0/0" not in r.get("cidrBlocks", []) for r in sg.inputs["ingress"] if r["protocol"] != "udp")
    cfg = parse_mesh(applied_named.raw)
    key = str(applied_named.exports["sites"].value["office"]["public_key"])
    for site in ("aws-use1", "gcp-euw3", "vps-fra"):
        if cfg.delivery == "user-data":
            conf = applied_named.exports["wireguard_configs"].value[site]
            (peer,) = [p for name, p in parse_wg_quick_conf(conf) if name == "Peer" and p["PublicKey"] == [key]]
            assert "Endpoint" not in peer and f"# Endpoint = {NAME}:51820" in conf, site
        else:
            model = cfg.site(site)
            body = verified_body(stored_document(applied_named, model), agent_json(applied_named, model)["trust"])
            (office,) = [p for p in body["interface"]["peers"] if p["name"] == "office"]
            assert office["endpoint"] is None and office["endpoint_name"] == f"{NAME}:51820", site


def test_a_dns_named_peer_is_mapped_as_configured_not_dynamic() -> None:
    """Its gateways dial it (the re-resolver sets its endpoint): the dynamic-site alert and doctor's dynamic check are
    not for it; WgMeshHandshakeStale is."""
    cfg = parse_mesh(dns_mesh())
    peers = json.loads(metrics.peer_mapping(cfg, "aws-use1", directory(cfg)))["peers"]
    office = next(p for p in peers if p["site"] == "office")
    assert "kind" not in office, office
