"""The AWS side of HA (wg_mesh.gateway.ha_aws, ha_run) against moto in server mode on 127.0.0.1 (a real AWS API
emulator: DynamoDB conditional writes, EC2 addresses and route tables) and an IMDSv2 server on loopback following
AWS's documented protocol (PUT /latest/api/token, then GETs with X-aws-ec2-metadata-token). Two gateways race for
the lease; a takeover moves the Elastic IP and every route of the remote ranges; two controllers (the agent's real
HA thread body, ticked by hand with a fake clock, with fake local checks) hand over when the active stops."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest

from tests.agent_fake import TRUST, base_plan
from wg_mesh.gateway.ha import Lease, Settings
from wg_mesh.gateway.ha_aws import AwsHa, Unreachable, own_interface, replaceable
from wg_mesh.gateway.ha_config import parse_ha
from wg_mesh.gateway.ha_routes import remote_ranges, safe_ranges
from wg_mesh.gateway.ha_run import Controller, cloud_factory
from wg_mesh.lab.clouds import awsctl
from wg_mesh.lab.clouds.awsctl import create_lease_table

REGION, TABLE, SITE = "us-east-1", "wg-mesh-ha-test", "aws-use1"


@dataclass
class Cloud:
    """One site's resources in moto: the lease table, two ENIs, the Elastic IP, a route table with the ranges."""

    ec2: Any
    enis: dict[str, str]
    allocation: str
    tables: list[str]
    ranges: list[str]
    table: str

    def adapter(self, name: str, holder: str = "") -> AwsHa:
        """Instance `name`'s calls (its ENI); `holder`: the identity its lease names (default: the name)."""
        eni = self.enis[name]
        return AwsHa(REGION, self.table, SITE, holder or name, self.allocation, self.tables, eni, trust=TRUST)

    def eip_holder(self) -> str | None:
        eni = self.ec2.describe_addresses(AllocationIds=[self.allocation])["Addresses"][0].get("NetworkInterfaceId")
        return next((g for g, e in self.enis.items() if e == eni), None)

    def route_targets(self) -> set[str | None]:
        tables = self.ec2.describe_route_tables(RouteTableIds=self.tables)["RouteTables"]
        by_eni = {e: g for g, e in self.enis.items()}
        return {
            by_eni.get(r.get("NetworkInterfaceId"))
            for t in tables
            for r in t["Routes"]
            if r.get("DestinationCidrBlock") in self.ranges
        }


_count = iter(range(1000))


