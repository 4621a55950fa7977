"""The lab's model of the EC2 instance metadata service, version 2 (IMDSv2), for an HA site's AWS gateways: served at
169.254.169.254:80 inside one gateway's network namespace (as gce.py serves GCE's metadata server in GCP gateways),
where botocore's `AWS_EC2_METADATA_SERVICE_ENDPOINT` (default http://169.254.169.254/) finds it.

The protocol, as AWS documents it ("How Instance Metadata Service Version 2 works",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-v2-how-it-works.html, read through its mirror
https://docs.amazonaws.cn/en_us/AWSEC2/latest/UserGuide/instance-metadata-v2-how-it-works.html):
* `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds: N`, 1 <= N <= 21600 (one second to six hours)
  -> 200, the token as the body and the same TTL header; a missing or invalid TTL -> 400; a PUT that carries
  `X-Forwarded-For` is refused (403: the token must not pass through a proxy);
* `GET /latest/meta-data/<path>` with `X-aws-ec2-metadata-token: <token>` -> 200 text/plain; a missing, unknown or
  expired token -> 401 (IMDSv2 required: `http_tokens = "required"`, as the program sets); an unknown path -> 404.
The paths served (the instance's own facts, from the lab's moto seeding): `instance-id`, `mac`,
`network/interfaces/macs/<mac>/interface-id`, `local-ipv4`, `placement/region`; `meta-data/` lists the top level.

Standard library only. `python -m wg_mesh.lab.clouds.imds FACTS.json [HOST PORT]`; FACTS: {"instance_id", "mac",
"interface_id", "local_ipv4", "region"}.
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ADDRESS, PORT = "169.254.169.254", 80
TOKEN_PATH = "/latest/api/token"
META_PREFIX = "/latest/meta-data/"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TTL_S = 21600


def meta_data(facts: dict[str, Any]) -> dict[str, str]:
    mac = facts["mac"]
    return {
        "instance-id": facts["instance_id"],
        "mac": mac,
        f"network/interfaces/macs/{mac}/interface-id": facts["interface_id"],
        "local-ipv4": facts["local_ipv4"],
        "placement/region": facts["region"],
    }


class ImdsHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    values: dict[str, str]
    tokens: dict[str, float]  # token -> expiry (monotonic)
    lock: threading.Lock

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {format % args}\n")

    def reply(self, status: int, body: str, **headers: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path != TOKEN_PATH:
            self.reply(404, "Not Found")
            return
        if "X-Forwarded-For" in self.headers:
            self.reply(403, "Forbidden")
            return
        ttl = self.headers.get(TTL_HEADER, "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TTL_S:
            self.reply(400, "Bad Request")
            return
        token = secrets.token_urlsafe(32)
        with self.lock:
            self.tokens[token] = time.monotonic() + int(ttl)
        self.reply(200, token, **{TTL_HEADER: ttl})

    def do_GET(self) -> None:
        token = self.headers.get(TOKEN_HEADER)
        with self.lock:
            expiry = self.tokens.get(token or "")
        if expiry is None or expiry < time.monotonic():
            self.reply(401, "Unauthorized")
            return
        if not self.path.startswith(META_PREFIX):
            self.reply(404, "Not Found")
            return
        key = self.path.removeprefix(META_PREFIX)
        if key == "":
            self.reply(200, "\n".join(sorted({k.split("/")[0] + ("/" if "/" in k else "") for k in self.values})))
        elif key in self.values:
            self.reply(200, self.values[key])
        else:
            self.reply(404, "Not Found")


def make_server(facts: dict[str, Any], host: str, port: int) -> ThreadingHTTPServer:
    attrs = {"values": meta_data(facts), "tokens": {}, "lock": threading.Lock()}
    server = ThreadingHTTPServer((host, port), type("Imds", (ImdsHandler,), attrs))
    server.daemon_threads = True
    return server


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3):
        print("usage: python -m wg_mesh.lab.clouds.imds FACTS.json [HOST PORT]", file=sys.stderr)
        return 2
    facts = json.loads(Path(argv[0]).read_text())
    host, port = (argv[1], int(argv[2])) if len(argv) == 3 else (ADDRESS, PORT)
    server = make_server(facts, host, port)
    print(f"listening {host}:{server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
