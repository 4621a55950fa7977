"""The layout's rules, read from the source with `ast` (nothing is imported, so this runs in well under a second).

- No import circle among our own modules (wg_mesh/ and bench/). Every import counts, a lazy one inside a function as
  much as one at the top of a module: a circle closed by a lazy import is still a circle (the two modules cannot be
  understood, tested or moved apart). Imports under `if TYPE_CHECKING:` are left out: they never run, and an
  annotation naming a type from a layer above is not an arrow pointing up. Imports by a computed name
  (`import_module(name)`, wg_mesh/__init__'s lazy public names) are not seen.
- wg_mesh/config/ (the model and its rules) imports nothing of ours outside itself, not even for type checking.
- No module past ~400 lines; the ones past it today are listed with their length, which may only shrink.
- The package root holds only the public API, the component layer behind it and the entries (ROOT): every other
  module lives in the package of its role (docs/architecture.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("wg_mesh", "bench")
PURE = "wg_mesh.config"  # the model: imports nothing of ours outside itself
MAX_LINES = 400
# What wg_mesh/ itself may hold (docs/architecture.md, "The map"); everything else lives in a package by its role.
ROOT_MODULES = {
    "__init__",  # the public API: Mesh, MeshArgs, ... (imported when first used), and lazy_attributes
    "__main__",  # the CLI entry: python -m wg_mesh (no logic)
    "args",  # MeshArgs and the other public argument types
    "mesh",  # Mesh: the sites composed through one deferred directory
    "component",  # SiteComponent: the shape every site's component shares
    "static",  # StaticSite
    "keys",  # the key material the components keep in state
    "providers",  # which cloud provider a site's resources use
    "announce",  # announced key rotation: when a site's key becomes valid
    "program",  # the Pulumi program's named steps (the repository's __main__.py)
    "provider",  # the plugin entry for other languages
    "readygate",  # `python -m wg_mesh.readygate`: the gate Commands' entry, a path kept in every stack's state
}
ROOT_PACKAGES = {"cli", "config", "plan", "aws", "gcp", "gateway", "tools", "lab", "testing"}  # cli: the CLI's commands
ROOT_FILES = {"py.typed"}
# Past MAX_LINES today: each may only shrink (lower its number when it does; remove it once it fits).
OVERSIZE = {}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of our packages (a package is its __init__)."""
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(tree: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (functions, methods, try blocks); `if TYPE_CHECKING:` bodies only if
    type_checking."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            if type_checking:
                yield from import_nodes(node, type_checking)
            else:
                for child in node.orelse:
                    yield from import_nodes(ast.Module(body=[child], type_ignores=[]), type_checking)
        else:
            yield from import_nodes(node, type_checking)


def ours(name: str, modules: set[str]) -> str | None:
    """The module of ours `name` loads: itself, or the longest enclosing module of ours (`wg_mesh.x.Class`)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imported(module: str, path: Path, modules: set[str], type_checking: bool) -> set[str]:
    """The modules of ours that `module` imports. `from p import x` imports p.x when that is a module, else p; the
    packages enclosing a target (run first by Python) are not counted: an __init__ is its own module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in import_nodes(parsed(path), type_checking):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        targets.update(t for t in (ours(name, modules) for name in names) if t and t != module)
    return targets


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    files = module_files()
    return {module: imported(module, path, set(files), type_checking) for module, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    arrows = [f"    {m} -> {t}" for m in component for t in sorted(graph[m] & inside)]
    return "\n".join([", ".join(component), *arrows])


def test_no_import_circles() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import circles (each a strongly connected component, with its arrows):\n" + "\n".join(
        describe(component, graph) for component in found
    )


def test_the_config_package_imports_nothing_of_ours_outside_itself() -> None:
    graph = import_graph(type_checking=True)
    assert PURE in graph, f"{PURE} is missing"
    inside = {m for m in graph if m == PURE or m.startswith(PURE + ".")}
    outside = {f"{m} -> {t}" for m in inside for t in graph[m] - inside}
    assert not outside, "the model imports from outside its package:\n" + "\n".join(sorted(outside))


def test_modules_stay_small() -> None:
    problems = []
    for path in module_files().values():
        name = path.relative_to(REPO).as_posix()
        lines = len(path.read_text().splitlines())
        allowed = OVERSIZE.get(name, MAX_LINES)
        if lines > allowed:
            problems.append(f"{name}: {lines} lines, more than {allowed}")
        elif name in OVERSIZE and lines <= MAX_LINES:
            problems.append(f"{name}: {lines} lines, fits now: remove it from OVERSIZE")
        elif name in OVERSIZE and lines < allowed:
            problems.append(f"{name}: {lines} lines: lower OVERSIZE to {lines} so it cannot grow back")
    problems += [f"{name}: listed in OVERSIZE but gone" for name in OVERSIZE if not (REPO / name).exists()]
    assert not problems, "\n".join(problems)


def test_the_package_root_holds_only_the_public_api_and_the_entries() -> None:
    root = REPO / "wg_mesh"
    found = sorted(p.name for p in root.iterdir() if p.name != "__pycache__")
    allowed = {f"{m}.py" for m in ROOT_MODULES} | ROOT_PACKAGES | ROOT_FILES
    strays = [name for name in found if name not in allowed]
    assert not strays, f"in wg_mesh/ but not its root's (move each into the package of its role): {strays}"
    packages = {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert all((root / name / "__init__.py").is_file() for name in packages), "a folder of wg_mesh/ is not a package"
