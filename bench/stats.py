"""Small, pure statistics and /proc readers shared by the benchmarks, and their common printout (`print_rows`)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of nothing")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), p in [0, 100]."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float | int]:
    return {
        "n": len(values),
        "min": min(values),
        "median": median(values),
        "p95": percentile(values, 95),
        "max": max(values),
    }


# --- CPU ------------------------------------------------------------------------------------------------


def parse_proc_stat(text: str) -> dict[str, int]:
    """The machine-wide `cpu` line of /proc/stat, in clock ticks."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            return dict(zip(PROC_STAT_FIELDS, values, strict=False))
    raise ValueError("no cpu line in /proc/stat")


def read_proc_stat() -> dict[str, int]:
    return parse_proc_stat(Path("/proc/stat").read_text())


def parse_pid_cpu(stat: str) -> tuple[int, int]:
    """(utime, stime) in clock ticks from a /proc/<pid>/stat line (the command may contain spaces)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])


def read_pid_cpu(pid: int) -> tuple[int, int] | None:
    try:
        return parse_pid_cpu(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class CpuSample:
    machine: dict[str, int]
    processes: dict[int, tuple[int, int]]  # pid -> (utime, stime)


def cpu_sample(pids: Sequence[int]) -> CpuSample:
    processes = {pid: cpu for pid in pids if (cpu := read_pid_cpu(pid)) is not None}
    return CpuSample(read_proc_stat(), processes)


def cores(ticks: float, seconds: float) -> float:
    """Clock ticks spent over a wall-clock interval, as a number of cores kept busy."""
    return ticks / CLOCK_TICKS / seconds if seconds > 0 else 0.0


def cpu_usage(
    before: CpuSample, after: CpuSample, seconds: float, groups: Mapping[str, Sequence[int]]
) -> dict[str, float]:
    """Machine-wide cores per /proc/stat field and busy total, plus cores used by each group of pids."""
    usage = {
        name: round(cores(after.machine.get(name, 0) - before.machine.get(name, 0), seconds), 3)
        for name in PROC_STAT_FIELDS
    }
    usage["busy"] = round(sum(usage[name] for name in BUSY_FIELDS), 3)
    for group, pids in groups.items():
        ticks = 0
        for pid in pids:
            if pid in before.processes and pid in after.processes:
                ticks += sum(after.processes[pid]) - sum(before.processes[pid])
        usage[group] = round(cores(ticks, seconds), 3)
    return usage


def print_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str]]) -> None:
    """A benchmark's printout: a right-aligned table of `rows` (each column: header, key, format spec), then each row
    as one JSON line (what scripts and docs read)."""
    cells = [[format(row[key], spec) for _, key, spec in columns] for row in rows]
    widths = [max([len(header)] + [len(line[i]) for line in cells]) for i, (header, _, _) in enumerate(columns)]
    print(" ".join(header.rjust(width) for (header, _, _), width in zip(columns, widths, strict=True)))
    for line in cells:
        print(" ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    for row in rows:
        print(json.dumps(row))
