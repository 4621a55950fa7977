"""The readiness gates' waiting loop, for every cloud: the AWS gate (wg_mesh.tools.readygate) and the GCP gate
(wg_mesh.tools.gcpgate, which `python -m wg_mesh.readygate gcp` runs) both wait on it."""

from __future__ import annotations

import time
from collections.abc import Callable

# `--update`: what a gate Command runs on an input change other than a new instance (wg_mesh.tools.localcmd), e.g. a
# new wg-mesh's command text or other credentials: the instance passed when it was created; nothing is waited for.
UPDATE_HELP = "the Command's update: the instance passed when created; only re-assert what an input can move"


def poll(
    ready: Callable[[], bool],
    timeout_s: float,
    interval_s: float,
    sleep: Callable[[float], None],
    not_ready: Callable[[float], str],
) -> float:
    """The gate's waiting loop, for every cloud: seconds until `ready()` (which raises RuntimeError for a gateway
    that died); TimeoutError with `not_ready(timeout_s)` after the timeout."""
    start = time.monotonic()
    while True:
        if ready():
            return time.monotonic() - start
        if time.monotonic() - start >= timeout_s:
            raise TimeoutError(not_ready(timeout_s))
        sleep(interval_s)
