"""wg-mesh-ready: a gateway marks itself ready once wg0 is up and forwarding is on.

Runs last in the first boot; `pulumi up` waits for the mark (mesh.readygate, README "Replacements").
Standard library only. AWS: the tag wg-mesh:ready=true (IMDSv2 for the instance role's credentials, SigV4 for EC2
CreateTags). GCP (--cloud gcp): the guest attribute wg-mesh/ready=true, written through the metadata server
(needs instance metadata enable-guest-attributes=TRUE; no credentials; Compute Engine docs, "Set and query guest
attributes": PUT .../instance/guest-attributes/NAMESPACE/KEY with Metadata-Flavor: Google).
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
IMDS = "http://169.254.169.254"
GCE_METADATA = "http://metadata.google.internal"
GUEST_NAMESPACE, GUEST_KEY = "wg-mesh", "ready"
FORWARD_PATH = "/proc/sys/net/ipv4/ip_forward"


def local_problems(forward_path: str = FORWARD_PATH, wg: Sequence[str] = ("wg", "show", "wg0")) -> list[str]:
    """Why this gateway cannot forward into the mesh yet; empty when it is ready."""
    problems = []
    try:
        with open(forward_path) as f:
            if f.read().strip() != "1":
                problems.append(f"{forward_path} is not 1: forwarding is off")
    except OSError as exc:
        problems.append(f"cannot read {forward_path}: {exc}")
    try:
        done = subprocess.run(list(wg), capture_output=True, text=True, timeout=10)
        if done.returncode:
            problems.append(f"{' '.join(wg)} failed: {done.stderr.strip() or done.returncode}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        problems.append(f"{' '.join(wg)} failed: {exc}")
    return problems


class Metadata:
    """IMDSv2: a session token, then every read with it."""

    def __init__(self, base: str = IMDS) -> None:
        self.base = base.rstrip("/")
        put = urllib.request.Request(
            f"{self.base}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"}
        )
        with urllib.request.urlopen(put, timeout=5) as response:
            self.token = response.read().decode()

    def get(self, path: str) -> str:
        req = urllib.request.Request(
            f"{self.base}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": self.token}
        )
        with urllib.request.urlopen(req, timeout=5) as response:
            return str(response.read().decode())

    def credentials(self) -> dict[str, str]:
        role = self.get("iam/security-credentials/").split()[0]
        c = json.loads(self.get(f"iam/security-credentials/{role}"))
        return {"key": c["AccessKeyId"], "secret": c["SecretAccessKey"], "token": c["Token"]}


def ec2_endpoint(region: str) -> str:
    return f"https://ec2.{region}.amazonaws.com{'.cn' if region.startswith('cn-') else ''}/"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_request(
    endpoint: str, region: str, body: str, creds: dict[str, str], now: datetime.datetime
) -> urllib.request.Request:
    """A SigV4-signed POST of a form-encoded EC2 query API call (AWS General Reference, SigV4)."""
    url = urllib.parse.urlsplit(endpoint)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {
        "content-type": "application/x-www-form-urlencoded; charset=utf-8",
        "host": url.netloc,
        "x-amz-date": stamp,
        "x-amz-security-token": creds["token"],
    }
    names = ";".join(sorted(headers))
    lines = ["POST", url.path or "/", "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names]
    canonical = "\n".join([*lines, hashlib.sha256(body.encode()).hexdigest()])
    scope = f"{stamp[:8]}/{region}/ec2/aws4_request"
    key = f"AWS4{creds['secret']}".encode()
    for part in scope.split("/"):
        key = _hmac(key, part)
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds['key']}/{scope}, SignedHeaders={names}, Signature={signature}"
    )
    del headers["host"]
    return urllib.request.Request(endpoint, data=body.encode(), method="POST", headers=headers)


def mark_ready(metadata: Metadata, endpoint: str | None = None) -> str:
    """Tag this instance ready; returns its id. Raises on an API error (the caller retries)."""
    instance_id, region = metadata.get("instance-id"), metadata.get("placement/region")
    fields = {"Action": "CreateTags", "Version": "2016-11-15", "ResourceId.1": instance_id}
    body = urllib.parse.urlencode({**fields, "Tag.1.Key": READY_TAG, "Tag.1.Value": READY_VALUE})
    now = datetime.datetime.now(datetime.UTC)
    with urllib.request.urlopen(
        signed_request(endpoint or ec2_endpoint(region), region, body, metadata.credentials(), now), timeout=10
    ) as response:
        response.read()
    return instance_id


def mark_ready_gce(base: str = GCE_METADATA) -> str:
    """Set this GCE instance's guest attribute wg-mesh/ready=true; returns what was set."""
    path = f"{GUEST_NAMESPACE}/{GUEST_KEY}"
    put = urllib.request.Request(
        f"{base.rstrip('/')}/computeMetadata/v1/instance/guest-attributes/{path}",
        data=READY_VALUE.encode(),
        method="PUT",
        headers={"Metadata-Flavor": "Google"},
    )
    with urllib.request.urlopen(put, timeout=5) as response:
        response.read()
    return f"guest attribute {path}"


def run(
    imds: str,
    endpoint: str | None,
    deadline_s: float,
    check: Callable[[], list[str]],
    sleep_s: float = 5.0,
    cloud: str = "aws",
) -> int:
    """Retry until ready and marked (a new role takes seconds to work) or the deadline; 0 on success."""
    give_up = time.monotonic() + deadline_s
    while True:
        last = "; ".join(check())
        if not last:
            try:
                done = mark_ready_gce(imds) if cloud == "gcp" else mark_ready(Metadata(imds), endpoint)
                print(f"wg-mesh-ready: {done} marked {READY_VALUE}")
                return 0
            except (OSError, KeyError, ValueError, IndexError) as exc:
                detail = exc.read().decode(errors="replace")[:300] if isinstance(exc, urllib.error.HTTPError) else ""
                last = f"marking failed: {exc} {detail}"
        if time.monotonic() >= give_up:
            print(f"wg-mesh-ready: not ready after {deadline_s:.0f} s: {last}", file=sys.stderr)
            return 1
        time.sleep(sleep_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-ready")
    parser.add_argument("--cloud", choices=("aws", "gcp"), default="aws")
    parser.add_argument("--imds", help="metadata server (default: the cloud's)")
    parser.add_argument("--endpoint", help="EC2 API endpoint (default: the region's)")
    parser.add_argument("--deadline", type=float, default=600.0)
    args = parser.parse_args(argv)
    imds = args.imds or (GCE_METADATA if args.cloud == "gcp" else IMDS)
    return run(imds, args.endpoint, args.deadline, local_problems, cloud=args.cloud)


if __name__ == "__main__":
    sys.exit(main())
