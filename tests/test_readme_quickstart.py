"""The README's two quick starts, run as printed in a fresh clone (issue 23: "every printed command runs in a fresh
shell as shown").

The repository's HEAD is cloned into a temporary directory as `wg-mesh`; every bash block of the README's sections
"Quick start: a stack file" and "Quick start: the component in your own program" (of the clone's README: what is
committed) runs in its own `bash -e -o pipefail`, with a clean environment (`env -i`: HOME and a PATH of the system's
directories only), in the directory the README names: the clone, or the directory holding it
(tests/docblocks.py OUTSIDE_THE_CLONE). The pip installs are real (PyPI, pip's cache under HOME). There is no Pulumi
CLI here: a stub `pulumi` comes first on PATH (tests/pulumistub.py says what it checks and what it does not); its
`preview` and `up` run the project's program under wg-mesh's mocks with the block's venv's Python.

Root and sudo (issue 34 item 8): CI runs as root, the way a container does, and a `sudo` stub first on PATH answers
"sudo: command not found" (exit 127) as a container without sudo would, so a bare `sudo` in a block fails here; the PATH
is root's (sbin included). Run as root, the stack file's run then runs the README's first block (apt-get, the lab's
extra, `$SUDO .venv/bin/wg-mesh lab --stack dev`) in the same clone: no second clone, the venv already filled. As a
user, that block is left out (it would ask for a password); tests/test_doc_examples.py checks every block of the first
pages sets `$SUDO` before it uses it, and what it expands to as root and as a user.

Integration (the lab's stage of scripts/check): each quick start is ~1.5 min of pip (measured: 93 s wall, 63 s CPU
for the stack file's), mostly unpacking wheels; the lab's stage has a core to spare while its tests wait. The first
block adds apt-get's update (the machine's packages are installed by .ci/run), the lab extra and the `dev` lab.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import time
from pathlib import Path

import pytest

from tests.docblocks import OUTSIDE_THE_CLONE, REPO, Block, blocks
from tests.pulumistub import install

FIRST = "wg-mesh"  # the README's first section: "See it run on this machine"
STACK_FILE = "Quick start: a stack file"
COMPONENT = "Quick start: the component in your own program"
SECTION_FENCE = re.compile(r"^\s*```(\S*)", re.M)
BLOCK_TIMEOUT_S = 1200  # a hung pip fails the test instead of hanging CI; no assertion on time


def section_blocks(readme: Path, section: str) -> list[Block]:
    """The section's bash blocks; every fenced block of it is bash or python (the docs test checks the Python), so a
    block in another language cannot be skipped silently."""
    found = [b for b in blocks(readme) if b.section == section]
    text = readme.read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    fences = SECTION_FENCE.findall(text[start : end if end > 0 else None])[::2]  # opening fences
    assert len(fences) == len(found) and found, f"{section}: fences {fences}, blocks {[b.lang for b in found]}"
    assert {b.lang for b in found} <= {"bash", "python"}, f"{section}: {[b.lang for b in found]}"
    return [b for b in found if b.lang == "bash"]


ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def first_block(readme: Path) -> Block:
    """The README's first block: the lab on this machine, needing root."""
    found = [b for b in blocks(readme) if b.section == FIRST and b.lang == "bash"]
    assert found and "wg-mesh lab --stack dev" in found[0].text, found
    return found[0]


def clone(into: Path) -> Path:
    into.mkdir()
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(into / "wg-mesh")], check=True)
    return into / "wg-mesh"


