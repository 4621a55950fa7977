"""Aliases as Pulumi's engine resolves them, for the mock monitor (wg_mesh.testing.RecordingMonitor): which resource of
a stack's earlier state (an earlier run's URNs) a registration *is*.

The engine (pulumi/pulumi@1b5949891b3cefcb9974752b24a5ecef0acc86c8, pkg/resource/deploy/step_generator.go,
`getOldResource`, `generateAliases`, `collapseAliasToUrn`, `inheritedChildAlias`) looks a registration up in the old
state first by its own URN, then by each alias URN in order, and uses the first found. The alias URNs are the
resource's own alias specs made URNs (a missing name, type or parent is the resource's own; the parent, if it was itself
found by an alias, by that alias), then one inherited from the parent's *matched* alias: the parent's old URN's type
chain with the child's type, and the child's name with the parent's name prefix replaced by the parent's old name
("newapp-function" under "newapp", aliased to "app": "app-function"). A resource found by an alias is an update,
replacement or "same" of the old one, not a create and a delete; its children inherit in turn.

URNs here are the mock monitor's (pulumi.runtime.mocks.MockMonitor.make_urn): a child's type is qualified by its
parent's last type only, and the root stack's type is kept (the engine drops it and keeps the whole chain). The same
scheme both ways, so a URN computed here is the one the mock monitor gave the old resource.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def urn(stack: str, project: str, parent: str, typ: str, name: str) -> str:
    """MockMonitor.make_urn with the stack and project given."""
    if parent:
        typ = parent.split("::")[2].split("$")[-1] + "$" + typ
    return "urn:pulumi:" + "::".join([stack, project, typ, name])


def urn_name(value: str) -> str:
    return value.split("::", 3)[3]


def _collapse(stack: str, project: str, root: str, name: str, typ: str, parent: str, alias: Any,
              matched: Mapping[str, str]) -> str:  # fmt: skip
    """collapseAliasToUrn: one alias (an alias_pb2.Alias, a URN or a spec) as a URN."""
    if alias.urn:
        return str(alias.urn)
    spec = alias.spec
    old_parent = parent
    if spec.parentUrn:
        old_parent = matched.get(spec.parentUrn, spec.parentUrn)
    if spec.noParent:
        old_parent = root  # the mock monitor's top-level resources are the root stack's children
    return urn(spec.stack or stack, spec.project or project, old_parent, spec.type or typ, spec.name or name)


def inherited(stack: str, project: str, typ: str, name: str, parent_name: str, parent_alias: str) -> str:
    """inheritedChildAlias: the child's alias from its parent's matched alias (in this stack and project)."""
    alias_name = urn_name(parent_alias) + name[len(parent_name) :] if name.startswith(parent_name) else name
    return urn(stack, project, parent_alias, typ, alias_name)


def alias_urns(
    stack: str,
    project: str,
    root: str,
    registration: tuple[str, str, str],
    aliases: Sequence[Any],
    matched: Mapping[str, str],
) -> list[str]:
    """generateAliases: every alias URN of a registration `(name, type, parent URN)`, in the engine's order; `matched`:
    URN -> the old URN each earlier registration was found by (an alias), `root`: the root stack's URN."""
    name, typ, parent = registration
    found: list[str] = []
    for alias in aliases:
        found.append(_collapse(stack, project, root, name, typ, parent, alias, matched))
    if parent in matched:
        parent_alias, parent_name = matched[parent], urn_name(parent)
        found.append(inherited(stack, project, typ, name, parent_name, parent_alias))
        for alias in aliases:
            own = _collapse(stack, project, root, name, typ, parent, alias, matched)
            own_type = own.split("::")[2].split("$")[-1]
            found.append(inherited(stack, project, own_type, urn_name(own), parent_name, parent_alias))
    return list(dict.fromkeys(found))


def old_resource(own: str, candidates: Sequence[str], olds: Mapping[str, Any], taken: Mapping[str, str]) -> str:
    """getOldResource: the old URN this registration is (its own first, then its aliases in order), "" for none. An old
    resource another registration already is: ValueError, as the engine refuses it ("Two resources ... alias")."""
    for candidate in [own, *candidates]:
        if candidate in olds:
            if candidate != own and taken.get(candidate, own) != own:
                raise ValueError(f"{own} and {taken[candidate]} are both aliases of {candidate}")
            return candidate
    return ""
