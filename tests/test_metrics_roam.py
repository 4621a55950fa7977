"""Roaming peers in the gateway metrics (issue 24 item 4): the peers' kinds from the mapping, their current endpoints
as a bounded label, and when each last roamed, from a small state file kept across runs (wg_mesh/gateway/wgmetrics.py).
Hostile `wg show` output included: over-long and malformed endpoints, IPv6, many peers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import roamlab
from tests.test_dynamic_site import raw_mesh
from tests.test_render import directory, fake_public_key
from wg_mesh.config import parse_mesh
from wg_mesh.gateway import mapping, wgmetrics
from wg_mesh.gateway.wgmetrics import INVALID, Seen, endpoint_label, track
from wg_mesh.plan import metrics

NOW = 1_800_000_000.0
OFFICE, VPS, GCP = fake_public_key("office"), fake_public_key("vps-fra"), fake_public_key("gcp-euw3")


def dump_line(key: str, endpoint: str = "(none)", handshake: int = 0, interface: str = "wg0") -> str:
    return f"{interface}\t{key}\t(none)\t{endpoint}\t10.0.0.0/8\t{handshake}\t0\t0\t25"


def aws_mapping() -> wgmetrics.Mapping:
    """aws-use1's mapping in the dynamic test mesh: gcp-euw3 and vps-fra configured, office dynamic."""
    cfg = parse_mesh(raw_mesh())
    return wgmetrics.parse_mapping(metrics.peer_mapping(cfg, "aws-use1", directory(cfg)))


def snap(*lines: str, now: float = NOW) -> wgmetrics.Snapshot:
    peers = tuple(wgmetrics.parse_dump("\n".join(lines)))
    return wgmetrics.Snapshot(now=now, peers=peers, link=None, ip_forward=None, routes=None)


def samples(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))}


# --- endpoints -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shown", "label"),
    [
        ("203.0.113.7:51820", "203.0.113.7:51820"),
        ("203.0.113.7:0051820", "203.0.113.7:51820"),
        ("[2001:DB8:0:0::1]:40000", "[2001:db8::1]:40000"),  # IPv6 as wg prints it, canonical
        ("[fe80::1%eth0]:51820", "[fe80::1%eth0]:51820"),
        ("[::ffff:203.0.113.7]:1", "[::ffff:cb00:7107]:1"),
        (None, None),
    ],
)
def test_an_endpoint_label_is_the_canonical_address_and_port(shown: str | None, label: str | None) -> None:
    assert endpoint_label(shown) == label


@pytest.mark.parametrize(
    "shown",
    [
        "203.0.113.7",  # no port
        "203.0.113.7:65536",
        "203.0.113.7:-1",
        "203.0.113.7:５１８２０",  # digits, but not ASCII ones
        "2001:db8::1:51820",  # IPv6 without its brackets
        "[203.0.113.7]:51820",  # brackets around IPv4
        "999.0.113.7:51820",
        "office.example.com:51820",  # a name is not what WireGuard shows
        '203.0.113.7:51820"} 1\nwgmesh_forged 1',  # a label that tries to end itself
        "[fe80::1%a b]:51820",  # a scope with a space
        "[fe80::1%" + "x" * 60 + "]:51820",  # longer than any address
        "1" * 100_000,
        "",
    ],
)
def test_anything_else_is_invalid_and_bounded(shown: str) -> None:
    assert endpoint_label(shown) == INVALID


def test_hostile_dump_lines_give_bounded_labels_or_a_clear_error() -> None:
    long_endpoint = "[" + "1:" * 50_000 + "]:51820"
    peers = wgmetrics.parse_dump(dump_line(OFFICE, long_endpoint))
    assert endpoint_label(peers[0].endpoint) == INVALID
    with pytest.raises(ValueError, match=r"^wg dump line 1: expected 5 or 9 fields, got 10$"):
        wgmetrics.parse_dump(dump_line(OFFICE) + "\t" + "x" * 1_000_000)
    text = wgmetrics.format_metrics(aws_mapping(), snap(dump_line(OFFICE, long_endpoint)))
    assert 'endpoint="invalid"' in text and max(len(line) for line in text.splitlines()) < 300


