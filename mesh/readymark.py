"""wg-mesh-ready: an AWS gateway tags itself wg-mesh:ready=true once wg0 is up and forwarding is on.

Runs last in the first boot; `pulumi up` waits for the tag (mesh.readygate, README "Replacements").
Ubuntu's python3-botocore signs the call with the instance role's credentials (IMDSv2).
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


def run(
    region: str, endpoint: str | None, deadline_s: float, check: Callable[[], list[str]], sleep_s: float = 5
) -> int:
    """Retry until ready and marked (a new role takes seconds to work) or the deadline; 0 on success."""
    give_up = time.monotonic() + deadline_s
    while True:
        last = "; ".join(check())
        if not last:
            try:
                print(f"wg-mesh-ready: {mark_ready(region, endpoint)} marked {READY_TAG}={READY_VALUE}")
                return 0
            except Exception as exc:  # any failure is retried until the deadline, then reported
                last = f"marking failed: {exc}"
        if time.monotonic() >= give_up:
            print(f"wg-mesh-ready: not ready after {deadline_s:.0f} s: {last}", file=sys.stderr)
            return 1
        time.sleep(sleep_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-ready")
    parser.add_argument("--region", required=True)
    parser.add_argument("--endpoint", help="EC2 API endpoint (default: the region's)")
    parser.add_argument("--deadline", type=float, default=600.0)
    args = parser.parse_args(argv)
    return run(args.region, args.endpoint, args.deadline, local_problems)


if __name__ == "__main__":
    sys.exit(main())
