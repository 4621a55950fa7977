"""The AWS side of an HA gateway (docs/ha.md section 5): the DynamoDB lease, the Elastic IP and the route targets.

Ubuntu's python3-botocore, as wg_mesh.gateway.source_aws: credentials from botocore's default chain (the instance role
through IMDSv2), endpoint override AWS_ENDPOINT_URL (the lab and the tests: moto in server mode). EC2 goes to the
site's interface endpoint by its own DNS name when agent.json names one (`ha.ec2_endpoint`, created networks: the
endpoint has no private DNS, so the VPC's other workloads keep the regional name: docs/ha.md 5.5). Short timeouts and
no botocore retries (`NO_RETRY`): the controller samples every 0.5 s and a slow answer is "unreachable" for that
tick, never "lost"; the only retries are the route mover's, each within the lease's write window.

- Lease item `{site: S, holder: S, epoch: N, counter: N}` in `lease_table` (hash key `site`), read with
  `GetItem(ConsistentRead=True)` and written only with conditional writes (`ConditionExpression`; a failed
  condition is `ConditionalCheckFailedException`): the DynamoDB Lock Client pattern [docs/ha.md 15][16]. Every
  attribute goes through ExpressionAttributeNames, so no name can collide with DynamoDB's reserved words.
- Elastic IP: `DescribeAddresses(AllocationIds)` names the holder's `NetworkInterfaceId`; `AssociateAddress(
  AllocationId, NetworkInterfaceId, AllowReassociation=True)` moves it in one call, only when another (or no)
  interface holds it (AWS may charge a remap to the same instance; moto refuses reassociation unless asked) [1].
- Routes: `DescribeRouteTables(RouteTableIds)`, then `ReplaceRoute(RouteTableId, DestinationCidrBlock,
  NetworkInterfaceId)` for every route of a remote range whose target is another interface [2][3]: `move_routes`,
  at most `PARALLEL` calls in flight, backoff with full jitter on RequestLimitExceeded and a deadline (EC2 throttles
  per account and Region with token buckets [5]: docs/ha.md 5.6). IAM has no
  condition key on a route's destination, so this code is the only guard: a destination is written only when
  `unsafe_destination` (wg_mesh.gateway.trust, against agent.json's trust) finds nothing, checked again right
  before each ReplaceRoute, and only over a route whose target is an interface or instance (the other gateway's)
  or a blackhole: a route to an internet, NAT, transit, virtual private or local gateway, a peering connection, a
  VPC endpoint... is never ours to take (`replaceable`; the Route shape: EC2 API reference, "Route",
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Route.html).
- Own instance id and primary ENI from IMDSv2 (PUT /latest/api/token, then meta-data/instance-id, mac,
  network/interfaces/macs/<mac>/interface-id) at AWS_EC2_METADATA_SERVICE_ENDPOINT (botocore's documented
  override; default http://169.254.169.254/).
"""

from __future__ import annotations

import os
import random
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .ha import NONE, Lease
from .trust import Trust, unsafe_destination

PARALLEL = 8
# One attempt per call, in every botocore retry mode: `max_attempts` counts *retries* ("setting this value to 2 will
# result in the request being retried at most two times after the initial request"), `total_max_attempts` counts
# the initial request too ("a value of 1 indicates that no requests will be retried") and takes precedence (botocore
# Config docstring, botocore/config.py; client.py maps it onto the legacy handler as max_attempts - 1). A retry
# botocore made on its own could land after the write window closed, after the standby's takeover: the only
# retries are ours (`move_routes`), each asking the window first.
NO_RETRY = {"mode": "standard", "total_max_attempts": 1}
METADATA_URL = "http://169.254.169.254/"
IMDS_TIMEOUT_S = 2.0
CONFLICT = "ConditionalCheckFailedException"


# A Route's own attributes (not its target); the targets we may take over (the other gateway's interface or
# instance; InstanceOwnerId comes with InstanceId). Any other key is another kind of target and the route stays.
ROUTE_ATTRIBUTES = frozenset({"DestinationCidrBlock", "Origin", "State"})
OUR_TARGETS = frozenset({"NetworkInterfaceId", "InstanceId", "InstanceOwnerId"})


