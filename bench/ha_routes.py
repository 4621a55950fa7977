"""An AWS failover's route move in a large mesh: `python -m bench ha_routes [--quick]` (no root).

Against moto in server mode on 127.0.0.1: one HA site whose gateway takes over 64 remote ranges in 4 route tables
(256 ReplaceRoutes), moved by
- the current mover (`wg_mesh.gateway.ha_aws.move_routes`: at most 8 calls in flight, full-jitter backoff on
  RequestLimitExceeded, a deadline), and
- the mover it replaced (the baseline, kept here: 8 calls in flight, no backoff; a throttled call fails the
  reconcile, and the controller's next reconcile, 1 s later, retries what is left),
each in the same run, alternating, in two settings:
- `open`: moto alone (no throttling: the mover's own overhead);
- `throttled`: ReplaceRoute behind a token bucket in front of moto (EC2 throttles per account and Region with token
  buckets, docs/ha.md 5.6; the size and refill here are made up, small enough that 256 calls empty it).
Per setting and mover: the median time until every route points at the new gateway, the ReplaceRoutes sent
(throttled ones included) and the throttled answers; the ratios current/baseline. moto answers in milliseconds and
never lags: the real cloud adds its latency; the ratio is the figure to read.
"""

from __future__ import annotations

import ipaddress
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

REGION = "us-east-1"
RANGES, TABLES = 64, 4
BUCKET_SIZE, BUCKET_REFILL = 40, 20.0  # tokens, tokens per second (the throttled setting)
RECONCILE_EVERY_S = 1.0  # the controller's cadence while active (docs/ha.md 5.3)


class Bucket:
    def __init__(self, size: int, refill: float) -> None:
        self.size, self.refill = size, refill
        self.tokens, self.last = float(size), time.monotonic()
        self.lock = threading.Lock()
        self.sent = self.throttled = 0

    def take(self) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.size, self.tokens + (now - self.last) * self.refill)
            self.last = now
            self.sent += 1
            if self.tokens < 1:
                self.throttled += 1
                return False
            self.tokens -= 1
            return True


class Gate:
    """botocore's EC2 client with ReplaceRoute behind a bucket (None: counted, never throttled)."""

    def __init__(self, client: Any, bucket: Bucket) -> None:
        self.client, self.bucket = client, bucket

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def replace_route(self, **kwargs: Any) -> Any:
        if not self.bucket.take():
            error = {"Error": {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}}
            raise ClientError(error, "ReplaceRoute")
        return self.client.replace_route(**kwargs)


def baseline_reconcile(gw: Any, ranges: list[str]) -> int:
    """The route half of the reconcile this branch replaced (8 in flight, a failure ends the reconcile)."""
    from wg_mesh.gateway.ha_aws import Unreachable

    wrong = gw.wrong_routes(ranges)

    def replace(target: tuple[str, str]) -> None:
        table, cidr = target
        gw._call("ec2", "replace_route", RouteTableId=table, DestinationCidrBlock=cidr, NetworkInterfaceId=gw.eni)

    if wrong:
        with ThreadPoolExecutor(max_workers=min(8, len(wrong))) as pool:
            results = [pool.submit(replace, target) for target in wrong]
        errors = [r.exception() for r in results if r.exception() is not None]
        if errors:
            raise Unreachable(f"{len(errors)} of {len(wrong)} ReplaceRoute failed")
    return len(wrong)


def current_reconcile(gw: Any, ranges: list[str]) -> int:
    from wg_mesh.gateway.ha_aws import Unreachable, move_routes

    wrong = gw.wrong_routes(ranges)
    moves = move_routes(gw._replace_route, wrong, lambda: True, gw.pace)
    if moves.errors or moves.left:
        raise Unreachable(f"{len(moves.errors) + len(moves.left)} of {len(wrong)} left")
    return len(wrong)


