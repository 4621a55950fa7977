"""mypy reads only the cloud SDK services the program uses (pyproject.toml: `follow_imports = "skip"` for
pulumi_aws.* and pulumi_gcp.*, `normal` for a list): a module it skips is Any to it, so a new use of an unlisted
service would not be type-checked at all. This test reads every use of the SDKs in wg_mesh/ (ast, nothing imported)
and fails on one mypy does not follow."""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SDKS = ("pulumi_aws", "pulumi_gcp")


def followed() -> list[str]:
    overrides = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    return [m for o in overrides if o.get("follow_imports") == "normal" for m in o["module"]]


def submodules(sdk: str) -> set[str]:
    spec = importlib.util.find_spec(sdk)  # the package's location; its __init__ is not run
    assert spec is not None and spec.submodule_search_locations
    (root,) = (Path(p) for p in spec.submodule_search_locations)
    return {p.stem for p in root.iterdir() if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}


def sdk_uses(tree: ast.Module) -> set[str]:
    """`pulumi_aws.ec2`, `pulumi_gcp.compute`, ...: the SDK modules a module names (alias.X, or imported directly)."""
    aliases: dict[str, str] = {}
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in SDKS:
                    used.add(a.name)
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in SDKS:
            used.update(f"{node.module}.{a.name}" for a in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used.add(f"{aliases[node.value.id]}.{node.attr}")
    return used


def sdk_module(name: str, known: dict[str, set[str]]) -> str | None:
    """The SDK module a dotted use lands in: `pulumi_aws.ec2.Instance` -> pulumi_aws.ec2; a function re-exported at
    the top (`pulumi_aws.get_caller_identity_output`) -> the module defining it; None for the package itself."""
    sdk, _, rest = name.partition(".")
    if not rest:
        return None
    head = rest.split(".")[0]
    for candidate in (head, head.removesuffix("_output")):
        if candidate in known[sdk]:
            return f"{sdk}.{candidate}"
    return None


def test_every_sdk_service_the_program_uses_is_type_checked() -> None:
    known = {sdk: submodules(sdk) for sdk in SDKS}
    patterns = followed()
    uses = {
        (module, path.relative_to(REPO).as_posix())
        for path in sorted((REPO / "wg_mesh").rglob("*.py"))
        for name in sdk_uses(ast.parse(path.read_text()))
        if (module := sdk_module(name, known))
    }
    assert uses, "no use of the cloud SDKs found: the scan is broken"
    assert {m for m, _ in uses} >= {"pulumi_aws.ec2", "pulumi_gcp.compute"}
    skipped = sorted((m, f) for m, f in uses if not any(fnmatch.fnmatchcase(m, p) for p in patterns))
    assert not skipped, f'add these to the `follow_imports = "normal"` list in pyproject.toml: {skipped}'


def test_an_unlisted_service_is_caught() -> None:
    known = {sdk: submodules(sdk) for sdk in SDKS}
    tree = ast.parse("import pulumi_aws as aws\naws.kms.Key('k')\naws.get_caller_identity_output()\n")
    found = {sdk_module(n, known) for n in sdk_uses(tree)} - {None}
    assert found == {"pulumi_aws.kms", "pulumi_aws.get_caller_identity"}
    assert not any(fnmatch.fnmatchcase("pulumi_aws.kms", p) for p in followed())
