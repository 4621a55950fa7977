"""The lab's model of the two Google endpoints a GCP gateway's agent talks to (no emulator for either is on PyPI):

* the GCE metadata server (`metadata`), served at 169.254.169.254:80 inside one gateway's network namespace,
  following https://cloud.google.com/compute/docs/metadata/querying-metadata :
  every request must carry `Metadata-Flavor: Google` (else 403) and must not carry `X-Forwarded-For` (else 403);
  every response carries `Metadata-Flavor: Google`; `instance/name`, `instance/zone` (with an `ETag`) and
  `instance/service-accounts/default/token` (`{"access_token", "expires_in", "token_type": "Bearer"}`); the agents
  read no custom metadata (their document is a Secret Manager secret: wg_mesh.gateway.source_gcp);
* Secret Manager's `GET /v1/projects/*/secrets/*/versions/*:access` (`secretmanager`), the REST shape of
  https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access :
  `Authorization: Bearer <token>` (401 without), 403 PERMISSION_DENIED unless that token's service account
  is a secretAccessor of the secret, 404 NOT_FOUND, else `{"name", "payload": {"data": b64, "dataCrc32c"}}`;
  `latest` is the highest version number.

The data is files the lab's control plane (`controlplane.py`) writes atomically; this module only serves them:

    metadata root:  instance/name, instance/zone   the VM's name and zone (an HA site's gateways: hacloud.py)
                    token                     the instance service account's access token
    secrets root:   <project>/<secret>/<n>    version n's payload (bytes)
                    <project>/<secret>/accessors   one token a line (the IAM binding to the gateway's SA)

Standard library only. Run as `python -m wg_mesh.lab.clouds.gce metadata ROOT` or `... secretmanager ROOT HOST PORT`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

METADATA_ADDRESS = "169.254.169.254"
METADATA_PORT = 80
FLAVOR = ("Metadata-Flavor", "Google")
METADATA_PREFIX = "/computeMetadata/v1/"
TOKEN_LIFETIME_S = 3599
INSTANCE_KEYS = ("instance/name", "instance/zone")  # `projects/NUMBER/zones/ZONE` for the zone
ACCESS = re.compile(r"^/v1/projects/([^/]+)/secrets/([^/]+)/versions/([^/:]+):access$")


def etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as Secret Manager's dataCrc32c (stdlib has only zlib's CRC-32)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


class _Handler(BaseHTTPRequestHandler):
    root: Path
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.address_string()} {format % args}\n")

    def reply(self, status: int, body: bytes, content_type: str = "application/text", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)


class MetadataHandler(_Handler):
    def do_GET(self) -> None:
        flavor = {FLAVOR[0]: FLAVOR[1]}
        if self.headers.get(FLAVOR[0]) != FLAVOR[1] or "X-Forwarded-For" in self.headers:
            self.reply(403, b"Missing required header: Metadata-Flavor: Google\n", **_h(flavor))
            return
        url = urlsplit(self.path)
        if not url.path.startswith(METADATA_PREFIX):
            self.reply(404, b"not found\n", **_h(flavor))
            return
        key = url.path.removeprefix(METADATA_PREFIX)
        if key == "instance/service-accounts/default/token":
            token = read(self.root / "token")
            if token is None:
                self.reply(404, b"no service account\n", **_h(flavor))
                return
            body = json.dumps(
                {"access_token": token.decode().strip(), "expires_in": TOKEN_LIFETIME_S, "token_type": "Bearer"}
            ).encode()
            self.reply(200, body, "application/json", **_h(flavor))
            return
        if key in INSTANCE_KEYS:  # an HA gateway's agent asks which VM it is (wg_mesh.gateway.ha_gcp.Metadata)
            found = read(self.root / key)
            if found is None:
                self.reply(404, b"not found\n", **_h(flavor))
            else:
                self.reply(200, found, **_h({**flavor, "ETag": etag(found)}))
            return
        self.reply(404, b"not found\n", **_h(flavor))


def _h(headers: dict[str, str]) -> dict[str, str]:
    return {name.replace("-", "_"): value for name, value in headers.items()}


class SecretManagerHandler(_Handler):
    def error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": {"code": status, "message": message, "status": code}}).encode()
        self.reply(status, body, "application/json")

    def do_GET(self) -> None:
        match = ACCESS.match(urlsplit(self.path).path)
        if match is None:
            self.error(404, "NOT_FOUND", f"no such method: {self.path}")
            return
        project, secret, version = match.groups()
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not auth.removeprefix("Bearer ").strip():
            self.error(401, "UNAUTHENTICATED", "Request is missing required authentication credential.")
            return
        base = self.root / project / secret
        accessors = (read(base / "accessors") or b"").decode().split()
        if auth.removeprefix("Bearer ").strip() not in accessors:
            name = f"projects/{project}/secrets/{secret}/versions/{version}"
            self.error(403, "PERMISSION_DENIED", f"Permission 'secretmanager.versions.access' denied for {name}")
            return
        versions = sorted(int(p.name) for p in base.glob("[0-9]*") if p.name.isdigit())
        number = versions[-1] if version == "latest" and versions else int(version) if version.isdigit() else None
        data = read(base / str(number)) if number is not None else None
        if data is None:
            self.error(404, "NOT_FOUND", f"Secret Version [projects/{project}/secrets/{secret}/versions/{version}]")
            return
        payload = {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc32c(data))}
        body = json.dumps({"name": f"projects/{project}/secrets/{secret}/versions/{number}", "payload": payload})
        self.reply(200, body.encode(), "application/json")


def make_server(kind: str, root: Path, host: str, port: int) -> ThreadingHTTPServer:
    handler = MetadataHandler if kind == "metadata" else SecretManagerHandler
    server = ThreadingHTTPServer((host, port), type(f"{kind}Handler", (handler,), {"root": root}))
    server.daemon_threads = True
    return server


def serve(kind: str, root: Path, host: str, port: int) -> None:
    server = make_server(kind, root, host, port)
    print(f"listening {host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("metadata", "secretmanager"):
        print(
            "usage: python -m wg_mesh.lab.clouds.gce metadata ROOT [HOST PORT] | secretmanager ROOT HOST PORT",
            file=sys.stderr,
        )
        return 2
    host, port = (argv[2], int(argv[3])) if len(argv) >= 4 else (METADATA_ADDRESS, METADATA_PORT)
    serve(argv[0], Path(argv[1]), host, port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
