"""The GCP readiness gate of `pulumi up`: wait for a new gateway's guest attribute, then move the static address.

Run as `python -m wg_mesh.readygate gcp ...` by a pulumi-command `local.Command` on the machine running `pulumi up`
(the operator's Google credentials, or the site's impersonated service account), after the new instance exists
and before the routes through it. The new VM boots with an ephemeral external address (cloud-init needs the
Ubuntu archive); once it has set `wg-mesh/ready=true` (wg_mesh.gateway.readymark --cloud gcp), the gate takes the site's
static address off whichever VM holds it (the old gateway) and gives it to the new one. Compute Engine REST API
v1 (https://cloud.google.com/compute/docs/reference/rest/v1/instances): getGuestAttributes, get,
deleteAccessConfig (query: accessConfig, networkInterface), addAccessConfig (query: networkInterface; body: an
AccessConfig with natIP); addresses.get (`users`: the instances using the address); zone operations, polled by
their selfLink until status DONE.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

# The REST client and the address move are the gateway agent's (stdlib, wg_mesh.gateway.ha_gcp): one mechanism for
# `pulumi up`'s gate and for an HA gateway's takeover.
from wg_mesh.gateway.ha_gcp import COMPUTE, ApiError, Compute, instance_path, move_address, resource_path
from wg_mesh.gateway.readymark import GUEST_KEY, GUEST_NAMESPACE, READY_VALUE
from wg_mesh.tools.gatepoll import UPDATE_HELP, hold_until, poll

__all__ = ["ApiError", "Compute", "instance_path", "is_ready", "main", "move_address", "resource_path", "wait_ready"]
SCOPE = "https://www.googleapis.com/auth/compute"
# Instance.status values after which a VM will not finish booting by itself.
DEAD_STATUSES = ("STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "TERMINATED")


def is_ready(api: Compute, instance: str) -> bool:
    """Whether the VM has set wg-mesh/ready=true; RuntimeError when it stopped (it will not get there)."""
    status = api.call("GET", instance).get("status")
    if status in DEAD_STATUSES:
        raise RuntimeError(f"gateway instance {instance} is {status} and never became ready")
    try:
        found = api.call("GET", f"{instance}/getGuestAttributes", {"queryPath": f"{GUEST_NAMESPACE}/{GUEST_KEY}"})
    except ApiError as exc:
        if exc.status == 404:  # no such attribute (yet)
            return False
        raise
    items = found.get("queryValue", {}).get("items", [])
    return any(
        (i.get("namespace"), i.get("key"), i.get("value")) == (GUEST_NAMESPACE, GUEST_KEY, READY_VALUE) for i in items
    )


def wait_ready(
    api: Compute, instance: str, timeout_s: float, interval_s: float = 5.0, sleep: Callable[[float], None] = time.sleep
) -> float:
    def not_ready(timeout: float) -> str:
        name = instance.rsplit("/", 1)[-1]
        zone = instance.split("/zones/", 1)[1].split("/", 1)[0]
        return (
            f"gateway instance {instance} did not set guest attribute {GUEST_NAMESPACE}/{GUEST_KEY}={READY_VALUE} "
            f"within {timeout:.0f} s; its static address and routes stay where they are. Look at its boot: "
            f"gcloud compute instances get-serial-port-output {name} --zone {zone}, or with operator_access: cloud, "
            f"gcloud compute ssh {name} --zone {zone} --tunnel-through-iap and `cloud-init status --long`"
        )

    return poll(lambda: is_ready(api, instance), timeout_s, interval_s, sleep, not_ready)


def google_token(impersonate: str | None) -> Callable[[], str]:
    """Application Default Credentials (gcloud auth application-default login, a service account), optionally
    impersonating the site's service account, as the site's Pulumi provider does."""
    import google.auth  # the operator's side only; gateways never import this module
    import google.auth.impersonated_credentials
    import google.auth.transport.requests

    credentials: Any = google.auth.default(scopes=[SCOPE])[0]
    if impersonate:
        credentials = google.auth.impersonated_credentials.Credentials(  # type: ignore[no-untyped-call]
            source_credentials=credentials, target_principal=impersonate, target_scopes=[SCOPE]
        )

    def token() -> str:
        if not credentials.valid:
            credentials.refresh(google.auth.transport.requests.Request())
        return str(credentials.token)

    return token


def token_file(path: str) -> Callable[[], str]:
    with open(path) as f:
        token = f.read().strip()
    return lambda: token


def _auth_errors() -> tuple[type[Exception], ...]:
    """google-auth's errors (no credentials, refused impersonation), reported like the API's."""
    import google.auth.exceptions

    return (google.auth.exceptions.GoogleAuthError,)


def _held(gap: float | None) -> str:
    return "the agents own it" if gap is None else f"on it ({gap:.1f} s)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wg_mesh.readygate gcp", description=__doc__.splitlines()[0])
    parser.add_argument("--instance", required=True, help="the new gateway: its selfLink (or projects/.../instances/N)")
    parser.add_argument("--address", required=True, help="the static external address: its selfLink (or path)")
    parser.add_argument("--impersonate", help="service account to act as (the site's impersonate_service_account)")
    parser.add_argument("--api", default=COMPUTE, help="Compute Engine API base (tests: a local server)")
    parser.add_argument("--access-token-file", help="a file holding an OAuth access token to use (as gcloud's flag)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--not-before", type=int, help="a key rotated in this up switches then (gatepoll.hold_until)")
    parser.add_argument(
        "--wait-only",
        action="store_true",
        help="gateways: 2: wait for the ready mark, move nothing (the site's wg-mesh-agents own the address)",
    )
    parser.add_argument("--update", action="store_true", help=UPDATE_HELP)
    args = parser.parse_args(argv)
    instance, address = resource_path(args.instance), resource_path(args.address)
    failures: tuple[type[Exception], ...] = (TimeoutError, RuntimeError, ApiError, OSError, *_auth_errors())
    try:
        token = token_file(args.access_token_file) if args.access_token_file else google_token(args.impersonate)
        if args.update:  # the instance passed when it was created: only the address (a new one) may need moving
            gap = None if args.wait_only else move_address(Compute(token, args.api), instance, address)
            print(f"wg-mesh readiness gate: {instance} passed when it was created; static address: {_held(gap)}")
            return 0
        api = Compute(token, args.api)
        waited = wait_ready(api, instance, args.timeout, args.interval)
        waited += hold_until(args.not_before, args.timeout - waited)
        gap = None if args.wait_only else move_address(api, instance, address)
    except failures as exc:
        print(f"wg-mesh readiness gate: {exc}", file=sys.stderr)
        return 1
    if gap is None:
        print(f"wg-mesh readiness gate: {instance} ready after {waited:.0f} s (HA: its agent claims {address})")
        return 0
    print(f"wg-mesh readiness gate: {instance} ready after {waited:.0f} s; static address moved ({gap:.1f} s)")
    return 0
