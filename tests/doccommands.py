"""The shell blocks' commands, checked one by one for tests/test_doc_examples.py (its docstring says how): a
virtual shell tracks the directory each command runs in (the clone of the repository, the directory holding it, an
example's copy), the offline `wg-mesh` commands run in-process against the repository's files."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import posixpath
import re
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tests.docblocks import OUTSIDE_THE_CLONE, REPO, Block, commands, pulumi_problem

HOLDER = PurePosixPath("/home/you")  # the directory holding the clone: what a page's "wg-mesh" directory is
CLONE = HOLDER / "wg-mesh"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

ALLOWED = {
    "apt-get": "Debian's package manager; the lab's packages (.ci/run installs the same ones)",
    "git": "git clone/pull of this repository (a clone maps the directory to the repository)",
    "ssh": "runs the quoted command on the user's host: tests/test_readme_static_site.py runs those with /etc moved",
    "break": "shell builtin (the static-site loop stops at the first missing output)",
}
WG_MESH_RUN = {"validate", "render", "cost", "plan", "init", "monitoring"}  # offline: run here
WG_MESH_PARSE_ONLY = {"lab": "needs root and the lab's tools (tests/test_lab*.py run it)", "doctor": "on a gateway"}


@dataclass
class Shell:
    """Where a page's blocks run: virtual directories mapped onto real ones (the clone, an example's copy)."""

    mounts: dict[PurePosixPath, Path] = field(default_factory=lambda: {CLONE: REPO})
    cwd: PurePosixPath = CLONE
    initialised: set[str] = field(default_factory=set)  # stacks a page's `wg-mesh init` wrote (in tmp/init)

    def virtual(self, path: str) -> PurePosixPath:
        return PurePosixPath(posixpath.normpath(self.cwd / path))

    def real(self, path: str) -> Path | None:
        target = self.virtual(path)
        for mount in sorted(self.mounts, key=lambda m: -len(m.parts)):
            if target == mount or mount in target.parents:
                return self.mounts[mount].joinpath(*target.parts[len(mount.parts) :])
        return None


def normalise(words: tuple[str, ...]) -> list[str]:
    """Without env assignments, sudo (or `$SUDO`: tests/docblocks.py SUDO_LINE) and its options, the `.venv/bin/`
    prefix; `python -m wg_mesh` as `wg-mesh`."""
    argv = list(words)
    while argv and re.match(r"^[A-Za-z_]\w*=", argv[0]):
        argv.pop(0)
    if argv[:1] in (["sudo"], ["$SUDO"]):
        argv.pop(0)
        while argv and argv[0].startswith("-"):
            argv.pop(0)
    if argv and argv[0].startswith(".venv/bin/"):
        argv[0] = argv[0].removeprefix(".venv/bin/")
    if argv[:1] in (["python"], ["python3"]) and argv[1:3] == ["-m", "wg_mesh"]:
        argv = ["wg-mesh", *argv[3:]]
    if argv[:1] in (["python"], ["python3"]) and argv[1:3] == ["-m", "pip"]:
        argv = ["pip", *argv[3:]]
    return ["pip", *argv[1:]] if argv[:1] == ["pip3"] else argv


def parse_with(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, str | None]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(argv), None
    except SystemExit as exc:
        return None, None if exc.code == 0 else f"refused by {parser.prog}'s parser: {err.getvalue().strip()[-300:]}"


def run_wg_mesh(argv: list[str], shell: Shell, tmp: Path, expected: int) -> str | None:
    from wg_mesh.cli import build_parser, main

    args, problem = parse_with(build_parser(), argv)
    if args is None:
        return problem  # None: --help or --version, exit 0
    if args.command in WG_MESH_PARSE_ONLY:
        return None
    if args.command not in WG_MESH_RUN:
        return f"wg-mesh {args.command}: neither run nor parse-only in tests/test_doc_examples.py: say which"
    cwd = shell.real(".")
    if args.command == "init" or getattr(args, "stack", None) in shell.initialised:
        cwd = tmp / "init"  # the stack file the page's init wrote, never one in the clone
        cwd.mkdir(exist_ok=True)
    if args.command == "monitoring":
        argv = [str(tmp / "monitoring") if argv[i - 1] == "--out" else a for i, a in enumerate(argv)]
    assert cwd is not None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    if code != expected:
        return f"exit {code}, expected {expected}: {err.getvalue().strip()[-400:]}"
    if args.command == "init" and code == 0:
        shell.initialised.add(args.stack)
    return None


def check_pip(argv: list[str], shell: Shell) -> str | None:
    if argv[:1] != ["install"]:
        return f"pip {argv[:1]}: only `pip install` is known here"
    rest = argv[1:]
    while rest:
        word = rest.pop(0)
        if word in ("-q", "--quiet", "-U", "--upgrade", "-e", "--editable"):
            continue
        if word in ("-r", "--requirement", "-c", "--constraint"):
            name = rest.pop(0)
            path = shell.real(name)
            if path is None or not path.is_file():
                return f"pip {word} {name}: no such file in {shell.cwd}"
        elif word.startswith("-"):
            return f"pip install: flag {word} unknown here"
        elif " @ " in word:
            name, url = word.split(" @ ", 1)
            if name != PROJECT["name"] or not url.startswith("git+"):
                return f"pip install {word!r}: not this project ({PROJECT['name']}) from git"
        elif word.startswith((".", "/")):
            where, _, extras = word.partition("[")
            path = shell.real(where)
            if path is None or not (path / "pyproject.toml").is_file():
                return f"pip install {word}: {where} is not a project directory (from {shell.cwd})"
            offered = tomllib.loads((path / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
            unknown = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()} - set(offered)
            if unknown:
                return f"pip install {word}: no extra {sorted(unknown)} in {where}/pyproject.toml"
        else:
            return (
                f"pip install {word}: a name from PyPI (pulumi-wg-mesh is not published: install from the repository)"
            )
    return None


def check_python_command(argv: list[str]) -> str | None:
    if argv[:2] == ["-m", "venv"]:
        return None
    if argv[:1] == ["-c"]:
        compile(argv[1], "<python -c>", "exec")
        return None
    if argv[:2] == ["-m", "refdocs"]:
        return None
    if argv[:2] == ["-m", "pricegen"]:
        from pricegen.__main__ import build_parser as pricegen_parser

        return parse_with(pricegen_parser(), argv[2:])[1]
    if argv[:2] == ["-m", "bench"]:
        from bench.cli import build_parser

        return parse_with(build_parser(), argv[2:])[1]
    return f"python {' '.join(argv[:2])}: unknown here"


def check_command(
    words: tuple[str, ...], comment: str, shell: Shell, tmp: Path, stdout: str | None = None
) -> str | None:
    argv = normalise(words)
    if not argv:
        return None  # only assignments (SUDO=...)
    program, args = argv[0], argv[1:]
    expected = int(m.group(1)) if (m := re.search(r"\bexits? (\d+)\b", comment)) else 0
    if program == "wg-mesh":
        # a file an earlier command of the page wrote (`git show ... > /tmp/old.yaml`): its stand-in
        saved = {str(mount): str(real) for mount, real in shell.mounts.items() if real.is_file()}
        return run_wg_mesh([saved.get(a, a) for a in args], shell, tmp, expected)
    if program == "pulumi":
        return pulumi_problem(args)
    if program == "pip":
        return check_pip(args, shell)
    if program in ("python", "python3"):
        return check_python_command(args)
    if program in (".", "source"):
        return None if args == [".venv/bin/activate"] else f"{program} {args}: only the venv's activate is known"
    if program == "export":
        bad = [a for a in args if not re.match(r"^[A-Za-z_]\w*(=|$)", a)]
        return f"export {bad}: not NAME=value" if bad else None
    if program == "cd":
        path = shell.real(args[0])
        if path is None or not path.is_dir():
            return f"cd {args[0]}: no such directory (from {shell.cwd})"
        shell.cwd = shell.virtual(args[0])
        return None
    if program == "cp":
        source, dest = [a for a in args if not a.startswith("-")]
        path = shell.real(source)
        if path is None or not path.exists():
            return f"cp {source}: no such file (from {shell.cwd})"
        shell.mounts[shell.virtual(dest)] = path
        return None
    if program == "git" and args[:1] == ["clone"]:
        shell.mounts[shell.virtual(args[-1])] = REPO
    if program == "git" and args[:1] == ["show"] and stdout is not None:
        # `git show REV:PATH > FILE`: a committed file saved; here the working tree's copy stands for it
        _, _, name = args[-1].rpartition(":")
        path = shell.real(name)
        if path is None or not path.is_file():
            return f"git show {args[-1]}: no such file {name} (from {shell.cwd})"
        shell.mounts[shell.virtual(stdout)] = path
    if program in ALLOWED:
        return None
    if "/" in program:
        path = shell.real(program)
        if path is None or not path.is_file() or not os.access(path, os.X_OK):
            return f"{program}: not an executable file (from {shell.cwd})"
        return None
    return f"{program}: a command tests/test_doc_examples.py does not know (check it, then add it)"


def check_bash(block: Block, shell: Shell, tmp: Path) -> list[str]:
    syntax = subprocess.run(["bash", "-n"], input=block.text, text=True, capture_output=True, check=False)
    if syntax.returncode:
        return [f"bash -n: {syntax.stderr.strip()}"]
    shell.cwd = HOLDER if block.key in OUTSIDE_THE_CLONE else CLONE
    problems = []
    for command in commands(block.text):
        if problem := check_command(command.words, command.comment, shell, tmp, command.stdout):
            problems.append(f"line {block.line + 1 + command.line}: {problem}")
    return problems
