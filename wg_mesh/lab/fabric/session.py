"""What every run on the lab (a lab run, a drill, a benchmark) shares: a free prefix, the signals that end it so
that `finally` tears it down, and the teardown that happens exactly once (from `finally`, or from atexit)."""

from __future__ import annotations

import atexit
import contextlib
import secrets
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from rich.console import Console

from wg_mesh.lab.fabric.netns import LabError, LabState
from wg_mesh.lab.fabric.teardown import lab_exists, teardown


class LabEnvironmentError(LabError):
    """This machine cannot run the lab (not root, tools missing)."""


def new_prefix() -> str:
    for _ in range(100):
        prefix = f"wgl{secrets.token_hex(2)}"
        if not lab_exists(prefix):
            return prefix
    raise LabError("no free lab prefix")


@contextlib.contextmanager
def signals_end_the_run() -> Iterator[None]:
    """SIGTERM (and SIGINT) interrupt the run so that `finally` tears the lab down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """While tearing down, a second Ctrl-C must not leave half a lab behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Cleanup:
    """Tears a lab down exactly once: from `finally`, or from atexit if the interpreter exits first."""

    def __init__(self, state: LabState, console: Console) -> None:
        self.state = state
        self.console = console
        self.done = False
        self.problems: list[str] = []
        atexit.register(self)

    def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        atexit.unregister(self)
        with signals_ignored():
            self.problems = teardown(self.state, lambda line: None)
        for problem in self.problems:
            self.console.print(f"[red]teardown: {problem}[/red]")
