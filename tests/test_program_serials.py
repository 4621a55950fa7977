"""Serials on their way (issue 32 item 6; issue 33 item 2): `pulumi up --target` on a store, and the first `up` of a
stack whose serials were stamps, under mocks that run each Command from the previous run's state as pulumi-command does
(wg_mesh.testing.mocks: `prior`, `untouched`).

On 58f58f7 a targeted store took the new content under the untargeted stamp's old serial (every agent refused it):
the first test fails there (the update succeeds). The second pins the upgrade: deployed agents (58f58f7's rules,
written out below as an independent check) accept what the first `up` of this version publishes for a static site.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import pytest

from tests.conftest import STACK_FILES, ProgramRun, run_program
from tests.signed import verified_body
from tests.test_program import mesh_of
from tests.test_program_live import agent_json, stack_name, stored_document
from wg_mesh.config import StaticSite
from wg_mesh.testing import Recorded
from wg_mesh.tools import serial
from wg_mesh.tools.stackfile import read_raw

PROD = next(p for p in STACK_FILES if p.name == "Pulumi.prod.yaml")
STAMP = 1_767_225_600  # what a stamp printed before counters: the Unix time of the content's last change
# What 58f58f7's agent accepts of a body (wg_mesh/gateway/document.py there: BODY_KEYS, the serial rules).
OLD_BODY_KEYS = {"format", "scope", "site", "serial", "public_key", "key_at", "interface", "generation"}
OLD_SERIAL_AHEAD_S = 86400


def prod_raw() -> dict[str, Any]:
    raw = copy.deepcopy(read_raw(PROD))
    assert isinstance(raw, dict)
    return raw


def moved(raw: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(raw)
    next(s for s in changed["sites"] if s["name"] == "vps-fra")["endpoint"] = "203.0.113.99"
    return changed


@pytest.fixture(scope="module")
def before() -> ProgramRun:
    run = run_program(prod_raw(), preview=False, stack=stack_name(PROD))
    assert run.error is None, run.error
    return run


def test_a_targeted_store_stops_the_update_instead_of_shipping_a_refused_document(before: ProgramRun) -> None:
    """`pulumi up --target <store>` after a change: the store's new content, its `-serial` Command left out (its
    state: the old content's serial). The update stops, naming the fix, before anything is signed with it."""
    serials = {f"{s.name}-serial" for s in mesh_of(before).sites}
    with pytest.raises(Exception) as caught:  # raised from the program's apply: the update fails
        run = run_program(moved(prod_raw()), preview=False, stack=stack_name(PROD), prior=before, untouched=serials)
        assert run.error is None
    text = str(caught.value)
    assert "serial was counted for other content" in text and "without --target" in text, text


def _body(run: ProgramRun, name: str) -> dict[str, Any]:
    site = mesh_of(run).site(name)
    return verified_body(stored_document(run, site), agent_json(run, site)["trust"])


def _legacy(state: list[Recorded]) -> list[Recorded]:
    """The state a stack from before counters left: each `-serial` Command a stamp (create: the interpreter's time,
    triggers: the content's digest), its output the Unix time."""
    out = []
    for r in state:
        if r.type == "command:local:Command" and r.name.endswith("-serial"):
            digest = r.inputs["environment"][serial.CONTENT_ENV]
            inputs = {"create": "/usr/bin/python3 -c 'import time; print(int(time.time()))'", "triggers": [digest]}
            r = dataclasses.replace(r, inputs=inputs, outputs={"stdout": str(STAMP), "stderr": ""})
        out.append(r)
    return out


def test_the_first_update_after_stamps_carries_on_and_deployed_agents_accept_it(before: ProgramRun) -> None:
    legacy = dataclasses.replace(before, mocks=copy.copy(before.mocks))
    legacy.mocks.resources = _legacy(before.mocks.resources)
    upgraded = run_program(prod_raw(), preview=False, stack=stack_name(PROD), prior=legacy)
    assert upgraded.error is None, upgraded.error
    now = time.time()
    for site in mesh_of(upgraded).sites:
        body = _body(upgraded, site.name)
        assert body["serial"] == STAMP + 1  # the stamp plus one: never below what a gateway runs
        # 58f58f7's agent: not below its floor (the stamp), at most a day ahead of its clock, no unknown field
        assert STAMP <= body["serial"] <= now + OLD_SERIAL_AHEAD_S
        if isinstance(site, StaticSite):  # its agent is upgraded by hand, later: it must accept the document
            assert set(body) <= OLD_BODY_KEYS, set(body) - OLD_BODY_KEYS
        else:  # a cloud gateway is replaced in this update (its agent changed); the new one requires an expiry, and
            # a single gateway's document says so (`gateways: 1`, issue 32 item 2)
            assert set(body) - OLD_BODY_KEYS == {"not_after", "gateways"} and body["not_after"] > now + 59 * 86400
