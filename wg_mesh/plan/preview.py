"""What `pulumi up` creates, and what a config change does to it: pure, on the resources a run under mocks recorded.

A `Resource` is one registration (type, name, inputs with secret ones replaced by a digest, the options the engine
acts on). `replaces(resource)` names the inputs whose change makes a new resource (the program's
`replace_on_changes`, AWS's `user_data_replace_on_change`, the provider's force-new inputs: wg_mesh.plan.forcenew).
`diff(before, after)` compares two runs as Pulumi's engine compares a program with its state: by URN, and a resource
found by an alias (a renamed site's `previous_names`, inherited by its children: wg_mesh.testing.aliases) is the old
resource it names, updated, replaced or left alone, never a deletion and a creation. An input computed from a
resource that is created or replaced is unknown until then (Pulumi's preview shows it as such), so it counts as
changed, and if it forces a new resource, that one is replaced as well (a gateway's gate, its address association,
GCP's routes). Never "unchanged" for a value that is unknown. Pulumi records what an input
came from per top-level input: for a `replace_on_changes` path inside one (`metadata["user-data"]`), the part's own
value in the two runs is compared (the mocks' stand-ins are deterministic), not the whole input's provenance.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wg_mesh.plan import forcenew

USER_DATA = ("userData", "userDataBase64")
TRIGGER = "(replacement_trigger)"  # what a Change names when the resource option replacement_trigger changed
GATEWAY_TYPES = ("aws:ec2/instance:Instance", "gcp:compute/instance:Instance")


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    urn: str
    inputs: Mapping[str, Any]  # secret inputs replaced by "sha256:<hex>" (wg_mesh.cli.plancmd)
    secret: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()  # inputs whose value the run could not know
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    protect: bool = False
    ignore_changes: tuple[str, ...] = ()
    depends_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # input -> the URNs it came from
    dependencies: tuple[str, ...] = ()  # every URN it depends on: its inputs' and its explicit depends_on
    was: str = ""  # the URN of the earlier run's resource it is, found by an alias ("": its own URN, or new)
    replacement_trigger: Any = None  # the resource option: a new value replaces the resource (None: not given)

    @property
    def key(self) -> tuple[str, str]:
        return (self.type, self.name)

    @property
    def was_name(self) -> str | None:
        """The name of the earlier run's resource it is, when an alias found it (a rename), else None."""
        return self.was.split("::")[-1] if self.was else None

    @property
    def listed(self) -> bool:
        """A cloud (or random, command) resource: not a component, not a provider."""
        return not self.type.startswith(forcenew.NOT_RESOURCES)


def short_type(typ: str) -> str:
    """`aws:ec2/instance:Instance` -> `ec2.Instance`; `random:index/randomBytes:RandomBytes` -> `random.RandomBytes`."""
    package, module, kind = typ.split(":", 2)
    module = module.split("/", 1)[0]
    return f"{package if module == 'index' else module}.{kind}"


def _top(path: str) -> str:
    return re.split(r"[\[.]", path, maxsplit=1)[0]


def replaces(resource: Resource) -> list[tuple[str, str]]:
    """(input, who says) for every input whose change replaces the resource: "program" (its replace_on_changes),
    "user data" (user_data_replace_on_change), "provider" (force-new, of the inputs the program sets)."""
    found = [(path, "program") for path in resource.replace_on_changes]
    if resource.inputs.get("userDataReplaceOnChange"):
        found += [(k, "user data") for k in USER_DATA if k in resource.inputs]
    named = {_top(path) for path, _ in found}
    provider = forcenew.force_new(resource.type)
    found += [(k, "provider") for k in sorted(resource.inputs) if k in provider and k not in named]
    return [(k, who) for k, who in found if _top(k) not in resource.ignore_changes]


