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


def hold_words(not_before: float | None) -> list[str]:
    """The words a gate's `create` (a new instance's gate) adds to hold until `not_before` (`--not-before`,
    hold_until); none when there is nothing to hold. A gate's `update` never holds (the same instance: a rotation
    holds no gate of a gateway it does not replace)."""
    return [] if not_before is None else ["--not-before", str(int(not_before))]


def hold_until(
    not_before: float | None, left_s: float, sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> float:  # fmt: skip
    """A new gateway takes traffic no earlier than `not_before` (unix seconds; wg_mesh.plan.live.switch_floor): the
    announced switch of a key rotated in the same `up`. Until then every party runs the key that serves, and a new
    gateway's agent runs the new one from its first boot (it holds no old key: wg_mesh.gateway.rotation), so an address
    moved to it earlier would leave its peers on a key it dropped. Returns the seconds waited (0 when the moment has
    passed or there is none); TimeoutError, before any wait, when it is more than `left_s` away (the gate's timeout:
    nothing moves, the old gateway keeps serving, and an `up` after that moment passes)."""
    if not_before is None:
        return 0.0
    wait = not_before - clock()
    if wait <= 0:
        return 0.0
    if wait > left_s:
        raise TimeoutError(
            f"a key rotated in this `pulumi up` switches at {not_before:.0f}, {wait:.0f} s from now, past this gate's "
            f"timeout ({left_s:.0f} s left): the new gateway would serve before it (its peers still on the key it "
            "dropped). Nothing moved; run `pulumi up` again after that moment (or rotate keys in an `up` that replaces "
            "no gateway)"
        )
    sleep(wait)
    return wait
