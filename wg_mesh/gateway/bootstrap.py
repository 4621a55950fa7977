"""A live gateway's first step: install wg-mesh-agent's package from its bundle, the one its agent.json pins.

    python3 -m wgmesh_gateway.bootstrap --config /etc/wg-mesh/agent.json [--timeout S] [--lib DIR]

The whole agent does not fit a cloud's user data: EC2 takes at most 16 KB of it (gzip'd), GCE at most 256 KiB per
metadata value, and the package as plain text passed that too in 2026-12. So a live cloud gateway's user data carries
only this module, what it imports and agent.json, and the rest of the package comes as one bundle, from where
agent.json's source says:
- `source.bundle_secret` (AWS): a Secrets Manager secret of the site, read with the instance role like the peer
  document (source_aws; retried every few seconds until `--timeout`: the role's credentials can take a moment on
  first boot, and a bundle secret being replaced holds the old format for a moment);
- `source.bundle_file` (GCP): a file the user data itself writes (cloud-init write_files, `encoding: b64`): the same
  bytes, read once, with the same bounds and the same pin (a file does not get better by waiting).

The bundle is the bzip2 (level 9, one stream) of a JSON object {"files": {module name: text}} (`encode`, `pack`; the
program packs it once for every cloud: wg_mesh.gateway.ship.bundle_value).
Secrets Manager holds at most 65536 bytes in a SecretString or a SecretBinary (Secrets Manager API reference,
SecretValueEntry: "Maximum length of 65536" for both; botocore's model, secretsmanager 2017-10-17: SecretBinaryType
is a blob with "max": 65536, which counts the bytes): VALUE_LIMIT, for a file too (one bound for one format). A binary
value spends none of that on base64 (the earlier SecretString held base64 of a gzip: a third more), and bzip2 is the
smallest of the stdlib's codecs for this text (`python -m bench.agent_size`: ~14 % under zopfli's gzip, ~5 % under xz).
botocore's GetSecretValue returns a SecretBinary as bytes, already base64-decoded (botocore/parsers.py,
`_default_blob_parser`: base64.b64decode), as cloud-init writes a b64 file's decoded bytes
(cloudinit/config/cc_write_files.py: extract_contents, base64.b64decode); `bz2` is in Ubuntu 24.04's python3
(libpython3.12-stdlib ships _bz2 and depends on libbz2-1.0: canonical/chisel-releases, slices/libpython3.12-stdlib.yaml,
its core slice). A secret that holds a SecretString (the format of wg-mesh before 2026-12-04) is refused as such.

Threat model. The secret can be written by whoever holds secretsmanager:PutSecretValue on it; the file by root on the
gateway and, before the first boot, whoever can set the instance's user-data (the owner: the same user data holds
agent.json). Either is fetched input, so hostile until its hash matches: at most VALUE_LIMIT bytes (a file: a regular
file, not followed through a symlink: wg_mesh.gateway.files.read_bytes), one bzip2 stream that expands to at most
TEXT_LIMIT bytes (decompressed with a bound, never whole), nothing after it. The bundle is pinned: agent.json (in the
user data) holds the SHA-256 of its JSON text (`bundle_sha256`), and a bundle that does not match is refused. Whoever
can write the secret can therefore not run code on the gateway, and a damaged, truncated or stale bundle file installs
nothing; a new agent release changes the hash, and with it the user data (a replacement, like a new image). Nothing is
installed unless the whole bundle passes. Exit 0 once the package is in place, 1 when it could not be (at the timeout),
2 for a bad agent.json. Writes each module atomically; logs to stderr.
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
from dataclasses import dataclass
from typing import Any

from .files import atomic_write, read_bytes
from .sources import FetchError

LIB_DIR = "/usr/local/lib/wg-mesh"
PACKAGE = "wgmesh_gateway"
RETRY_S = 3.0
VALUE_LIMIT = 65536  # bytes: Secrets Manager's largest SecretBinary (see above), and a bundle file's bound
TEXT_LIMIT = 1 << 20  # bytes: the bundle's JSON text at most (~190 KB in 2026-12; ~5x room, and a bound on a bomb)
MAGIC = b"BZh9"  # a bzip2 stream of 900 KB blocks (bz2.compress(..., 9))
_MODULE = re.compile(r"[a-z_][a-z0-9_]*\.py")


class BundleError(ValueError):
    pass


def encode(files: dict[str, str]) -> tuple[bytes, str]:
    """The bundle's canonical JSON text (what the hash covers) and its SHA-256 (hex)."""
    text = json.dumps({"files": files}, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return text, hashlib.sha256(text).hexdigest()


def pack(text: bytes) -> bytes:
    """A bundle's value: its JSON text as one bzip2 stream of 900 KB blocks (what `unpack` reads back)."""
    return bz2.compress(text, 9)


def unpack(value: bytes | str) -> bytes:
    """The JSON text of a bundle's value (a secret's, a file's), bounded; BundleError saying what is wrong with it."""
    if isinstance(value, str):
        raise BundleError("the secret holds a SecretString, not a SecretBinary (an older wg-mesh's bundle?)")
    if len(value) > VALUE_LIMIT:
        raise BundleError(f"over {VALUE_LIMIT} bytes (Secrets Manager's limit, every bundle's bound): not a bundle")
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
    """The modules of a bundle's value; BundleError when it is damaged, not the pinned one or malformed."""
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


def read_file(path: str) -> bytes:
    """A bundle file's bytes, through the gateway's one reader (wg_mesh.gateway.files.read_bytes): a regular file only,
    never through a symlink, opened without blocking (a FIFO would wait for a writer), at most VALUE_LIMIT bytes read.
    OSError or BundleError."""
    data = read_bytes(path, VALUE_LIMIT)
    if data is None:
        raise BundleError(f"{path}: no such file")
    return data


@dataclass(frozen=True)
class Spec:
    """Where agent.json says the bundle is, and its pin: a file (`path`), or an AWS secret (`region`, `secret`)."""

    sha256: str
    path: str = ""
    region: str = ""
    secret: str = ""


def _text(raw: dict[str, Any], field: str, where: str) -> str:
    value = raw.get(field)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}{field}: missing")
    return value


