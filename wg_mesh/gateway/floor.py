"""The replay floor: the serial below which this gateway applies no document, kept so that losing it fails closed.

Standard library only (it ships with the agent). docs/security.md, "Freshness". The floor is the higher of
agent.json's `trust.floor` (the serial of the site's document when the gateway was made:
wg_mesh.tools.serial.floor_pin) and the serial of the last document applied, which the state file
`/var/lib/wg-mesh/agent-state.json` keeps:

    {"applied_generation": G, "applied_serial": S, "pin": P, "keyid": K, "scope": "project/stack"}

`load` tells three cases apart:
- no state file and no sign that this gateway ever applied a document (no wg0.conf, no apply record): a fresh
  gateway; its floor is agent.json's.
- a state file that parses and belongs to this agent.json (the same pin, signing key and scope; a file from before
  pins has none of them): the floor is the higher of both. One that names another pin, key or scope was written under
  another agent.json (a static site set up again): its floor is the new agent.json's.
- anything else: missing although the gateway applied documents before, truncated, not JSON, not an object (`true`,
  `-5`), a serial that is not a positive integer, a directory or a symlink where the file belongs. The floor is then
  unknown and the agent refuses every document (reason `state`), logs why and exports wgmesh_agent_state_lost 1: it
  never falls back to 0, which would let whoever can write the store replay any superseded document. The running wg0
  stays as it is. `wg-mesh-agent --reset-floor SERIAL` (an operator who knows the serial of the current document)
  writes a new state; the agent reads it at its next cycle.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from .apply import Paths
from .files import atomic_write, read_text
from .trust import MAX_SERIAL as MAX_SERIAL
from .trust import Trust

OWNER_KEYS = ("pin", "keyid", "scope")  # which agent.json the state was written under


@dataclass(frozen=True)
class Loaded:
    state: dict[str, Any]  # {} for a fresh gateway
    problem: str | None = None  # why the floor is unknown (every document refused); None: known
    note: str | None = None  # worth a log line (a state of another agent.json, set aside)


def owner(trust: Trust) -> dict[str, Any]:
    return {"pin": trust.floor, "keyid": trust.keyid, "scope": trust.scope}


def _serial(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SERIAL


def _problem(state: object) -> str | None:
    if not isinstance(state, dict):
        return f"not a JSON object but {type(state).__name__}"
    if not _serial(state.get("applied_serial")):
        return f"applied_serial {str(state.get('applied_serial'))[:40]!r} is not a serial"
    generation = state.get("applied_generation")
    if generation is not None and not (_serial(generation) and generation < 2**48):
        return f"applied_generation {str(generation)[:40]!r} is not a generation"
    return None


def ran_before(paths: Paths) -> str | None:
    """What shows that this gateway applied a document before (its wg0.conf, its apply record), or None."""
    return next((p for p in (paths.wg_conf, paths.applied) if os.path.lexists(p)), None)


def load(paths: Paths, trust: Trust) -> Loaded:
    """The state file, checked (module doc); never raises."""
    try:
        text = read_text(paths.state)
    except OSError as exc:  # a directory, a symlink, unreadable
        return Loaded({}, f"{paths.state} cannot be read: {exc}")
    if text is None:
        evidence = ran_before(paths)
        if evidence is None:
            return Loaded({})  # a fresh gateway: agent.json's floor
        return Loaded({}, f"{paths.state} is missing, yet {evidence} shows this gateway applied documents before")
    try:
        state = json.loads(text)
    except ValueError:
        return Loaded({}, f"{paths.state} is not JSON ({len(text)} bytes: truncated?)")
    problem = _problem(state)
    if problem is not None:
        return Loaded({}, f"{paths.state}: {problem}")
    mine = owner(trust)
    if any(key in state and state[key] != mine[key] for key in OWNER_KEYS):
        return Loaded({}, None, f"{paths.state} was written under another agent.json; its floor is set aside")
    return Loaded(state)


def floor(state: dict[str, Any], trust: Trust) -> int:
    """The serial below which nothing is applied (a known state's: module doc)."""
    return max(int(state.get("applied_serial", 0)), trust.floor)


def write(path: str, state: dict[str, Any]) -> None:
    """The state file, whole or not at all (OSError: it is unchanged)."""
    atomic_write(path, json.dumps(state, sort_keys=True) + "\n", 0o644)


def reset(paths: Paths, trust: Trust, serial: int) -> dict[str, Any]:
    """`--reset-floor SERIAL`: a new state whose floor is SERIAL (agent.json's when higher), no running generation."""
    state = {"applied_generation": None, "applied_serial": max(serial, trust.floor), **owner(trust)}
    write(paths.state, state)
    return state


def reset_command(trust: Trust | None, paths: Paths, serial: int) -> int:
    """`wg-mesh-agent --reset-floor SERIAL`: the operator's answer to a lost state; the exit status."""
    if trust is None or not 1 <= serial <= MAX_SERIAL:
        print(f"wg-mesh-agent: --reset-floor {serial}: not a serial, or no trust in agent.json", file=sys.stderr)
        return 2
    try:
        state = reset(paths, trust, serial)
    except OSError as exc:
        print(f"wg-mesh-agent: cannot write {paths.state}: {exc}", file=sys.stderr)
        return 1
    print(f"wg-mesh-agent: replay floor reset to {state['applied_serial']} in {paths.state}", file=sys.stderr)
    return 0