def test_many_peers_give_endpoint_series_for_the_mapped_ones_only() -> None:
    """Peers on wg0 that the mapping does not know (added by hand, or a flood) get no endpoint or roam series: those
    are bounded by the mesh's size, one of each per mapped peer."""
    strangers = [dump_line(f"stranger{i:05d}=", f"198.51.100.{i % 250}:{1024 + i}") for i in range(5000)]
    mine = [dump_line(OFFICE, "203.0.113.7:40000"), dump_line(VPS, "203.0.113.10:51820")]
    text = wgmetrics.format_metrics(aws_mapping(), snap(*strangers, *mine), roams={})
    got = samples(text)
    assert len([k for k in got if k.startswith("wgmesh_peer_endpoint_info")]) == 2
    assert len([k for k in got if k.startswith("wgmesh_peer_last_roam_timestamp_seconds")]) == 2
    assert len([k for k in got if k.startswith("wgmesh_peer_latest_handshake_seconds")]) == 5002  # as before
    assert set(wgmetrics.observed(aws_mapping(), snap(*strangers, *mine))) == {OFFICE, VPS}


# --- kinds -----------------------------------------------------------------------------------------------------------


def test_the_mapping_says_which_peers_are_dynamic() -> None:
    kinds = {p.site: p.kind for p in aws_mapping().peers}
    assert kinds == {"gcp-euw3": "configured", "vps-fra": "configured", "office": "dynamic"}
    cfg = parse_mesh(raw_mesh())
    office = wgmetrics.parse_mapping(metrics.peer_mapping(cfg, "office", directory(cfg)))
    assert {p.kind for p in office.peers} == {"configured"}  # the dynamic site dials every peer


def test_a_relayed_site_is_the_relays_entry_with_its_own_name() -> None:
    """The mapping entry the relay branch adds (wg_mesh/gateway/mapping.py's doc): the relayed site is reached through
    the relay's peer entry: not expected on wg0 as a peer of its own, its prefixes routed into wg0, and its info series
    says through whom. Nothing else changes in the exporter."""
    cfg = parse_mesh(raw_mesh())
    doc = json.loads(metrics.peer_mapping(cfg, "vps-fra", directory(cfg)))
    doc["peers"].append({"site": "home", "public_key": GCP, "allowed_ips": ["10.60.0.0/24"], "kind": "relayed",
                         "via": "gcp-euw3"})  # fmt: skip
    parsed = wgmetrics.parse_mapping(json.dumps(doc))
    home = parsed.peers[-1]
    assert (home.site, home.public_key, home.kind, home.via) == ("home", GCP, "relayed", "gcp-euw3")
    assert [p.site for p in parsed.direct] == ["aws-use1", "gcp-euw3", "office"]
    assert parsed.site_of(GCP) == "gcp-euw3"
    got = samples(wgmetrics.format_metrics(parsed, snap(dump_line(GCP, "192.0.2.2:51820"))))
    base = 'site="vps-fra",interface="wg0"'
    assert got[f'wgmesh_peer_info{{{base},peer_site="home",peer="{GCP}",kind="relayed",via="gcp-euw3"}}'] == 1
    assert got[f'wgmesh_peer_info{{{base},peer_site="gcp-euw3",peer="{GCP}",kind="configured"}}'] == 1
    assert got['wgmesh_peers_expected{site="vps-fra"}'] == 3
    assert [k for k in got if "endpoint_info" in k] == [
        f'wgmesh_peer_endpoint_info{{{base},peer_site="gcp-euw3",peer="{GCP}",endpoint="192.0.2.2:51820"}}'
    ]


def test_a_mapping_without_a_kind_is_configured_and_a_strange_one_unknown() -> None:
    """No `kind`: configured (so a mesh without dynamic sites keeps its mapping byte for byte, and its user data)."""
    doc = {"site": "a", "interface": "wg0", "peers": [
        {"site": "b", "public_key": VPS, "allowed_ips": []},
        {"site": "c", "public_key": OFFICE, "allowed_ips": [], "kind": 'dynamic"} 1'},
        {"site": "d", "public_key": GCP, "allowed_ips": [], "kind": ["dynamic"]},
    ]}  # fmt: skip
    assert [p.kind for p in wgmetrics.parse_mapping(json.dumps(doc)).peers] == ["configured", "unknown", "unknown"]
    assert all(f"`{kind}`" in (mapping.__doc__ or "") for kind in wgmetrics.KINDS)  # the kinds the builder documents
    cfg = parse_mesh(raw_mesh())
    aws = json.loads(metrics.peer_mapping(cfg, "aws-use1", directory(cfg)))
    assert [p.get("kind") for p in aws["peers"]] == [None, None, "dynamic"]


