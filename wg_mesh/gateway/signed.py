"""The signed envelope of a peer document and the bounded JSON reader: what a gateway does before it believes a byte.

Standard library, and python3-nacl (Ubuntu 24.04's libsodium binding) imported inside `_verifies` only. DSSE
(https://github.com/secure-systems-lab/dsse, envelope.md and protocol.md): `{"payloadType": PAYLOAD_TYPE,
"payload": base64(body), "signatures": [{"keyid": ..., "sig": base64(Ed25519(PAE))}]}` with PAE = b"DSSEv1
<len(type)> <type> <len(body)> <body>". The keyid only selects which signatures to try (DSSE: it "MUST NOT be used
for security decisions"); the verification with the pinned key decides. wg_mesh.gateway.document re-exports all
of this; DocumentError's reasons are the `reason` label of wgmesh_agent_apply_failures_total.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, NoReturn

from .trust import Trust

PAYLOAD_TYPE = "application/vnd.wg-mesh.peers+json;version=2"
MAX_BYTES = 256 * 1024  # the envelope; GCE metadata values stop at 256 KiB, Secrets Manager at 64 KiB
MAX_DEPTH = 8  # the body nests 5 deep (body, interface, peers, a peer, its allowed_ips)
MAX_SIGNATURES = 8
MAX_INT_DIGITS = 16  # serial and key_at (10 digits until 2286), generation (15)
SIG_BYTES = 64

# Why a document was refused (the `reason` label of wgmesh_agent_apply_failures_total).
PARSE = "parse"  # too large, too deep, not JSON, duplicate keys, NaN, huge numbers, not an envelope's shape
FORMAT_MISMATCH = "format"  # another payload type, format or version
SIGNATURE = "signature"  # unsigned, no signature by this gateway's key, or a signature that does not verify
SCOPE_MISMATCH = "scope"  # written for another Pulumi project or stack
WRONG_SITE = "site"  # written for another site
REPLAY = "replay"  # a serial below the applied one (or agent.json's floor), or the applied serial with other content
EXPIRED = "expired"  # past its not_after, or without one where agent.json requires it
NO_PEERS = "no_peers"  # would remove every peer
INVALID = "invalid"  # a field has the wrong type, shape or range
GENERATION = "generation"  # the content does not match its generation
UNSAFE = "unsafe"  # well-formed and signed, but breaks an invariant (wg_mesh.gateway.trust) or a string grammar
REASONS = (PARSE, FORMAT_MISMATCH, SIGNATURE, SCOPE_MISMATCH, WRONG_SITE, REPLAY, EXPIRED, NO_PEERS, INVALID,
           GENERATION, UNSAFE)  # fmt: skip


class DocumentError(ValueError):
    def __init__(self, reason: str, message: str, generation: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.generation = generation  # the generation a signed document claims (its metric), when known


def canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def pae(payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the signature covers (the payload type and the body)."""
    kind = PAYLOAD_TYPE.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope(payload: str, keyid: str, sig_b64: str) -> str:
    encoded = base64.b64encode(payload.encode()).decode("ascii")
    return canonical(
        {"payloadType": PAYLOAD_TYPE, "payload": encoded, "signatures": [{"keyid": keyid, "sig": sig_b64}]}
    )


# --- bounded JSON ----------------------------------------------------------------------------------------------

_ESCAPE = re.compile(r"\\.", re.S)
_BRACKETS_ONLY = {c: None for c in range(128) if chr(c) not in "[]{}"}  # str.translate: delete all but brackets


def _depth_ok(text: str) -> bool:
    """Whether ASCII JSON text nests at most MAX_DEPTH deep, without recursion and at C speed: escapes out, strings
    out (every other piece between quotes), everything but brackets out, then the innermost pairs removed MAX_DEPTH
    times (each round removes one level); anything left is deeper, or unbalanced (not JSON either way). Up to the
    first character json.loads would refuse, this sees exactly the brackets it would nest."""
    outside = "".join(_ESCAPE.sub("", text).split('"')[::2])
    brackets = outside.translate(_BRACKETS_ONLY)
    for _ in range(MAX_DEPTH):
        if not brackets:
            return True
        brackets = brackets.replace("[]", "").replace("{}", "")
    return not brackets


