"""The component in an IDE (issue 23 item 6): every field of the public Args has a description (its docstring, which
IDEs show and Pulumi's schema inference carries into the schema), and the fixed choices are Literal types, the same
as the config model's. mypy checks a user's typed MeshArgs (tests/args_typed_example.py, listed in pyproject's
[tool.mypy]); these tests check the rest without running mypy."""

from __future__ import annotations

import typing
from typing import Any, Literal, get_args, get_origin

import pytest

import wg_mesh
from tests.conftest import REPO
from wg_mesh import args
from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite
from wg_mesh.config.underlay import PrivatePath
from wg_mesh.mesh import MESH_TYPE
from wg_mesh.provider import schema, schema_type

# The TypedDicts among the package's public names: the Args a program builds and the outputs it reads.
PUBLIC_ARGS = sorted(name for name in wg_mesh.__all__ if typing.is_typeddict(getattr(wg_mesh, name)))


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def schema_properties(spec: dict[str, Any], name: str) -> dict[str, Any]:
    if name == "MeshArgs":  # the component's inputs
        found: dict[str, Any] = spec["resources"][MESH_TYPE]["inputProperties"]
    else:
        found = spec["types"][f"wg-mesh:index:{name}"]["properties"]
    return found


def test_the_public_args_are_the_ones_expected() -> None:
    """A new public TypedDict is covered by the tests below without being named here; this pins today's four."""
    assert PUBLIC_ARGS == ["MeshArgs", "PrivatePathArgs", "SiteArgs", "SiteOutputs"]


@pytest.mark.parametrize("name", PUBLIC_ARGS)
def test_every_field_has_a_description_in_the_schema(name: str) -> None:
    """Fails when a field's docstring is removed (or no longer directly follows the field: the analyzer and IDEs
    read the string right after it)."""
    spec = schema()
    props = schema_properties(spec, name)
    fields = getattr(wg_mesh, name).__annotations__
    assert set(props) == {camel(field) for field in fields}
    missing = sorted(field for field in fields if len(props[camel(field)].get("description", "").strip()) < 10)
    assert not missing, f"{name}: fields without a description: {missing}"
    assert all("\n" not in prop["description"] for prop in props.values())  # one line, not the source's layout


# --- fixed choices ----------------------------------------------------------------------------------------------


def choices(annotation: Any) -> set[Any]:
    """The Literal choices inside an annotation (NotRequired, unions and Annotated unwrapped)."""
    if get_origin(annotation) is Literal:
        return set(get_args(annotation))
    return {choice for inner in get_args(annotation) for choice in choices(inner)}


def model_choices(model: Any, field: str) -> set[Any]:
    return choices(model.model_fields[field].annotation)


LITERALS = [
    (args.SiteArgs, "cloud", {"aws", "gcp", "static"}),
    (args.SiteOutputs, "cloud", {"aws", "gcp", "static"}),
    (args.MeshArgs, "delivery", model_choices(MeshConfig, "delivery")),
    (args.MeshArgs, "operator_access", model_choices(MeshConfig, "operator_access")),
    (args.MeshArgs, "mtu", model_choices(MeshConfig, "mtu")),
    (args.PrivatePathArgs, "kind", model_choices(PrivatePath, "kind")),
    (args.SiteArgs, "workload_scope", model_choices(GcpSite, "workload_scope")),
]


@pytest.mark.parametrize(("typ", "field", "expected"), LITERALS, ids=[f"{t.__name__}.{f}" for t, f, _ in LITERALS])
def test_fixed_choices_are_literals_equal_to_the_models(typ: Any, field: str, expected: set[Any]) -> None:
    assert expected, "the model lost its choices"
    assert choices(typ.__annotations__[field]) == expected


def test_the_cloud_choices_are_the_models_site_kinds() -> None:
    kinds = set().union(*(model_choices(site, "cloud") for site in (AwsSite, GcpSite, StaticSite)))
    assert set(get_args(args.Cloud)) == kinds


@pytest.mark.parametrize(("typ", "field", "expected"), LITERALS, ids=[f"{t.__name__}.{f}" for t, f, _ in LITERALS])
def test_each_choice_is_named_in_the_description(typ: Any, field: str, expected: set[Any]) -> None:
    """The schema has no per-field enum: other languages learn the choices from the description."""
    description = schema_properties(schema(), typ.__name__)[camel(field)]["description"]
    assert all(f"'{choice}'" in description for choice in expected if isinstance(choice, str)), description


def test_literals_are_strings_in_the_schema_and_mtu_stays_any() -> None:
    spec = schema()
    assert schema_properties(spec, "SiteArgs")["cloud"]["type"] == "string"
    assert schema_properties(spec, "MeshArgs")["delivery"]["type"] == "string"
    assert schema_properties(spec, "MeshArgs")["mtu"]["$ref"] == "pulumi.json#/Any"
    assert schema_type(Literal["a", "b"]) is str and schema_type(Literal[1, 2]) is int
    assert schema_type(Literal["auto"] | int) is Any and schema_type(Literal["a"] | None) == (Literal["a"] | None)
    with pytest.raises(TypeError):
        schema_type(Literal["a", 1])


def test_mypy_checks_the_typed_example() -> None:
    """The example only guards the Literals while mypy's configuration names it."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "tests/args_typed_example.py" in config["files"] and config["strict"] is True


# --- docs/how-to/component-inputs.md ----------------------------------------------------------------------------

HOW_TO = REPO / "docs" / "how-to" / "component-inputs.md"


def test_the_how_to_says_yes_for_exactly_the_keys_that_take_an_output() -> None:
    rows = [line.split("|")[1:-1] for line in HOW_TO.read_text().splitlines() if line.startswith("| `")]
    rows = [cells for cells in rows if len(cells) == 4]  # the first table: key, site, takes an Output, checked
    takes = {cells[0].strip().strip("`") for cells in rows if cells[2].strip().startswith(("yes", "each id: yes"))}
    assert takes == set(args.INPUT_KEYS) | set(args.INPUT_LIST_KEYS)


def test_the_how_tos_example_parses_and_imports_wg_mesh() -> None:
    import ast

    text = HOW_TO.read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    tree = ast.parse(block)
    assert any(isinstance(node, ast.ImportFrom) and node.module == "wg_mesh" for node in tree.body)