# --- roaming ----------------------------------------------------------------------------------------------------------


def test_a_first_address_is_learnt_and_a_change_is_a_roam() -> None:
    state = track({}, {OFFICE: None}, NOW)
    assert state == {}  # not heard yet: nothing to remember
    state = track(state, {OFFICE: "203.0.113.7:40000"}, NOW + 15)
    assert state == {OFFICE: Seen("203.0.113.7:40000", 0.0)}  # learnt, not roamed
    assert track(state, {OFFICE: "203.0.113.7:40000"}, NOW + 30) == state
    state = track(state, {OFFICE: "198.51.100.9:40001"}, NOW + 45)
    assert state == {OFFICE: Seen("198.51.100.9:40001", NOW + 45)}
    assert track(state, {}, NOW + 60) == {}  # a peer gone from wg0 is forgotten


def test_an_endpoint_lost_and_back_is_no_roam_and_another_one_is() -> None:
    """wg0 restarted (or the gateway rebooted): a dynamic peer has no endpoint until it dials again."""
    state = {OFFICE: Seen("203.0.113.7:40000", NOW)}
    lost = track(state, {OFFICE: None}, NOW + 15)
    assert lost == state
    assert track(lost, {OFFICE: "203.0.113.7:40000"}, NOW + 30) == state
    assert track(lost, {OFFICE: "198.51.100.9:40000"}, NOW + 30) == {OFFICE: Seen("198.51.100.9:40000", NOW + 30)}


def run(tmp_path: Path, *lines: str, now: float) -> dict[str, float]:
    """One run of the script's main (a fresh process every 15 s on a gateway), with --state; what it observes is
    `lines` (its collect replaced for the call)."""
    mapping_file = tmp_path / "peers.json"
    cfg = parse_mesh(raw_mesh())
    mapping_file.write_text(metrics.peer_mapping(cfg, "aws-use1", directory(cfg)))
    out, state = tmp_path / "wg_mesh.prom", tmp_path / "state" / "endpoints"
    args = ["--mapping", str(mapping_file), "--out", str(out), "--state", str(state)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wgmetrics, "collect", lambda m: snap(*lines, now=now))
        assert wgmetrics.main(args) == 0
    return {k: v for k, v in samples(out.read_text()).items() if "roam" in k or "endpoint_info" in k}


def roam_key(site: str, key: str) -> str:
    return f'wgmesh_peer_last_roam_timestamp_seconds{{site="aws-use1",interface="wg0",peer_site="{site}",peer="{key}"}}'


def test_runs_of_the_script_find_the_roam_through_the_state_file(tmp_path: Path) -> None:
    first = run(tmp_path, dump_line(OFFICE, "203.0.113.7:40000"), dump_line(VPS, "203.0.113.10:51820"), now=NOW)
    assert first[roam_key("office", OFFICE)] == 0 and first[roam_key("vps-fra", VPS)] == 0
    state = tmp_path / "state" / "endpoints"
    assert state.read_text().splitlines() == sorted(
        [f"{OFFICE} 203.0.113.7:40000 0.0", f"{VPS} 203.0.113.10:51820 0.0"]
    )
    written = state.stat().st_mtime_ns
    same = run(tmp_path, dump_line(OFFICE, "203.0.113.7:40000"), dump_line(VPS, "203.0.113.10:51820"), now=NOW + 15)
    assert same == first and state.stat().st_mtime_ns == written  # nothing changed: not rewritten
    moved = run(tmp_path, dump_line(OFFICE, "198.51.100.9:1024"), dump_line(VPS, "203.0.113.10:51820"), now=NOW + 30)
    assert moved[roam_key("office", OFFICE)] == NOW + 30 and moved[roam_key("vps-fra", VPS)] == 0
    office = 'wgmesh_peer_endpoint_info{site="aws-use1",interface="wg0",peer_site="office",peer="%s",endpoint="%s"}'
    assert moved[office % (OFFICE, "198.51.100.9:1024")] == 1
    assert office % (OFFICE, "203.0.113.7:40000") not in moved  # one endpoint series per peer at a time
    # a reboot: wg0 has no endpoint for the office until it dials; the state file keeps what it was
    rebooted = run(tmp_path, dump_line(OFFICE), dump_line(VPS, "203.0.113.10:51820"), now=NOW + 300)
    assert rebooted[roam_key("office", OFFICE)] == NOW + 30
    assert not any('peer_site="office"' in k and "endpoint_info" in k for k in rebooted)


