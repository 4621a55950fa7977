"""Every fenced block in README.md and docs/ is classified and checked; a block this test does not know fails it,
naming page:line. The generated pages under docs/reference/ are left out: tests/test_reference_docs.py checks them
against the code they are rendered from.

- bash/sh: `bash -n`, then every simple command (tests/docblocks.py splits them): `wg-mesh ...` (or `python -m
  wg_mesh`) parsed by the real parser, and the offline commands (validate, render, cost, init into a temporary
  directory, monitoring --out a temporary directory, plan) run against the repository's files, exit 0 or the code a
  trailing `# exits N` gives; `pulumi ...` against the Pulumi CLI table in tests/docblocks.py; `pip install`: the
  files, projects and extras it names exist; `cd`/`cp`/`scripts/X`: their paths exist (in the repository, or where
  the page says the block runs: tests/docblocks.py OUTSIDE_THE_CLONE); anything else only on ALLOWED, with a reason.
- yaml: parsed; a price file (first line `# a price file of your own`) read as `cost --prices` reads it; a whole
  stack file (`config: wg-mesh:mesh:`) validated as `wg-mesh validate --file` does; a fragment
  says so on its first line, `# part of FILE: wg-mesh:mesh` (mesh keys) or `# part of FILE: wg-mesh:mesh.sites`
  (sites), and is validated merged into FILE: its keys replace FILE's, a site replaces FILE's site of that name,
  one with a `...` key only the keys it gives (`...`: the site's other keys as in FILE).
- python: compiled; `from wg_mesh import X` names a public name; SiteArgs/MeshArgs keys are real fields; the block
  runs under Pulumi's mocks (wg_mesh.testing); one whose first line names `examples/.../__main__.py` runs after that
  program's statements before its Mesh.
- json: parsed. text: diagrams and output. No language: refused (say `text`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docblocks import OUTSIDE_THE_CLONE, REPO, SUDO_LINE, Block, blocks, commands
from tests.doccommands import Shell, check_bash

PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if p.parent.name != "reference")]
FRAGMENT = re.compile(r"^# part of (?P<file>\S+\.yaml): (?P<path>wg-mesh:mesh(?:\.sites)?)(?:[\s,;(]|$)")
CONTINUES = re.compile(r"^#.*?\b(?P<program>examples/[\w./-]+/__main__\.py)\b")
ARGS_TYPES = ("SiteArgs", "MeshArgs", "PrivatePathArgs")


def merge_sites(sites: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged = [dict(site) for site in sites]
    by_name = {site["name"]: site for site in merged}
    for site in new:
        site = dict(site)
        elided = "..." in site
        site.pop("...", None)
        if elided and site["name"] in by_name:
            by_name[site["name"]].update(site)
        elif elided:
            raise ValueError(f"site {site['name']}: `...` but the base file has no such site")
        elif site["name"] in by_name:
            merged[merged.index(by_name[site["name"]])] = site
        else:
            merged.append(site)
    return merged


def check_yaml(block: Block, tmp: Path) -> list[str]:
    from wg_mesh.config import ConfigError
    from wg_mesh.plan.validate import load_mesh
    from wg_mesh.tools.stackfile import load

    data = yaml.safe_load(block.text)
    first = block.text.lstrip().split("\n", 1)[0]
    try:
        if fragment := FRAGMENT.match(first):
            base = yaml.safe_load((REPO / fragment["file"]).read_text())["config"]["wg-mesh:mesh"]
            if fragment["path"].endswith(".sites"):
                base["sites"] = merge_sites(base["sites"], data)
            else:
                base |= {k: v for k, v in data.items() if k != "sites"}
                base["sites"] = merge_sites(base["sites"], data.get("sites", []))
            load_mesh(base)
        elif isinstance(data, dict) and "wg-mesh:mesh" in (data.get("config") or {}):
            path = tmp / "Pulumi.docs.yaml"
            path.write_text(block.text)
            load(path)
        elif first.startswith("# a price file of your own"):  # wg-mesh cost --prices FILE
            import datetime as dt

            from wg_mesh.tools import prices

            path = tmp / "prices.yaml"
            path.write_text(block.text)
            prices.overlay(prices.load(), path, dt.date.today())
        else:
            return ["YAML that is neither a stack file (config: wg-mesh:mesh:) nor a fragment (`# part of FILE: ...`)"]
    except ConfigError as exc:
        return [f"invalid: {p}" for p in exc.problems]
    except ValueError as exc:
        return [str(exc)]
    return []


def check_imports_and_args(tree: ast.Module) -> list[str]:
    import wg_mesh

    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            public = set(wg_mesh.__all__) if node.module == "wg_mesh" else set(dir(module))
            problems += [
                f"from {node.module} import {a.name}: no such name" for a in node.names if a.name not in public
            ]
        elif isinstance(node, ast.Import):
            problems += [f"import {a.name}: not installed" for a in node.names if not importlib.util.find_spec(a.name)]
        keys: list[str] = []
        kind = ""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ARGS_TYPES:
            kind, keys = node.func.id, [k.arg for k in node.keywords if k.arg]
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.annotation, ast.Name)
            and isinstance(node.value, ast.Dict)
        ):
            kind = node.annotation.id if node.annotation.id in ARGS_TYPES else ""
            keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
        if kind:
            fields = getattr(wg_mesh, kind).__annotations__
            problems += [f"{kind}: no field {key!r}" for key in keys if key not in fields]
    return problems


def check_python(block: Block, tmp: Path) -> list[str]:
    from wg_mesh.testing import ProgramRun as Run
    from wg_mesh.testing import RecordingMocks, RecordingMonitor, execute

    tree = ast.parse(block.text)
    problems = check_imports_and_args(tree)
    program = block.text
    if continues := CONTINUES.match(block.text):
        source = (REPO / continues["program"]).read_text()
        before = next(n for n in ast.parse(source).body if "Mesh(" in ast.get_source_segment(source, n)).lineno
        program = "\n".join(source.split("\n")[: before - 1]) + "\n" + block.text

    class Mocks(RecordingMocks):
        def new_resource(self, args: Any) -> tuple[str | None, dict[str, Any]]:
            if args.typ == "pulumi:pulumi:StackReference":  # another stack's outputs: a fake address
                return args.name, {"name": args.name, "outputs": {"public_ip": "198.51.100.10"}}
            return super().new_resource(args)

    path = tmp / f"block_{block.line}.py"
    path.write_text(program)
    mocks = Mocks(False)
    try:
        run = execute(Run(preview=False, mocks=mocks, monitor=RecordingMonitor(mocks)), path, {}, project="docs")
    except Exception as exc:
        return [*problems, f"under mocks: {type(exc).__name__}: {exc}"]
    return problems + ([f"under mocks: {run.error}"] if run.error else [])


CHECKS: dict[str, Callable[[Block, Shell, Path], list[str]]] = {
    "bash": check_bash,
    "sh": check_bash,
    "yaml": lambda block, shell, tmp: check_yaml(block, tmp),
    "python": lambda block, shell, tmp: check_python(block, tmp),
    "json": lambda block, shell, tmp: json.loads(block.text) and [],
    "text": lambda block, shell, tmp: [],
}


def page_problems(page: Path, tmp: Path) -> list[str]:
    shell, problems = Shell(), []
    for block in blocks(page):
        check = CHECKS.get(block.lang)
        if check is None:
            label = f"```{block.lang}" if block.lang else "no language (a diagram or output: say ```text)"
            problems.append(f"{block.where}: {label}: not a kind tests/test_doc_examples.py checks")
            continue
        try:
            problems += [f"{block.where}: {p}" for p in check(block, shell, tmp)]
        except Exception as exc:  # a parse error of any kind names the block
            problems.append(f"{block.where}: {type(exc).__name__}: {exc}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_block_of_the_page_is_right(page: Path, tmp_path: Path) -> None:
    problems = page_problems(page, tmp_path)
    assert not problems, "\n".join(problems)


def test_the_sections_that_start_outside_the_clone_exist() -> None:
    sections = {block.key for page in PAGES for block in blocks(page)}
    assert sections >= OUTSIDE_THE_CLONE, OUTSIDE_THE_CLONE - sections


BROKEN = """# A page of broken examples

