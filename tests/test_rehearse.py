"""The change rehearsal's pure parts (wg_mesh/lab/rehearse): one fabric for two configs (layout.py), what it counts as a
violation between two steps (judge.state_violations), the change catalogue (catalogue.py), the keys across a change
(keys.py). No root, no lab: the rehearsal itself is tests/test_lab_rehearse.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from wg_mesh.config import ConfigError
from wg_mesh.lab.rehearse.catalogue import changes, renamed
from wg_mesh.lab.rehearse.judge import state_violations
from wg_mesh.lab.rehearse.keys import KeyRing
from wg_mesh.lab.rehearse.layout import LayoutError, layout
from wg_mesh.tools.stackfile import load, read_raw

PREFIX = "wgl0abc"


def _cfg(tmp: Path, name: str, raw: Any) -> Any:
    path = tmp / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
    return load(path)


@pytest.fixture
def prod() -> Any:
    return read_raw(REPO / "Pulumi.prod.yaml")


def test_a_site_keeps_its_place_in_the_fabric_across_a_change(tmp_path: Path, prod: Any) -> None:
    """A removed site keeps its index (its lab address), an added one comes after BEFORE's; each state's plan has only
    its own sites, and a workload may be routed any range either config has."""
    fewer = copy.deepcopy(prod)
    fewer["sites"] = [s for s in prod["sites"] if s["name"] != "gcp-euw3"]
    added = {"name": "vps-new", "cloud": "static", "endpoint": "203.0.113.50", "overlay_ip": "10.200.0.9",
             "cidrs": ["10.60.0.0/24"]}  # fmt: skip
    fewer["sites"].append(added)
    lay = layout(_cfg(tmp_path, "a", prod), _cfg(tmp_path, "b", fewer), PREFIX)
    assert [s.name for s in lay.fabric.sites] == ["aws-use1", "gcp-euw3", "vps-fra", "vps-new"]
    assert lay.fabric.site("vps-new").public_ip != lay.fabric.site("gcp-euw3").public_ip
    assert [s.name for s in lay.state_plan("before").sites] == ["aws-use1", "gcp-euw3", "vps-fra"]
    assert [s.name for s in lay.state_plan("after").sites] == ["aws-use1", "vps-fra", "vps-new"]
    assert lay.kept == ["aws-use1", "vps-fra"]
    routes = {str(r) for r in lay.fabric.site("aws-use1").host_routes}
    assert {"10.100.0.0/16", "10.60.0.0/24", "192.168.50.0/24"} <= routes
    for site in lay.fabric.sites:  # every cloud site has places for machines beside each other
        assert (site.standby_ns is not None) == site.is_cloud


def test_a_renamed_site_is_one_site_under_both_names(tmp_path: Path, prod: Any) -> None:
    after = renamed(prod, "aws-use1", "aws-use1-new")
    lay = layout(_cfg(tmp_path, "a", prod), _cfg(tmp_path, "b", after), PREFIX)
    assert lay.renamed == {"aws-use1-new": "aws-use1"}
    assert lay.fabric_name("aws-use1-new") == "aws-use1" and lay.after_name("aws-use1") == "aws-use1-new"
    before, new = lay.state_plan("before").site("aws-use1"), lay.state_plan("after").site("aws-use1-new")
    assert (before.gateway_ns, before.public_ip) == (new.gateway_ns, new.public_ip)
    ring = KeyRing()  # Pulumi's aliases keep the key: the same key under both names
    assert ring.keys(lay.before).public["aws-use1"] == ring.keys(lay.after, lay.renamed).public["aws-use1-new"]


def test_a_key_epoch_is_a_new_key_and_only_that(tmp_path: Path, prod: Any) -> None:
    bumped = copy.deepcopy(prod)
    bumped["sites"][1]["key_epoch"] = 1
    ring = KeyRing()
    old, new = ring.keys(_cfg(tmp_path, "a", prod)), ring.keys(_cfg(tmp_path, "b", bumped))
    assert old.public["gcp-euw3"] != new.public["gcp-euw3"] and old.public["aws-use1"] == new.public["aws-use1"]
    assert old.signing == new.signing
    assert "private" not in repr(new) and new.private["gcp-euw3"] not in repr(new)


def test_what_one_fabric_cannot_hold_is_refused_before_anything_is_built(tmp_path: Path, prod: Any) -> None:
    moved = copy.deepcopy(prod)
    moved["sites"][0]["cidrs"] = ["10.11.0.0/16"]
    with pytest.raises(LayoutError) as refused:
        layout(_cfg(tmp_path, "a", prod), _cfg(tmp_path, "b", moved), PREFIX)
    said = str(refused.value)
    assert "aws-use1: its cidrs change" in said


def test_the_clouds_state_between_two_steps_is_judged() -> None:
    kept = {"10.100.0.0/16", "10.200.0.0/24"}
    ok = state_violations("s", "b", dict.fromkeys(kept, "b"), {"a", "b"}, True, kept)
    assert ok == []
    nothing = state_violations("s", None, {"10.100.0.0/16": None, "10.200.0.0/24": "a"}, {"b"}, True, kept)
    assert nothing == [
        "address on nothing: s's public address is on no gateway",
        "route on nothing: s's route to 10.100.0.0/16 goes nowhere",
        "route on a deleted gateway: s's route to 10.200.0.0/24 is through place a",
    ]
    assert state_violations("s", "a", {}, {"b"}, True, set()) == [
        "address on a deleted gateway: s's public address is on place a"
    ]
    # an added site before its address was ever set, a site with no machine (not yet, or gone): nothing to judge
    assert state_violations("s", None, {}, {"a"}, False, set()) == []
    assert state_violations("s", None, {"10.100.0.0/16": None}, set(), True, kept) == []


@pytest.mark.parametrize(
    "stack",
    ["Pulumi.dev.yaml", "Pulumi.prod.yaml", "examples/edge/Pulumi.edge.yaml", "examples/underlay/Pulumi.underlay.yaml"],
)
def test_every_change_of_the_catalogue_is_a_valid_config(tmp_path: Path, stack: str) -> None:
    raw = read_raw(REPO / stack)
    found = list(changes(raw))
    names = {c.name for c in found}
    assert {"site added", "site removed", "a site's key rotated", "site renamed"} <= names
    for i, change in enumerate(found):
        for which, config in (("before", change.before), ("after", change.after)):
            try:
                _cfg(tmp_path, f"{i}-{which}", config)
            except ConfigError as exc:
                pytest.fail(f"{stack}: {change.name}: {which} is invalid: {exc.problems}")
    assert ("signing key rotated" in names) == (raw.get("delivery") == "live")
