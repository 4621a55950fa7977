"""Moments from the program: the time on the deployer's machine when something changed, kept in Pulumi state.

`stamp(name, triggers, opts)` is a pulumi-command `local.Command` that prints the Unix time with the interpreter
running the program (`sys.executable`: the one Python certainly there), once when created and again only when it is
replaced: `triggers` changed ("The resource will be updated (or replaced) if any of these values change. [...]
If the `update` command was provided the resource will be updated, otherwise it will be replaced using the `create`
command": pulumi-command 1.2.1, local.Command `triggers`). Its stdout is in the state, so every later `pulumi up`
reads the same moment without running anything: a document's serial (wg_mesh.component) changes when, and only
when, its content does.

Run from a machine whose Python lives at another path, the `create` text differs and pulumi-command runs it again
("If an `update` command isn't provided, then `create` will also be run when the resource's inputs are modified":
the same reference): every document gets a newer serial once, with the same content (its generation). A gateway
sees a newer document that changes nothing; nothing goes backwards.

No resource is created inside an apply: the triggers are Outputs, resolved by the engine.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

import pulumi
import pulumi_command as command

PROGRAM = "import time; print(int(time.time()))"
# 2001-09-09 .. 2286-11-20: ten decimal digits; anything else is not a time this program printed.
MIN_STAMP, MAX_STAMP = 1_000_000_000, 9_999_999_999


def command_line(words: Sequence[str], windows: bool = os.name == "nt") -> str:
    """Words as one command line for pulumi-command's default interpreter: `/bin/sh -c` (POSIX quoting) or, on
    Windows, `cmd /C` (the Microsoft C runtime's quoting, `subprocess.list2cmdline`: single quotes mean nothing to
    cmd). The deployer's own interpreter (`sys.executable`) is the first word of every Command this program runs:
    the one Python certainly there, whether the program runs from a virtualenv, an installed package, `pulumi
    --cwd` elsewhere or Windows (where no `.venv/bin/python` exists)."""
    return subprocess.list2cmdline(list(words)) if windows else " ".join(shlex.quote(word) for word in words)


def python_command(*args: str, executable: str = sys.executable, windows: bool = os.name == "nt") -> str:
    """`python ARGS...` with the interpreter running this program."""
    return command_line([executable, *args], windows=windows)


def create_command(executable: str = sys.executable) -> str:
    """What the Command runs (through /bin/sh -c, pulumi-command's default interpreter; cmd /C on Windows)."""
    return python_command("-c", PROGRAM, executable=executable)


def parse(stdout: str) -> int:
    """The Unix time the command printed; ValueError for anything else."""
    text = stdout.strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"the stamp command printed {stdout[:40]!r}, not a Unix time")
    value = int(text)
    if not MIN_STAMP <= value <= MAX_STAMP:
        raise ValueError(f"the stamp command printed {value}, not a Unix time of this era")
    return value


def stamp(
    name: str, triggers: list[pulumi.Input[str]], opts: pulumi.ResourceOptions | None = None
) -> pulumi.Output[int]:
    """The Unix time (int seconds) at which this Command was last created: a change of `triggers` renews it."""
    run = command.local.Command(name, create=create_command(), triggers=triggers, opts=opts)
    return run.stdout.apply(parse)
