"""Where gateway b runs is decided once (issue 32, item 9): two `pulumi up`s under mocks whose live lookups differ (a
zone the region gains, an instance type offered in another zone) change nothing, as the engine would see them: an
input under `ignore_changes` keeps the value in the state (AWS: the standby subnet's zone), and a `pulumi.Stash`
answers the value of its first run (GCP: b's zone; RecordingMocks.kept_stashes plays the state). Only a config change
(`zone`, `standby_zone`) decides again."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ProgramRun
from tests.test_program import GCP_INSTANCE
from tests.test_program_ha import SUBNET, ha_raw, run
from wg_mesh.aws import network as aws_network
from wg_mesh.config import AwsSite
from wg_mesh.plan import ha
from wg_mesh.plan.validate import load_mesh
from wg_mesh.testing import RecordingMocks
from wg_mesh.testing.mocks import STASH

TYPE = "c6i.2xlarge"  # Pulumi.ha.yaml's AWS type


def site_of(raw: dict[str, Any], cloud: str) -> dict[str, Any]:
    (site,) = [s for s in raw["sites"] if s["cloud"] == cloud]
    return site


def seen_by_the_engine(done: ProgramRun) -> dict[tuple[str, str], dict[str, Any]]:
    """Each resource's inputs as the engine compares them with the state: without those under ignore_changes, and a
    stash's `input` (a new one is an update of the stash alone: its `output`, which others read, stays)."""
    out = {}
    for r in done.resources:
        ignored = set(done.options(r.type, r.name).ignore_changes) | ({"input"} if r.type == STASH else set())
        out[(r.type, r.name)] = {k: v for k, v in r.inputs.items() if k not in ignored}
    return out


def changed(before: ProgramRun, after: ProgramRun) -> list[tuple[str, str]]:
    old, new = seen_by_the_engine(before), seen_by_the_engine(after)
    assert old.keys() == new.keys()
    return sorted(key for key in new if old[key] != new[key])


def test_aws_a_new_offering_zone_moves_no_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    """`zone` written, `standby_zone` not: the type is offered in c only at the first `up` (b is placed in c), then in
    b and c, and the program now picks b; the standby subnet keeps c (before issue 32 only a subnet whose `zone` was
    chosen too ignored it: this one was replaced, and gateway b with it)."""
    raw = ha_raw()
    site = site_of(raw, "aws")
    site["zone"] = "us-east-1a"
    monkeypatch.setattr(RecordingMocks, "type_gaps", {TYPE: frozenset({"us-east-1b"})})
    first = run(raw)
    monkeypatch.setattr(RecordingMocks, "type_gaps", {})
    later = run(raw)
    name = f"{site['name']}-b-subnet"
    assert first.named(SUBNET, name).inputs["availabilityZone"] == "us-east-1c"
    assert later.named(SUBNET, name).inputs["availabilityZone"] == "us-east-1b"
    assert later.options(SUBNET, name).ignore_changes == ("availabilityZone", "availabilityZoneId")  # name or ID
    assert changed(first, later) == []


def test_aws_a_written_standby_zone_is_the_users_to_change() -> None:
    site = load_mesh(ha_raw()).site("aws-use1")
    assert isinstance(site, AwsSite)
    assert aws_network.standby_ignores(site) == ["availabilityZone", "availabilityZoneId"]
    written = site.model_copy(update={"standby_zone": "us-east-1c"})
    assert aws_network.standby_ignores(written) is None


def gcp_runs(monkeypatch: pytest.MonkeyPatch, raw: dict[str, Any], zones: list[list[str]]) -> list[ProgramRun]:
    """One `pulumi up` per zone list, each after the previous one's state (its stashes' outputs)."""
    runs: list[ProgramRun] = []
    for names in zones:
        kept = {r.name: r.outputs["output"] for r in runs[-1].of_type(STASH)} if runs else {}
        monkeypatch.setattr(RecordingMocks, "kept_stashes", kept)
        monkeypatch.setattr(RecordingMocks, "gcp_zones", {"europe-west3": names})
        runs.append(run(raw))
    return runs


def test_gcp_a_zone_the_region_gains_moves_no_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    """a in -c, b chosen as the next zone by letter, wrapping: -a; the region then gains -d, which the program would
    pick now. b's VM, its group, both gateways' user data and the IAM condition stay as they were."""
    raw = ha_raw()
    site = site_of(raw, "gcp")
    site["zone"] = "europe-west3-c"
    del site["standby_zone"]
    abc = [f"europe-west3-{z}" for z in "abc"]
    first, later = gcp_runs(monkeypatch, raw, [abc, [*abc, "europe-west3-d"]])
    b = f"{site['name']}-b"
    assert first.vm(GCP_INSTANCE, b).inputs["zone"] == later.vm(GCP_INSTANCE, b).inputs["zone"] == abc[0]
    (stash,) = later.of_type(STASH)
    assert stash.name == f"{site['name']}-b-zone" and stash.inputs["input"] == "europe-west3-d"  # the new choice...
    assert stash.outputs["output"] == abc[0]  # ...is not taken
    assert later.options(STASH, stash.name).replacement_trigger == "europe-west3-c"  # moving a decides again
    assert changed(first, later) == []
    # A first `up` (no stash yet: an upgraded stack too) decides as the program before the stash did.
    assert first.vm(GCP_INSTANCE, b).inputs["zone"] == ha.next_zone("europe-west3-c", abc)
