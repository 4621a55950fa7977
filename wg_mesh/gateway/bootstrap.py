"""An AWS gateway's first step: install wg-mesh-agent's package from its bundle in Secrets Manager.

    python3 -m wgmesh_gateway.bootstrap --config /etc/wg-mesh/agent.json [--timeout S] [--lib DIR]

EC2 takes at most 16 KB of user data (gzip'd), and the whole agent (with the path-MTU monitor) does not fit next to
the metrics script and the readiness mark. So an AWS gateway's user data carries only this module, the source
modules it uses and agent.json; the rest of the package is a Secrets Manager secret of the site (`bundle_secret` in
agent.json's source), read with the instance role like the peer document.

The value is a SecretBinary: the bzip2 (level 9, one stream) of a JSON object {"files": {module name: text}}
(`encode`; the program packs it: wg_mesh.plan.userdata.aws_agent_bundle_bytes).
Secrets Manager holds at most 65536 bytes in a SecretString or a SecretBinary (Secrets Manager API reference,
SecretValueEntry: "Maximum length of 65536" for both; botocore's model, secretsmanager 2017-10-17: SecretBinaryType
is a blob with "max": 65536, which counts the bytes). A binary value spends none of that on base64 (the earlier
SecretString held base64 of a gzip: a third more), and bzip2 is the smallest of the stdlib's codecs for this text
(`python -m bench.agent_size`: ~14 % under zopfli's gzip, ~5 % under xz). botocore's GetSecretValue returns a
SecretBinary as bytes, already base64-decoded (botocore/parsers.py, `_default_blob_parser`: base64.b64decode); `bz2`
is in Ubuntu 24.04's python3 (libpython3.12-stdlib ships _bz2 and depends on libbz2-1.0: canonical/chisel-releases,
slices/libpython3.12-stdlib.yaml, its core slice). A secret that holds a
SecretString (the format of wg-mesh before 2026-12-04) is refused as such.

The value is fetched input, so hostile until its hash matches: at most VALUE_LIMIT bytes, one bzip2 stream that
expands to at most TEXT_LIMIT bytes (decompressed with a bound, never whole), nothing after it. The bundle is pinned:
agent.json (in the user data) holds the SHA-256 of its JSON text (`bundle_sha256`), and a bundle that does not match
is refused. Whoever can write the secret can therefore not run code on the gateway; a new agent release changes the
hash, and with it the user data (a replacement, like a new image). Nothing is installed unless the whole bundle
passes. Retries every few seconds until `--timeout` (the instance role's credentials can take a moment on first
boot, and a bundle secret being replaced holds the old format for a moment). Exit 0 once the package is in place, 1
at the timeout, 2 for a bad agent.json. Writes each module atomically; logs to stderr.
"""

from __future__ import annotations

import argparse
import bz2
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from .files import atomic_write
from .sources import FetchError

LIB_DIR = "/usr/local/lib/wg-mesh"
PACKAGE = "wgmesh_gateway"
RETRY_S = 3.0
VALUE_LIMIT = 65536  # bytes: Secrets Manager's largest SecretBinary (see above)
TEXT_LIMIT = 1 << 20  # bytes: the bundle's JSON text at most (~190 KB in 2026-12; ~5x room, and a bound on a bomb)
MAGIC = b"BZh9"  # a bzip2 stream of 900 KB blocks (bz2.compress(..., 9))
_MODULE = re.compile(r"[a-z_][a-z0-9_]*\.py")


class BundleError(ValueError):
    pass


