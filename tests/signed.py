"""Checking a signed peer document the way a gateway must, independently of wg_mesh.gateway.document: the DSSE
envelope (payloadType, base64 payload, one signature), the signature over DSSE's pre-authentication encoding with
the Ed25519 key pinned in the site's agent.json, then the body's site and scope against that agent.json's `trust`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import nacl.signing

PAYLOAD_TYPE = "application/vnd.wg-mesh.peers+json;version=2"  # written out, not imported: an independent check


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding (secure-systems-lab/dsse, protocol.md): what the signature covers."""
    kind = payload_type.encode()
    return b"DSSEv1 " + str(len(kind)).encode() + b" " + kind + b" " + str(len(body)).encode() + b" " + body


def verified_body(text: str, trust: dict[str, Any]) -> dict[str, Any]:
    """The document's body, after checking its signature against `trust.signing_key` (nacl raises BadSignatureError
    otherwise) and that it was written for this site and scope."""
    outer = json.loads(text)
    assert set(outer) == {"payloadType", "payload", "signatures"} and outer["payloadType"] == PAYLOAD_TYPE
    payload = base64.b64decode(outer["payload"], validate=True)
    (signature,) = outer["signatures"]
    raw_key = base64.b64decode(trust["signing_key"], validate=True)
    assert signature["keyid"] == hashlib.sha256(raw_key).hexdigest()[:16]
    nacl.signing.VerifyKey(raw_key).verify(pae(PAYLOAD_TYPE, payload), base64.b64decode(signature["sig"]))
    body = json.loads(payload)
    assert isinstance(body, dict)
    assert (body["site"], body["scope"], body["format"]) == (trust["site"], trust["scope"], "wg-mesh.peers/2")
    return body
