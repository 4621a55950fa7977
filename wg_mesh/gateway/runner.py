"""How the agent runs a command: one injectable runner (argv and stdin in, a Result out), and the redaction of
anything key-shaped before a command's output reaches a message. Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

COMMAND_TIMEOUT_S = 30.0
_KEYLIKE = re.compile(r"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=")


def redact(text: str) -> str:
    """Anything shaped like a WireGuard key (wg(8) quotes a line it cannot parse, key included)."""
    return _KEYLIKE.sub("(key redacted)", text)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], "str | None"], Result]  # argv, stdin


def run_command(argv: Sequence[str], stdin: str | None = None) -> Result:
    """The real runner: sbin on PATH, C locale, a timeout; a missing tool or a hang is a failed command."""
    env = dict(os.environ, LC_ALL="C")
    env["PATH"] = "/usr/local/sbin:/usr/sbin:/sbin:" + env.get("PATH", "/usr/bin:/bin")
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Result(127, "", str(exc))
    return Result(done.returncode, done.stdout, done.stderr)
