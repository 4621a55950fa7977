"""The peer document v2 (wg_mesh/gateway/document.py, signed.py, trust.py; wg_mesh/plan/signing.py): every site of every
stack file round-trips through encode_body, sign and decode against the trust its agent.json would hold; the
envelope, the signature, agent.json's trust object and the rules shared with the config model. The refusals are
tests/test_document_hostile.py's."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest

from tests.agent_fake import SCOPE, SEED, TRUST, TRUST_JSON, sign
from tests.conftest import STACK_FILES
from tests.test_render import fake_public_key
from wg_mesh.config import MeshConfig, sites
from wg_mesh.gateway import document, signed, trust
from wg_mesh.gateway.document import DocumentError, Trust, decode, encode_body, parse_trust
from wg_mesh.gateway.wgconf import InterfacePlan
from wg_mesh.plan import signing
from wg_mesh.plan.topology import PeerAddress, interface_plan
from wg_mesh.tools.stackfile import load


def trust_of(cfg: MeshConfig, name: str) -> Trust:
    """What the program writes into the site's agent.json."""
    site = cfg.site(name)
    overlay = cfg.overlay_cidr
    return Trust(TRUST.signing_key, SCOPE, name, tuple(str(c) for c in site.cidrs), str(overlay),
                 f"{site.overlay_ip}/{overlay.prefixlen}", cfg.masquerades(site))  # fmt: skip


def plans(path: Path) -> list[tuple[InterfacePlan, Trust]]:
    cfg = load(path)
    directory = {s.name: PeerAddress(f"198.51.100.{i + 1}", fake_public_key(s.name)) for i, s in enumerate(cfg.sites)}
    return [(interface_plan(cfg, s.name, directory), trust_of(cfg, s.name)) for s in cfg.sites]


@pytest.mark.parametrize("path", STACK_FILES, ids=[p.name for p in STACK_FILES])
def test_every_site_of_every_stack_file_round_trips(path: Path) -> None:
    for plan, site_trust in plans(path):
        payload = encode_body(plan, fake_public_key(plan.site), scope=SCOPE, serial=1_700_000_000)
        text = sign(payload)
        doc = decode(text, site_trust)
        assert doc.plan == plan and doc.site == plan.site and doc.serial == 1_700_000_000 and doc.key_at is None
        assert doc.public_key == fake_public_key(plan.site)
        assert encode_body(doc.plan, doc.public_key, scope=SCOPE, serial=doc.serial) == payload  # canonical
        assert sign(payload) == text  # Ed25519 is deterministic: a second `pulumi up` changes nothing
        assert 0 < doc.generation < 2**48
        assert decode(text, site_trust, min_serial=doc.serial, applied_generation=doc.generation) == doc


def test_the_generation_follows_the_content_not_the_serial() -> None:
    plan, site_trust = plans(STACK_FILES[0])[0]
    key = fake_public_key(plan.site)
    first = decode(sign(encode_body(plan, key, scope=SCOPE, serial=5)), site_trust)
    later = decode(sign(encode_body(plan, key, scope=SCOPE, serial=6)), site_trust)
    assert first.generation == later.generation
    changed = dataclasses.replace(plan, peers=tuple(dataclasses.replace(p, persistent_keepalive=7) for p in plan.peers))
    assert decode(sign(encode_body(changed, key, scope=SCOPE, serial=5)), site_trust).generation != first.generation
    rotating = decode(sign(encode_body(plan, key, scope=SCOPE, serial=5, key_at=1_800_000_000)), site_trust)
    assert rotating.key_at == 1_800_000_000 and rotating.generation != first.generation


def test_peer_key_at_round_trips_and_is_absent_when_unset() -> None:
    plan, site_trust = plans(STACK_FILES[0])[0]
    peers = (dataclasses.replace(plan.peers[0], key_at=1_800_000_000), *plan.peers[1:])
    rotated = dataclasses.replace(plan, peers=peers)
    payload = encode_body(rotated, fake_public_key(plan.site), scope=SCOPE, serial=1)
    assert payload.count('"key_at"') == 1
    assert decode(sign(payload), site_trust).plan == rotated


def test_gateways_1_round_trips_and_is_absent_unless_said() -> None:
    """A cloud site with one gateway says so (issue 32: a pair being retired stands down); a pair's document and a
    static site's keep their bytes, so an agent of before this field still reads them."""
    plan, site_trust = plans(STACK_FILES[0])[0]
    key = fake_public_key(plan.site)
    plain = encode_body(plan, key, scope=SCOPE, serial=1)
    single = encode_body(plan, key, scope=SCOPE, serial=1, gateways=document.SINGLE)
    assert '"gateways"' not in plain and single.count('"gateways":1') == 1
    assert decode(sign(plain), site_trust).gateways is None
    said = decode(sign(single), site_trust)
    assert said.gateways == 1 and said.plan == decode(sign(plain), site_trust).plan
    assert said.generation != decode(sign(plain), site_trust).generation  # content: a new generation


