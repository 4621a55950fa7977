"""wg_mesh/plan/forcenew.py covers every resource type the program can create: each of the repository's stacks and
the examples', in both deliveries (HA and private-path stacks included), so that a new type cannot silently read as
"updated in place" in `wg-mesh plan`; and names only inputs the pinned Pulumi SDKs have."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from tests.conftest import REPO, run_program, with_delivery
from tests.stacks import STACK_FILES, example_stack_files
from wg_mesh.plan import forcenew
from wg_mesh.tools.stackfile import read_raw

STACKS = [*STACK_FILES, *example_stack_files()]


@pytest.fixture(scope="module")
def types() -> dict[str, set[str]]:
    """Resource type -> the stacks (and deliveries) that create it."""
    found: dict[str, set[str]] = {}
    for path in STACKS:
        raw = read_raw(path)
        for delivery in ("live", "user-data"):
            run = run_program(with_delivery(raw, delivery), preview=True)
            if run.error is not None:  # private paths need live delivery: the model refuses the other
                assert delivery == "user-data" and "private_paths" in str(run.error), run.error
                continue
            for resource in run.resources:
                found.setdefault(resource.type, set()).add(f"{Path(path).name} ({delivery})")
    # The GCP standby's default zone (no stack writes it unset): its pulumi.Stash (wg_mesh.gcp.ha.standby_zone).
    raw = read_raw(REPO / "Pulumi.ha.yaml")
    for site in raw["sites"]:
        site.pop("standby_zone", None)
    for resource in run_program(raw, preview=True).resources:
        found.setdefault(resource.type, set()).add("Pulumi.ha.yaml without standby_zone (live)")
    return found


def test_every_type_the_program_creates_has_its_force_new_inputs(types: dict[str, set[str]]) -> None:
    missing = {t: sorted(where) for t, where in types.items() if not forcenew.covered(t)}
    assert not missing, f"add these to wg_mesh/plan/forcenew.py, from the provider's schema: {missing}"
    assert "aws:ec2/instance:Instance" in types and "gcp:compute/forwardingRule:ForwardingRule" in types  # HA too


def test_the_table_names_only_types_the_program_creates(types: dict[str, set[str]]) -> None:
    assert not set(forcenew.TABLE) - set(types), "a type no stack creates: remove it, or add the stack that does"


def test_a_type_missing_from_the_table_is_an_error_not_nothing() -> None:
    with pytest.raises(KeyError):
        forcenew.force_new("aws:ec2/natGateway:NatGateway")
    assert forcenew.force_new("wg-mesh:aws:Gateway") == frozenset()


def test_every_entry_names_its_source() -> None:
    for typ, entry in forcenew.TABLE.items():
        assert entry.source and entry.path, typ
        assert "@" in entry.source or not entry.read, f"{typ}: an entry read from a file names the commit"


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def test_every_force_new_input_is_an_input_of_the_pinned_sdk() -> None:
    """A misspelt or camel-cased-wrong name, or one the pinned SDK no longer has, would never match a recorded input:
    the table would silently say "updated in place" for it."""
    packages = {"aws": "pulumi_aws", "gcp": "pulumi_gcp", "random": "pulumi_random", "command": "pulumi_command"}
    packages["pulumi"] = "pulumi.stash"  # the engine's built-in Stash: StashArgs lives in its own module
    wrong = {}
    for typ, entry in forcenew.TABLE.items():
        package, module, kind = typ.split(":")
        top = module.split("/")[0]
        sdk = importlib.import_module(packages[package] + ("" if top == "index" else f".{top}"))
        params = inspect.signature(getattr(sdk, f"{kind}Args").__init__).parameters
        unknown = entry.inputs - {_camel(name) for name in params if name != "__self__"}
        if unknown:
            wrong[typ] = sorted(unknown)
    assert not wrong, f"not inputs of the pinned Pulumi SDKs: {wrong}"
