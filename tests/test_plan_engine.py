"""The engine's step order (wg_mesh.plan.engine) on real runs of the program under mocks, and each resource's role in
a rehearsal (wg_mesh.lab.rehearse.roles) over every stack in the repository. Pure/mock: no lab.

Pulumi's order, the facts these tests hold the planner to: a replacement is created at its registration and its old
one deleted at the end (pulumi/pulumi tests/integration/diff/step3), a delete-before-replace resource's old one and
its replaced dependents go first (tests/integration/delete_before_create), every delete at the end runs dependents
first."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.stacks import example_stack_files, stack_files
from wg_mesh.cli import plancmd
from wg_mesh.cli.plancmd import Planned
from wg_mesh.lab.rehearse.roles import ROLES, role_of
from wg_mesh.plan import engine, preview
from wg_mesh.tools.stackfile import read_raw

STACKS = [*stack_files(), *example_stack_files()]


class Runs:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.cache = tmp, {}  # type: dict[str, Planned]

    def get(self, name: str, raw: Any) -> Planned:
        if name not in self.cache:
            path = self.tmp / f"Pulumi.{name}.yaml"
            path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
            self.cache[name] = plancmd.plan_file(path, project="wg-mesh", stack="dev")
        return self.cache[name]

    def after(self, name: str, raw: Any, before: Planned) -> Planned:
        """A run of `raw` whose aliases find `before`'s resources (plancmd.plan_file's `before`)."""
        if name not in self.cache:
            path = self.tmp / f"Pulumi.{name}.yaml"
            path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
            self.cache[name] = plancmd.plan_file(path, project="wg-mesh", stack="dev", before=before)
        return self.cache[name]

    def steps(self, before: Planned, after: Planned) -> list[tuple[str, str]]:
        found = preview.diff(before.resources, after.resources)
        return [(s.op, s.resource.name) for s in engine.steps(before.resources, after.resources, found)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("engine"))


def _edited(path: Path, **changes: Any) -> Any:
    raw = copy.deepcopy(read_raw(path))
    for site, values in changes.items():
        next(s for s in raw["sites"] if s["name"] == site.replace("_", "-")).update(values)
    return raw


def test_a_replaced_gateway_is_created_first_moved_to_and_deleted_last(runs: Runs) -> None:
    path = REPO / "Pulumi.dev.yaml"
    bigger = _edited(path, aws_use1={"instance_type": "c6i.4xlarge"})
    steps = runs.steps(runs.get("dev", read_raw(path)), runs.get("bigger", bigger))
    assert steps == [
        ("create-replacement", "aws-use1-instance"),
        ("create-replacement", "aws-use1-ready"),
        ("create-replacement", "aws-use1-eip-assoc"),  # create before delete: the address moves in one call
        ("update", "aws-use1-route-0-10-200-0-0-24"),
        ("update", "aws-use1-route-0-10-100-0-0-16"),
        # the end of up: dependents before what they depend on
        ("delete-replaced", "aws-use1-eip-assoc"),
        ("delete-replaced", "aws-use1-ready"),
        ("delete-replaced", "aws-use1-instance"),
    ]


def test_a_delete_before_replace_resource_goes_first_with_its_replaced_dependents(runs: Runs) -> None:
    """A private-path gateway holds a fixed address: delete before create, and what depends on it and is replaced
    too (its gate) is deleted before it, as pulumi/pulumi's delete_before_create test orders it."""
    path = REPO / "examples/underlay/Pulumi.underlay.yaml"
    bigger = _edited(path, aws_use1={"instance_type": "c6i.4xlarge"})
    steps = runs.steps(runs.get("underlay", read_raw(path)), runs.get("underlay-bigger", bigger))
    early = steps[: steps.index(("create-replacement", "aws-use1-instance"))]
    assert ("delete-replaced", "aws-use1-instance") in early
    assert early.index(("delete-replaced", "aws-use1-ready")) < early.index(("delete-replaced", "aws-use1-instance"))
    assert steps.count(("delete-replaced", "aws-use1-instance")) == 1


def test_a_removed_site_is_deleted_at_the_end_dependents_first(runs: Runs) -> None:
    prod = read_raw(REPO / "Pulumi.prod.yaml")
    fewer = copy.deepcopy(prod)
    fewer["sites"] = [s for s in fewer["sites"] if s["name"] != "vps-fra"]
    steps = runs.steps(runs.get("prod", prod), runs.get("prod-fewer", fewer))
    first_delete = next(i for i, (op, _) in enumerate(steps) if op == "delete")
    assert all(op.startswith("delete") for op, _ in steps[first_delete:])  # deletes only at the end
    deleted = [name for op, name in steps if op == "delete"]
    assert "aws-use1-route-0-192-168-50-0-24" in deleted


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.name)
def test_every_resource_of_every_stack_has_a_role(runs: Runs, path: Path) -> None:
    """The rehearsal knows what each resource is to traffic; a new kind of resource must be given a role."""
    planned = runs.get(path.stem.split(".")[-1], read_raw(path))
    names = [s.name for s in planned.cfg.sites]
    roles = {r.name: role_of(r, names) for r in planned.resources if r.listed}
    assert {role.role for role in roles.values()} <= set(ROLES)
    for r in planned.resources:
        if r.type in ("aws:ec2/instance:Instance", "gcp:compute/instance:Instance"):
            assert roles[r.name].role == "instance", r.name
        if r.type in ("aws:ec2/route:Route", "gcp:compute/route:Route") and not r.name.endswith("-rt-default"):
            assert roles[r.name].role == "route" and roles[r.name].cidr, r.name
    letters = {roles[r.name].letter for r in planned.resources if r.listed and "-b-" in r.name}
    assert letters <= {"b"}


def test_a_renamed_site_is_its_old_resources_replaced_only_where_the_engine_replaces_them(runs: Runs) -> None:
    """Aliases (previous_names) make the new names the old resources: no create, no delete, only the replacements a
    rename really makes (its gateway, gate, address association, GCP routes), deleted at the end as any."""
    from wg_mesh.lab.rehearse.catalogue import renamed

    path = REPO / "Pulumi.dev.yaml"
    dev = runs.get("dev", read_raw(path))
    steps = runs.steps(dev, runs.after("dev-renamed", renamed(read_raw(path), "aws-use1", "aws-use1-new"), dev))
    ops = {op for op, _ in steps}
    assert "create" not in ops and "delete" not in ops
    assert ("create-replacement", "aws-use1-new-instance") in steps
    assert ("delete-replaced", "aws-use1-instance") in steps  # the old resource, by its old name