def test_the_envelope_is_dsse() -> None:
    """secure-systems-lab/dsse envelope.md and protocol.md: PAE over the payload type and the body."""
    payload = '{"a":1}'
    envelope = json.loads(sign(payload))
    assert set(envelope) == {"payloadType", "payload", "signatures"}
    assert envelope["payloadType"] == document.PAYLOAD_TYPE
    assert base64.b64decode(envelope["payload"]) == payload.encode()
    (signature,) = envelope["signatures"]
    assert signature["keyid"] == signing.keyid(signing.verify_key_b64(SEED)) == TRUST.keyid and len(TRUST.keyid) == 16
    kind = document.PAYLOAD_TYPE.encode()
    assert document.pae(b"xy") == b"DSSEv1 %d %s 2 xy" % (len(kind), kind)
    import nacl.signing

    key = nacl.signing.VerifyKey(base64.b64decode(TRUST.signing_key))
    key.verify(document.pae(payload.encode()), base64.b64decode(signature["sig"]))


def test_the_seed_comes_from_32_random_bytes() -> None:
    assert signing.seed_from_random(base64.b64encode(SEED).decode()) == SEED
    for bad in ("not base64!", base64.b64encode(bytes(31)).decode(), base64.b64encode(bytes(33)).decode()):
        with pytest.raises(ValueError, match="signing seed") as caught:
            signing.seed_from_random(bad)
        assert bad not in str(caught.value)
    assert trust.is_key(signing.verify_key_b64(SEED))


def test_agent_json_trust_is_checked_field_by_field() -> None:
    assert parse_trust(TRUST_JSON) == TRUST
    assert parse_trust({**TRUST_JSON, "address": None}).address is None
    bad = {
        "signing_key": "AAAA",
        "scope": "no-stack",
        "site": "Bad_Site",
        "cidrs": "10.0.0.0/8",
        "overlay": "169.254.0.0/24",
        "address": "10.201.0.1/24",
        "masquerade": "no",
        "extra": 1,
    }
    for field, value in bad.items():
        with pytest.raises(ValueError, match="trust[.:]" if field == "extra" else rf"trust\.{field}"):
            parse_trust({**TRUST_JSON, field: value})
    with pytest.raises(ValueError, match=r"trust\.cidrs"):
        parse_trust({**TRUST_JSON, "cidrs": ["10.10.0.1/16"]})
    with pytest.raises(ValueError, match="trust: not an object"):
        parse_trust(None)


def test_the_gateway_keeps_the_config_models_rules() -> None:
    """The gateway package cannot import wg_mesh.config.sites (it ships alone): the same numbers and the same name
    rule."""
    assert (trust.MIN_MTU, trust.MAX_MTU) == (sites.MIN_TUNNEL_MTU, sites.MAX_TUNNEL_MTU)
    for name in ("a", "aws-use1", "x" * 32, "a-b-c"):
        assert trust.is_name(name) and sites._DNS_LABEL.fullmatch(name)
    for name in ("A", "1a", "a-", "-a", "a_b", "a.b", "a\n", "a\u2028", "\u0430"):  # the last: Cyrillic a
        assert not trust.is_name(name) and not sites._DNS_LABEL.fullmatch(name)


def test_the_depth_check_sees_what_json_would_nest() -> None:
    ok, deep = "[" * 8 + "]" * 8, "[" * 9 + "]" * 9
    assert signed._depth_ok(ok) and not signed._depth_ok(deep)
    assert signed._depth_ok('["' + "[" * 50 + '"]')  # inside a string: not nesting
    assert signed._depth_ok('["\\"' + "[" * 50 + '"]')  # an escaped quote does not end the string
    assert not signed._depth_ok('["\\\\"' + "," + "[" * 50 + "]" * 50 + "]")  # an escaped backslash does
    assert not signed._depth_ok("[}")


def test_every_reason_is_a_metric_label_and_documented() -> None:
    from wg_mesh.gateway.agent import FAILURE_REASONS

    page = (Path(__file__).resolve().parent.parent / "docs" / "concepts" / "delivery.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `wgmesh_agent_apply_failures_total`"))
    assert set(document.REASONS) <= set(FAILURE_REASONS)
    assert all(f"`{reason}`" in row for reason in FAILURE_REASONS)
    with pytest.raises(DocumentError) as caught:
        decode("{}", TRUST)
    assert caught.value.reason == document.SIGNATURE
