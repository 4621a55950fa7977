"""Keys: PyNaCl's public key is the one `wg pubkey` derives; clamping matches `wg genkey`."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess

import pytest

from wg_mesh.plan import wgkey

needs_wg = pytest.mark.skipif(shutil.which("wg") is None, reason="wireguard-tools not installed")


def wg(*args: str, stdin: str = "") -> str:
    return subprocess.run(["wg", *args], input=stdin, capture_output=True, text=True, check=True).stdout.strip()


@needs_wg
@pytest.mark.parametrize("trial", range(5))
def test_public_key_matches_wg_pubkey(trial: int) -> None:
    private = wgkey.private_key_from_random(base64.b64encode(os.urandom(32)).decode())
    assert wgkey.public_key(private) == wg("pubkey", stdin=private + "\n")


@needs_wg
def test_unclamped_random_bytes_give_the_same_public_key_as_wg() -> None:
    """wg clamps any 32 bytes it is given; so do we, before the key is ever written."""
    raw = base64.b64encode(bytes(range(224, 256))).decode()  # every clamped bit is wrong here
    assert wgkey.public_key(wgkey.private_key_from_random(raw)) == wg("pubkey", stdin=raw + "\n")


@needs_wg
def test_generated_key_is_accepted_by_wg() -> None:
    private = wgkey.generate_private_key()
    assert wgkey.public_key(private) == wg("pubkey", stdin=private + "\n")


def test_clamp_sets_the_x25519_bits() -> None:
    clamped = wgkey.clamp(b"\xff" * 32)
    assert clamped[0] & 7 == 0 and clamped[31] & 128 == 0 and clamped[31] & 64 == 64
    assert wgkey.clamp(clamped) == clamped


@pytest.mark.parametrize("bad", ["", "not base64!", base64.b64encode(b"short").decode()])
def test_bad_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        wgkey.public_key(bad)
    assert not wgkey.is_public_key(bad)