def encode(files: dict[str, str]) -> tuple[bytes, str]:
    """The bundle's canonical JSON text (what the hash covers) and its SHA-256 (hex)."""
    text = json.dumps({"files": files}, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return text, hashlib.sha256(text).hexdigest()


def unpack(value: bytes | str) -> bytes:
    """The JSON text of a secret's value, bounded; BundleError saying what is wrong with it."""
    if isinstance(value, str):
        raise BundleError("the secret holds a SecretString, not a SecretBinary (an older wg-mesh's bundle?)")
    if len(value) > VALUE_LIMIT:
        raise BundleError(f"{len(value)} bytes, over Secrets Manager's {VALUE_LIMIT}: not a bundle")
    if not value.startswith(MAGIC):
        raise BundleError(f"not a bzip2 bundle (starts {value[:4]!r})")
    decompressor = bz2.BZ2Decompressor()
    try:
        text = decompressor.decompress(value, max_length=TEXT_LIMIT + 1)
    except (OSError, EOFError, ValueError) as exc:
        raise BundleError(f"damaged bzip2: {exc}") from None
    if len(text) > TEXT_LIMIT:
        raise BundleError(f"expands past {TEXT_LIMIT} bytes: not a bundle")
    if not decompressor.eof:
        raise BundleError("truncated bzip2")
    if decompressor.unused_data:
        raise BundleError(f"{len(decompressor.unused_data)} bytes after the bzip2 stream")
    return text


def decode(value: bytes | str, sha256: str) -> dict[str, str]:
    """The modules of a bundle secret's value; BundleError when it is damaged, not the pinned one or malformed."""
    text = unpack(value)
    digest = hashlib.sha256(text).hexdigest()
    if digest != sha256:
        raise BundleError(f"SHA-256 {digest[:12]}… is not the pinned {sha256[:12]}… (agent.json)")
    try:
        body = json.loads(text)
    except ValueError:
        raise BundleError("not JSON") from None
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, dict) or not files:
        raise BundleError("no files in it")
    for name, body in files.items():
        if not isinstance(name, str) or not _MODULE.fullmatch(name) or not isinstance(body, str):
            raise BundleError(f"not a module: {str(name)[:40]!r}")
    return files


def install(modules: dict[str, str], lib_dir: str) -> None:
    """Each module through a temporary file and a rename (wg_mesh.gateway.files.atomic_write): an interrupted install
    leaves whole files only, and nothing planted in the directory is written through."""
    directory = os.path.join(lib_dir, PACKAGE)
    for name, body in sorted(modules.items()):
        atomic_write(os.path.join(directory, name), body, 0o644)


def bundle_spec(config: dict[str, Any]) -> tuple[str, str, str]:
    """(region, secret, sha256) from agent.json; ValueError naming the field."""
    source = config.get("source")
    if not isinstance(source, dict) or source.get("kind") != "aws":
        raise ValueError("source.kind: the bundle is an AWS source's")
    spec = (source.get("region"), source.get("bundle_secret"), config.get("bundle_sha256"))
    for field, value in zip(("source.region", "source.bundle_secret", "bundle_sha256"), spec, strict=True):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{field}: missing")
    region, secret, sha256 = spec
    assert isinstance(region, str) and isinstance(secret, str) and isinstance(sha256, str)
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError("bundle_sha256: not a SHA-256 in hex")
    return region, secret, sha256


def run(
    fetch: Callable[[], bytes | str],
    sha256: str,
    lib_dir: str,
    timeout_s: float,
    log: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    give_up, last = time.monotonic() + timeout_s, ""
    while True:
        try:
            files = decode(fetch(), sha256)
            install(files, lib_dir)
            log(f"installed {len(files)} modules of bundle {sha256[:12]}… in {lib_dir}/{PACKAGE}")
            return 0
        except (FetchError, BundleError, OSError) as exc:
            message = f"bundle not installed: {exc}"
            if message != last:
                log(message)
            last = message
        if time.monotonic() >= give_up:
            log(f"no agent bundle installed within {timeout_s:.0f} s")
            return 1
        sleep(min(RETRY_S, max(0.0, give_up - time.monotonic())))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-bootstrap", description="Install wg-mesh-agent's bundle.")
    parser.add_argument("--config", required=True, help="agent.json (source.bundle_secret, bundle_sha256)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    parser.add_argument("--lib", default=LIB_DIR, help="where the package directory goes")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(f"wg-mesh-bootstrap: {message}", file=sys.stderr, flush=True)

    try:
        with open(args.config) as f:
            region, secret, sha256 = bundle_spec(json.load(f))
    except (OSError, ValueError) as exc:
        log(f"{args.config}: {exc}")
        return 2
    from .source_aws import AwsSource  # Ubuntu's python3-botocore, as for the peer document

    source = AwsSource(region, secret, "")
    return run(source.secret_value, sha256, args.lib, args.timeout, log)


if __name__ == "__main__":
    sys.exit(main())
