"""Signing peer documents on the deployer's side: Ed25519 (PyNaCl), DSSE envelopes (wg_mesh.gateway.document).

The signing key is a 32-byte seed kept secret in Pulumi state like the WireGuard keys (wg_mesh.keys); its public
half is pinned in every gateway's agent.json (`trust.signing_key`), so write access to a store is not enough to
change a gateway: the agent refuses any document this key did not sign (wg_mesh.gateway.document.decode).
Ed25519 signatures are deterministic (RFC 8032 section 5.1.6), so the same payload always gives the same envelope
and a second `pulumi up` changes nothing.
"""

from __future__ import annotations

import base64
import binascii

import nacl.signing

from wg_mesh.gateway import document
from wg_mesh.gateway.trust import KEY_BYTES, keyid_of

SEED_BYTES = KEY_BYTES  # an Ed25519 seed (RFC 8032) is 32 bytes, like the verify key


def seed_from_random(b64_32_bytes: str) -> bytes:
    """The signing seed from the base64 of 32 random bytes (a RandomBytes' `base64`); ValueError for anything else
    (the message never holds the value)."""
    try:
        raw = base64.b64decode(b64_32_bytes, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("the signing seed is not base64") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"the signing seed is {len(raw)} bytes, not {KEY_BYTES}")
    return raw


def verify_key_b64(seed: bytes) -> str:
    """The public half (base64, 32 bytes): agent.json's trust.signing_key."""
    return base64.b64encode(bytes(nacl.signing.SigningKey(seed).verify_key)).decode("ascii")


def keyid(verify_key_b64: str) -> str:
    """The envelope's keyid: the first 16 hex digits of the SHA-256 of the raw verify key (a hint, not trusted)."""
    return keyid_of(verify_key_b64)


def sign(payload: str, seed: bytes) -> str:
    """The DSSE envelope of `payload` (document.encode_body's text) signed with `seed`."""
    signature = nacl.signing.SigningKey(seed).sign(document.pae(payload.encode())).signature
    return document.envelope(payload, keyid(verify_key_b64(seed)), base64.b64encode(signature).decode("ascii"))
