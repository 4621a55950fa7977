"""The install metadata says what the code imports: every third-party import under wg_mesh/ is a declared dependency
(the lab's in the `lab` extra), nothing is declared that nothing imports, and requirements.txt pins exactly the
runtime set while requirements-dev.txt adds the developer tools on top of it."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "wg_mesh"
# Declared though no module imports it by name: google-auth's requests transport (google.auth.transport.requests)
# needs it, and google-auth lists it only as an extra.
IMPORTED_INDIRECTLY = {"requests"}
# Imported by name, installed by the declared distribution that owns it (and pins it).
PART_OF = {"pydantic-core": "pydantic"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    assert match, spec
    return _norm(match.group(1))


def _owner(module: str, candidates: list[str]) -> str:
    """The distribution that installs `module`: the only one providing its top-level name, or (a namespace package
    such as google) the one whose files hold the module's first two levels."""
    if len(set(candidates)) == 1:
        return candidates[0]
    spec = importlib.util.find_spec(".".join(module.split(".")[:2]))
    assert spec is not None and spec.origin is not None, module
    origin = Path(spec.origin).resolve()
    holders = {
        d for d in candidates if any(Path(str(f.locate())).resolve() == origin for f in distribution(d).files or ())
    }
    assert len(holders) == 1, f"{module}: installed by {holders or candidates}"
    return holders.pop()


def imported_distributions(*, lab: bool) -> set[str]:
    """The distributions providing the top-level third-party modules imported under wg_mesh/ (lab: only wg_mesh/lab/,
    else everything outside it)."""
    owners = packages_distributions()
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if (PACKAGE / "lab" in path.parents) != lab:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top == "wg_mesh":
                    continue
                assert top in owners, (
                    f"{path.relative_to(REPO)} imports {top}, which no installed distribution provides"
                )
                owner = _norm(_owner(module, owners[top]))
                found.add(PART_OF.get(owner, owner))
    return found


def _project() -> dict[str, object]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert isinstance(project, dict)
    return project


def _pins(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-r "):
            assert "==" in line, f"{name}: {line} is not pinned"
            pins[_requirement_name(line)] = line
    return pins


def test_runtime_imports_are_exactly_the_declared_dependencies() -> None:
    declared = {_requirement_name(d) for d in _project()["dependencies"]}  # type: ignore[attr-defined]
    imported = imported_distributions(lab=False)
    assert imported - declared == set(), "imported under wg_mesh/ but not in [project.dependencies]"
    assert declared - imported - IMPORTED_INDIRECTLY == set(), "declared but imported nowhere outside wg_mesh/lab/"


def test_the_labs_own_imports_are_its_extra() -> None:
    extra = {_requirement_name(d) for d in _project()["optional-dependencies"]["lab"]}  # type: ignore[index]
    declared = {_requirement_name(d) for d in _project()["dependencies"]}  # type: ignore[attr-defined]
    assert imported_distributions(lab=True) - declared == extra


def test_requirements_pin_the_runtime_set_and_dev_adds_the_tools() -> None:
    runtime = _pins("requirements.txt")
    declared = {_requirement_name(d) for d in _project()["dependencies"]}  # type: ignore[attr-defined]
    assert set(runtime) == declared
    dev_text = (REPO / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev_text.splitlines()
    dev = _pins("requirements-dev.txt")
    assert set(dev) & set(runtime) == set(), "requirements-dev.txt repeats a runtime pin"
    lab = {_requirement_name(d) for d in _project()["optional-dependencies"]["lab"]}  # type: ignore[index]
    assert lab <= set(dev), "the lab's extra is not pinned in requirements-dev.txt"
    assert "requirements-dev.txt" in (REPO / ".ci" / "run").read_text()
