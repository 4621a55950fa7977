"""wg-mesh-ready: a gateway marks itself ready once wg0 is up and forwarding is on.

Runs last in the first boot; `pulumi up` waits for the mark (mesh.readygate, README "Replacements").
AWS: the tag wg-mesh:ready=true on its own instance; Ubuntu's python3-botocore signs the call with the instance
role's credentials (IMDSv2). GCP (--cloud gcp): the guest attribute wg-mesh/ready=true, written through the
metadata server (standard library; needs instance metadata enable-guest-attributes=TRUE and no credentials;
Compute Engine docs, "Set and query guest attributes": PUT .../instance/guest-attributes/NAMESPACE/KEY with
Metadata-Flavor: Google).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence

READY_TAG = "wg-mesh:ready"
READY_VALUE = "true"
FORWARD_PATH = "/proc/sys/net/ipv4/ip_forward"
IMDS = "http://169.254.169.254"
GCE_METADATA = "http://metadata.google.internal"
GUEST_NAMESPACE, GUEST_KEY = "wg-mesh", "ready"


def imds_endpoint() -> str:
    """botocore's own setting for where its credentials come from, so one variable moves both (tests: moto)."""
    return os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", IMDS)


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


def instance_id() -> str:
    """This instance's id, through IMDSv2 (a session token first)."""
    base = imds_endpoint().rstrip("/")
    put = urllib.request.Request(f"{base}/latest/api/token", method="PUT")
    put.add_header("X-aws-ec2-metadata-token-ttl-seconds", "60")
    with urllib.request.urlopen(put, timeout=5) as response:
        token = response.read().decode()
    get = urllib.request.Request(f"{base}/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(get, timeout=5) as response:
        return str(response.read().decode())


def mark_ready(region: str, endpoint: str | None = None) -> str:
    """Tag this instance ready; returns its id. Raises on any error (the caller retries)."""
    import botocore.session  # Ubuntu's python3-botocore on the gateway

    ec2 = botocore.session.get_session().create_client("ec2", region_name=region, endpoint_url=endpoint)
    iid = instance_id()
    ec2.create_tags(Resources=[iid], Tags=[{"Key": READY_TAG, "Value": READY_VALUE}])
    return iid


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
    where: str,
    endpoint: str | None,
    deadline_s: float,
    check: Callable[[], list[str]],
    sleep_s: float = 5,
    cloud: str = "aws",
) -> int:
    """Retry until ready and marked (a new role takes seconds to work) or the deadline; 0 on success."""
    give_up = time.monotonic() + deadline_s
    while True:
        last = "; ".join(check())
        if not last:
            try:
                # `where`: the AWS region, or the GCE metadata server's base URL
                if cloud == "gcp":
                    done = f"{mark_ready_gce(where)} set to {READY_VALUE}"
                else:
                    done = f"{mark_ready(where, endpoint)} marked {READY_TAG}={READY_VALUE}"
                print(f"wg-mesh-ready: {done}")
                return 0
            except Exception as exc:  # any failure is retried until the deadline, then reported
                last = f"marking failed: {exc}"
        if time.monotonic() >= give_up:
            print(f"wg-mesh-ready: not ready after {deadline_s:.0f} s: {last}", file=sys.stderr)
            return 1
        time.sleep(sleep_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-ready")
    parser.add_argument("--cloud", choices=("aws", "gcp"), default="aws")
    parser.add_argument("--region", help="AWS: the instance's region (required there)")
    parser.add_argument("--endpoint", help="AWS: EC2 API endpoint (default: the region's)")
    parser.add_argument("--imds", default=GCE_METADATA, help="GCP: the metadata server (default: the real one)")
    parser.add_argument("--deadline", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.cloud == "aws" and not args.region:
        parser.error("--region is required with --cloud aws")
    where = args.imds if args.cloud == "gcp" else args.region
    return run(where, args.endpoint, args.deadline, local_problems, cloud=args.cloud)


if __name__ == "__main__":
    sys.exit(main())
