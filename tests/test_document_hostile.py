"""Every hostile document (tests/hostile_documents.py) is refused for its reason by `decode`, never with another
exception, and the agent on the pretend gateway (tests/agent_fake.py) that runs the base document refuses each one
without running a mutating command or changing a file; random bytes and random JSON are refusals too (hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import hostile_documents as hostile
from tests.agent_fake import TRUST, FakeHost, Keys, sign
from tests.test_agent import Store, make
from wg_mesh.gateway import document
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.document import DocumentError, decode

CASES = hostile.cases(sign)


def refusal(text: str | bytes) -> DocumentError:
    with pytest.raises(DocumentError) as caught:
        decode(text, TRUST, min_serial=hostile.SERIAL, applied_generation=hostile.base_generation())
    return caught.value


def test_the_base_document_is_accepted() -> None:
    doc = decode(hostile.base(sign), TRUST, min_serial=hostile.SERIAL, applied_generation=hostile.base_generation())
    assert doc.serial == hostile.SERIAL and doc.public_key == hostile.PUBLIC_KEY


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decode_refuses_with_the_reason(case: hostile.Case) -> None:
    error = refusal(case.text)  # any other exception fails the test
    assert error.reason == case.reason, f"{case.name}: {error.reason}: {error}"
    assert error.reason in document.REASONS


def test_every_reason_and_every_class_of_the_issue_is_in_the_corpus() -> None:
    assert {c.reason for c in CASES} == set(document.REASONS)
    names = " | ".join(c.name for c in CASES)
    for needle in (
        "newline",
        "U+2028",
        "U+0085",
        "NUL",
        "PostUp",
        "0.0.0.0/0",
        "0.0.0.0/1",
        "128.0.0.0/1",
        "169.254.169.254/32",
        "127.0.0.0/8",
        "224.0.0.0/4",
        "10.10.0.0/16",
        "another peer's prefix",
        "inside another's prefix",
        "/1 prefix",
        "our own overlay address",
        "outside the overlay",
        "100,000-deep",
        "300 KiB",
        "\u00b2",
        ":0'",
        ":65536'",
        "[2001:db8::1]",
        "gw.example.com",
        "duplicate keys",
        "NaN",
        "Infinity",
        "400-digit",
        "a bool",
        "masquerade turned on",
        "interface.mtu 0",
        "interface.mtu 100000",
        "unsigned",
        "signed by another key",
        "another payload",
        "wrong site",
        "wrong scope",
        "older serial",
        "equal serial",
        "payloadType",
    ):
        assert needle in names, needle  # fmt: skip


def test_the_errors_say_what_without_echoing_control_characters() -> None:
    for case in CASES:
        message = str(refusal(case.text))
        assert message.isprintable() and len(message) < 400, (case.name, message)


def test_the_pretend_gateway_refuses_each_and_nothing_changes(tmp_path: Path) -> None:
    keys, host, logs = Keys(hostile.PRIVATE_KEY), FakeHost(), []
    paths = Paths.under(str(tmp_path))
    store = Store(hostile.base(sign), keys.private)
    agent = make(store, host, paths, logs)
    assert agent.cycle()
    host.up_from(Path(paths.wg_conf))
    assert agent.cycle()  # the base again: level-triggered, nothing to do
    before = host.mutating()
    files = {p: Path(p).read_bytes() for p in (paths.wg_conf, paths.mapping, paths.state)}
    state = (dict(host.peers), set(host.routes), set(host.rules), host.mtu, list(host.addresses))
    counts = dict(agent.status.failures)
    for case in CASES:
        store.text = case.text  # type: ignore[assignment]  # bytes too: the store hands over what it holds
        assert not agent.cycle(), case.name
        assert host.mutating() == before, case.name
        assert {p: Path(p).read_bytes() for p in files} == files, case.name
        assert (dict(host.peers), set(host.routes), set(host.rules), host.mtu, list(host.addresses)) == state
        if case.text:  # this pretend store calls an empty value missing: a fetch failure, not a refusal
            counts[case.reason] += 1
        assert agent.status.failures == counts, case.name
    assert json.loads(files[paths.state])["applied_serial"] == hostile.SERIAL
    store.text = hostile.base(sign)
    assert agent.cycle()  # and the good document still runs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_random_bytes_are_refusals(data: bytes) -> None:
    with pytest.raises(DocumentError):
        decode(data, TRUST)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_random_json_bodies_signed_or_not_are_refusals(value: object) -> None:
    text = json.dumps(value)
    for candidate in (text, sign(text), sign(json.dumps({"format": document.FORMAT, "x": value}))):
        with pytest.raises(DocumentError):
            decode(candidate, TRUST)
