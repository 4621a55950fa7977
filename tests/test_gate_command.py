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

from wg_mesh import aws
from wg_mesh.gcp import instance as gcp_instance
from wg_mesh.tools import stamp

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