def _refuse(reason: str, message: str) -> NoReturn:
    raise DocumentError(reason, message)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        _refuse(PARSE, "a key appears twice in one object")
    return out


def _int_text(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        _refuse(PARSE, f"a number of {len(text)} digits")
    return int(text)


def load_json(text: str | bytes, what: str) -> Any:
    """JSON within every bound; DocumentError(PARSE) otherwise. ASCII only: canonical JSON escapes the rest."""
    if len(text) > MAX_BYTES:
        _refuse(PARSE, f"{what}: {len(text)} bytes, more than {MAX_BYTES}")
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            _refuse(PARSE, f"{what}: not ASCII text")
    assert isinstance(text, str)
    if not text.isascii():
        _refuse(PARSE, f"{what}: not ASCII text")
    if not _depth_ok(text):
        _refuse(PARSE, f"{what}: nested deeper than {MAX_DEPTH}")
    try:
        return json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_int=_int_text,
            parse_float=lambda s: _refuse(PARSE, f"{what}: a fraction or exponent ({s[:20]})"),
            parse_constant=lambda s: _refuse(PARSE, f"{what}: {s} is not JSON"),
        )
    except ValueError as exc:  # json.JSONDecodeError; DocumentError is a ValueError too
        if isinstance(exc, DocumentError):
            raise
        raise DocumentError(PARSE, f"{what}: not JSON: {exc}") from None
    except RecursionError:  # unreachable after _depth_ok; a refusal all the same
        raise DocumentError(PARSE, f"{what}: nested too deep") from None


# --- the envelope ----------------------------------------------------------------------------------------------


def _b64(value: object, what: str, limit: int) -> bytes:
    if not isinstance(value, str) or len(value) > limit:
        _refuse(PARSE, f"{what}: not a string of at most {limit} characters")
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        _refuse(PARSE, f"{what}: not base64")


def verified_payload(text: str | bytes, trust: Trust) -> bytes:
    """The body bytes of an envelope signed by trust.signing_key; DocumentError otherwise."""
    raw = load_json(text, "document")
    if not isinstance(raw, dict):
        _refuse(PARSE, f"not a JSON object but {type(raw).__name__}")
    if "payloadType" not in raw and "signatures" not in raw:
        _refuse(SIGNATURE, "unsigned: not a DSSE envelope")
    unknown = sorted(set(raw) - {"payloadType", "payload", "signatures"})
    if unknown:
        _refuse(PARSE, f"envelope: unknown field {unknown[0][:40]!r}")
    if raw.get("payloadType") != PAYLOAD_TYPE:
        _refuse(
            FORMAT_MISMATCH, f"payload type {str(raw.get('payloadType'))[:80]!r}, this agent reads {PAYLOAD_TYPE!r}"
        )
    payload = _b64(raw.get("payload"), "payload", MAX_BYTES)
    signatures = raw.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        _refuse(SIGNATURE, "unsigned: no signatures")
    assert isinstance(signatures, list)
    if len(signatures) > MAX_SIGNATURES:
        _refuse(PARSE, f"{len(signatures)} signatures, more than {MAX_SIGNATURES}")
    ours = []
    for entry in signatures:
        if not isinstance(entry, dict) or set(entry) - {"keyid", "sig"}:
            _refuse(PARSE, "signatures: an entry is not {keyid, sig}")
        if entry.get("keyid") == trust.keyid:
            ours.append(_b64(entry.get("sig"), "sig", 4 * SIG_BYTES))
    if not ours:
        _refuse(SIGNATURE, f"no signature by this gateway's signing key (keyid {trust.keyid})")
    if not any(_verifies(trust.signing_key, pae(payload), sig) for sig in ours):
        _refuse(SIGNATURE, "the signature does not verify (another key, or another payload)")
    return payload


def _verifies(verify_key_b64: str, message: bytes, signature: bytes) -> bool:
    """Ed25519 with python3-nacl (libsodium), imported here only: the deployer side never needs it from us."""
    try:
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey
    except ImportError:
        raise DocumentError(SIGNATURE, "python3-nacl is not installed: no document can be verified") from None
    if len(signature) != SIG_BYTES:
        return False
    try:
        VerifyKey(base64.b64decode(verify_key_b64)).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True