```bash
wg-mesh validte --stack dev
wg-mesh validate --stack nosuch
wg-mesh validate --stack dev   # exits 1
pulumi up --stak dev
pulumi stack frobnicate
.venv/bin/pip install -r requirements-nope.txt
.venv/bin/pip install -e ".[nolab]"
.venv/bin/pip install pulumi-wg-mesh
cd nowhere
curl https://example.com
scripts/nope
```

```bash
if then fi
```

```yaml
config:
  wg-mesh:mesh: {overlay_cidr: 10.200.0.0/24, sites: [{name: a, cloud: aws}]}
```

```yaml
# part of Pulumi.dev.yaml: wg-mesh:mesh.sites
- {name: aws-use1, overlay_ip: 10.99.0.1, ...}
```

```python
from wg_mesh import Mesh, Nope, SiteArgs
SiteArgs(nme="x")
```

```
unlabelled
```

```console
$ wg-mesh cost
```
"""


def test_a_broken_example_fails_at_its_line(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text(BROKEN)
    problems = "\n".join(page_problems(page, tmp_path))
    expected = [
        "broken.md:3: line 4: refused by wg-mesh's parser",  # a misspelt subcommand
        "broken.md:3: line 5: exit 2, expected 0: --stack nosuch: no stack file",
        "broken.md:3: line 6: exit 0, expected 1",  # a documented exit code that is not the command's
        "broken.md:3: line 7: pulumi up: unknown flag --stak",
        "broken.md:3: line 8: unknown pulumi subcommand: stack frobnicate",
        "broken.md:3: line 9: pip -r requirements-nope.txt: no such file",
        "broken.md:3: line 10: pip install .[nolab]: no extra ['nolab']",
        "broken.md:3: line 11: pip install pulumi-wg-mesh: a name from PyPI",
        "broken.md:3: line 12: cd nowhere: no such directory",
        "broken.md:3: line 13: curl: a command tests/test_doc_examples.py does not know",
        "broken.md:3: line 14: scripts/nope: not an executable file",
        "broken.md:17: bash -n:",
        "broken.md:21: invalid: sites[0].overlay_ip: required",
        "broken.md:26: invalid: sites[0].overlay_ip:",  # outside the dev file's overlay
        "broken.md:31: from wg_mesh import Nope: no such name",
        "broken.md:31: SiteArgs: no field 'nme'",
        "broken.md:36: no language",
        "broken.md:40: ```console: not a kind",
    ]
    missing = [line for line in expected if line not in problems]
    assert not missing, f"not reported: {missing}\nreported:\n{problems}"


# --- root and sudo (issue 34 item 8: "sudo: command not found" as root in a container) -----------------------------

ROOT_OR_SUDO_PAGES = [REPO / "README.md", *sorted((REPO / "docs" / "getting-started").glob("*.md"))]


@pytest.mark.parametrize("page", ROOT_OR_SUDO_PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_first_pages_commands_run_as_root_and_as_a_user_with_sudo(page: Path) -> None:
    """No bare `sudo` (root in a container has none): `$SUDO`, set by SUDO_LINE earlier in the same block (each
    block runs in a new shell)."""
    problems = []
    for block in (b for b in blocks(page) if b.lang in ("bash", "sh")):
        defined = False
        for command in commands(block.text):
            words = command.words
            defined = defined or words[:1] == ("SUDO=sudo-unless-root",)
            if "sudo" in words[:1]:
                problems.append(f"{block.where}: `sudo {' '.join(words[1:3])} ...`: write $SUDO ({SUDO_LINE})")
            if "$SUDO" in words and not defined:
                problems.append(f"{block.where}: $SUDO used before `{SUDO_LINE}` in this block")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("uid", "expected"), [("0", ""), ("1000", "sudo")])
def test_the_sudo_line_is_empty_as_root_and_sudo_otherwise(uid: str, expected: str, tmp_path: Path) -> None:
    """SUDO_LINE itself under bash, with `id -u` answering as root and as a user (a stub first on PATH)."""
    stub = tmp_path / "id"
    stub.write_text(f'#!/bin/sh\n[ "$1" = -u ] && echo {uid}\n')
    stub.chmod(0o755)
    done = subprocess.run(
        ["bash", "-e", "-c", f'{SUDO_LINE}\nprintf "%s" "$SUDO"'], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout == expected