def until_moved(reconcile: Callable[[Any, list[str]], int], gw: Any, ranges: list[str]) -> tuple[float, int]:
    """Seconds until a reconcile finds nothing left to move (the controller's loop: a failed one is retried after
    RECONCILE_EVERY_S), and the reconciles it took."""
    from wg_mesh.gateway.ha_aws import Unreachable

    started, rounds = time.perf_counter(), 0
    while True:
        rounds += 1
        try:
            reconcile(gw, ranges)
            return time.perf_counter() - started, rounds
        except Unreachable:
            time.sleep(RECONCILE_EVERY_S)


def _site(url: str) -> tuple[dict[str, Any], list[str], Any]:
    import base64

    import boto3

    from wg_mesh.gateway.ha_aws import AwsHa
    from wg_mesh.gateway.trust import Trust

    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.10.0.0/24")["Subnet"]["SubnetId"]
    enis = {g: ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"] for g in "ab"}
    ranges = [str(n) for n in list(ipaddress.ip_network("172.16.0.0/12").subnets(new_prefix=24))[:RANGES]]
    tables = [ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"] for _ in range(TABLES)]
    for table in tables:
        for cidr in ranges:
            ec2.create_route(RouteTableId=table, DestinationCidrBlock=cidr, NetworkInterfaceId=enis["a"])
    trust = Trust(base64.b64encode(bytes(32)).decode(), "bench/ha", "site", ("10.0.0.0/16",), "100.96.0.0/24")
    gws = {g: AwsHa(REGION, "unused", "site", g, "eipalloc-unused", tables, enis[g], trust=trust) for g in "ab"}
    return gws, ranges, ec2


def measure(url: str, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    gws, ranges, _ = _site(url)
    movers = {"current": current_reconcile, "baseline": baseline_reconcile}
    results: dict[str, Any] = {}
    turn = 0
    for setting in ("open", "throttled"):
        seconds: dict[str, list[float]] = {m: [] for m in movers}
        sent: dict[str, list[int]] = {m: [] for m in movers}
        throttled: dict[str, list[int]] = {m: [] for m in movers}
        rounds: dict[str, list[int]] = {m: [] for m in movers}
        for run in range(runs):
            for name in ("current", "baseline") if run % 2 == 0 else ("baseline", "current"):
                gw = gws["b" if turn % 2 == 0 else "a"]  # each move takes the routes from the other gateway
                turn += 1
                size = BUCKET_SIZE if setting == "throttled" else 10**9
                bucket = Bucket(size, BUCKET_REFILL if setting == "throttled" else 0.0)
                gw._clients.pop("ec2", None)
                gw._clients["ec2"] = Gate(gw._client("ec2"), bucket)
                took, n = until_moved(movers[name], gw, ranges)
                assert not gw.wrong_routes(ranges), "a route was left behind"
                seconds[name].append(took)
                sent[name].append(bucket.sent)
                throttled[name].append(bucket.throttled)
                rounds[name].append(n)
                log(f"ha_routes {setting} {name}: {took:.2f} s, {bucket.sent} sent, {bucket.throttled} throttled")
        row = {
            m: {
                "seconds": round(statistics.median(seconds[m]), 3),
                "sent": int(statistics.median(sent[m])),
                "throttled": int(statistics.median(throttled[m])),
                "reconciles": int(statistics.median(rounds[m])),
            }
            for m in movers
        }
        row["time_ratio"] = round(row["current"]["seconds"] / row["baseline"]["seconds"], 2)
        row["sent_ratio"] = round(row["current"]["sent"] / row["baseline"]["sent"], 2)
        results[setting] = row
    return {
        "ranges": RANGES,
        "tables": TABLES,
        "routes": RANGES * TABLES,
        "runs": runs,
        "bucket": {"size": BUCKET_SIZE, "refill_per_s": BUCKET_REFILL},
        "reconcile_every_s": RECONCILE_EVERY_S,
        **results,
    }


def run_ha_routes(runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    import logging

    from bench.motolocal import moto_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    with moto_server(as_default=True) as url:
        return measure(url, runs, log)
