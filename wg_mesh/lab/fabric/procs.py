"""The lab's own processes (servers, pingers, streams started with Node.popen): wait for what they print, and end
them by their pid and process group (never by name)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

# The middle of a receiver's script (`python3 -I -c`; argv: address, port, then the script's own): it listens, says
# `listening` (what its starter waits for, wait_for_line) and accepts one connection within 30 s, as `conn`. Its own
# imports go before it, what it does with `conn` after it.
ACCEPT_ONE = """
import socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2])))
srv.listen(1)
srv.settimeout(30)
print("listening", flush=True)
conn, _ = srv.accept()
"""


def wait_for_line(proc: subprocess.Popen[str], marker: str, timeout: float) -> bool:
    """Whether the process prints a line containing `marker` within `timeout` seconds."""
    found = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if marker in line:
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    return found.wait(timeout)


def _signal_group(proc: subprocess.Popen[str], sig: int) -> None:
    """Signal the process and what it forked: Node.popen starts each in its own session, so its group is its pid
    (`nsenter --pid` into a booted gateway forks the command and would not pass a signal on)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(proc: subprocess.Popen[str]) -> str:
    """End a process we started (by its pid and process group), returning what it printed."""
    _signal_group(proc, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        out, _ = proc.communicate()
    return out or ""
