"""Announced key rotation, the program's side (wg_mesh/announce.py, issue 20 item 5), under Pulumi mocks: each live
document carries its site's key_at (the stamp of its key_epoch + rotation_lead_seconds) and each peer entry that
peer's; a rotation moves only the rotated site's moment; the lead's bounds."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ProgramRun, run_program, with_delivery
from tests.test_program import mesh_of
from tests.test_program_live import agent_json, stored_document
from wg_mesh.config import MAX_ROTATION_LEAD_S, MIN_ROTATION_LEAD_S, ConfigError, StaticSite
from wg_mesh.gateway import document
from wg_mesh.plan import live
from wg_mesh.plan.topology import PeerAddress
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools import localcmd
from wg_mesh.tools.stackfile import read_raw
from wg_mesh.tools.stamp import CREATE

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "command:local:Command"


def prod(delivery: str = "live", **mesh: Any) -> dict[str, Any]:
    raw = with_delivery(copy.deepcopy(read_raw(ROOT / "Pulumi.prod.yaml")), delivery)
    assert isinstance(raw, dict)
    return {**raw, **mesh}


def applied(raw: dict[str, Any]) -> ProgramRun:
    run = run_program(raw, preview=False, stack="prod")
    assert run.error is None, run.error
    return run


def stamped(run: ProgramRun, site: str) -> int:
    """What the site's key stamp printed (the mocks: a moment from its name and triggers)."""
    return int(run.named(COMMAND, f"{site}-key-at").outputs["stdout"])


def documents(run: ProgramRun) -> dict[str, document.Document]:
    """Each site's stored document, as its agent decodes it (the trust of its own agent.json)."""
    cfg = mesh_of(run)
    return {
        s.name: document.decode(stored_document(run, s), document.parse_trust(agent_json(run, s)["trust"]))
        for s in cfg.sites
    }


@pytest.fixture(scope="module")
def rotated() -> tuple[ProgramRun, ProgramRun]:
    """prod in live mode, then the same with aws-use1's key_epoch bumped."""
    raw = prod()
    bumped = copy.deepcopy(raw)
    site = next(s for s in bumped["sites"] if s["name"] == "aws-use1")
    site["key_epoch"] = site.get("key_epoch", 0) + 1
    return applied(raw), applied(bumped)


def test_each_document_carries_its_key_at_and_each_peer_entry_the_peers(rotated: tuple[ProgramRun, ProgramRun]) -> None:
    run = rotated[0]
    cfg, docs = mesh_of(run), documents(run)
    assert cfg.rotation_lead_seconds == 120
    for site in cfg.sites:
        stamp = run.named(COMMAND, f"{site.name}-key-at")
        assert stamp.inputs["triggers"] == [str(site.key_epoch)] and stamp.inputs["create"] == CREATE
        assert stamp.inputs["update"] == localcmd.KEEP_OUTPUT  # a new command text keeps the moment
        assert docs[site.name].key_at == stamped(run, site.name) + 120
        assert {p.name: p.key_at for p in docs[site.name].plan.peers} == {
            p: docs[p].key_at for p in docs if p != site.name
        }


def test_a_rotation_moves_only_the_rotated_sites_moment(rotated: tuple[ProgramRun, ProgramRun]) -> None:
    before, after = (documents(r) for r in rotated)
    assert before["aws-use1"].public_key != after["aws-use1"].public_key
    moved = {n for n in before if before[n].key_at != after[n].key_at}
    assert moved == {"aws-use1"}
    for name, doc in after.items():
        if name == "aws-use1":
            continue
        entry = next(p for p in doc.plan.peers if p.name == "aws-use1")
        assert entry.public_key == after["aws-use1"].public_key and entry.key_at == after["aws-use1"].key_at
        assert doc.public_key == before[name].public_key


def test_the_lead_moves_key_at() -> None:
    run = applied(prod(rotation_lead_seconds=3600))
    assert all(d.key_at == stamped(run, n) + 3600 for n, d in documents(run).items())


def test_user_data_delivery_has_no_key_stamp() -> None:
    run = applied(prod("user-data"))
    assert not [r for r in run.of_type(COMMAND) if r.name.endswith("-key-at")]


@pytest.mark.parametrize("lead", [MIN_ROTATION_LEAD_S - 1, MAX_ROTATION_LEAD_S + 1, "120"])
def test_a_lead_out_of_bounds_is_refused(lead: object) -> None:
    with pytest.raises(ConfigError, match="rotation_lead_seconds"):
        load_mesh(prod(rotation_lead_seconds=lead))
    assert load_mesh(prod(rotation_lead_seconds=MIN_ROTATION_LEAD_S)).rotation_lead_seconds == MIN_ROTATION_LEAD_S


def gate_of(run: ProgramRun, site: str) -> dict[str, Any]:
    return run.named(COMMAND, f"{site}-ready").inputs


def test_a_new_gateway_in_a_rotations_up_takes_traffic_no_earlier_than_the_switch(
    rotated: tuple[ProgramRun, ProgramRun],
) -> None:
    """Issue 32 item 7: a gateway replaced in the `up` that rotates a key (its own or a peer's) boots with the new keys
    (a fresh agent holds none: wg_mesh.gateway.rotation), so its gate holds the address until the switch
    (`--not-before`, gatepoll.hold_until) while the old gateway, reading the same store, switches at key_at with
    everyone. Only `create` holds (a new instance): the rotation changes every gate's `create`, and the `update` that
    pulumi-command runs for the same instance does not wait. Keys never rotated (key_epoch 0: a new mesh) hold
    nothing."""
    before, after = rotated
    key_at = documents(after)["aws-use1"].key_at
    for site in mesh_of(before).sites:
        if isinstance(site, StaticSite):
            continue
        old, new = gate_of(before, site.name), gate_of(after, site.name)
        assert "--not-before" not in old["create"] and "--not-before" not in old["update"]  # nothing rotated yet
        assert f"--not-before {key_at}" in new["create"], site.name  # every site peers aws-use1: held until its switch
        # the same instance's `update` (what pulumi-command runs for it) never holds; a new instance's `create` does
        assert new["update"] == old["update"] and "--update" in new["update"] and new["triggers"] == old["triggers"]


def test_the_floor_is_the_latest_switch_of_a_key_rotated_at_least_once(rotated: tuple[ProgramRun, ProgramRun]) -> None:
    cfg = mesh_of(rotated[0])
    directory = {s.name: PeerAddress("198.51.100.1", f"key-{s.name}", key_at=1000 + i) for i, s in enumerate(cfg.sites)}
    site = cfg.sites[0].name
    assert live.switch_floor(cfg, site, directory, 999) is None  # every key_epoch 0: a first key replaces none
    rotated = cfg.model_copy(update={"sites": [s.model_copy(update={"key_epoch": 1}) for s in cfg.sites]})
    peers = [1000 + i for i, s in enumerate(cfg.sites) if s.name != site]
    assert live.switch_floor(rotated, site, directory, 999) == max(peers)
    assert live.switch_floor(rotated, site, directory, 5000) == 5000  # its own, later
