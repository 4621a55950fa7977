"""wg-mesh-ready: the last step of an AWS gateway's first boot. Python standard library only.

When wg0 is up and forwarding is on, the gateway tags its own instance `wg-mesh:ready=true` through the
EC2 API, with its instance role's credentials from the instance metadata service (IMDSv2). `pulumi up`
waits for that tag (mesh.readygate) before it moves the Elastic IP and the routes to a new gateway.

Requests are signed with AWS Signature Version 4 (AWS General Reference, "Signing AWS API requests").
`--imds` and `--endpoint` exist for the tests, which run this against moto in server mode.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

READY_TAG = "wg-mesh:ready"
READY_VALUE = "true"
EC2_API_VERSION = "2016-11-15"
IMDS = "http://169.254.169.254"
FORWARD_PATH = "/proc/sys/net/ipv4/ip_forward"
INTERFACE = "wg0"


def local_problems(forward_path: str = FORWARD_PATH, wg: Sequence[str] = ("wg", "show", INTERFACE)) -> list[str]:
    """What keeps this gateway from forwarding into the mesh; empty when it is ready."""
    problems = []
    try:
        with open(forward_path) as f:
            if f.read().strip() != "1":
                problems.append(f"{forward_path} is not 1: forwarding is off")
    except OSError as exc:
        problems.append(f"cannot read {forward_path}: {exc}")
    try:
        done = subprocess.run(list(wg), capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            problems.append(f"{' '.join(wg)} failed: {done.stderr.strip() or done.returncode}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        problems.append(f"{' '.join(wg)} failed: {exc}")
    return problems


class Metadata:
    """IMDSv2: a session token first, then every read with it."""

    def __init__(self, base: str = IMDS) -> None:
        self.base = base.rstrip("/")
        request = urllib.request.Request(
            f"{self.base}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            self.token = response.read().decode()

    def get(self, path: str) -> str:
        request = urllib.request.Request(
            f"{self.base}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": self.token}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return str(response.read().decode())

    def credentials(self) -> dict[str, str]:
        role = self.get("iam/security-credentials/").splitlines()[0].strip()
        creds = json.loads(self.get(f"iam/security-credentials/{role}"))
        return {"key": creds["AccessKeyId"], "secret": creds["SecretAccessKey"], "token": creds["Token"]}


def ec2_endpoint(region: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://ec2.{region}.{suffix}/"


def signed_request(
    endpoint: str, region: str, body: str, creds: dict[str, str], now: datetime.datetime
) -> urllib.request.Request:
    """A SigV4-signed POST of a form-encoded EC2 query API call."""
    host = urllib.parse.urlsplit(endpoint).netloc
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    content_type = "application/x-www-form-urlencoded; charset=utf-8"
    headers = {
        "content-type": content_type,
        "host": host,
        "x-amz-date": amz_date,
        "x-amz-security-token": creds["token"],
    }
    signed_headers = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            "POST",
            urllib.parse.urlsplit(endpoint).path or "/",
            "",
            "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
            signed_headers,
            hashlib.sha256(body.encode()).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/ec2/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{creds['secret']}".encode()
    for part in (day, region, "ec2", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={creds['key']}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
    )
    return urllib.request.Request(
        endpoint,
        data=body.encode(),
        method="POST",
        headers={**{k: v for k, v in headers.items() if k != "host"}, "Authorization": authorization},
    )


def mark_ready(metadata: Metadata, endpoint: str | None = None) -> str:
    """Tag this instance ready; returns its id. Raises on an API error (the caller retries)."""
    instance_id = metadata.get("instance-id")
    region = metadata.get("placement/region")
    body = urllib.parse.urlencode(
        {
            "Action": "CreateTags",
            "Version": EC2_API_VERSION,
            "ResourceId.1": instance_id,
            "Tag.1.Key": READY_TAG,
            "Tag.1.Value": READY_VALUE,
        }
    )
    now = datetime.datetime.now(datetime.UTC)
    request = signed_request(endpoint or ec2_endpoint(region), region, body, metadata.credentials(), now)
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
    return instance_id


def run(
    imds: str, endpoint: str | None, deadline_s: float, check: Callable[[], list[str]], sleep_s: float = 5.0
) -> int:
    """Wait until the gateway is ready, then mark it; retry while IAM propagates. 0 on success."""
    give_up = time.monotonic() + deadline_s
    last = ""
    while True:
        problems = check()
        if not problems:
            try:
                instance_id = mark_ready(Metadata(imds), endpoint)
                print(f"wg-mesh-ready: {instance_id} marked {READY_TAG}={READY_VALUE}")
                return 0
            except (OSError, urllib.error.URLError, KeyError, ValueError, IndexError) as exc:
                detail = exc.read().decode(errors="replace")[:300] if isinstance(exc, urllib.error.HTTPError) else ""
                last = f"marking failed: {exc} {detail}".strip()
        else:
            last = "; ".join(problems)
        if time.monotonic() >= give_up:
            print(f"wg-mesh-ready: not ready after {deadline_s:.0f} s: {last}", file=sys.stderr)
            return 1
        time.sleep(sleep_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-ready", description=__doc__.splitlines()[0])
    parser.add_argument("--imds", default=IMDS)
    parser.add_argument("--endpoint", default=None, help="EC2 API endpoint (default: the region's)")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds to keep trying")
    args = parser.parse_args(argv)
    return run(args.imds, args.endpoint, args.deadline, local_problems)


if __name__ == "__main__":
    sys.exit(main())
