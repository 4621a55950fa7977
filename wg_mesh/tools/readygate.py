"""The readiness gate of `pulumi up`: wait until a new AWS gateway has tagged itself `wg-mesh:ready=true`.

(`python -m wg_mesh.readygate gcp ...`: the GCP gate, wg_mesh.tools.gcpgate, on the same waiting loop.)

Run by a pulumi-command `local.Command` on the machine that runs `pulumi up`, with that machine's AWS
credentials (or the site's `profile` / `assume_role_arn`), after the instance is created and before its
Elastic IP association and routes: a replacement gateway takes traffic only once wg0 is up and forwarding is
on (wg_mesh.gateway.readymark), and a gateway that never gets there fails the update while the old one keeps serving.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from wg_mesh.gateway.readymark import READY_TAG, READY_VALUE
from wg_mesh.tools.gatepoll import UPDATE_HELP, hold_until, poll

DEAD_STATES = ("shutting-down", "terminated", "stopping", "stopped")


def wait_ready(
    ec2: Any, instance_id: str, timeout_s: float, interval_s: float = 5.0, sleep: Callable[[float], None] = time.sleep
) -> float:
    """Seconds until the instance was ready; TimeoutError (or RuntimeError for a dead instance) otherwise."""

    def tagged() -> bool:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        (instance,) = [i for r in reservations for i in r["Instances"]]
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        if tags.get(READY_TAG) == READY_VALUE:
            return True
        state = instance["State"]["Name"]
        if state in DEAD_STATES:
            raise RuntimeError(f"gateway instance {instance_id} is {state} and never became ready")
        return False

    def not_ready(timeout: float) -> str:
        return (
            f"gateway instance {instance_id} did not tag itself {READY_TAG}={READY_VALUE} "
            f"within {timeout:.0f} s; "
            "its Elastic IP and routes stay where they are. Look at its boot: "
            f"aws ec2 get-console-output --latest --instance-id {instance_id}, or with operator_access: cloud, "
            f"aws ssm start-session --target {instance_id} and `cloud-init status --long`"
        )

    return poll(tagged, timeout_s, interval_s, sleep, not_ready)


def ec2_client(region: str, profile: str | None, role_arn: str | None, endpoint: str | None) -> Any:
    import boto3  # the operator's side only; the gateways never import this module

    session = boto3.Session(profile_name=profile, region_name=region)
    if role_arn:
        creds = session.client("sts", endpoint_url=endpoint).assume_role(
            RoleArn=role_arn, RoleSessionName="wg-mesh-readiness-gate"
        )["Credentials"]
        session = boto3.Session(
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
            region_name=region,
        )
    return session.client("ec2", endpoint_url=endpoint)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gcp"]:
        from wg_mesh.tools import gcpgate

        return gcpgate.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m wg_mesh.readygate", description=__doc__.splitlines()[0])
    parser.add_argument("--region", required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--profile")
    parser.add_argument("--role-arn")
    parser.add_argument("--endpoint", help="EC2/STS endpoint (tests: moto)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--update", action="store_true", help=UPDATE_HELP)
    parser.add_argument("--not-before", type=int, help="a key rotated in this up switches then (gatepoll.hold_until)")
    args = parser.parse_args(argv)
    if args.update:  # the instance passed this gate when it was created; nothing an input change can undo
        print(f"wg-mesh readiness gate: {args.instance_id} passed when it was created; nothing to check again")
        return 0
    client = ec2_client(args.region, args.profile, args.role_arn, args.endpoint)
    try:
        waited = wait_ready(client, args.instance_id, args.timeout, args.interval)
        held = hold_until(args.not_before, args.timeout - waited)
    except (TimeoutError, RuntimeError) as exc:
        print(f"wg-mesh readiness gate: {exc}", file=sys.stderr)
        return 1
    after = f", then {held:.0f} s for the announced key switch" if held else ""
    print(f"wg-mesh readiness gate: {args.instance_id} ready after {waited:.0f} s{after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
