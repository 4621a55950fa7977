"""wg-mesh as a Pulumi plugin, for TypeScript, Go, C#, Java and YAML programs (README, "Other languages").

Pulumi's Python SDK hosts Python components for other languages (pulumi.provider.experimental): it infers the
package schema from `Mesh`'s type annotations (its `args: MeshArgs` and its `pulumi.Output` attributes) and serves
it over the provider protocol; `pulumi package add` generates each language's SDK from that schema. `provider/` at
the repository's root is the plugin directory (PulumiPlugin.yaml: runtime python, and a __main__.py calling
`main`). The schema is computed here exactly as the plugin serves it, so tests/test_provider.py checks it without
the Pulumi CLI; generating SDKs and running a program in another language need the CLI (not checked here).
"""

from __future__ import annotations

import json
from typing import Any

from pulumi.provider.experimental import component_provider_host
from pulumi.provider.experimental.component import ComponentProvider

from wg_mesh import __version__
from wg_mesh.mesh import Mesh

# The package name is the first part of every type token: `wg-mesh:index:Mesh` is wg_mesh.mesh.MESH_TYPE, the type the
# Python component registers. Changing either would replace every user's resources.
PACKAGE_NAME = "wg-mesh"
COMPONENTS: list[type[Any]] = [Mesh]


def provider() -> ComponentProvider:
    """The provider the plugin runs (schema inferred from the annotations at construction)."""
    return ComponentProvider(COMPONENTS, PACKAGE_NAME, version=__version__)


def schema() -> dict[str, Any]:
    """The package schema, as the plugin's GetSchema returns it."""
    text = provider().schema
    assert text is not None
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def main() -> None:
    """The plugin's entry point: serve the components over the provider protocol (the engine starts it)."""
    component_provider_host(COMPONENTS, name=PACKAGE_NAME, version=__version__)
