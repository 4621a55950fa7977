"""The readiness gate's command line: the interpreter running the program, not a path relative to the cwd.

`.venv/bin/python` existed only in a checkout with its virtualenv, run from the project directory, on POSIX: a
package user, `pulumi --cwd` and Windows had none. The gate now runs with `sys.executable`, quoted by the one
mechanism the stamp uses too (wg_mesh.tools.stamp.command_line). Pure: no Pulumi run.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from wg_mesh import aws
from wg_mesh.gcp import instance as gcp_instance
from wg_mesh.tools import gatepoll, stamp

REPO = Path(__file__).resolve().parents[1]


def test_the_gate_runs_with_the_interpreter_running_the_program() -> None:
    words = shlex.split(aws.GATE_COMMAND)
    assert words == [sys.executable, "-m", "wg_mesh.readygate"]
    assert os.path.isabs(words[0]) and os.access(words[0], os.X_OK)
    assert gcp_instance.GATE_COMMAND is aws.GATE_COMMAND  # the GCP gate is the same module's `gcp` subcommand


def test_the_stamp_and_the_gate_quote_the_same_way() -> None:
    assert stamp.create_command("/opt/py 3/bin/python") == stamp.python_command(
        "-c", stamp.PROGRAM, executable="/opt/py 3/bin/python"
    )
    assert shlex.split(stamp.python_command("-m", "x", executable="/opt/py 3/bin/python", windows=False)) == [
        "/opt/py 3/bin/python", "-m", "x",
    ]  # fmt: skip


def test_windows_gets_cmd_quoting_not_posix_quotes() -> None:
    line = stamp.python_command(
        "-m", "wg_mesh.readygate", executable=r"C:\Program Files\Python312\python.exe", windows=True
    )
    assert line == r'"C:\Program Files\Python312\python.exe" -m wg_mesh.readygate'
    program = stamp.python_command("-c", stamp.PROGRAM, executable=r"C:\Python\python.exe", windows=True)
    assert program == r'C:\Python\python.exe -c "import time; print(int(time.time()))"'


def test_the_gate_command_runs_from_another_directory(tmp_path: Path) -> None:
    """What `pulumi --cwd` or an installed package does: the cwd is not the checkout, no `.venv` lies beside it."""
    done = subprocess.run(
        ["/bin/sh", "-c", f"{aws.GATE_COMMAND} --help"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},  # the package importable, as installed
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--instance-id" in done.stdout


def test_a_new_instances_gate_holds_until_a_key_switch_and_an_update_does_not() -> None:
    """Issue 32 item 7: `create` (a new instance) holds until the announced switch; `update` (the same instance, its
    `create` changed by a rotation) leaves the hold out; nothing announced, no hold and no `update` (create runs again,
    as before)."""
    line = lambda v: f"gate --instance {v['iid']}"  # noqa: E731
    assert (
        gatepoll.held(line, {"iid": "i-1", "not_before": 1_800_000_000})
        == "gate --instance i-1 --not-before 1800000000"
    )
    assert gatepoll.unheld(line, {"iid": "i-1", "not_before": 1_800_000_000}) == "gate --instance i-1"
    assert gatepoll.held(line, {"iid": "i-1", "not_before": None}) == "gate --instance i-1"
    assert gatepoll.unheld(line, {"iid": "i-1", "not_before": None}) is None
    slept: list[float] = []
    clock = lambda: 1000.0  # noqa: E731
    assert gatepoll.hold_until(None, 10, slept.append, clock) == 0.0
    assert gatepoll.hold_until(900, 10, slept.append, clock) == 0.0 and slept == []  # passed
    assert gatepoll.hold_until(1007, 10, slept.append, clock) == 7.0 and slept == [7.0]
    with pytest.raises(TimeoutError, match="past this gate's timeout"):
        gatepoll.hold_until(1011, 10, slept.append, clock)
    assert slept == [7.0]  # failed before any wait
