"""Traffic through a disruption: a ping every 10 ms while something restarts, and the longest silence across it
(check 6, the booted reboot check, the benchmarks)."""

from __future__ import annotations

import itertools
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from wg_mesh.lab.fabric.netns import LabError, LabState, Node
from wg_mesh.lab.fabric.procs import stop

_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from")


@dataclass(frozen=True)
class Outage:
    """Traffic through a restart: pings every `interval`, the longest silence between two replies across it."""

    replies: int
    restart_ms: float | None  # restart() from start to return
    outage_ms: float | None  # None: no reply before or after the restart
    first_reply_after_restart_ms: float | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.outage_ms is not None


def measure_outage(
    node: Node,
    state: LabState,
    netns: str,
    target: str,
    restart: Callable[[], None],
    *,
    source: str | None = None,
    interval: float = 0.01,
    warmup_replies: int = 20,
    warmup_timeout: float = 3.0,
    timeout: float = 20.0,
) -> Outage:
    """Ping `target` from `node` while `restart()` runs (it may raise LabError, reported as the error).

    The outage is the longest silence between two replies, from the last reply before the restart to the first
    replies after it: the time until traffic flows again, however long the restart itself took.
    """
    argv = ["ping", "-n", "-D", "-i", f"{interval:g}", "-W", "1", *(["-I", source] if source else []), target]
    pinger = node.popen(argv, stdout=subprocess.PIPE)
    state.track(pinger.pid, netns, f"ping {target} (outage)")
    replies: list[float] = []

    def collect() -> None:
        assert pinger.stdout is not None
        for line in pinger.stdout:
            if m := _REPLY.match(line):
                replies.append(float(m.group(1)))

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    error = None
    began = restarted = None
    try:
        deadline = time.monotonic() + warmup_timeout
        while len(replies) < warmup_replies and time.monotonic() < deadline:
            time.sleep(0.01)
        if not replies:
            raise LabError(f"no replies from {target} before the restart: nothing to recover")
        began = time.time()
        restart()
        restarted = time.time()
        deadline = time.monotonic() + timeout
        while not any(t > restarted for t in replies) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
    except LabError as exc:
        error = str(exc)
    finally:
        stop(pinger)
        reader.join(2)

    restart_ms = round((restarted - began) * 1000, 1) if began is not None and restarted is not None else None
    before = [t for t in replies if began is not None and t < began]
    after = [t for t in replies if restarted is not None and t > restarted]
    if error is not None or restarted is None or not before or not after:
        return Outage(len(replies), restart_ms, None, None, error)
    window = [t for t in replies if t >= before[-1]]
    gap = max(later - earlier for earlier, later in itertools.pairwise(window))
    return Outage(len(replies), restart_ms, round(gap * 1000, 1), round((after[0] - restarted) * 1000, 1))
