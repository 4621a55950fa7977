"""What every check of the lab shares: its result (table rows for the report, data for the JSON), the lab's options,
running one check timed, and choosing the pairs a check measures. The six checks every lab runs are mesh.py's and
pathmtu.py's; underlaycheck.py and bootchecks.py add theirs."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from wg_mesh.lab.fabric.plan import SitePlan
from wg_mesh.lab.machines.build import BuiltLab

TITLES = {
    "handshakes": "1. WireGuard handshakes",
    "ping": "2. Workload host to workload host (ICMP)",
    "path_mtu": "3. Path MTU and fragmentation",
    "bulk_tcp": "4. Bulk TCP across the tunnel (MSS clamping, bytes verified)",
    "throughput": "5. Throughput (iperf3, TCP)",
    "recovery": "6. Recovery after a gateway restart (ping every 10 ms)",
}

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class CheckResult:
    key: str
    title: str
    ok: bool
    summary: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class LabOptions:
    handshake_timeout: float = 10.0
    iperf_seconds: float = 3.0
    bulk_bytes: int = 16 * 1024 * 1024
    recovery_timeout: float = 15.0
    reboot_timeout: float = 90.0  # --boot: a rebooted gateway's wg0 must be active again within this
    # --drill pmtu: how long the ICMP-allowed shrink is watched (pmtudrill.OBSERVE_S), and whether it runs at all (the
    # test suite's CI run: only the ICMP-filtered black hole and its grow-back; the benchmark runs both)
    pmtu_observe_s: float = 90.0
    pmtu_icmp_allowed: bool = True
    # the dynamic check's restart step (a gateway restarted while the dynamic site idles: its re-arm watchdog, ~30 s);
    # the test suite runs it in one delivery mode only (the watchdog is the same code in both)
    dynamic_restart: bool = True
    # the dynamic check's relay step (a relayed pair's iperf3 against a direct path's, iperf_seconds each): the test
    # suite runs it in one delivery mode only
    relay_throughput: bool = True
    # ... with both offices of the relayed pair on consumer lines of this many Mbit/s, up and down (wg_mesh.lab.fabric.
    # line: the line, not the lab's CPU, their limit, as for offices on real lines); None: unshaped (the CPU's figure)
    relay_line_mbit: float | None = 50.0


def parallel(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    items = list(items)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(items)))) as pool:
        return list(pool.map(fn, items))


def ordered_pairs(lab: BuiltLab) -> list[tuple[SitePlan, SitePlan]]:
    return list(itertools.permutations(lab.plan.sites, 2))


def main_pair(lab: BuiltLab) -> tuple[SitePlan, SitePlan]:
    """The sender for the TCP and throughput checks (the AWS site, whose hosts have 9001-byte frames; else
    the site with the largest host MTU) and its first peer."""
    sites = lab.plan.sites
    source = next((s for s in sites if s.cloud == "aws"), max(sites, key=lambda s: s.nic_mtu))
    return source, next(s for s in sites if s is not source)


def ok_text(ok: bool) -> str:
    return "ok" if ok else "FAIL"


def timed(key: str, fn: Callable[[], CheckResult], titles: Mapping[str, str] = TITLES) -> CheckResult:
    """Run one check; a check that cannot even run is reported as failed, and the others still run."""
    start = time.monotonic()
    try:
        result = fn()
    except Exception as exc:  # reported, with its type: exit 1 either way
        result = CheckResult(key, titles[key], False, f"could not run: {type(exc).__name__}: {exc}", ["error"])
    result.seconds = round(time.monotonic() - start, 2)
    return result