def run_section(checkout: Path, section: str, tmp: Path) -> tuple[list[str], list[dict[str, object]]]:
    """Run the section's bash blocks as printed; (problems, the stub's log). Stops at the first failing block."""
    stubs, state = tmp / "stub-bin", tmp / "stub-state"
    stubs.mkdir()
    state.mkdir()
    install(stubs, state)
    no_sudo = stubs / "sudo"  # as in a container: root, and no sudo installed
    no_sudo.write_text('#!/bin/sh\necho "sudo: command not found" >&2\nexit 127\n')
    no_sudo.chmod(0o755)
    env = {"HOME": os.environ.get("HOME", str(tmp)), "PATH": f"{stubs}:{ROOT_PATH}"}
    problems = []
    run = section_blocks(checkout / "README.md", section)
    if section == STACK_FILE and os.geteuid() == 0:
        run.append(first_block(checkout / "README.md"))  # root: the lab block too, in this clone and venv
    for block in run:
        cwd = checkout.parent if block.key in OUTSIDE_THE_CLONE else checkout
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=cwd, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT_S, check=False,
        )  # fmt: skip
        print(f"--- {block.where} in {cwd} (exit {result.returncode})\n{result.stdout[-3000:]}")
        if result.returncode:
            problems.append(f"{block.where}: exit {result.returncode}:\n{result.stdout[-3000:]}")
            break
    log = [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()] if problems == [] else []
    return problems, log


@pytest.mark.integration
@pytest.mark.parametrize("section", [STACK_FILE, COMPONENT])
def test_the_quick_start_runs_as_printed_in_a_fresh_clone(section: str, tmp_path: Path) -> None:
    start, children = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    checkout = clone(tmp_path / "home")
    problems, log = run_section(checkout, section, tmp_path)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = used.ru_utime + used.ru_stime - children.ru_utime - children.ru_stime
    print(f"{section}: {time.monotonic() - start:.0f} s wall, {cpu:.0f} s CPU (children)")
    assert not problems, "\n".join(problems)
    ran = [entry for entry in log if "ran" in entry]
    assert ran and all(entry["resources"] for entry in ran), ran  # the stub's preview really ran the program
    project = checkout if section == STACK_FILE else checkout.parent / "my-mesh"
    for entry in ran:
        package = Path(str(entry["package"]))
        assert entry["cwd"] == str(project)
        # the stack file's editable install imports the clone's wg_mesh; the component's, its own venv's copy
        assert package.is_relative_to(project / ".venv" if section == COMPONENT else checkout), package


def test_a_broken_block_fails_the_run(tmp_path: Path) -> None:
    """The README copy in a fresh clone broken (a path that is not there): the run stops at that block, non-zero.
    Cheap: the component's first command fails before any pip install."""
    checkout = clone(tmp_path / "home")
    readme = checkout / "README.md"
    readme.write_text(readme.read_text().replace("cp -r wg-mesh/examples/existing-vpc", "cp -r wg-mesh/examples/gone"))
    problems, _ = run_section(checkout, COMPONENT, tmp_path)
    assert len(problems) == 1 and problems[0].startswith("README.md:") and "examples/gone" in problems[0], problems


def test_the_stub_refuses_what_pulumi_would(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "state").mkdir()
    stub = install(tmp_path / "bin", tmp_path / "state")
    (tmp_path / "Pulumi.yaml").write_text("name: p\nruntime: {name: python, options: {virtualenv: .venv}}\n")

    def pulumi(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(stub), *argv], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True,
            check=False,
        )  # fmt: skip

    assert pulumi("preview", "--stak", "dev").returncode == 2  # an unknown flag
    assert pulumi("stack", "frobnicate").returncode == 2
    assert "not logged in" in pulumi("stack", "init", "dev").stderr
    assert pulumi("login", "--local").returncode == 0
    assert "PULUMI_CONFIG_PASSPHRASE" in pulumi("stack", "init", "dev").stderr
    assert pulumi("stack", "init", "dev", PULUMI_CONFIG_PASSPHRASE="x").returncode == 0
    assert "already exists" in pulumi("stack", "init", "dev", PULUMI_CONFIG_PASSPHRASE="x").stderr
    assert "no stack named 'prod'" in pulumi("preview", "--stack", "prod", PULUMI_CONFIG_PASSPHRASE="x").stderr
    assert "virtualenv" in pulumi("preview", PULUMI_CONFIG_PASSPHRASE="x").stderr  # no .venv here
    assert "run `pulumi up` first" in pulumi("stack", "output", "sites", PULUMI_CONFIG_PASSPHRASE="x").stderr
