"""Signing peer documents on the deployer's side (Ed25519 with PyNaCl, DSSE envelopes: wg_mesh.gateway.document).

STAND-IN for helper A's module (/work/wt/SPEC-20.md section 1): exactly the functions the program calls.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

import nacl.signing

from wg_mesh.gateway import document

_SEED_BYTES = 32
_KEYID_HEX = 16


def seed_from_random(b64_32_bytes: str) -> bytes:
    """The signing seed from a RandomBytes' base64 (32 bytes); ValueError for anything else."""
    try:
        raw = base64.b64decode(b64_32_bytes, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the signing seed is not base64") from None
    if len(raw) != _SEED_BYTES:
        raise ValueError(f"the signing seed is {len(raw)} bytes, not {_SEED_BYTES}")
    return raw


def verify_key_b64(seed: bytes) -> str:
    return base64.b64encode(bytes(nacl.signing.SigningKey(seed).verify_key)).decode("ascii")


def keyid(verify_key: str) -> str:
    return hashlib.sha256(base64.b64decode(verify_key)).hexdigest()[:_KEYID_HEX]


def sign(payload: str, seed: bytes) -> str:
    """The DSSE envelope of `payload` signed with `seed`."""
    key = nacl.signing.SigningKey(seed)
    signature = key.sign(document.pae(payload.encode())).signature
    return document.envelope(payload, keyid(verify_key_b64(seed)), base64.b64encode(signature).decode("ascii"))
