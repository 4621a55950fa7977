"""The steps `pulumi up` takes from one config to another, in the engine's order: pure, on two runs under mocks
(wg_mesh.plan.preview.Resource lists) and their diff (wg_mesh.plan.preview.diff).

Pulumi's engine turns each registration of the program into a step as the program makes it, and a resource is
registered only once the inputs it depends on are resolved, so the program's registration order is an order the
engine may take: a dependency's step is done before its dependents' (Pulumi docs, "Resource registration"). Per
resource:

* new: `create`; changed in place: `update`; unchanged: no step;
* replaced, by default create-before-delete: `create-replacement` at its registration, its `delete-replaced` at the
  end of the update ("By default, to minimize downtime, Pulumi creates new instances of resources before deleting old
  ones": Pulumi docs, "deleteBeforeReplace"; pulumi/pulumi tests/integration/diff/step3: CreateReplacement(a3),
  Update(c2=>c3), DeleteReplaced(a2));
* replaced with `delete_before_replace`: the old one deleted at its registration, every replaced resource that
  depends on it first, dependents before what they depend on (pulumi/pulumi tests/integration/delete_before_create:
  "DeleteReplacement Dependent, DeleteReplacement Base, Replace Base, CreateReplacement Base"), then
  `create-replacement`;
* at the end of the update, every delete: the replaced resources' old ones and the resources no longer declared,
  dependents before what they depend on (the old run's registration order, reversed).

What the engine runs in parallel (independent registrations, independent deletes) is one order here, the program's:
a rehearsal of it (wg_mesh.lab.rehearse) sees that order, not every interleaving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from wg_mesh.plan.preview import Change, Diff, Resource

Op = Literal["create", "update", "create-replacement", "delete-replaced", "delete"]
OPS: tuple[Op, ...] = ("create", "update", "create-replacement", "delete-replaced", "delete")


@dataclass(frozen=True)
class Step:
    op: Op
    resource: Resource  # the new registration (create, update, create-replacement) or the old one (deletes)
    previous: Resource | None = None  # update and create-replacement: the resource as it was
    inputs: tuple[str, ...] = ()  # update / replacement: the inputs that change (or are unknown until up)
    forced_by: dict[str, str] = field(default_factory=dict)  # replacement: input -> who forces it

    @property
    def key(self) -> tuple[str, str]:
        return self.resource.key

    def describe(self) -> str:
        return f"{self.op} {self.resource.type}::{self.resource.name}"


def _previous(change: Change) -> Resource:
    if change.previous is None:
        raise ValueError(f"{change.resource.name}: a change without the resource it changes")
    return change.previous


def _dependents(before: Sequence[Resource]) -> dict[str, set[str]]:
    """URN -> the URNs of the old run's resources that depend on it (directly)."""
    found: dict[str, set[str]] = {}
    for r in before:
        for urn in r.dependencies:
            found.setdefault(urn, set()).add(r.urn)
    return found


def _transitive(urn: str, dependents: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [urn]
    while todo:
        for d in dependents.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def steps(before: Sequence[Resource], after: Sequence[Resource], found: Diff) -> list[Step]:
    """Every step of `pulumi up` from the state `before` describes to the program `after` declares, in order.
    `found` is `preview.diff(before, after)`; each change's previous resource is its `previous` (an alias's match)."""
    old_at = {r.urn: i for i, r in enumerate(before)}
    replaced = {c.resource.key: c for c in found.replaced}
    updated = {c.resource.key: c for c in found.updated}
    created = {r.key for r in found.created}
    dependents = _dependents(before)
    replaced_old = {_previous(c).urn: _previous(c) for c in found.replaced}
    out: list[Step] = []
    deleted_early: set[str] = set()
    for r in after:
        if not r.listed:
            continue
        if r.key in created:
            out.append(Step("create", r))
        elif (change := replaced.get(r.key)) is not None:
            old = _previous(change)
            if r.delete_before_replace and old.urn not in deleted_early:
                # the replaced resources that depend on it go first, dependents before their dependencies
                cascade = [u for u in _transitive(old.urn, dependents) if u in replaced_old and u not in deleted_early]
                for urn in sorted(cascade, key=lambda u: old_at[u], reverse=True):
                    out.append(Step("delete-replaced", replaced_old[urn]))
                    deleted_early.add(urn)
                out.append(Step("delete-replaced", old))
                deleted_early.add(old.urn)
            out.append(Step("create-replacement", r, old, change.inputs, dict(change.forced_by)))
        elif (change := updated.get(r.key)) is not None:
            out.append(Step("update", r, _previous(change), change.inputs))
    gone = {r.urn for r in found.deleted}
    for old in reversed(before):
        if old.urn in gone:
            out.append(Step("delete", old))
        elif old.urn in replaced_old and old.urn not in deleted_early:
            out.append(Step("delete-replaced", old))
    return out
