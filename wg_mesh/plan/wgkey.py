"""WireGuard (X25519) keys as base64 text, the form wg(8) uses. Pure functions, no Pulumi."""

from __future__ import annotations

import base64
import binascii

from nacl.public import PrivateKey

KEY_LENGTH = 32


def clamp(raw: bytes) -> bytes:
    """Clamp 32 random bytes into an X25519 private scalar, exactly as `wg genkey` does."""
    if len(raw) != KEY_LENGTH:
        raise ValueError(f"a WireGuard key is {KEY_LENGTH} bytes, got {len(raw)}")
    key = bytearray(raw)
    key[0] &= 248
    key[31] = (key[31] & 127) | 64
    return bytes(key)


def _decode(key_b64: str) -> bytes:
    try:
        raw = base64.b64decode(key_b64, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not a base64 WireGuard key") from None
    if len(raw) != KEY_LENGTH:
        raise ValueError(f"a WireGuard key is {KEY_LENGTH} bytes, got {len(raw)}")
    return raw


def private_key_from_random(random_b64: str) -> str:
    """Turn 32 random bytes (base64, e.g. from pulumi_random.RandomBytes) into a wg private key."""
    return base64.b64encode(clamp(_decode(random_b64))).decode()


def public_key(private_b64: str) -> str:
    """The public key `wg pubkey` prints for this private key."""
    return base64.b64encode(bytes(PrivateKey(_decode(private_b64)).public_key)).decode()


def generate_private_key() -> str:
    """A fresh private key (for the lab; stacks keep theirs in Pulumi state)."""
    return base64.b64encode(clamp(bytes(PrivateKey.generate()))).decode()


def is_public_key(text: str) -> bool:
    try:
        _decode(text)
    except ValueError:
        return False
    return True
