"""wg-mesh as a Pulumi plugin, for TypeScript, Go, C#, Java and YAML programs (README, "Other languages").

Pulumi's Python SDK hosts Python components for other languages (pulumi.provider.experimental): it infers the
package schema from `Mesh`'s type annotations (its `args: MeshArgs` and its `pulumi.Output` attributes) and serves
it over the provider protocol; `pulumi package add` generates each language's SDK from that schema. `provider/` at
the repository's root is the plugin directory (PulumiPlugin.yaml: runtime python, and a __main__.py calling
`main`). The schema is computed here exactly as the plugin serves it, so tests/test_provider.py checks it without
the Pulumi CLI; generating SDKs and running a program in another language need the CLI (not checked here).

The fields' descriptions are their docstrings in wg_mesh.args (the analyzer reads a string right after a field, as
IDEs do). The analyzer refuses `typing.Literal`, which the args use for fixed choices (`cloud`, `delivery`, ...):
`_Analyzer` reads a Literal of strings as a string (the choices are in its description) and a choice-or-number such
as `mtu` as Any, and a description as one line; Pulumi's own analyzer does the rest. It is swapped in only while a
provider is built (and while the plugin serves).
"""

from __future__ import annotations

import contextlib
import json
import types
from collections.abc import Iterator
from typing import Any, Literal, Union, get_args, get_origin

from pulumi.provider.experimental import analyzer, component, component_provider_host
from pulumi.provider.experimental.analyzer import PropertyDefinition
from pulumi.provider.experimental.component import ComponentProvider

from wg_mesh import __version__
from wg_mesh.mesh import Mesh

# The package name is the first part of every type token: `wg-mesh:index:Mesh` is wg_mesh.mesh.MESH_TYPE, the type the
# Python component registers. Changing either would replace every user's resources.
PACKAGE_NAME = "wg-mesh"
COMPONENTS: list[type[Any]] = [Mesh]


def schema_type(arg: Any) -> Any:
    """What the schema makes of an annotation: a Literal as the type of its choices (all of one type), a union of
    choices and other types (not None: Optional stays Pulumi's) as Any; anything else as it is."""
    if get_origin(arg) is Literal:
        kinds = {type(choice) for choice in get_args(arg)}
        if len(kinds) != 1:
            raise TypeError(f"{arg}: choices of more than one type")
        return kinds.pop()
    members = get_args(arg) if get_origin(arg) in (Union, types.UnionType) else ()
    if type(None) not in members and any(get_origin(m) is Literal for m in members):
        return Any
    return arg


class _Analyzer(analyzer.Analyzer):
    def analyze_property(
        self,
        arg: type,
        typ: type,
        name: str,
        *,
        can_be_plain: bool,
        is_component_output: bool,
        optional: bool | None = None,
    ) -> PropertyDefinition:
        return super().analyze_property(
            schema_type(arg),
            typ,
            name,
            can_be_plain=can_be_plain,
            is_component_output=is_component_output,
            optional=optional,
        )

    def get_docstring(self, typ: type, name: str) -> str | None:
        """A field's docstring as one line (a docstring's line breaks and indentation are the source's, not text)."""
        doc = super().get_docstring(typ, name)
        return None if doc is None else " ".join(doc.split())


@contextlib.contextmanager
def _literals() -> Iterator[None]:
    """ComponentProvider builds its analyzer by name from its module: ours, for as long as this lasts."""
    original = component.Analyzer  # type: ignore[attr-defined]
    component.Analyzer = _Analyzer  # type: ignore[attr-defined]
    try:
        yield
    finally:
        component.Analyzer = original  # type: ignore[attr-defined]


def provider() -> ComponentProvider:
    """The provider the plugin runs (schema inferred from the annotations at construction)."""
    with _literals():
        return ComponentProvider(COMPONENTS, PACKAGE_NAME, version=__version__)


def schema() -> dict[str, Any]:
    """The package schema, as the plugin's GetSchema returns it."""
    text = provider().schema
    assert text is not None
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def main() -> None:
    """The plugin's entry point: serve the components over the provider protocol (the engine starts it)."""
    with _literals():
        component_provider_host(COMPONENTS, name=PACKAGE_NAME, version=__version__)
