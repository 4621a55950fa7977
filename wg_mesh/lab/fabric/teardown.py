"""Removing a lab: its recorded processes, containers and namespaces (`teardown`), kept or crashed labs found by
their state files (`find_labs`, `lab_down`), and whether a prefix is taken.

Only what a lab's state file records is touched: nothing is looked up by process name, and namespaces named like a
lab's that no state file records are left alone.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

from wg_mesh.lab.fabric.netns import STATE_DIR, LabState, Log, Node, list_netns, netns_id, pids_in_netns, run, stop_pids
from wg_mesh.lab.fabric.nspawn import stop_container
from wg_mesh.lab.fabric.plan import NETNS_PATTERN, PREFIX_PATTERN


def teardown(state: LabState, log: Log, graceful: bool = True, strict: bool = True) -> list[str]:
    """Remove a lab: wg-quick down (PostDown as written), end its processes by pid, delete its namespaces.

    Returns the problems. With strict=False (a kept or crashed lab, which may have died halfway through
    wg-quick up), a failing wg-quick down is only logged: the lab is removed all the same."""
    problems: list[str] = []
    namespaces = sorted(set(state.namespaces))  # what the lab recorded, never what merely looks like it
    for record in state.containers.values():
        problems += stop_container(record, graceful=graceful)
    if graceful:
        for netns, holder in state.holders.items():
            tracked = next((p for p in state.processes if p.pid == holder), None)
            if tracked is None or not tracked.still_ours():
                continue
            for interface in state.interfaces.get(netns, []):
                result = run(Node(netns, holder).wrap(["wg-quick", "down", interface]), check=False, timeout=15)
                if result.returncode != 0 and "is not a WireGuard interface" not in result.stderr:
                    problem = f"{netns}: wg-quick down {interface}: {result.stderr.strip()[-200:]}"
                    (problems.append if strict else log)(problem)
    pids = {p.pid for p in state.processes if p.still_ours()}
    for netns in namespaces:
        pids.update(pids_in_netns(netns))
    pids.discard(os.getpid())
    stubborn = stop_pids(pids)
    if stubborn:
        problems.append(f"processes would not stop: {stubborn}")
    for netns in namespaces:
        if netns_id(netns) is not None:
            result = run(["ip", "netns", "delete", netns], check=False)
            if result.returncode != 0:
                problems.append(f"ip netns delete {netns}: {result.stderr.strip()}")
    shutil.rmtree(state.log_dir, ignore_errors=True)
    machines = STATE_DIR / f"{state.prefix}.machines"
    if machines.is_dir() and not any(os.path.ismount(p) for p in machines.glob("*/root")):
        shutil.rmtree(machines, ignore_errors=True)
    state.remove()
    log(f"removed lab {state.prefix}: {len(namespaces)} namespaces, {len(pids)} processes")
    return problems


def find_labs(unreadable: list[str] | None = None) -> dict[str, LabState]:
    """Every lab on this machine that recorded itself: a state file is the only proof that a lab is ours.

    A state file that cannot be read (damaged, or written by another version) says nothing about what runs:
    it is listed in `unreadable`, never taken for a dead lab."""
    labs: dict[str, LabState] = {}
    if STATE_DIR.is_dir():
        for path in sorted(STATE_DIR.glob("*.json")):
            if PREFIX_PATTERN.match(path.stem):
                try:
                    labs[path.stem] = LabState.load(path)
                except (ValueError, TypeError, KeyError, OSError):
                    if unreadable is not None:
                        unreadable.append(path.stem)
    return labs


def unrecorded_namespaces(labs: Mapping[str, LabState]) -> list[str]:
    """Namespaces named like a lab's that no state file records: not ours to remove."""
    recorded = {n for state in labs.values() for n in state.namespaces}
    return [n for n in list_netns() if NETNS_PATTERN.match(n) and n not in recorded]


def lab_down(log: Log, prefixes: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Remove kept or crashed labs: the named ones, or (no names) every one that recorded itself here.

    A lab whose owner process still runs is left alone; each lab's teardown touches only the namespaces,
    processes, containers and mounts its state file records. Returns (removed prefixes, problems)."""
    removed: list[str] = []
    problems: list[str] = []
    unreadable: list[str] = []
    labs = find_labs(unreadable)
    for prefix in unreadable:
        if not prefixes or prefix in prefixes:
            problems.append(f"{STATE_DIR / prefix}.json cannot be read (damaged or another version): not touched")
    for prefix in prefixes:
        if prefix not in labs and prefix not in unreadable:
            problems.append(f"no lab {prefix} recorded in {STATE_DIR}")
    for prefix, state in labs.items():
        if prefixes and prefix not in prefixes:
            continue
        if state.owner_alive():
            log(f"lab {prefix} is running (pid {state.owner_pid}): left alone")
            continue
        problems += teardown(state, log, strict=False)
        removed.append(prefix)
    strays = unrecorded_namespaces(find_labs())
    if strays and not prefixes:
        log(f"left alone (no lab recorded them): {', '.join(strays)}")
    return removed, problems


def lab_exists(prefix: str) -> bool:
    return (STATE_DIR / f"{prefix}.json").exists() or any(n.startswith(prefix + "-") for n in list_netns())