@pytest.fixture
def cloud(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    kwargs = {"region_name": REGION, "endpoint_url": moto_url}
    ec2, dynamodb = boto3.client("ec2", **kwargs), boto3.client("dynamodb", **kwargs)
    table = f"{TABLE}-{next(_count)}"
    create_lease_table(dynamodb, table)
    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.10.{i}.0/24", AvailabilityZone=f"{REGION}{z}")["Subnet"]["SubnetId"]
        for i, z in ((0, "a"), (1, "b"))
    ]
    enis = {  # a2, b2: the replacements Pulumi creates beside a and b (create before delete)
        g: ec2.create_network_interface(SubnetId=s)["NetworkInterface"]["NetworkInterfaceId"]
        for g, s in zip(("a", "b", "a2", "b2"), subnets * 2, strict=True)
    }
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ranges = remote_ranges(base_plan())
    tables = [ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"] for _ in range(2)]
    for t in tables:
        for cidr in ranges:  # as the program creates them: towards gateway a
            ec2.create_route(RouteTableId=t, DestinationCidrBlock=cidr, NetworkInterfaceId=enis["a"])
        ec2.create_route(RouteTableId=t, DestinationCidrBlock="0.0.0.0/0", NetworkInterfaceId=enis["b"])  # not ours
    return Cloud(ec2, enis, allocation, tables, ranges, table)


def test_remote_ranges_are_the_overlay_and_the_peers_cidrs() -> None:
    plan = base_plan()
    ranges = remote_ranges(plan)
    assert ranges[0] == "10.99.0.0/24" or ranges[0].startswith("10.")
    assert all(not r.endswith("/32") for r in ranges) and len(ranges) == len(set(ranges)) > 1


def test_two_gateways_race_for_the_lease_and_exactly_one_wins(cloud: Cloud) -> None:
    """Both saw no lease and both claim on that: the conditional write lets exactly one through. (In sequence: two
    threads timed by a barrier made the order, and moto's own locking, the test's subject; the CAS is DynamoDB's.)"""
    a, b = cloud.adapter("a"), cloud.adapter("b")
    assert a.read_lease() is None and b.read_lease() is None
    results = {gw.me: gw.claim(None) for gw in (a, b)}
    winners = [g for g, lease in results.items() if lease is not None]
    assert len(winners) == 1
    winner, loser = (a, b) if winners == ["a"] else (b, a)
    assert winner.read_lease() == Lease(winner.me, 1, 0)
    assert winner.renew(1) and winner.renew(1)
    assert not loser.renew(1)  # not its lease
    seen = loser.read_lease()
    assert seen == Lease(winner.me, 1, 2)
    assert winner.renew(1)  # the holder renews between the loser's read and its claim: the CAS fails
    assert loser.claim(seen) is None
    assert loser.claim(loser.read_lease()) == Lease(loser.me, 2, 0)  # (an expired lease, in the machine's eyes)
    assert not winner.renew(1) and not winner.release(1)
    assert loser.release(2) and loser.read_lease() == Lease("none", 2, 0)


def test_takeover_moves_the_elastic_ip_and_every_route(cloud: Cloud) -> None:
    a, b = cloud.adapter("a"), cloud.adapter("b")
    assert a.holder() == "none"
    assert a.claim(None) is not None
    assert a.reconcile(cloud.ranges, lambda: True) == [f"address {cloud.allocation}"]  # routes start on a
    assert cloud.eip_holder() == "a" and cloud.route_targets() == {"a"}
    assert a.reconcile(cloud.ranges, lambda: True) == []  # level-triggered: nothing to do, nothing written
    assert a.holder() == "me" and b.holder() == "other"

    assert b.reconcile(cloud.ranges, lambda: False) == []  # outside its write window: no write at all
    assert cloud.eip_holder() == "a" and cloud.route_targets() == {"a"}

    seen = b.read_lease()
    assert b.claim(seen) is not None
    changed = b.reconcile(cloud.ranges, lambda: True)
    assert changed[0] == f"address {cloud.allocation}" and len(changed) == 1 + len(cloud.ranges) * len(cloud.tables)
    assert cloud.eip_holder() == "b" and cloud.route_targets() == {"b"}
    assert a.holder() == "other" and not a.renew(1)
    # the default route (not a remote range) was never touched
    routes = cloud.ec2.describe_route_tables(RouteTableIds=cloud.tables)["RouteTables"][0]["Routes"]
    assert {r["NetworkInterfaceId"] for r in routes if r.get("DestinationCidrBlock") == "0.0.0.0/0"} == {
        cloud.enis["b"]
    }


def test_routes_are_taken_only_towards_safe_destinations_and_from_interfaces(cloud: Cloud) -> None:
    """IAM cannot limit ReplaceRoute by destination: the adapter itself never writes a default route or half of one,
    a reserved range or one inside the site's own CIDRs, whatever the ranges it is given, and never takes a route
    whose target is a gateway (here an internet gateway) rather than the other gateway's interface."""
    ec2, table = cloud.ec2, cloud.tables[0]
    vpc = ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"][0]["VpcId"]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    ec2.replace_route(RouteTableId=table, DestinationCidrBlock=cloud.ranges[1], GatewayId=igw)
    hostile = ["0.0.0.0/1", "128.0.0.0/1", "169.254.169.254/32", "10.10.5.0/24"]
    for cidr in hostile:
        ec2.create_route(RouteTableId=table, DestinationCidrBlock=cidr, NetworkInterfaceId=cloud.enis["a"])
    b = cloud.adapter("b")
    assert b.claim(None) is not None
    b.reconcile([*cloud.ranges, "0.0.0.0/0", *hostile], lambda: True)

    routes = {
        r["DestinationCidrBlock"]: r
        for r in ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"][0]["Routes"]
    }
    assert routes["0.0.0.0/0"]["NetworkInterfaceId"] == cloud.enis["b"]  # as the fixture made it (not by us)
    assert all(routes[c]["NetworkInterfaceId"] == cloud.enis["a"] for c in hostile)  # never moved
    assert routes[cloud.ranges[1]].get("GatewayId") == igw  # not an interface: left alone
    assert all(routes[c]["NetworkInterfaceId"] == cloud.enis["b"] for c in cloud.ranges if c != cloud.ranges[1])
    ranges, refused = safe_ranges(base_plan(), TRUST)
    assert ranges == cloud.ranges and refused == []
    assert safe_ranges(base_plan(), None)[0] == []  # no trust: no route at all


def test_only_an_interface_instance_or_blackhole_target_is_replaceable() -> None:
    """The Route shape of DescribeRouteTables (EC2 API reference, "Route")."""
    assert replaceable({"DestinationCidrBlock": "10.1.0.0/16", "NetworkInterfaceId": "eni-1", "Origin": "CreateRoute",
                        "State": "active"})  # fmt: skip
    assert replaceable({"DestinationCidrBlock": "10.1.0.0/16", "InstanceId": "i-1", "InstanceOwnerId": "1",
                        "NetworkInterfaceId": "eni-1", "Origin": "CreateRoute", "State": "blackhole"})  # fmt: skip
    assert replaceable({"DestinationCidrBlock": "10.1.0.0/16", "Origin": "CreateRoute", "State": "blackhole"})
    for target in ("GatewayId", "NatGatewayId", "TransitGatewayId", "VpcPeeringConnectionId", "LocalGatewayId",
                   "CarrierGatewayId", "EgressOnlyInternetGatewayId", "CoreNetworkArn", "IpAddress"):  # fmt: skip
        assert not replaceable({"DestinationCidrBlock": "10.1.0.0/16", target: "x-1", "State": "blackhole"})
    assert not replaceable({"DestinationCidrBlock": "10.1.0.0/16", "GatewayId": "vpce-1", "NetworkInterfaceId": "e"})
    assert not replaceable({"DestinationCidrBlock": "10.1.0.0/16", "NetworkInterfaceId": "eni-1",
                            "Origin": "EnableVgwRoutePropagation"})  # fmt: skip
    assert not replaceable({"DestinationCidrBlock": "10.1.0.0/16", "State": "active"})


def test_an_unreachable_api_is_not_a_lost_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard: nothing listens
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    gw = AwsHa(REGION, TABLE, SITE, "a", "eipalloc-1", ["rtb-1"], "eni-1", trust=TRUST)
    for call in (gw.read_lease, lambda: gw.renew(1), gw.holder, lambda: gw.claim(None)):
        with pytest.raises(Unreachable):
            call()


class Imds(BaseHTTPRequestHandler):
    """IMDSv2 as documented: a session token from PUT /latest/api/token (TTL header required), then GETs that
    carry it; a GET without it is refused (401), as on an instance with HttpTokens=required."""

    TOKEN = "imds-token"
    META: ClassVar[dict[str, str]] = {
        "instance-id": "i-0abc",
        "mac": "0e:00:00:00:00:01",
        "network/interfaces/macs/0e:00:00:00:00:01/interface-id": "eni-0abc",
    }

    def do_PUT(self) -> None:
        ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        self._answer(200 if ok else 400, self.TOKEN if ok else "")

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != self.TOKEN:
            self._answer(401, "")
            return
        value = self.META.get(self.path.removeprefix("/latest/meta-data/"))
        self._answer(200 if value else 404, value or "")

    def _answer(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_own_interface_from_imdsv2(monkeypatch: pytest.MonkeyPatch) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Imds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/")
        assert own_interface() == ("i-0abc", "eni-0abc")
        config = parse_ha({"cloud": "aws", "gateway": "a", "region": REGION, "lease_table": TABLE,
                           "allocation_id": "eipalloc-1", "route_table_ids": ["rtb-1"]})  # fmt: skip
        adapter = cloud_factory(SITE, config, TRUST)()
        assert (adapter.me, adapter.eni) == ("i-0abc", "eni-0abc")  # the lease names the instance, not "a"
    finally:
        server.shutdown()
        server.server_close()


ENDPOINT = "https://vpce-0123456789abcdef0-1a2b3c4d.ec2.us-east-1.vpce.amazonaws.com"  # a Regional DNS name


def test_ec2_goes_to_the_sites_endpoint_by_its_own_name(
    cloud: Cloud, moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: the site's EC2 interface endpoint has no private DNS (it would take every workload of the VPC), so
    the agent calls EC2 at the name agent.json gives; only EC2: the lease stays on the regional DynamoDB name (the
    gateway endpoint is a route, not a name). Here EC2's name is moto and every other service's a dead port."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard: nothing listens
    gw = AwsHa(REGION, cloud.table, SITE, "a", cloud.allocation, cloud.tables, cloud.enis["a"], trust=TRUST,
               ec2_endpoint=moto_url)  # fmt: skip
    assert gw.holder() == "none"
    assert gw.reconcile(cloud.ranges, lambda: True) == [f"address {cloud.allocation}"]  # EC2 answered: the address
    assert cloud.eip_holder() == "a"
    with pytest.raises(Unreachable):
        gw.read_lease()
    raw = {"cloud": "aws", "gateway": "a", "region": REGION, "lease_table": TABLE, "allocation_id": "eipalloc-1",
           "route_table_ids": ["rtb-1"]}  # fmt: skip
    assert parse_ha({**raw, "ec2_endpoint": ENDPOINT}).ec2_endpoint == ENDPOINT
    assert parse_ha(raw).ec2_endpoint == ""  # an existing network: the regional name (the user's endpoint, if any)
    for bad in (ENDPOINT.replace("https", "http"), "https://ec2.us-east-1.amazonaws.com", ENDPOINT + "/x",
                ENDPOINT.replace(".ec2.", ".ssm."), "https://vpce-1.ec2.us-east-1.vpce.amazonaws.com.evil.example",
                ENDPOINT + "\n", 443, ["x"]):  # fmt: skip
        with pytest.raises(ValueError, match=r"^ha\.ec2_endpoint: "):
            parse_ha({**raw, "ec2_endpoint": bad})


# --- two controllers against moto -------------------------------------------------------------------------


@dataclass
class FakeGateway:
    """The agent as the controller sees it, and the host commands its health checks run."""

    tmp: Path
    plan: Any = field(default_factory=base_plan)
    roles: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    metrics: str = ""
    wg_answers: bool = True
    eip_holder: Any = None  # when set: who holds the Elastic IP, recorded at each role change
    holder_at_role: list[tuple[str, str | None]] = field(default_factory=list)
    handshakes: dict[str, int] | None = None  # when set: the dump's peers (public key -> latest handshake, unix s)
    rearms: list[list[str]] = field(default_factory=list)
    pings: list[str] = field(default_factory=list)
    single: bool = False  # the applied document says the site has one gateway (`gateways: 2` -> 1)

    def set_role(self, role: str) -> None:
        self.roles.append(role)
        if self.eip_holder is not None:
            self.holder_at_role.append((role, self.eip_holder()))

    def rearm(self, keys: list[str]) -> None:
        self.rearms.append(keys)

    def applied(self) -> bool:
        return True

    def stood_down(self) -> bool:
        return self.single

    def log(self, message: str) -> None:
        self.logs.append(message)

    def write_ha_metrics(self, text: str) -> None:
        self.metrics = text

    def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        if argv[:2] == ["ip", "-j"]:
            return 0, '[{"ifname": "wg0", "flags": ["POINTOPOINT", "NOARP", "UP", "LOWER_UP"]}]'
        if argv[:2] == ["wg", "show"]:
            peers = "".join(
                f"{k}\t(none)\t(none)\t10.9.0.0/16\t{t}\t0\t0\toff\n" for k, t in (self.handshakes or {}).items()
            )
            return (0, "k\tpub\t51820\toff\n" + peers) if self.wg_answers else (124, "")
        if argv[0] == "ping":
            self.pings.append(argv[-1])
        return 0, ""


INSTANCES = {"a": "i-0a1", "b": "i-0b1", "a2": "i-0a2", "b2": "i-0b2"}  # each instance's id (IMDS)


def controller(cloud: Cloud, tmp_path: Path, clock: list[float], name: str, holder: str = "",
               settings: Settings | None = None) -> tuple[Controller, FakeGateway]:  # fmt: skip
    """The agent's HA thread of instance `name` (letter: its first character); its lease names `holder` (default
    its instance id, as cloud_factory does; a letter: the previous agent)."""
    forward = tmp_path / "ip_forward"
    forward.write_text("1\n")
    config = parse_ha(
        {"cloud": "aws", "gateway": name[0], "region": REGION, "lease_table": cloud.table,
         "allocation_id": cloud.allocation, "route_table_ids": cloud.tables}
    )  # fmt: skip
    gw = FakeGateway(tmp_path, eip_holder=cloud.eip_holder)
    ident = holder or INSTANCES[name]
    ctl = Controller(SITE, config, gw, lambda: cloud.adapter(name, ident), gw.run, lambda: clock[0], settings,
                     wall=lambda: WALL + clock[0], trust=TRUST)  # fmt: skip
    ctl.checks.forward_path = str(forward)
    return ctl, gw


def controllers(cloud: Cloud, tmp_path: Path) -> tuple[dict[str, Controller], dict[str, FakeGateway], list[float]]:
    clock = [0.0]
    gws, ctls = {}, {}
    for g in "ab":
        ctls[g], gws[g] = controller(cloud, tmp_path, clock, g)
    return ctls, gws, clock


WALL = 1_700_000_000.0  # the controllers' wall clock at clock 0


def run_for(ctls: dict[str, Controller], clock: list[float], seconds: float, alive: Sequence[str] = "ab",
            watch: Callable[[], None] = lambda: None) -> None:  # fmt: skip
    """Tick the `alive` controllers every 0.5 s of the fake clock; `watch()` after each round."""
    end = clock[0] + seconds
    while clock[0] < end:
        for g in alive:
            ctls[g].tick()
            for ctl in ctls.values():  # the role and reconcile workers: wait, so the test sees their effect
                ctl.wait_idle()
        watch()
        clock[0] = round(clock[0] + 0.5, 3)


def test_two_controllers_hand_over_when_the_active_stops(cloud: Cloud, tmp_path: Path) -> None:
    ctls, gws, clock = controllers(cloud, tmp_path)
    run_for(ctls, clock, 3)
    assert (ctls["a"].machine.role, ctls["b"].machine.role) == ("active", "standby")
    assert cloud.eip_holder() == "a" and cloud.route_targets() == {"a"}
    assert gws["a"].roles == ["active"] and gws["b"].roles == []
    assert ctls["a"].healthz() == (200, "active") and ctls["b"].healthz() == (503, "standby")
    assert 'wgmesh_ha_role{site="aws-use1",gateway="a"} 1' in gws["a"].metrics
    assert 'wgmesh_ha_failovers_total{site="aws-use1",gateway="a",reason="initial"} 1' in gws["a"].metrics
    assert 'wgmesh_ha_role{site="aws-use1",gateway="b"} 0' in gws["b"].metrics

    stopped = clock[0]
    run_for(ctls, clock, 5, alive="b")  # a's process is gone (killed): its lease stops changing
    claimed = [line for line in gws["b"].logs if "claimed the active role (lease_expired)" in line]
    assert claimed and ctls["b"].machine.role == "active"
    assert cloud.eip_holder() == "b" and cloud.route_targets() == {"b"}
    assert clock[0] - stopped <= 5
    # each promotion came after the Elastic IP was the new active's: its first initiations leave from the site address
    assert gws["a"].holder_at_role[0] == ("active", "a") and gws["b"].holder_at_role == [("active", "b")]

    # a comes back (its process, same machine state: it still believes it is active) and is fenced
    run_for(ctls, clock, 3)
    assert ctls["a"].machine.role == "standby" and gws["a"].roles[-1] == "standby"
    assert ctls["b"].machine.role == "active" and cloud.eip_holder() == "b"


def test_hung_wireguard_releases_and_the_standby_claims_at_once(cloud: Cloud, tmp_path: Path) -> None:
    ctls, gws, clock = controllers(cloud, tmp_path)
    run_for(ctls, clock, 3)
    gws["a"].wg_answers = False  # `wg show wg0 dump` times out (SIGSTOPped wireguard-go)
    failed = clock[0]
    run_for(ctls, clock, 2)
    assert ctls["b"].machine.role == "active" and ctls["a"].machine.role == "standby"
    assert ctls["a"].healthz() == (503, "unhealthy: wg hung (no answer in 1 s)")
    assert cloud.eip_holder() == "b" and cloud.route_targets() == {"b"}
    assert any("claimed the active role (released)" in line for line in gws["b"].logs)
    assert clock[0] - failed <= 2


def test_shutdown_releases_for_a_planned_handover(cloud: Cloud, tmp_path: Path) -> None:
    ctls, gws, clock = controllers(cloud, tmp_path)
    run_for(ctls, clock, 3)
    ctls["a"].shutdown()
    assert ctls["a"].healthz()[0] == 503 and gws["a"].roles[-1] == "standby"
    assert cloud.adapter("a").read_lease() == Lease("none", 1, cloud.adapter("a").read_lease().counter)  # type: ignore[union-attr]
    run_for(ctls, clock, 1, alive="b")
    assert ctls["b"].machine.role == "active" and cloud.eip_holder() == "b"


def test_a_retired_pair_stands_down_and_pulumis_moves_stay(cloud: Cloud, tmp_path: Path) -> None:
    """`gateways: 2` -> 1 (issue 32 item 2) against moto: the pair's document says `gateways: 1` (each agent applies
    it), then Pulumi associates the Elastic IP with the new single gateway (`a2` here: its EipAssociation) and
    ReplaceRoutes every route to it (its routes' networkInterfaceId, no longer ignored), then deletes the old pair
    last (systemd stops each agent). Before the field the active took both back within a second."""
    ctls, gws, clock = controllers(cloud, tmp_path)
    run_for(ctls, clock, 3)
    assert cloud.eip_holder() == "a" and ctls["a"].machine.role == "active"
    for gw in gws.values():
        gw.single = True
    run_for(ctls, clock, 1)
    assert all(any("standing down" in line for line in gw.logs) for gw in gws.values())
    assert 'wgmesh_ha_stood_down{site="aws-use1",gateway="a"} 1' in gws["a"].metrics
    cloud.ec2.associate_address(AllocationId=cloud.allocation, NetworkInterfaceId=cloud.enis["a2"],
                                AllowReassociation=True)  # fmt: skip
    for table in cloud.tables:
        for cidr in cloud.ranges:
            cloud.ec2.replace_route(RouteTableId=table, DestinationCidrBlock=cidr, NetworkInterfaceId=cloud.enis["a2"])
    lease = cloud.adapter("a").read_lease()
    run_for(ctls, clock, 4)
    assert cloud.eip_holder() == "a2" and cloud.route_targets() == {"a2"}
    assert ctls["a"].machine.role == "standby" and gws["a"].roles[-1] == "standby"  # it read the new holder twice
    assert lease is not None and lease.holder == INSTANCES["a"]
    # Pulumi deletes b first (it depends on a's gate); after a failover b is the active, so the harder order is the
    # active stopped while its partner still runs: it releases nothing and the partner, stood down, claims nothing
    ctls["a"].shutdown()
    run_for(ctls, clock, 4, alive="b")  # > the lease's 3 s
    assert cloud.eip_holder() == "a2" and cloud.route_targets() == {"a2"}
    assert (cloud.adapter("a").read_lease() or lease).holder == INSTANCES["a"]  # not released
    assert all(sum(c.machine.claims.values()) == (1 if n == "a" else 0) for n, c in ctls.items())


def test_active_cut_off_from_the_lease_writes_nothing_and_demotes_on_the_new_holder(
    cloud: Cloud, tmp_path: Path
) -> None:
    """DynamoDB unreachable for a only (unreachable != lost): a keeps its role but its write window closes; b claims
    after 3 s and moves the address and routes; a reads the new holder twice and demotes, never moving them back."""
    ctls, gws, clock = controllers(cloud, tmp_path)
    run_for(ctls, clock, 3)
    cut = {"on": False}
    real = cloud.adapter("a", INSTANCES["a"])

    class CutOff(AwsHa):
        def _call(self, service: str, operation: str, **kwargs: Any) -> Any:
            if cut["on"] and service == "dynamodb":
                raise Unreachable("dynamodb: connect timeout")
            return super()._call(service, operation, **kwargs)

    ctls["a"].cloud = CutOff(REGION, cloud.table, SITE, real.me, cloud.allocation, cloud.tables, real.eni, trust=TRUST)
    cut["on"] = True
    run_for(ctls, clock, 4)
    assert ctls["b"].machine.role == "active" and cloud.eip_holder() == "b" and cloud.route_targets() == {"b"}
    run_for(ctls, clock, 2)
    assert ctls["a"].machine.role == "standby" and gws["a"].roles[-1] == "standby"
    assert any("another gateway holds the address" in line for line in gws["a"].logs)
    run_for(ctls, clock, 5)
    assert cloud.eip_holder() == "b" and cloud.route_targets() == {"b"}


def test_the_new_active_re_arms_only_peers_without_a_handshake_since_the_promotion(
    cloud: Cloud, tmp_path: Path
) -> None:
    """The kick (wg_mesh.gateway.ha_kick): a lost first initiation would wait REKEY_TIMEOUT (5 s) for wireguard-go's
    retry; the new active re-arms and pings, every second, each peer still without a handshake since it promoted."""
    ctls, gws, clock = controllers(cloud, tmp_path)
    keys = [p.public_key for p in base_plan().peers]
    assert len(keys) >= 2
    old = int(WALL) - 60  # a handshake of before the promotion (the old active's session) is stale
    for g in "ab":
        gws[g].handshakes = dict.fromkeys(keys, old)
    run_for(ctls, clock, 3)
    assert ctls["a"].machine.role == "active"
    promoted = next(i for i, line in enumerate(gws["a"].logs) if "claimed the active role" in line)
    assert promoted >= 0 and gws["a"].rearms and gws["b"].rearms == []
    assert all(r == sorted(keys) for r in gws["a"].rearms)
    assert len(gws["a"].rearms) <= 2  # at most one a second (the promotion's own ping was the first initiation)

    fresh = keys[0]
    gws["a"].handshakes[fresh] = int(WALL + clock[0])  # type: ignore[index]
    gws["a"].rearms.clear()
    gws["a"].pings.clear()
    run_for(ctls, clock, 2)
    assert gws["a"].rearms and all(fresh not in r for r in gws["a"].rearms)  # a fresh peer is never disturbed
    assert gws["a"].pings and len(gws["a"].pings) == len(gws["a"].rearms) * (len(keys) - 1)

    gws["a"].handshakes = dict.fromkeys(keys, int(WALL + clock[0]))
    run_for(ctls, clock, 1)
    gws["a"].rearms.clear()
    gws["a"].handshakes = dict.fromkeys(keys, old)  # the kick has ended: a later stale handshake is WireGuard's own
    run_for(ctls, clock, 3)
    assert gws["a"].rearms == [] and gws["b"].rearms == []


def test_the_labs_lease_table_has_the_programs_key() -> None:
    """The lab, the bench and these tests seed moto with wg_mesh.lab.clouds.awsctl's table, keyed as the program
    declares it."""
    from wg_mesh.aws import ha as aws_ha

    assert awsctl.LEASE_KEY == aws_ha.LEASE_KEY


# --- a replacement beside the old instance (issue 21) ----------------------------------------------------------


@dataclass
class Moves:
    """Every change of the Elastic IP's holder and of the routes' targets, as the cloud shows them after each tick."""

    cloud: Cloud
    last: tuple[str | None, frozenset[str | None]] | None = None
    address: int = 0
    routes: int = 0

    def __call__(self) -> None:
        now = (self.cloud.eip_holder(), frozenset(self.cloud.route_targets()))
        if self.last is not None:
            self.address += now[0] != self.last[0]
            self.routes += now[1] != self.last[1]
        self.last = now


QUIET = Settings(tunnel_fail_s=1e6)  # no tunnel handover (the fakes have no peer handshakes)


@pytest.mark.parametrize(
    ("old", "holders", "most"),
    [
        ("a", {}, 1),  # the active replaced; every agent names its instance
        ("a", {"a": "a", "b": "b"}, 1),  # the upgrade from the previous agent: a letter lease, taken over once
        ("b", {}, 0),  # the standby replaced: nothing moves
    ],
    ids=["active", "active, letter lease of the previous agent", "standby"],
)
def test_a_replacement_beside_the_old_instance_moves_the_address_and_routes_at_most_once(
    cloud: Cloud, tmp_path: Path, old: str, holders: dict[str, str], most: int
) -> None:
    """The reviewer's reproduction (issue 21), with this agent: Pulumi creates `old`'s replacement beside it (create
    before delete), the three controllers run side by side (12 s: the fight moved them every 2.5 s; 4 lease
    periods), then the old instance is terminated (systemd stops its agent: Controller.shutdown). The address and
    routes move at most once, to one gateway, and stay; claims are counted too, so a move and a move back within
    one round of ticks cannot hide. (The fake peers never answer: the tunnel check's handover, tested above, is set
    beyond the test's length.)"""
    clock = [0.0]
    ctls, gws = {}, {}
    for g in "ab":
        ctls[g], gws[g] = controller(cloud, tmp_path, clock, g, holders.get(g, ""), QUIET)
    run_for(ctls, clock, 3)
    assert ctls["a"].machine.role == "active" and cloud.eip_holder() == "a" and cloud.route_targets() == {"a"}
    assert [ctls[g].machine.holder_id for g in "ab"] == [holders.get(g) or INSTANCES[g] for g in "ab"]  # the adapter's
    new = f"{old}2"
    ctls[new], gws[new] = controller(cloud, tmp_path, clock, new, settings=QUIET)
    moves = Moves(cloud)
    moves()
    everyone = ("a", "b", new)
    claims = sum(sum(ctl.machine.claims.values()) for ctl in ctls.values())
    run_for(ctls, clock, 12, alive=everyone, watch=moves)
    assert (moves.address, moves.routes) == (0, 0) and ctls["a"].machine.role == "active"
    assert ctls[new].machine.role == "standby" and gws[new].roles == []

    ctls[old].shutdown()
    rest = tuple(g for g in everyone if g != old)
    run_for(ctls, clock, 4, alive=rest, watch=moves)
    active = [g for g in rest if ctls[g].machine.role == "active"]
    assert len(active) == 1 and cloud.eip_holder() == active[0] and cloud.route_targets() == {active[0]}
    assert moves.address == most and moves.routes == most, (moves.address, moves.routes)
    assert sum(sum(ctl.machine.claims.values()) for ctl in ctls.values()) == claims + most
    if most:  # released on shutdown: claimed at the next read, not after lease_s
        assert any("claimed the active role (released)" in line for line in gws[active[0]].logs)


def test_the_single_gateways_eip_association_deleted_last_changes_nothing(cloud: Cloud, moto_url: str) -> None:
    """`gateways: 1` -> 2 (docs/how-to/high-availability.md): the new `a`'s agent moves the address (a new association),
    then `pulumi up` deletes the single gateway's EipAssociation, as terraform-provider-aws does it
    (resourceEIPAssociationDelete: DisassociateAddress by the id in its state, InvalidAssociationID.NotFound is
    success), through the lab's hand (awsctl.handle): the id is gone, the address stays on the new gateway."""
    single = cloud.ec2.associate_address(AllocationId=cloud.allocation, NetworkInterfaceId=cloud.enis["a"])
    cloud.adapter("a2").take_address()  # the new `a`'s claim: AssociateAddress with AllowReassociation
    assert cloud.eip_holder() == "a2"
    client = awsctl.clients(moto_url)
    request = {"op": "disassociate-address", "region": REGION, "name": single["AssociationId"], "value": ""}
    assert awsctl.handle(client, request) == {"gone": True}
    assert cloud.eip_holder() == "a2"
    held = cloud.ec2.describe_addresses(AllocationIds=[cloud.allocation])["Addresses"][0]["AssociationId"]
    assert awsctl.handle(client, {**request, "name": held}) == {"gone": False} and cloud.eip_holder() is None
