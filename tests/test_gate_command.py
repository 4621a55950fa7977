"""The Commands' texts are the same on every machine, and still run the right Python (issue 32, item 5).

Before, every `create` began with `sys.executable`: an `up` from another machine, virtualenv or OS changed every
Command's input and ran every stamp and readiness gate again. Now the texts name no interpreter and no path
(wg_mesh.tools.localcmd); the Python a gate needs is found where it runs: WG_MESH_PYTHON, Pulumi.yaml's virtualenv
(the PULUMI_RUNTIME_VIRTUALENV the engine gives the provider, relative to the project directory), the uv toolchain's
`.venv`, or `python3`. Pure tests and a few shell runs; the whole program under two interpreters and two working
directories is tests/test_program_machines.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from wg_mesh import aws
from wg_mesh.tools import gatepoll, localcmd, serial, stamp

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)  # the virtualenv running the tests: what Pulumi.yaml's `virtualenv` names in a project


def gate_words(text: str) -> list[str]:
    """The arguments a gate Command's text passes to `python` (its first line: `set -- -m MODULE ARGS...`)."""
    first, _, _ = text.partition("\n")
    words = shlex.split(first)
    assert words[:2] == ["set", "--"], first
    return words[2:]


def run_text(text: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The text as pulumi-command runs it (/bin/sh -c, in the provider's directory, with its environment)."""
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **env}  # the checkout's wg_mesh, as installed
    return subprocess.run(
        [*localcmd.INTERPRETER, text], cwd=cwd, env=environment, capture_output=True, text=True, timeout=120
    )


def test_no_text_names_an_interpreter_or_a_path() -> None:
    texts = [aws.gate_command("--region", "us-east-1", "--instance-id", "i-1"), serial.COUNTER_CREATE,
             serial.COUNTER_UPDATE, serial.PIN_CREATE, localcmd.KEEP_OUTPUT, stamp.CREATE]  # fmt: skip
    for text in texts:
        assert sys.executable not in text and sys.prefix not in text and str(REPO) not in text, text
        assert os.getcwd() not in text and "C:\\" not in text
    assert gate_words(texts[0]) == ["-m", "wg_mesh.readygate", "--region", "us-east-1", "--instance-id", "i-1"]
    assert localcmd.INTERPRETER == ["/bin/sh", "-c"]  # explicit: the same input on every OS


def test_every_argument_is_quoted() -> None:
    text = localcmd.python_module("m", "a b", "$(touch /tmp/x)", "'")
    assert gate_words(text) == ["-m", "m", "a b", "$(touch /tmp/x)", "'"]


def test_the_gate_finds_pulumi_yamls_virtualenv_from_the_project_directory(tmp_path: Path) -> None:
    """`virtualenv: .venv` in Pulumi.yaml: the engine gives the provider PULUMI_RUNTIME_VIRTUALENV=.venv and starts
    it in the project directory; no `python3` on the PATH has wg_mesh's dependencies."""
    (tmp_path / ".venv").symlink_to(VENV)
    done = run_text(aws.gate_command("--help"), tmp_path, PULUMI_RUNTIME_VIRTUALENV=".venv")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--instance-id" in done.stdout and "--update" in done.stdout


def test_the_gate_finds_the_uv_toolchains_venv_and_an_explicit_choice(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(VENV)
    done = run_text(aws.gate_command("gcp", "--help"), tmp_path, PULUMI_RUNTIME_TOOLCHAIN="uv")
    assert done.returncode == 0 and "--wait-only" in done.stdout, done.stdout + done.stderr
    other = tmp_path / "elsewhere"
    other.mkdir()
    done = run_text(aws.gate_command("--help"), other, WG_MESH_PYTHON=str(VENV / "bin" / "python"))
    assert done.returncode == 0 and "--instance-id" in done.stdout, done.stdout + done.stderr


def test_without_a_python_that_imports_wg_mesh_the_gate_says_what_to_set(tmp_path: Path) -> None:
    done = run_text(aws.gate_command("--help"), tmp_path, PYTHONPATH="/nonexistent")
    assert done.returncode == 127, done.stdout + done.stderr
    assert "set WG_MESH_PYTHON" in done.stderr and done.stdout == ""


def test_the_small_commands_need_no_python(tmp_path: Path) -> None:
    """The serial counter, the pinned floor and a moment: POSIX shell and `date` only."""
    assert run_text(serial.COUNTER_CREATE, tmp_path, WG_MESH_CONTENT="d1").stdout == "1 d1\n"
    update = {"WG_MESH_CONTENT": "d2", "PULUMI_COMMAND_STDOUT": "7 d1"}
    assert run_text(serial.COUNTER_UPDATE, tmp_path, **update).stdout == "8 d2\n"
    assert run_text(serial.COUNTER_UPDATE, tmp_path, **{**update, "WG_MESH_CONTENT": "d1"}).stdout == "7 d1\n"
    # a stack from before counters: its stamp (the Unix time of the content's last change) plus one
    assert run_text(serial.COUNTER_UPDATE, tmp_path, **{**update, "PULUMI_COMMAND_STDOUT": "1767225600"}).stdout == (
        "1767225601 d2\n"
    )
    broken = run_text(serial.COUNTER_UPDATE, tmp_path, **{**update, "PULUMI_COMMAND_STDOUT": "x d1"})
    assert broken.returncode == 1 and "not a number" in broken.stderr
    assert run_text(serial.PIN_CREATE, tmp_path, WG_MESH_SERIAL="9").stdout == "9\n"
    assert run_text(localcmd.KEEP_OUTPUT, tmp_path, PULUMI_COMMAND_STDOUT="9").stdout == "9\n"
    assert stamp.parse(run_text(stamp.CREATE, tmp_path).stdout) > stamp.MIN_STAMP


def test_a_new_instances_gate_holds_until_a_key_switch_and_an_update_does_not() -> None:
    """Issue 32 item 7: `create` (a new instance) holds until the announced switch (`--not-before`); `update` (the same
    instance) never holds; nothing announced, no hold."""
    assert gatepoll.hold_words(1_800_000_000) == ["--not-before", "1800000000"]
    assert gatepoll.hold_words(None) == []
    slept: list[float] = []
    clock = lambda: 1000.0  # noqa: E731
    assert gatepoll.hold_until(None, 10, slept.append, clock) == 0.0
    assert gatepoll.hold_until(900, 10, slept.append, clock) == 0.0 and slept == []  # passed
    assert gatepoll.hold_until(1007, 10, slept.append, clock) == 7.0 and slept == [7.0]
    with pytest.raises(TimeoutError, match="past this gate's timeout"):
        gatepoll.hold_until(1011, 10, slept.append, clock)
    assert slept == [7.0]  # failed before any wait
