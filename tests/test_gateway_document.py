"""The peer document (wg_mesh/gateway/document.py): encode/decode for every site of every stack file, and every
reason a gateway refuses one."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import STACK_FILES
from tests.test_render import fake_public_key
from wg_mesh.gateway import document
from wg_mesh.gateway.document import DocumentError, decode, encode
from wg_mesh.gateway.wgconf import InterfacePlan
from wg_mesh.stackfile import load
from wg_mesh.topology import PeerAddress, interface_plan


def directory_of(path: Path) -> dict[str, PeerAddress]:
    cfg = load(path)
    return {s.name: PeerAddress(f"198.51.100.{i + 1}", fake_public_key(s.name)) for i, s in enumerate(cfg.sites)}


def plans(path: Path) -> list[InterfacePlan]:
    cfg = load(path)
    directory = directory_of(path)
    return [interface_plan(cfg, s.name, directory) for s in cfg.sites]


@pytest.mark.parametrize("path", STACK_FILES, ids=[p.name for p in STACK_FILES])
def test_every_site_of_every_stack_file_round_trips(path: Path) -> None:
    for plan in plans(path):
        text = encode(plan, fake_public_key(plan.site))
        doc = decode(text, plan.site)
        assert doc.plan == plan
        assert doc.public_key == fake_public_key(plan.site)
        assert doc.site == plan.site
        assert encode(doc.plan, doc.public_key) == text  # canonical: the same bytes again
        assert 0 < doc.generation < 2**48


def test_the_generation_follows_the_content() -> None:
    plan = plans(STACK_FILES[0])[0]
    first = decode(encode(plan, fake_public_key(plan.site)), plan.site).generation
    changed = dataclasses.replace(plan, peers=tuple(dataclasses.replace(p, persistent_keepalive=7) for p in plan.peers))
    assert decode(encode(changed, fake_public_key(plan.site)), plan.site).generation != first


def base() -> tuple[str, dict[str, Any]]:
    plan = plans(STACK_FILES[0])[0]
    return plan.site, json.loads(encode(plan, fake_public_key(plan.site)))


def resealed(body: dict[str, Any]) -> str:
    """The body with a correct generation, so the test reaches the check after the generation's."""
    body["generation"] = document.generation_of(body)
    return json.dumps(body)


def edit(change: Callable[[dict[str, Any]], None], reseal: bool = True) -> str:
    _, body = base()
    change(body)
    return resealed(body) if reseal else json.dumps(body)


def peer0(body: dict[str, Any]) -> dict[str, Any]:
    peer: dict[str, Any] = body["interface"]["peers"][0]
    return peer


CASES: dict[str, tuple[str, Callable[[], str | bytes]]] = {
    "not json": (document.PARSE, lambda: "{not json"),
    "not utf-8": (document.PARSE, lambda: b"\xff\xfe"),
    "a list": (document.PARSE, lambda: "[]"),
    "another format": (document.FORMAT_MISMATCH, lambda: edit(lambda b: b.update(format="wg-mesh.peers/2"))),
    "another site": (document.WRONG_SITE, lambda: edit(lambda b: b.update(site="somewhere-else"))),
    "no peers": (document.NO_PEERS, lambda: edit(lambda b: b["interface"].update(peers=[]))),
    "damaged generation": (
        document.GENERATION,
        lambda: edit(lambda b: b.update(generation=b["generation"] ^ 1), False),
    ),
    "edited without generation": (document.GENERATION, lambda: edit(lambda b: b["interface"].update(mtu=1300), False)),
    "bad own key": (document.INVALID, lambda: edit(lambda b: b.update(public_key="not-a-key"))),
    "bad peer key": (document.INVALID, lambda: edit(lambda b: peer0(b).update(public_key="A" * 43 + "!"))),
    "short peer key": (document.INVALID, lambda: edit(lambda b: peer0(b).update(public_key="AAAA"))),
    "hostname endpoint": (document.INVALID, lambda: edit(lambda b: peer0(b).update(endpoint="gw.example:51820"))),
    "endpoint port": (document.INVALID, lambda: edit(lambda b: peer0(b).update(endpoint="192.0.2.1:70000"))),
    "no endpoint port": (document.INVALID, lambda: edit(lambda b: peer0(b).update(endpoint="192.0.2.1"))),
    "host bits set": (document.INVALID, lambda: edit(lambda b: peer0(b).update(allowed_ips=["10.1.2.3/16"]))),
    "not a cidr": (document.INVALID, lambda: edit(lambda b: peer0(b).update(allowed_ips=["10.1.0.0/33"]))),
    "no allowed ips": (document.INVALID, lambda: edit(lambda b: peer0(b).update(allowed_ips=[]))),
    "mtu too small": (document.INVALID, lambda: edit(lambda b: b["interface"].update(mtu=576))),
    "bad address": (document.INVALID, lambda: edit(lambda b: b["interface"].update(address="10.0.0.300/24"))),
    "own key as a peer": (document.INVALID, lambda: edit(lambda b: peer0(b).update(public_key=b["public_key"]))),
    "a key twice": (
        document.INVALID,
        lambda: edit(lambda b: b["interface"]["peers"].append(dict(peer0(b), name="twin"))),
    ),
    "keepalive a string": (document.INVALID, lambda: edit(lambda b: peer0(b).update(persistent_keepalive="25"))),
}


@pytest.mark.parametrize("case", CASES)
def test_refusals_carry_their_reason(case: str) -> None:
    reason, make = CASES[case]
    site, _ = base()
    with pytest.raises(DocumentError) as caught:
        decode(make(), site)
    assert caught.value.reason == reason, str(caught.value)
    assert reason in document.REASONS


def test_every_reason_has_a_case() -> None:
    assert {reason for reason, _ in CASES.values()} == set(document.REASONS)


def test_the_unedited_base_decodes() -> None:
    site, body = base()
    assert decode(resealed(body), site).site == site
