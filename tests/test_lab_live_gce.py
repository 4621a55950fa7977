"""The lab's GCE metadata server and Secret Manager model (wg_mesh/lab/clouds/gce.py) against Google's documented
protocol, on loopback with real HTTP clients (urllib): no root needed."""

from __future__ import annotations

import base64
import json
import threading
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


TOKEN = "/computeMetadata/v1/instance/service-accounts/default/token"


def test_metadata_requires_the_flavor_header_and_sets_it(servers: tuple[Path, str, str]) -> None:
    root, metadata, _ = servers
    write_atomic(root / "metadata" / "token", b"tok-gw\n", 0o600)
    status, headers, _ = get(metadata + TOKEN)
    assert status == 403
    status, _, _ = get(metadata + TOKEN, {**GOOGLE, "X-Forwarded-For": "10.0.0.1"})
    assert status == 403
    status, headers, _ = get(metadata + TOKEN, GOOGLE)
    assert (status, headers["Metadata-Flavor"]) == (200, "Google")
    assert get(metadata + "/computeMetadata/v1/instance/attributes/wg-mesh-peers", GOOGLE)[0] == 404  # not read


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
