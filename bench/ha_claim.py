"""What an AWS takeover costs in API time: `python -m bench.ha_claim [--routes N ...] [--runs R]` (no root).

Against moto in server mode on 127.0.0.1 (no cloud latency, no eventual consistency: the figures are the agent's own
share, the real cloud adds its API latency and propagation, docs/ha.md section 8): per route count, the median of
R runs of
- the claim: the lease compare-and-swap (`AwsHa.claim`, one conditional UpdateItem);
- the reconcile that follows it: DescribeAddresses, AssociateAddress, DescribeRouteTables and the ReplaceRoutes (at
  most 8 in flight, `ha_aws.PARALLEL`), for N remote ranges in one route table;
- the baseline in the same run: one strongly consistent GetItem (the standby's poll), so a figure can be read as
  "k round trips".
Prints a table and the JSON line per route count.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import statistics
import time
from typing import Any

from bench.motolocal import moto_server
from bench.stats import print_rows

REGION = "us-east-1"


def _setup(url: str, routes: int, table: str) -> tuple[Any, list[str], dict[str, str], str, str]:
    import boto3

    from wg_mesh.lab.clouds.awsctl import create_lease_table

    kwargs = {"region_name": REGION, "endpoint_url": url}
    ec2, dynamodb = boto3.client("ec2", **kwargs), boto3.client("dynamodb", **kwargs)
    create_lease_table(dynamodb, table)
    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.10.0.0/24")["Subnet"]["SubnetId"]
    enis = {g: ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"] for g in "ab"}
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    rtb = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ranges = [str(n) for n in list(ipaddress.ip_network("172.16.0.0/12").subnets(new_prefix=24))[:routes]]
    for cidr in ranges:
        ec2.create_route(RouteTableId=rtb, DestinationCidrBlock=cidr, NetworkInterfaceId=enis["a"])
    return ec2, ranges, enis, allocation, rtb


def measure(url: str, routes: int, runs: int) -> dict[str, Any]:
    from wg_mesh.gateway.ha_aws import AwsHa
    from wg_mesh.gateway.trust import Trust

    table = f"bench-ha-{routes}-{time.monotonic_ns()}"
    _, ranges, enis, allocation, rtb = _setup(url, routes, table)
    # what the site's agent.json would say: its own ranges apart from the remote ones (172.16/12), any signing key
    trust = Trust(base64.b64encode(bytes(32)).decode(), "bench/ha", "site", ("10.0.0.0/16",), "100.96.0.0/24")
    gws = {g: AwsHa(REGION, table, "site", g, allocation, [rtb], enis[g], trust=trust) for g in "ab"}
    gws["a"].claim(None)
    gws["a"].reconcile(ranges, lambda: True)
    poll, claim, reconcile = [], [], []
    for i in range(runs):
        me = "b" if i % 2 == 0 else "a"
        gw = gws[me]
        started = time.perf_counter()
        seen = gw.read_lease()
        poll.append(time.perf_counter() - started)
        started = time.perf_counter()
        assert gw.claim(seen) is not None
        claim.append(time.perf_counter() - started)
        started = time.perf_counter()
        changed = gw.reconcile(ranges, lambda: True)
        reconcile.append(time.perf_counter() - started)
        assert len(changed) == 1 + routes, changed
    ms = {name: statistics.median(values) * 1000 for name, values in (("poll", poll), ("claim", claim),
                                                                       ("reconcile", reconcile))}  # fmt: skip
    return {
        "routes": routes,
        "runs": runs,
        "poll_ms": round(ms["poll"], 2),
        "claim_ms": round(ms["claim"], 2),
        "reconcile_ms": round(ms["reconcile"], 2),
        "claim_in_polls": round(ms["claim"] / ms["poll"], 2),
        "reconcile_in_polls": round(ms["reconcile"] / ms["poll"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ha_claim", description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, nargs="+", default=[3, 16, 64])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    with moto_server(as_default=True) as url:
        results = [measure(url, n, args.runs) for n in args.routes]
    columns = [("routes", "routes", ""), ("poll ms", "poll_ms", ""), ("claim ms", "claim_ms", ""),
               ("reconcile ms", "reconcile_ms", ""), ("claim/poll", "claim_in_polls", ""),
               ("reconcile/poll", "reconcile_in_polls", "")]  # fmt: skip
    print_rows(results, columns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
