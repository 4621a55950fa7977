"""An `up` from another machine changes nothing (issue 32, item 5): the program run here and again in a fresh
interpreter with another `sys.executable` and another working directory declares every resource with the very same
inputs.

Before, every Command's `create` began with `sys.executable` (read when wg_mesh.aws.machine was imported): an `up`
from another machine, virtualenv or OS updated all of them, which ran every stamp and readiness gate again. The other
run is a subprocess because that was read at import time; both are the `dev` stack in `delivery: live` (a document
serial, a key moment, a pinned floor and a readiness gate per site, AWS and GCP).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import NOW, REPO, run_program, with_delivery
from wg_mesh.tools.stackfile import read_raw

DRIVER = """
import json, os, sys  # noqa: E401
sys.executable = sys.argv[1]  # what the program would read on another machine
os.chdir(sys.argv[2])
sys.path.insert(0, sys.argv[3])
import tests.conftest
tests.conftest.NOW = float(sys.argv[4])  # the same renewal period as this process's runs
from tests.test_program_machines import declared
print(json.dumps(declared()))
"""


def declared() -> list[Any]:
    """Every resource the `dev` stack (live) declares, with its inputs, sorted: JSON text's values."""
    run = run_program(with_delivery(read_raw(REPO / "Pulumi.dev.yaml"), "live"), preview=False, stack="dev")
    assert run.error is None, run.error
    resources: list[Any] = json.loads(json.dumps([[r.type, r.name, r.inputs] for r in run.mocks.resources]))
    return sorted(resources)


def inputs_on(executable: str, cwd: Path) -> list[Any]:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, executable, str(cwd), str(REPO), repr(NOW)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    resources: list[Any] = json.loads(done.stdout)
    return resources


def test_another_interpreter_and_directory_declare_the_same_inputs(tmp_path: Path) -> None:
    laptop = declared()  # this interpreter, in the repository
    ci = inputs_on("/opt/hostedtoolcache/Python/3.12.7/x64/bin/python3", tmp_path)
    commands = [r for r in laptop if r[0] == "command:local:Command"]
    kinds = {name.rsplit("-", 1)[-1] for _, name, _ in commands}
    assert kinds == {"serial", "at", "floor", "ready"}, kinds  # every kind of Command the program makes
    assert len(laptop) == len(ci)
    for mine, theirs in zip(laptop, ci, strict=True):
        assert mine == theirs, (mine[:2], theirs[:2])
