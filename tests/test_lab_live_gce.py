"""The lab's GCE metadata server and Secret Manager model (wg_mesh/lab/clouds/gce.py) against Google's documented
protocol, on loopback with real HTTP clients (urllib): no root needed."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from wg_mesh.lab.clouds import gce
from wg_mesh.lab.clouds.controlplane import write_atomic

GOOGLE = {"Metadata-Flavor": "Google"}


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    started = []
    urls = []
    for kind in ("metadata", "secretmanager"):
        server = gce.make_server(kind, tmp_path / kind, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        urls.append(f"http://127.0.0.1:{server.server_address[1]}")
    yield tmp_path, urls[0], urls[1]
    for server in started:
        server.shutdown()
        server.server_close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


ATTR = "/computeMetadata/v1/instance/attributes/wg-mesh-peers"


def test_metadata_requires_the_flavor_header_and_sets_it(servers: tuple[Path, str, str]) -> None:
    root, metadata, _ = servers
    write_atomic(root / "metadata" / "attributes" / "wg-mesh-peers", b"doc-1", 0o644)
    status, headers, _ = get(metadata + ATTR)
    assert status == 403
    status, _, _ = get(metadata + ATTR, {**GOOGLE, "X-Forwarded-For": "10.0.0.1"})
    assert status == 403
    status, headers, body = get(metadata + ATTR, GOOGLE)
    assert (status, body, headers["Metadata-Flavor"]) == (200, b"doc-1", "Google")
    assert headers["ETag"] == gce.etag(b"doc-1")
    assert get(metadata + "/computeMetadata/v1/instance/attributes/other", GOOGLE)[0] == 404


def test_wait_for_change_hangs_until_the_value_changes(servers: tuple[Path, str, str]) -> None:
    root, metadata, _ = servers
    path = root / "metadata" / "attributes" / "wg-mesh-peers"
    write_atomic(path, b"doc-1", 0o644)
    first = gce.etag(b"doc-1")
    # A last_etag that already differs: at once.
    start = time.monotonic()
    status, headers, body = get(f"{metadata}{ATTR}?wait_for_change=true&last_etag=stale&timeout_sec=30", GOOGLE)
    assert (status, body) == (200, b"doc-1") and time.monotonic() - start < 1
    # The current ETag and no change: the current value after timeout_sec.
    start = time.monotonic()
    status, headers, body = get(f"{metadata}{ATTR}?wait_for_change=true&last_etag={first}&timeout_sec=1", GOOGLE)
    assert (status, body, headers["ETag"]) == (200, b"doc-1", first) and time.monotonic() - start >= 1
    # The current ETag, then a change: the new value, promptly.
    timer = threading.Timer(0.5, write_atomic, (path, b"doc-2", 0o644))
    timer.start()
    start = time.monotonic()
    status, headers, body = get(f"{metadata}{ATTR}?wait_for_change=true&last_etag={first}&timeout_sec=30", GOOGLE)
    elapsed = time.monotonic() - start
    assert (status, body, headers["ETag"]) == (200, b"doc-2", gce.etag(b"doc-2"))
    assert 0.4 < elapsed < 2


def test_token_and_secret_manager_access(servers: tuple[Path, str, str]) -> None:
    root, metadata, secret_manager = servers
    write_atomic(root / "metadata" / "token", b"tok-gw\n", 0o600)
    status, _, body = get(metadata + "/computeMetadata/v1/instance/service-accounts/default/token", GOOGLE)
    token = json.loads(body)
    assert status == 200 and token["access_token"] == "tok-gw" and token["token_type"] == "Bearer"

    base = root / "secretmanager" / "proj" / "key"
    write_atomic(base / "1", b"old", 0o600)
    write_atomic(base / "2", b"new", 0o600)
    write_atomic(base / "accessors", b"tok-gw\n", 0o600)
    url = f"{secret_manager}/v1/projects/proj/secrets/key/versions/latest:access"
    assert get(url)[0] == 401
    status, _, body = get(url, {"Authorization": "Bearer tok-other"})
    assert status == 403 and json.loads(body)["error"]["status"] == "PERMISSION_DENIED"
    status, _, body = get(url, {"Authorization": "Bearer tok-gw"})
    reply = json.loads(body)
    assert status == 200 and reply["name"] == "projects/proj/secrets/key/versions/2"
    assert base64.b64decode(reply["payload"]["data"]) == b"new"
    assert reply["payload"]["dataCrc32c"] == str(gce.crc32c(b"new"))
    status, _, body = get(url.replace("latest", "1"), {"Authorization": "Bearer tok-gw"})
    assert base64.b64decode(json.loads(body)["payload"]["data"]) == b"old"
    assert get(url.replace("/key/", "/nope/"), {"Authorization": "Bearer tok-gw"})[0] == 403
    assert get(url.replace("latest", "9"), {"Authorization": "Bearer tok-gw"})[0] == 404


def test_crc32c_matches_the_standard_check_value() -> None:
    assert gce.crc32c(b"123456789") == 0xE3069283  # RFC 3720 B.4 / the CRC catalogue's check value
