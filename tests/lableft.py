"""What a lab left behind, by its name prefix only: the lab's tests run beside other labs (scripts/check runs the
integration tests on two pytest-xdist workers), so "nothing new on the machine" is not the question; "nothing of
this lab" is. Read-only: nothing is stopped here."""

from __future__ import annotations

import os
from pathlib import Path

from wg_mesh.lab.fabric.netns import STATE_DIR, list_netns
from wg_mesh.lab.fabric.nspawn import CGROUP_PARENT, cgroup2_root
from wg_mesh.lab.fabric.teardown import find_labs


def nspawn_pids(prefix: str) -> list[int]:
    """systemd-nspawn processes of the lab: the executable, and `--machine=PREFIX-SITE` on the command line."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                exe = os.readlink(f"/proc/{entry}/exe")
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if exe.endswith("/systemd-nspawn") and any(a.startswith(f"--machine={prefix}-".encode()) for a in argv):
                found.append(int(entry))
    return found


def lab_left(prefix: str) -> list[str]:
    """Everything of lab `prefix` still on the machine: namespaces, state files, mounts, cgroups, containers."""
    assert len(prefix) == 7 and prefix.startswith("wgl"), prefix  # a lab's prefix, never a pattern for all of them
    left = [f"netns {n}" for n in list_netns() if n.startswith(prefix + "-")]
    left += [f"state {p}" for p in (STATE_DIR / f"{prefix}.json", STATE_DIR / f"{prefix}.machines") if p.exists()]
    left += [f"recorded lab {prefix}"] if prefix in find_labs() else []
    left += [f"mount of {prefix}"] if prefix in Path("/proc/self/mountinfo").read_text() else []
    parent = cgroup2_root() / CGROUP_PARENT
    left += [f"cgroup {p}" for p in (parent.glob(f"{prefix}-*") if parent.exists() else ())]
    left += [f"systemd-nspawn {pid}" for pid in nspawn_pids(prefix)]
    return left