def bundle_spec(config: dict[str, Any]) -> Spec:
    """The bundle's Spec from agent.json: `source.bundle_file` (any kind), else an AWS source's `bundle_secret`, and
    `bundle_sha256` either way; ValueError naming the field."""
    source = config.get("source")
    if not isinstance(source, dict):
        raise ValueError("source: not an object")
    where: dict[str, str]
    if "bundle_file" in source:
        where = {"path": _text(source, "bundle_file", "source.")}
        if not where["path"].startswith("/"):
            raise ValueError("source.bundle_file: not an absolute path")
    elif source.get("kind") == "aws":
        where = {"region": _text(source, "region", "source."), "secret": _text(source, "bundle_secret", "source.")}
    else:
        raise ValueError("source.bundle_file: missing (a bundle secret is an AWS source's)")
    sha256 = _text(config, "bundle_sha256", "")
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError("bundle_sha256: not a SHA-256 in hex")
    return Spec(sha256, **where)


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
            log(f"no agent bundle installed within {timeout_s:.0f} s" if timeout_s > 0 else "no agent bundle installed")
            return 1
        sleep(min(RETRY_S, max(0.0, give_up - time.monotonic())))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-bootstrap", description="Install wg-mesh-agent's bundle.")
    parser.add_argument("--config", required=True, help="agent.json (source.bundle_file|bundle_secret, bundle_sha256)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds (a secret)")
    parser.add_argument("--lib", default=LIB_DIR, help="where the package directory goes")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(f"wg-mesh-bootstrap: {message}", file=sys.stderr, flush=True)

    try:
        with open(args.config) as f:
            spec = bundle_spec(json.load(f))
    except (OSError, ValueError) as exc:
        log(f"{args.config}: {exc}")
        return 2
    if spec.path:  # one attempt: the file is what the user data wrote
        return run(lambda: read_file(spec.path), spec.sha256, args.lib, 0.0, log)
    from .source_aws import AwsSource  # Ubuntu's python3-botocore, as for the peer document

    source = AwsSource(spec.region, spec.secret, "")
    return run(source.secret_value, spec.sha256, args.lib, args.timeout, log)


if __name__ == "__main__":
    sys.exit(main())