def replaceable(route: dict[str, Any]) -> bool:
    """Whether a route's current target may be replaced by our interface: an interface or instance (the other
    gateway), or a blackhole whose target is gone; never a propagated route or any other kind of target."""
    targets = set(route) - ROUTE_ATTRIBUTES
    if targets - OUR_TARGETS or route.get("Origin", "CreateRoute") != "CreateRoute":
        return False
    return bool(targets & {"NetworkInterfaceId", "InstanceId"}) or route.get("State") == "blackhole"


class Unreachable(Exception):
    """The call did not get an answer we can act on (timeout, throttling, 5xx, no credentials)."""


def imds(path: str, endpoint: str | None = None) -> str:
    """One IMDSv2 GET (a fresh session token: the agent asks twice at start, never in the loop)."""
    base = (endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or METADATA_URL).rstrip("/")
    put = urllib.request.Request(
        f"{base}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"}
    )
    with urllib.request.urlopen(put, timeout=IMDS_TIMEOUT_S) as response:
        token = response.read().decode()
    get = urllib.request.Request(f"{base}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(get, timeout=IMDS_TIMEOUT_S) as response:
        return str(response.read().decode().strip())


def own_interface(endpoint: str | None = None) -> tuple[str, str]:
    """(instance id, primary ENI id) of this instance; OSError when IMDS does not answer."""
    mac = imds("mac", endpoint)
    return imds("instance-id", endpoint), imds(f"network/interfaces/macs/{mac}/interface-id", endpoint)


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


class Throttled(Exception):
    """EC2 refused a call for the request rate (its token bucket is empty): wait, then send it again."""


# EC2's throttling answer is RequestLimitExceeded ("Request throttling for the Amazon EC2 API":
# https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html); the others are the throttling codes
# botocore's standard retry mode treats alike (botocore/retries/standard.py, ThrottledRetryableChecker).
THROTTLED = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled"})


@dataclass(frozen=True)
class Pace:
    """How a route move paces itself against EC2's per-account, per-Region token buckets (a bucket refills at a fixed
    rate; an empty one answers RequestLimitExceeded [5]). EC2 has no batch form of ReplaceRoute (one table, one
    destination per call [2]), so a move is `parallel` calls in flight at most; after a throttled answer every worker
    waits until a shared resume time, pushed out by a "full jitter" delay, uniform in [0, min(cap_s, base_s * 2**n)]
    with n the throttled answers so far less the successful ones (AWS Architecture Blog, "Exponential Backoff And
    Jitter", https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/), and the throttled route goes
    back in the queue; nothing is sent `deadline_s` after the start (what is left waits for the next reconcile)."""

    parallel: int = PARALLEL
    base_s: float = 0.05
    cap_s: float = 2.0
    deadline_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random  # uniform in [0, 1)


PACE = Pace()
Target = tuple[str, str]  # (route table id, destination CIDR)


@dataclass(frozen=True)
class Moves:
    moved: list[Target]
    left: list[Target]
    errors: list[str]
    stopped: str  # "", "window" (the lease's write window closed: nothing to report) or "deadline"


def move_routes(
    replace: Callable[[str, str], None],
    targets: Sequence[Target],
    may_write: Callable[[], bool],
    pace: Pace = PACE,
) -> Moves:
    """Every target through `replace(table, cidr)` with bounded concurrency, backoff with jitter on Throttled and a
    deadline; `may_write()` is asked right before each call (a retry too: the lease's write window). Returns (moved,
    left: not sent, `stopped` says why: "window" or "deadline"; errors: other failures, not retried here)."""
    lock = threading.Lock()
    queue, moved, errors = deque(targets), list[Target](), list[str]()
    state = {"throttled": 0, "resume": pace.clock()}
    end = state["resume"] + pace.deadline_s
    stop = threading.Event()
    stopped: list[str] = []

    def work() -> None:
        while not stop.is_set():
            with lock:
                if not queue:
                    return
                target = queue.popleft()
                wait = state["resume"] - pace.clock()
            if wait > 0:
                pace.sleep(wait)
            why = "deadline" if pace.clock() >= end else "" if may_write() else "window"
            if why:
                with lock:
                    queue.appendleft(target)
                    stopped.append(why)
                stop.set()
                return
            try:
                replace(*target)
            except Throttled:
                with lock:
                    state["throttled"] += 1
                    ceiling = min(pace.cap_s, pace.base_s * 2 ** min(int(state["throttled"]), 30))
                    state["resume"] = max(state["resume"], pace.clock() + pace.jitter() * ceiling)
                    queue.append(target)
            except Exception as exc:
                with lock:
                    errors.append(f"{target[1]} in {target[0]}: {exc}")
            else:
                with lock:
                    moved.append(target)
                    state["throttled"] = max(0, state["throttled"] - 1)  # an answer: the bucket has tokens again

    workers = [threading.Thread(target=work, daemon=True) for _ in range(min(pace.parallel, len(targets)))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return Moves(moved, list(queue), errors, stopped[0] if stopped else "")


class AwsHa:
    """One gateway's calls. `me`: the lease identity, the instance id (own_interface()): a replacement instance (same
    letter, same user data) is another holder, so old and new never take the lease from each other (docs/ha.md 5.3
    "Lease identity"); `eni`: its own primary interface."""

    def __init__(
        self,
        region: str,
        table: str,
        site: str,
        me: str,
        allocation_id: str,
        route_tables: Iterable[str],
        eni: str,
        *,
        trust: Trust,
        pace: Pace = PACE,
        ec2_endpoint: str = "",
    ) -> None:
        self.region, self.table, self.site, self.me, self.trust = region, table, site, me, trust
        self.allocation_id, self.route_tables, self.eni = allocation_id, tuple(route_tables), eni
        self.endpoint = os.environ.get("AWS_ENDPOINT_URL") or None  # as source_aws (bookworm's botocore 1.29)
        self.endpoints = {"ec2": ec2_endpoint} if ec2_endpoint else {}  # per service, before AWS_ENDPOINT_URL
        self._clients: dict[str, Any] = {}
        self.pace = pace

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            import botocore.config
            import botocore.session

            config = botocore.config.Config(connect_timeout=1, read_timeout=2, retries=NO_RETRY)
            self._clients[service] = botocore.session.get_session().create_client(
                service, region_name=self.region, endpoint_url=self.endpoints.get(service, self.endpoint), config=config
            )
        return self._clients[service]

    def _call(self, service: str, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client(service), operation)(**kwargs)
        except Exception as exc:
            if _error_code(exc) == CONFLICT:
                raise
            raise Unreachable(f"{service} {operation}: {exc.__class__.__name__}: {exc}") from None

    # -- the lease ------------------------------------------------------------------------------------------

    def _key(self) -> dict[str, Any]:
        return {"site": {"S": self.site}}

    def read_lease(self) -> Lease | None:
        """The item (strongly consistent), None when there is none; Unreachable."""
        item = self._call("dynamodb", "get_item", TableName=self.table, Key=self._key(), ConsistentRead=True)
        found = item.get("Item")
        if not found:
            return None
        try:
            return Lease(found["holder"]["S"], int(found["epoch"]["N"]), int(found["counter"]["N"]))
        except (KeyError, ValueError) as exc:
            raise Unreachable(f"lease item of {self.site} is malformed ({exc.__class__.__name__})") from None

    def _conditional(self, operation: str, **kwargs: Any) -> bool:
        try:
            self._call("dynamodb", operation, TableName=self.table, **kwargs)
        except Exception as exc:
            if _error_code(exc) == CONFLICT:
                return False
            raise
        return True

    def claim(self, seen: Lease | None) -> Lease | None:
        """The compare-and-swap on what was seen (None: the item must not exist). The new lease, or None (lost)."""
        names = {"#s": "site", "#h": "holder", "#e": "epoch", "#c": "counter"}
        if seen is None:
            new = Lease(self.me, 1, 0)
            item = {**self._key(), "holder": {"S": self.me}, "epoch": {"N": "1"}, "counter": {"N": "0"}}
            won = self._conditional(  # every name given must be used (DynamoDB's ValidationException; moto too)
                "put_item",
                Item=item,
                ConditionExpression="attribute_not_exists(#s)",
                ExpressionAttributeNames={"#s": "site"},
            )
            return new if won else None
        new = Lease(self.me, seen.epoch + 1, 0)
        won = self._conditional(
            "update_item",
            Key=self._key(),
            UpdateExpression="SET #h = :me, #e = :new, #c = :zero",
            ConditionExpression="#e = :epoch AND #c = :counter",
            ExpressionAttributeNames={k: v for k, v in names.items() if k != "#s"},
            ExpressionAttributeValues={
                ":me": {"S": self.me},
                ":new": {"N": str(new.epoch)},
                ":zero": {"N": "0"},
                ":epoch": {"N": str(seen.epoch)},
                ":counter": {"N": str(seen.counter)},
            },
        )
        return new if won else None

    def renew(self, epoch: int) -> bool:
        """counter + 1 while we hold `epoch`: False when the lease is someone else's; Unreachable."""
        return self._conditional(
            "update_item",
            Key=self._key(),
            UpdateExpression="SET #c = #c + :one",
            ConditionExpression="#h = :me AND #e = :epoch",
            ExpressionAttributeNames={"#h": "holder", "#e": "epoch", "#c": "counter"},
            ExpressionAttributeValues={":one": {"N": "1"}, ":me": {"S": self.me}, ":epoch": {"N": str(epoch)}},
        )

    def release(self, epoch: int) -> bool:
        """holder -> none while we hold `epoch` (a planned handover: the standby claims at its next read)."""
        return self._conditional(
            "update_item",
            Key=self._key(),
            UpdateExpression="SET #h = :none",
            ConditionExpression="#h = :me AND #e = :epoch",
            ExpressionAttributeNames={"#h": "holder", "#e": "epoch"},
            ExpressionAttributeValues={":none": {"S": NONE}, ":me": {"S": self.me}, ":epoch": {"N": str(epoch)}},
        )

    # -- address and routes ---------------------------------------------------------------------------------

    def holder(self) -> str:
        """ "me", "other" or "none": who DescribeAddresses says holds the Elastic IP; Unreachable."""
        answer = self._call("ec2", "describe_addresses", AllocationIds=[self.allocation_id])
        addresses = answer.get("Addresses", [])
        eni = addresses[0].get("NetworkInterfaceId") if addresses else None
        return NONE if not eni else ("me" if eni == self.eni else "other")

    def take_address(self) -> None:
        self._call(
            "ec2",
            "associate_address",
            AllocationId=self.allocation_id,
            NetworkInterfaceId=self.eni,
            AllowReassociation=True,
        )

    def wrong_routes(self, ranges: Iterable[str]) -> list[tuple[str, str]]:
        """(table, destination) of every route of `ranges` in our tables whose target is not our interface, that we
        may replace (`replaceable`) towards a destination the trust allows."""
        wanted = {r for r in ranges if unsafe_destination(r, self.trust) is None}
        tables = self._call("ec2", "describe_route_tables", RouteTableIds=list(self.route_tables))
        return sorted(
            (table["RouteTableId"], route["DestinationCidrBlock"])
            for table in tables.get("RouteTables", [])
            for route in table.get("Routes", [])
            if route.get("DestinationCidrBlock") in wanted
            and route.get("NetworkInterfaceId") != self.eni
            and replaceable(route)
        )

    def reconcile(self, ranges: Iterable[str], may_write: Callable[[], bool]) -> list[str]:
        """The address and the routes of `ranges` to us, where they are not; `may_write()` is asked before each
        write (the lease's write window). Returns what it changed; Unreachable when a read or a write failed."""
        changed: list[str] = []
        if not may_write():
            return changed
        if self.holder() != "me" and may_write():
            self.take_address()
            changed.append(f"address {self.allocation_id}")
        wrong = self.wrong_routes(ranges) if self.route_tables else []
        if wrong:
            # the window closed meanwhile: the next renewal reopens it, the next reconcile moves the rest
            moves = move_routes(self._replace_route, wrong, may_write, self.pace)
            changed += [f"route {cidr} in {table}" for table, cidr in moves.moved]
            failed = len(moves.errors) + (len(moves.left) if moves.stopped == "deadline" else 0)
            if failed:
                why = moves.errors[0] if moves.errors else f"throttled past the {self.pace.deadline_s:g} s deadline"
                raise Unreachable(f"{failed} of {len(wrong)} ReplaceRoute failed: {why}")
        return changed

    def _replace_route(self, table: str, cidr: str) -> None:
        """One ReplaceRoute towards our interface; Throttled when EC2 refused it for the request rate."""
        problem = unsafe_destination(cidr, self.trust)
        if problem is not None:  # never reached (wrong_routes filters); the last check before the write, all the same
            raise Unreachable(f"route refused: {problem}")
        ec2 = self._client("ec2")
        try:
            ec2.replace_route(RouteTableId=table, DestinationCidrBlock=cidr, NetworkInterfaceId=self.eni)
        except Exception as exc:
            if _error_code(exc) in THROTTLED:
                raise Throttled(_error_code(exc)) from None
            raise Unreachable(f"ec2 replace_route: {exc.__class__.__name__}: {exc}") from None
