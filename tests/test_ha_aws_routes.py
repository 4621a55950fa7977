"""The AWS route and address movers (wg_mesh.gateway.ha_aws): one attempt per API call (no botocore retries after the
write window), route moves with bounded concurrency, backoff with jitter on throttling and a deadline, against a fake
EC2 whose ReplaceRoute bucket empties (a token bucket refilled by a fake clock: only the mover's own waits refill
it), and route writes only for the site's remote ranges. No moto here: fast, pure or loopback only."""

from __future__ import annotations

import ipaddress
import itertools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from botocore.exceptions import ClientError

from tests.agent_fake import TRUST, base_plan
from wg_mesh.gateway.ha_aws import AwsHa, Pace, Throttled, Unreachable, move_routes
from wg_mesh.gateway.ha_routes import safe_ranges

REGION = "us-east-1"
ENI = {"a": "eni-aaaaaaaa", "b": "eni-bbbbbbbb"}


class FakeClock:
    """Time that passes only when someone sleeps (thread-safe)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()
        self.sleeps: list[float] = []

    def time(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.sleeps.append(seconds)
            self.now += seconds


class Bucket:
    """EC2's token bucket for one API [docs/ha.md 5]: `size` tokens, `rate` per second of the fake clock."""

    def __init__(self, clock: FakeClock, size: int, rate: float) -> None:
        self.clock, self.size, self.rate = clock, size, rate
        self.tokens, self.last = float(size), clock.time()
        self.lock = threading.Lock()
        self.throttled = 0
        self.in_flight = self.max_in_flight = 0

    def take(self) -> bool:
        with self.lock:
            now = self.clock.time()
            self.tokens = min(self.size, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens < 1:
                self.throttled += 1
                return False
            self.tokens -= 1
            return True


def throttled_error() -> ClientError:
    return ClientError(
        {"Error": {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}}, "ReplaceRoute"
    )


class FakeEc2:
    """DescribeAddresses, AssociateAddress, DescribeRouteTables and a throttling ReplaceRoute, as botocore answers."""

    def __init__(self, bucket: Bucket, tables: dict[str, dict[str, dict[str, Any]]]) -> None:
        self.bucket, self.tables = bucket, tables  # table -> destination -> route (botocore's Route shape)
        self.holder = ENI["a"]
        self.replaced: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def describe_addresses(self, **kwargs: Any) -> dict[str, Any]:
        return {"Addresses": [{"AllocationId": "eipalloc-1", "NetworkInterfaceId": self.holder}]}

    def associate_address(self, **kwargs: Any) -> dict[str, Any]:
        self.holder = kwargs["NetworkInterfaceId"]
        return {"AssociationId": "eipassoc-1"}

    def describe_route_tables(self, RouteTableIds: list[str]) -> dict[str, Any]:
        with self.lock:
            return {
                "RouteTables": [
                    {"RouteTableId": t, "Routes": [dict(r) for r in self.tables[t].values()]} for t in RouteTableIds
                ]
            }

    def replace_route(self, RouteTableId: str, DestinationCidrBlock: str, NetworkInterfaceId: str) -> None:
        with self.bucket.lock:
            self.bucket.in_flight += 1
            self.bucket.max_in_flight = max(self.bucket.max_in_flight, self.bucket.in_flight)
        try:
            if self.bucket.throttled > 10_000:
                raise RuntimeError("a mover that never waits: the fake clock never refills the bucket")
            if not self.bucket.take():
                raise throttled_error()
            with self.lock:
                route = self.tables[RouteTableId][DestinationCidrBlock]  # KeyError: no such route (EC2 refuses)
                route.pop("InstanceId", None)
                route["NetworkInterfaceId"] = NetworkInterfaceId
                self.replaced.append((RouteTableId, DestinationCidrBlock))
        finally:
            with self.bucket.lock:
                self.bucket.in_flight -= 1


def remote(n: int) -> list[str]:
    return [str(net) for net in list(ipaddress.ip_network("172.16.0.0/12").subnets(new_prefix=24))[:n]]


def site(clock: FakeClock, bucket: Bucket, ranges: list[str], tables: int, pace: Pace) -> tuple[AwsHa, FakeEc2]:
    routes = {
        f"rtb-{i:08x}": {
            cidr: {
                "DestinationCidrBlock": cidr,
                "NetworkInterfaceId": ENI["a"],
                "Origin": "CreateRoute",
                "State": "active",
            }
            for cidr in ranges
        }
        for i in range(tables)
    }
    ec2 = FakeEc2(bucket, routes)
    gw = AwsHa(REGION, "lease", "aws-use1", "b", "eipalloc-1", list(routes), ENI["b"], trust=TRUST, pace=pace)
    gw._clients["ec2"] = ec2
    return gw, ec2


def fake_pace(clock: FakeClock, **kwargs: Any) -> Pace:
    return Pace(clock=clock.time, sleep=clock.sleep, **kwargs)


# --- no hidden retries ----------------------------------------------------------------------------------------


class Failing(BaseHTTPRequestHandler):
    """An AWS endpoint that throttles every request (EC2's query protocol and DynamoDB's JSON alike get a 503)."""

    requests: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.requests.append(self.headers.get("X-Amz-Target") or "ec2")
        error = b"<Error><Code>RequestLimitExceeded</Code><Message>slow</Message></Error>"
        body = b"<Response><Errors>" + error + b"</Errors></Response>"
        if self.headers.get("X-Amz-Target"):
            body = b'{"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": "slow down"}'
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")  # the environment must not bring retries back
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")
    Failing.requests = []
    try:
        yield Failing.requests
    finally:
        server.shutdown()
        server.server_close()


def test_every_call_is_sent_once_even_when_throttled(failing: list[str]) -> None:
    gw = AwsHa(REGION, "lease", "aws-use1", "b", "eipalloc-1", ["rtb-1"], ENI["b"], trust=TRUST)
    with pytest.raises(Unreachable):
        gw.take_address()
    assert failing == ["ec2"]  # botocore's legacy max_attempts=1 sent it twice
    with pytest.raises(Unreachable):
        gw.read_lease()
    assert failing == ["ec2", "DynamoDB_20120810.GetItem"]
    with pytest.raises(Throttled):
        gw._replace_route("rtb-1", "172.16.0.0/24")  # the mover's own backoff takes it from here
    assert len(failing) == 3


# --- the mover ------------------------------------------------------------------------------------------------


def test_a_throttled_failover_moves_every_route_of_64_ranges_in_4_tables() -> None:
    clock = FakeClock()
    bucket = Bucket(clock, size=20, rate=5)  # far below 256 ReplaceRoutes: only waiting refills it
    gw, ec2 = site(clock, bucket, remote(64), 4, fake_pace(clock, deadline_s=600))
    changed = gw.reconcile(remote(64), lambda: True)
    assert ec2.holder == ENI["b"] and "address eipalloc-1" in changed
    assert len(changed) == 1 + 256 and sorted(ec2.replaced) == sorted(set(ec2.replaced))  # each route exactly once
    assert all(r["NetworkInterfaceId"] == ENI["b"] for t in ec2.tables.values() for r in t.values())
    assert bucket.throttled > 0 and clock.sleeps  # it was throttled and waited
    assert all(0 <= s <= gw.pace.cap_s for s in clock.sleeps)
    assert bucket.max_in_flight <= gw.pace.parallel


def test_a_move_sends_nothing_after_its_deadline() -> None:
    bucket = Bucket(FakeClock(), size=20, rate=0)  # never refills: every call after the 20th is throttled
    ticks = itertools.count()  # a clock that moves 10 ms per reading, whatever the waits
    pace = Pace(clock=lambda: next(ticks) * 0.01, sleep=lambda s: None, deadline_s=30)
    gw, ec2 = site(FakeClock(), bucket, remote(64), 4, pace)
    with pytest.raises(Unreachable, match="236 of 256 ReplaceRoute failed: throttled past the 30 s deadline"):
        gw.reconcile(remote(64), lambda: True)
    assert len(ec2.replaced) == 20 and bucket.throttled > 0
    calls_at_deadline = bucket.throttled + 20
    assert calls_at_deadline < 3000 + 64  # bounded by the clock's 3000 readings to the deadline, never endless


def test_jitter_is_full_and_grows_with_throttles_up_to_the_cap() -> None:
    clock = FakeClock()
    answers = iter([False] * 12 + [True] * 10)
    calls: list[str] = []

    def replace(table: str, cidr: str) -> None:
        calls.append(cidr)
        if not next(answers):
            raise Throttled("RequestLimitExceeded")

    pace = fake_pace(clock, parallel=1, base_s=0.1, cap_s=1.0, deadline_s=100, jitter=lambda: 1.0)
    moves = move_routes(replace, [("rtb-1", c) for c in remote(10)], lambda: True, pace)
    assert len(moves.moved) == 10 and not moves.left and not moves.errors
    assert clock.sleeps[:5] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])  # base * 2**n, capped (jitter at its top)


