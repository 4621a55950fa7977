"""Low-level pieces of a booted gateway: its cgroup, finding its PID 1, and stopping it from a state record.

Each container is started from its own cgroup (v2), named after the lab and site; stopping one ends its
systemd-nspawn by recorded pid (and start time), then everything left in that cgroup (`cgroup.kill`),
then unmounts its overlay. Nothing is looked up by process name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from wg_mesh.lab.fabric.netns import proc_start_time, run, stop_pids

CGROUP_PARENT = "wg-mesh-lab"


def cgroup2_root() -> Path:
    """Where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup (unified) or /sys/fs/cgroup/unified (hybrid)."""
    for candidate in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.max.depth").exists():
            return candidate
    raise FileNotFoundError("no cgroup v2 hierarchy under /sys/fs/cgroup")


def cgroup_path(name: str) -> Path:
    return cgroup2_root() / CGROUP_PARENT / name


def join_cgroup(path: Path) -> None:
    """Move the calling process into `path` (for a child between fork and exec)."""
    (path / "cgroup.procs").write_text("0")


def cgroup_pids(path: Path) -> list[int]:
    pids: list[int] = []
    for procs in path.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in procs.read_text().split()]
    return pids


def container_leader(path: Path) -> int | None:
    """The container's PID 1 (as the host sees it): the process in the cgroup whose innermost pid is 1."""
    for pid in cgroup_pids(path):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    if len(ids) > 1 and ids[-1] == "1":
                        return pid
    return None


def kill_cgroup(path: Path, timeout: float = 5.0) -> bool:
    """Kill every process in the cgroup tree and remove it; False if something would not go."""
    if not path.exists():
        return True
    with contextlib.suppress(OSError):
        (path / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + timeout
    while cgroup_pids(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # the shared parent, once no lab uses it
    return not path.exists()


def stop_container(record: dict[str, Any], graceful: bool = True, timeout: float = 15.0) -> list[str]:
    """Stop one recorded container: SIGTERM to its systemd-nspawn (a clean poweroff inside), SIGKILL after
    `timeout`, then whatever is left in its cgroup; unmount its root and remove its directory."""
    problems: list[str] = []
    pid, start = int(record.get("pid", 0)), record.get("start")
    if pid > 0 and start is not None and proc_start_time(pid) == start:
        if graceful:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while proc_start_time(pid) == start and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.05)
        if stop_pids([pid]):
            problems.append(f"systemd-nspawn {pid} would not stop")
    if pid > 0:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it was our child
    if record.get("cgroup") and not kill_cgroup(Path(record["cgroup"])):
        problems.append(f"cgroup {record['cgroup']} would not empty")
    root = Path(record.get("root", ""))
    if record.get("root") and os.path.ismount(root):
        result = run(["umount", str(root)], check=False)
        if result.returncode != 0:
            result = run(["umount", "--lazy", str(root)], check=False)
        if result.returncode != 0:
            problems.append(f"umount {root}: {result.stderr.strip()}")
    directory = record.get("dir")
    if directory and not (record.get("root") and os.path.ismount(root)):
        shutil.rmtree(directory, ignore_errors=True)
    return problems