def _sub(value: Any, path: str) -> Any:
    """The part of a top-level input a replace_on_changes path names (`metadata["user-data"]`); the whole for `x[*]`."""
    for key in re.findall(r'\["([^"]+)"\]', path):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _forces(resource: Resource, before: Resource, name: str, unknown: bool) -> str | None:
    """Who says a change of `name` (unknown: a value not known until up) replaces the resource, or None."""
    for path in resource.replace_on_changes:
        if _top(path) != name:
            continue
        part = '["' in path  # a part of the input (`metadata["user-data"]`): that part's own value is compared
        if (unknown and not part) or _sub(before.inputs.get(name), path) != _sub(resource.inputs.get(name), path):
            return "program"
    if name in USER_DATA and resource.inputs.get("userDataReplaceOnChange"):
        return "user data"
    return "provider" if name in forcenew.force_new(resource.type) else None


@dataclass(frozen=True)
class Change:
    resource: Resource
    inputs: tuple[str, ...]  # changed inputs
    unknown: Mapping[str, str] = field(default_factory=dict)  # input -> what it is computed from (unknown until up)
    forced_by: Mapping[str, str] = field(default_factory=dict)  # input -> "program" / "user data" / "provider"
    previous: Resource | None = None  # the resource as the state has it (the earlier run's registration)

    @property
    def order(self) -> str:
        return "delete-before-create" if self.resource.delete_before_replace else "create-before-delete"


@dataclass(frozen=True)
class Diff:
    created: tuple[Resource, ...]
    deleted: tuple[Resource, ...]
    replaced: tuple[Change, ...]
    updated: tuple[Change, ...]
    unchanged: int
    same: tuple[Resource, ...] = ()  # the unchanged ones

    def carried(self) -> list[Resource]:
        """The resources an alias found (a renamed site's): the old ones, updated, replaced or unchanged."""
        changed = [c.resource for c in (*self.replaced, *self.updated)]
        return [r for r in (*changed, *self.same) if r.was]


def diff(before: Sequence[Resource], after: Sequence[Resource]) -> Diff:
    """The two runs compared by URN or alias (`was`), in the after run's registration order (a resource's dependencies
    are registered before it)."""
    old = {r.urn: r for r in before}
    found: set[str] = set()  # the old URNs the after run's resources are
    moving: dict[str, str] = {}  # URN -> name of a resource created or replaced (its outputs unknown until up)
    created, replaced, updated, same = [], [], [], []
    for resource in after:
        previous = old.get(resource.urn) or old.get(resource.was)
        if previous is not None:
            found.add(previous.urn)
        if previous is None:
            created.append(resource)
            moving[resource.urn] = resource.name
            continue
        names = set(resource.inputs) | set(previous.inputs)
        changed = {
            k for k in names
            if k not in resource.ignore_changes
            and (k in resource.unknown or k in previous.unknown or resource.inputs.get(k) != previous.inputs.get(k))
        }  # fmt: skip
        unknown = {
            k: ", ".join(sorted({moving[u] for u in urns if u in moving}))
            for k, urns in resource.depends_on.items()
            if k not in resource.ignore_changes and any(u in moving for u in urns)
        }
        unknown |= {k: "unknown in this run" for k in resource.unknown if k not in unknown}
        touched = changed | set(unknown)
        forced = {k: who for k in sorted(touched) if (who := _forces(resource, previous, k, k in unknown))}
        if resource.replacement_trigger != previous.replacement_trigger:  # the option, not an input
            touched, forced = touched | {TRIGGER}, {**forced, TRIGGER: "program"}
        change = Change(resource, tuple(sorted(touched)), unknown, forced, previous)
        if forced:
            replaced.append(change)
            moving[resource.urn] = resource.name
        elif touched:
            updated.append(change)
        else:
            same.append(resource)
    deleted = tuple(r for r in before if r.urn not in found)
    return Diff(
        tuple(r for r in created if r.listed),
        tuple(r for r in deleted if r.listed),
        tuple(c for c in replaced if c.resource.listed),
        tuple(c for c in updated if c.resource.listed),
        sum(r.listed for r in same),
        tuple(r for r in same if r.listed),
    )


def site_of(name: str, sites: Iterable[str]) -> str | None:
    """The site a resource belongs to by its name (`<site>` or `<site>-...`, the longest such site), else None."""
    matches = [s for s in sites if name == s or name.startswith(s + "-")]
    return max(matches, key=len) if matches else None
