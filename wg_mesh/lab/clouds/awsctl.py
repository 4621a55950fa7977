"""The lab control plane's AWS hand: what `pulumi up` does to the AWS stores of a `delivery: live` mesh (and to an HA
site's address, routes and lease table when it goes back to one gateway, hadowngrade.py, and to two again,
haupgrade.py), done with boto3 against
the lab's moto server (`python -m moto.server`, a real AWS API emulator) in the lab's cloud namespace.

Runs in that namespace (the lab reaches moto only from there: no host networking) and reads one JSON request a
line on stdin, answering one JSON line on stdout:

    {"op": "secret", "region": R, "name": N, "value": V}     Secrets Manager: create the secret or put a new version
    {"op": "secret-binary", ...}                             the same with a SecretBinary: V is its base64, decoded
                                                             here as the provider does (the agent's bundle)
    {"op": "parameter", "region": R, "name": N, "value": V}  SSM Parameter Store: SecureString, standard tier, overwrite
    {"op": "associate-address", "region": R, "name": ALLOCATION_ID, "value": INSTANCE_ID}
                                    an EipAssociation's create (AllowReassociation: AWS's default in a VPC, moto's
                                    is to refuse: docs/ha.md 11); the answer has its "association_id"
    {"op": "disassociate-address", "region": R, "name": ASSOCIATION_ID, "value": ""}
                                    an EipAssociation's delete as terraform-provider-aws does it
                                    (resourceEIPAssociationDelete: DisassociateAddress by the id in the state,
                                    InvalidAssociationID.NotFound is success); the answer's "gone" says it was
    {"op": "replace-route", "region": R, "name": ROUTE_TABLE_ID, "value": "CIDR ENI_ID"}  a route's in-place update
    {"op": "delete-table", "region": R, "name": TABLE, "value": ""}  DynamoDB DeleteTable (a lease table's delete)
    {"op": "create-table", "region": R, "name": TABLE, "value": ""}  the lease table's create (`create_lease_table`)
    -> {"ok": true, ...} | {"ok": false, "error": "..."}

The values are key material and documents: never printed. `python -m wg_mesh.lab.clouds.awsctl ENDPOINT`.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

CREDENTIALS = {"aws_access_key_id": "lab", "aws_secret_access_key": "lab"}  # moto accepts any
LEASE_KEY = "site"  # wg_mesh.aws.ha.LEASE_KEY (not imported: this module runs without Pulumi in the cloud namespace)


def create_lease_table(dynamodb: Any, name: str) -> None:
    """The lease table as the program declares it (wg_mesh/aws/ha.py): on-demand, hash key `site`."""
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": LEASE_KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": LEASE_KEY, "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )


def clients(endpoint: str) -> Any:
    cache: dict[tuple[str, str], Any] = {}

    def client(service: str, region: str) -> Any:
        if (service, region) not in cache:
            cache[service, region] = boto3.client(service, region_name=region, endpoint_url=endpoint, **CREDENTIALS)
        return cache[service, region]

    return client


def handle(client: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Does the request; what the answer carries besides "ok"."""
    op, region, name, value = request["op"], request["region"], request["name"], request["value"]
    if op in ("secret", "secret-binary"):
        sm = client("secretsmanager", region)
        content = (
            {"SecretString": value} if op == "secret" else {"SecretBinary": base64.b64decode(value, validate=True)}
        )
        try:
            sm.put_secret_value(SecretId=name, **content)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
            sm.create_secret(Name=name, **content)
    elif op == "parameter":
        ssm = client("ssm", region)
        ssm.put_parameter(Name=name, Value=value, Type="SecureString", Tier="Standard", Overwrite=True)
    elif op == "associate-address":
        done = client("ec2", region).associate_address(AllocationId=name, InstanceId=value, AllowReassociation=True)
        return {"association_id": done["AssociationId"]}
    elif op == "disassociate-address":
        try:
            client("ec2", region).disassociate_address(AssociationId=name)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "InvalidAssociationID.NotFound":
                raise
            return {"gone": True}
        return {"gone": False}
    elif op == "replace-route":
        cidr, interface = value.split(" ")
        client("ec2", region).replace_route(RouteTableId=name, DestinationCidrBlock=cidr, NetworkInterfaceId=interface)
    elif op == "delete-table":
        client("dynamodb", region).delete_table(TableName=name)
    elif op == "create-table":
        create_lease_table(client("dynamodb", region), name)
    else:
        raise ValueError(f"unknown op {op!r}")
    return {}


def wait_for(endpoint: str, timeout: float) -> None:
    """Until moto answers (it starts in a second or two)."""
    sts = boto3.client("sts", region_name="us-east-1", endpoint_url=endpoint, **CREDENTIALS)
    deadline = time.monotonic() + timeout
    while True:
        try:
            sts.get_caller_identity()
            return
        except (EndpointConnectionError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    endpoint = argv[0]
    try:
        wait_for(endpoint, 30)
    except (BotoCoreError, ConnectionError) as exc:
        print(json.dumps({"ok": False, "error": f"moto at {endpoint} did not answer: {exc}"}), flush=True)
        return 1
    print(json.dumps({"ok": True, "ready": endpoint}), flush=True)
    client = clients(endpoint)
    for line in sys.stdin:
        try:
            print(json.dumps({"ok": True, **handle(client, json.loads(line))}), flush=True)
        except (BotoCoreError, ClientError, ValueError, KeyError) as exc:  # binascii.Error is a ValueError
            print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