def test_a_missing_broken_or_foreign_state_is_a_fresh_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state" / "endpoints"
    state.parent.mkdir()
    for junk in (b"\xff\xfe garbage\n", b"x" * (wgmetrics.MAX_STATE_BYTES + 10), f"{OFFICE} 1.2.3.4 5\n".encode(),
                 f"{OFFICE} 1.2.3.4:5 yesterday\n".encode(), f"{OFFICE} 1.2.3.4:5 1e9\n".encode()):  # fmt: skip
        state.write_bytes(junk)
        got = run(tmp_path, dump_line(OFFICE, "203.0.113.7:40000"), now=NOW)
        assert got[roam_key("office", OFFICE)] == 0, junk[:40]  # no roam made up from junk
    assert wgmetrics.parse_state(f"{OFFICE} 1.2.3.4:5 12.5\nnot a line\n") == {OFFICE: Seen("1.2.3.4:5", 12.5)}
    state.unlink()
    state.parent.rmdir()
    state.parent.write_text("a file where the state directory should be")  # cannot be saved, not even by root
    got = run(tmp_path, dump_line(OFFICE, "203.0.113.7:40000"), now=NOW)
    assert not any("roam" in k for k in got) and any("endpoint_info" in k for k in got)  # each run would roam again
    assert "cannot save the state" in capsys.readouterr().err


def test_without_state_there_are_no_roam_series() -> None:
    text = wgmetrics.format_metrics(aws_mapping(), snap(dump_line(OFFICE, "203.0.113.7:40000")))
    assert "last_roam" not in text and 'kind="dynamic"' in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (prometheus)")
def test_promtool_lints_the_new_series() -> None:
    lines = (dump_line(OFFICE, "[2001:db8::1]:40000"), dump_line(VPS, "bogus"), dump_line(GCP, "192.0.2.2:51820"))
    roams = {OFFICE: Seen("[2001:db8::1]:40000", NOW - 5)}
    text = wgmetrics.format_metrics(aws_mapping(), snap(*lines), roams=roams)
    assert re.search(r'endpoint="\[2001:db8::1\]:40000"', text) and 'endpoint="invalid"' in text
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the lab assertion (tests/roamlab.py) on the dynamic check's data ---------------------------------------------


def lab_data(before: str, after: str) -> dict[str, object]:
    """The shape of wg_mesh/lab/checks/dynamiccheck.py's data: each other gateway's view of the dynamic site."""
    rows = lambda endpoint: [{"gateway": g, "peer": "office", "configured": None, "endpoint": endpoint, "ok": True}  # noqa: E731
                             for g in ("aws-use1", "gcp-euw3", "vps-fra")]  # fmt: skip
    return {"learnt": rows(before), "roam": {"site": "office", "learnt_after": rows(after)}}


def test_the_lab_assertion_sees_a_roam_and_fails_without_one() -> None:
    cfg = parse_mesh(raw_mesh())
    roamlab.assert_the_metrics_follow_the_roam(cfg, lab_data("203.0.113.1:51820", "203.0.113.254:51820"))
    with pytest.raises(AssertionError):  # the same address before and after: no roam to see
        roamlab.assert_the_metrics_follow_the_roam(cfg, lab_data("203.0.113.1:51820", "203.0.113.1:51820"))
    with pytest.raises(AssertionError):  # what WireGuard never shows
        roamlab.assert_the_metrics_follow_the_roam(cfg, lab_data("203.0.113.1:51820", "somewhere"))


def test_a_roam_drill_step_is_read_as_the_lab_assertion_s_data() -> None:
    cfg = parse_mesh(raw_mesh())
    step = {"site": "office", "endpoints_before": {"aws-use1": "203.0.113.1:51820", "gcp-euw3": None},
            "endpoints": {"aws-use1": "203.0.113.254:40000", "gcp-euw3": "203.0.113.254:40001"}}  # fmt: skip
    data = roamlab.drill_data(step)
    assert data["roam"]["learnt_after"] == [{"gateway": "aws-use1", "endpoint": "203.0.113.254:40000"}]  # no before
    roamlab.assert_the_metrics_follow_the_roam(cfg, data)
    with pytest.raises(AssertionError):  # a gateway that did not move its endpoint saw no roam
        roamlab.assert_the_metrics_follow_the_roam(
            cfg, roamlab.drill_data({**step, "endpoints": step["endpoints_before"]})
        )
