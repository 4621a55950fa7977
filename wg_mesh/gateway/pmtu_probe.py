"""Path-MTU probes across the tunnel and the per-peer verdict they lead to (pure, except for the runner).

A probe is one `ping -M do` (DF set) of an exact IP packet size to the peer's overlay address. An echo reply
is as large as the request, so a probe passes only if the path carries that size in both directions. `-M do`
honours this host's route MTU, so the heal never lowers the route to the probe's target (pmtu_heal): the
full-size probe must still leave through wg0 at full size, or a path that grows back could not be seen. (`-M
probe`, which would ignore the route's MTU, is missing from bookworm's iputils 20221126.)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

ICMP_IP_OVERHEAD = 28  # IPv4 header (20) + ICMP echo header (8): ping's -s is the payload size
SMALL_SIZE = 84  # ping's default 56-byte payload: what "small pings pass" means everywhere else

# argv -> (exit status, stdout); the agent passes its own runner, tests a fake one.
Runner = Callable[[Sequence[str]], tuple[int, str]]


@dataclass(frozen=True)
class Settings:
    fail_after: int = 3  # N: consecutive full-size failures (small passing) before the path counts as shrunk
    pass_after: int = 3  # M: consecutive full-size passes while shrunk before the original MTU returns
    floor: int = 1280  # the search never goes below this IP packet size (IPv6's minimum link MTU)
    step: int = 8  # the search's granularity, in bytes
    timeout: int = 1  # seconds ping waits for its reply
    parallel: int = 32  # probes in flight at once
    heal: bool = True

    def __post_init__(self) -> None:
        if self.fail_after < 1 or self.pass_after < 1 or self.step < 1 or self.timeout < 1 or self.parallel < 1:
            raise ValueError(f"fail_after, pass_after, step, timeout and parallel must be >= 1: {self}")
        if self.floor <= SMALL_SIZE:
            raise ValueError(f"floor {self.floor} must exceed the small probe's {SMALL_SIZE} bytes")


def ping_argv(address: str, size: int, timeout: int) -> list[str]:
    """One DF echo request of `size` bytes on the wire (IP header included)."""
    payload = str(size - ICMP_IP_OVERHEAD)
    return ["ping", "-n", "-q", "-c", "1", "-W", str(timeout), "-M", "do", "-s", payload, address]


def probe(runner: Runner, address: str, size: int, timeout: int) -> bool:
    return runner(ping_argv(address, size, timeout))[0] == 0


def search(passes: Callable[[int], bool], floor: int, failed: int, step: int) -> int | None:
    """The largest size on the grid floor, floor+step, ... below `failed` (known to fail) that passes, by
    binary search: ceil(log2(n + 1)) probes for n grid points (4 for 1280..1392, tunnel 1400). None if even the
    floor fails. Assumes the path passes every size up to its MTU and none above (one bottleneck)."""
    grid = list(range(floor, failed, step))
    lo, hi, best = 0, len(grid) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if passes(grid[mid]):
            best, lo = grid[mid], mid + 1
        else:
            hi = mid - 1
    return best


class Status(enum.Enum):
    UNKNOWN = "unknown"  # not probed yet
    OK = "ok"  # the full tunnel size passes
    SUSPECT = "suspect"  # full size failing with small passing, fewer than fail_after times in a row
    SHRUNK = "shrunk"  # a black hole: small passes, full size does not; `pmtu` is what passes
    BELOW_FLOOR = "below_floor"  # a black hole, and not even the search floor passes
    UNANSWERED = "unanswered"  # not even small pings answer: down, or the peer does not answer ICMP


@dataclass(frozen=True)
class PeerPath:
    """What this gateway knows about the path to one peer."""

    peer: str  # the peer's site name
    address: str  # its overlay address: the probes' target
    status: Status = Status.UNKNOWN
    small_ok: bool | None = None
    full_ok: bool | None = None
    fails: int = 0  # consecutive full-size failures with small passing
    passes: int = 0  # consecutive full-size passes
    pmtu: int | None = None  # the largest size found to pass while shrunk (None: the full size, or unknown)


@dataclass(frozen=True)
class Round:
    """One tick's probe results for a peer; `at_pmtu` only while a shrunk size is known."""

    small: bool
    full: bool
    at_pmtu: bool | None = None


def step(path: PeerPath, result: Round, settings: Settings) -> tuple[PeerPath, bool]:
    """The peer's next state, and whether a new search is needed now (pure)."""
    path = replace(path, small_ok=result.small, full_ok=result.full)
    if result.full:  # a lost small ping next to a passing full one is loss, not a property of the path
        passes = path.passes + 1
        if path.pmtu is None or passes >= settings.pass_after:
            return replace(path, status=Status.OK, fails=0, passes=passes, pmtu=None), False
        return replace(path, fails=0, passes=passes), False
    if not result.small:
        # Nothing answers: not a black hole. Keep what we knew (a heal in place stays) and count nothing.
        return replace(path, status=Status.UNANSWERED, passes=0), False
    fails = path.fails + 1
    path = replace(path, fails=fails, passes=0)
    if fails < settings.fail_after:
        return replace(path, status=Status.SHRUNK if path.pmtu else Status.SUSPECT), False
    if path.pmtu is not None and result.at_pmtu:
        return replace(path, status=Status.SHRUNK), False
    return path, True  # newly shrunk, or the known size fails too (shrunk further): search


def found(path: PeerPath, pmtu: int | None) -> PeerPath:
    """The state after a search that found `pmtu` (None: not even the floor passes)."""
    return replace(path, pmtu=pmtu, status=Status.SHRUNK if pmtu is not None else Status.BELOW_FLOOR)