def test_the_window_closing_stops_the_move_and_nothing_is_reported() -> None:
    clock = FakeClock()
    bucket = Bucket(clock, size=1000, rate=0)
    gw, ec2 = site(clock, bucket, remote(64), 4, fake_pace(clock, parallel=1))
    asked = iter([True] * 30 + [False] * 10**4)  # 1 + 1 for the address, then 28 routes
    changed = gw.reconcile(remote(64), lambda: next(asked))
    assert len(ec2.replaced) == 28 and len(changed) == 29  # no error: the next reconcile moves the rest


def test_an_error_other_than_throttling_is_not_retried_here() -> None:
    calls: list[str] = []

    def replace(table: str, cidr: str) -> None:
        calls.append(cidr)
        if cidr == "172.16.1.0/24":
            raise Unreachable("InvalidRoute.NotFound")

    clock = FakeClock()
    moves = move_routes(replace, [("rtb-1", c) for c in remote(4)], lambda: True, fake_pace(clock, parallel=2))
    assert calls.count("172.16.1.0/24") == 1 and len(moves.moved) == 3 and len(moves.errors) == 1


# --- route writes only for the site's remote ranges -----------------------------------------------------------


def test_route_writes_only_for_the_sites_remote_ranges() -> None:
    """The documents' ranges (checked against agent.json's trust) are the only destinations written; a route of the
    same table to any other destination, to the site's own range, or to a target that is not an interface or
    instance, stays as it is, even when a hostile document names it."""
    plan = base_plan()
    ranges, refused = safe_ranges(plan, TRUST)
    assert ranges and not refused
    clock = FakeClock()
    gw, ec2 = site(clock, Bucket(clock, 10**6, 0), ranges, 2, fake_pace(clock))
    own = TRUST.cidrs[0]
    extra = {
        "192.168.77.0/24": {
            "DestinationCidrBlock": "192.168.77.0/24",
            "NetworkInterfaceId": "eni-user",
            "Origin": "CreateRoute",
        },
        own: {"DestinationCidrBlock": own, "NetworkInterfaceId": ENI["a"], "Origin": "CreateRoute"},
        "172.31.0.0/16": {
            "DestinationCidrBlock": "172.31.0.0/16",
            "TransitGatewayId": "tgw-1",
            "Origin": "CreateRoute",
        },
    }
    for table in ec2.tables.values():
        table.update({k: dict(v) for k, v in extra.items()})
    gw.reconcile([*ranges, own, "172.31.0.0/16"], lambda: True)  # a hostile list: the own range, a TGW route
    assert {cidr for _, cidr in ec2.replaced} == set(ranges)
    for table in ec2.tables.values():
        assert table["192.168.77.0/24"]["NetworkInterfaceId"] == "eni-user"
        assert table[own]["NetworkInterfaceId"] == ENI["a"]
        assert "NetworkInterfaceId" not in table["172.31.0.0/16"]


def test_the_route_bench_section_renders_from_its_json() -> None:
    import json
    from pathlib import Path

    from bench.report.ha_routes import section

    data = json.loads((Path(__file__).parent.parent / "docs" / "bench" / "ha_routes.json").read_text())
    text = section(data)
    assert "| throttled | **current / baseline** |" in text and f"{data['routes']} ReplaceRoutes" in text
