"""The lab's AWS control plane for HA sites (docs/ha.md section 11): what `pulumi up` creates for a `gateways: 2` site,
created in the lab's moto server, and the cloud model that applies moto's state to the namespaces.

Runs in the lab's cloud namespace next to awsctl.py (moto is reachable only from there) and reuses its clients:

1. seed: per HA site, the VPC and the gateway subnet, both gateway instances with their private addresses (one ENI
   each), the Elastic IP (allocated, not associated: the agents claim it), a route table with a route per remote
   range to gateway a's ENI (as the program creates them), the DynamoDB lease table (hash key `site`, S,
   on demand). One JSON line on stdout: the ids (`{"ok": true, "sites": {site: {...}}}`).
2. poll every `interval` s (default 0.05): DescribeAddresses (who holds the EIP: its NetworkInterfaceId; never
   DescribeInstances, where moto leaves the old ENI's public_ip after a move) and DescribeRouteTables (each remote
   range's target ENI); on a change, apply it: the internet namespace's 1:1 NAT (haplan.nat_rules, atomically) and
   the workload host's routes (the VPC route table). Each change is one JSON line: `{"t": epoch, "site", "holder",
   "routes": {cidr: letter}, "applied_s"}`; a failed poll `{"t", "error"}`. `delay` (s) waits between reading the
   state and applying it (a stand-in for the data plane's lag; 0: none).

`python -m wg_mesh.lab.clouds.awsmodel ENDPOINT` with the spec as the first stdin line: `{"region", "interval", "delay",
"sites": [haplan.ha_to_json(site) + {"vpc_cidr", "lease_table"}]}`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from wg_mesh.lab.clouds.awsctl import CREDENTIALS, create_lease_table, wait_for
from wg_mesh.lab.clouds.haapply import Applier
from wg_mesh.lab.fabric.haplan import HaSite, ha_from_json
from wg_mesh.lab.fabric.netns import LabError

POLL_CONFIG = Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})  # a slow poll: the next one
SEED_CONFIG = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3})  # moto's first calls are slow


def client(endpoint: str, service: str, region: str, config: Config = POLL_CONFIG) -> Any:
    import boto3

    return boto3.client(service, region_name=region, endpoint_url=endpoint, config=config, **CREDENTIALS)


def tags(site: str, **more: str) -> list[dict[str, Any]]:
    return [{"Key": k, "Value": v} for k, v in {"wg-mesh-site": site, **more}.items()]


def seed(ec2: Any, dynamodb: Any, ha: HaSite, vpc_cidr: str, lease_table: str) -> dict[str, Any]:
    """What the program creates for the site, in moto; the ids."""
    site = ha.site
    vpc = ec2.create_vpc(CidrBlock=vpc_cidr)["Vpc"]["VpcId"]
    subnet_cidr = str(ha.gateways[0].private_ip.network)
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=subnet_cidr)["Subnet"]["SubnetId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]  # moto's bundled AMIs
    instances = {}
    for g in ha.gateways:
        spec = [{"ResourceType": "instance", "Tags": tags(site, **{"wg-mesh-gateway": g.letter})}]
        found = ec2.run_instances(
            ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnet, PrivateIpAddress=g.private, TagSpecifications=spec
        )["Instances"][0]
        nic = found["NetworkInterfaces"][0]
        instances[g.letter] = {
            "instance_id": found["InstanceId"],
            "interface_id": nic["NetworkInterfaceId"],
            "mac": nic["MacAddress"],
            "local_ipv4": g.private,
        }
        ec2.modify_instance_attribute(InstanceId=found["InstanceId"], SourceDestCheck={"Value": False})
    allocation = ec2.allocate_address(
        Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags(site)}]
    )["AllocationId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
    for cidr in ha.remote_ranges:
        ec2.create_route(
            RouteTableId=table, DestinationCidrBlock=str(cidr), NetworkInterfaceId=instances["a"]["interface_id"]
        )
    create_lease_table(dynamodb, lease_table)
    return {
        "vpc_id": vpc,
        "subnet_id": subnet,
        "allocation_id": allocation,
        "route_table_ids": [table],
        "lease_table": lease_table,
        "instances": instances,
    }


class Model(Applier):
    """One site's view of moto; what was last applied (haapply.Applier)."""

    def __init__(self, ha: HaSite, ids: dict[str, Any]) -> None:
        super().__init__(ha)
        self.ids = ids
        self.letter_of = {v["interface_id"]: letter for letter, v in ids["instances"].items()}
        self.private_of = {v["interface_id"]: v["local_ipv4"] for v in ids["instances"].values()}

    def read(self, ec2: Any) -> tuple[str | None, dict[str, str | None]]:
        addresses = ec2.describe_addresses(AllocationIds=[self.ids["allocation_id"]])["Addresses"]
        eni = addresses[0].get("NetworkInterfaceId") if addresses else None
        holder = self.letter_of.get(eni or "")
        tables = ec2.describe_route_tables(RouteTableIds=self.ids["route_table_ids"])["RouteTables"]
        wanted = {str(c) for c in self.ha.remote_ranges}
        routes: dict[str, str | None] = {}
        for table in tables:
            for route in table.get("Routes", []):
                cidr = route.get("DestinationCidrBlock")
                if cidr in wanted:
                    routes[cidr] = self.private_of.get(route.get("NetworkInterfaceId", ""))
        return holder, routes


def emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def main(argv: list[str]) -> int:
    endpoint = argv[0]
    spec = json.loads(sys.stdin.readline())
    region, interval, delay = spec["region"], float(spec.get("interval", 0.05)), float(spec.get("delay", 0.0))
    try:
        wait_for(endpoint, 30)
        ec2 = client(endpoint, "ec2", region)
        seeding = client(endpoint, "ec2", region, SEED_CONFIG), client(endpoint, "dynamodb", region, SEED_CONFIG)
        models = []
        for entry in spec["sites"]:
            ha = ha_from_json(entry)
            models.append(Model(ha, seed(*seeding, ha, entry["vpc_cidr"], entry["lease_table"])))
    except (BotoCoreError, ClientError, ConnectionError) as exc:
        emit({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    emit({"ok": True, "sites": {m.ha.site: m.ids for m in models}})
    while True:
        started = time.monotonic()
        for model in models:
            try:
                state = model.read(ec2)
            except (BotoCoreError, ClientError, ConnectionError) as exc:
                emit({"t": time.time(), "site": model.ha.site, "error": f"{type(exc).__name__}: {exc}"})
                continue
            if delay:
                time.sleep(delay)
            try:
                if model.apply(*state):
                    emit({"t": time.time(), **model.event(), "applied_s": round(time.monotonic() - started, 3)})
            except LabError as exc:
                emit({"t": time.time(), "site": model.ha.site, "error": str(exc)})
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
