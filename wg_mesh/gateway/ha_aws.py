"""The AWS side of an HA gateway (docs/ha.md section 5): the DynamoDB lease, the Elastic IP and the route targets.

Ubuntu's python3-botocore, as wg_mesh.gateway.source_aws: credentials from botocore's default chain (the instance role
through IMDSv2), endpoint override AWS_ENDPOINT_URL (the lab and the tests: moto in server mode). Short timeouts and
no retries: the controller samples every 0.5 s and a slow answer is "unreachable" for that tick, never "lost".

- Lease item `{site: S, holder: S, epoch: N, counter: N}` in `lease_table` (hash key `site`), read with
  `GetItem(ConsistentRead=True)` and written only with conditional writes (`ConditionExpression`; a failed
  condition is `ConditionalCheckFailedException`): the DynamoDB Lock Client pattern [docs/ha.md 15][16]. Every
  attribute goes through ExpressionAttributeNames, so no name can collide with DynamoDB's reserved words.
- Elastic IP: `DescribeAddresses(AllocationIds)` names the holder's `NetworkInterfaceId`; `AssociateAddress(
  AllocationId, NetworkInterfaceId, AllowReassociation=True)` moves it in one call, only when another (or no)
  interface holds it (AWS may charge a remap to the same instance; moto refuses reassociation unless asked) [1].
- Routes: `DescribeRouteTables(RouteTableIds)`, then `ReplaceRoute(RouteTableId, DestinationCidrBlock,
  NetworkInterfaceId)` for every route of a remote range whose target is another interface [2][3]; in parallel,
  at most `PARALLEL` calls in flight (EC2 throttles per account and Region with token buckets [5]). IAM has no
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
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .ha import NONE, Lease
from .trust import Trust, unsafe_destination

PARALLEL = 8
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
    ) -> None:
        self.region, self.table, self.site, self.me, self.trust = region, table, site, me, trust
        self.allocation_id, self.route_tables, self.eni = allocation_id, tuple(route_tables), eni
        self.endpoint = os.environ.get("AWS_ENDPOINT_URL") or None  # as source_aws (bookworm's botocore 1.29)
        self._clients: dict[str, Any] = {}

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            import botocore.config
            import botocore.session

            config = botocore.config.Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
            self._clients[service] = botocore.session.get_session().create_client(
                service, region_name=self.region, endpoint_url=self.endpoint, config=config
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

        def replace(target: tuple[str, str]) -> str:
            if not may_write():
                return ""  # the window closed meanwhile: the next renewal reopens it, the next reconcile retries
            table, cidr = target
            if unsafe_destination(cidr, self.trust) is not None:
                return ""  # never reached (wrong_routes filters); the last check before the write, all the same
            self._call(
                "ec2", "replace_route", RouteTableId=table, DestinationCidrBlock=cidr, NetworkInterfaceId=self.eni
            )
            return f"route {cidr} in {table}"

        if wrong:
            with ThreadPoolExecutor(max_workers=min(PARALLEL, len(wrong))) as pool:
                results = [pool.submit(replace, target) for target in wrong]
            errors = [r.exception() for r in results if r.exception() is not None]
            changed += [r.result() for r in results if r.exception() is None and r.result()]
            if errors:
                raise Unreachable(f"{len(errors)} of {len(wrong)} ReplaceRoute failed: {errors[0]}")
        return changed
