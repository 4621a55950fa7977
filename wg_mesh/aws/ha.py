"""An AWS site with `gateways: 2` (docs/ha.md 5): what the pair shares besides the site's identity.

- The lease table: DynamoDB, on demand, hash key `site` (S); the agents' arbiter (docs/ha.md 5.3). On-demand: two
  gateways renewing or polling a few times a second is a steady, small load, billed per request unit, no capacity to
  plan (https://aws.amazon.com/dynamodb/pricing/on-demand/).
- A DynamoDB gateway VPC endpoint on the gateway subnets' route table (created networks), so that the lease works
  without any public address (docs/ha.md 5.5); "There is no additional charge for using gateway endpoints"
  (https://docs.aws.amazon.com/vpc/latest/userguide/vpce-gateway.html).
- An EC2 interface endpoint in both gateway subnets (created networks): the demoted gateway's API path while it has
  no public address (`ec2_endpoint`; cost in docs/ha.md 12). Without private DNS: the agents call it by its own DNS
  name (agent.json's `ha.ec2_endpoint`), and the rest of the VPC keeps the regional EC2 name (docs/ha.md 5.5).
- The project, stack and site tags on each gateway's primary ENI: the agent's AssociateAddress permission is scoped
  by them (wg_mesh.plan.awsiam.ha_policy). aws_instance has no tag specification for the ENI it creates and default tags
  do not reach it (hashicorp/terraform-provider-aws#45887; terraform-aws-modules/terraform-aws-ec2-instance#478 tags
  it with aws_ec2_tag, as here).
- The `ha` object of each gateway's agent.json (wg_mesh.plan.ha) and each gateway role's HA policy.

Failover itself is the agent's (wg_mesh/gateway/ha*.py): Pulumi creates no EipAssociation for an HA site and leaves the
routes' target to the active gateway.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

from wg_mesh.component import description_kept
from wg_mesh.config import AwsSite
from wg_mesh.plan import awsiam, ha, topology

LEASE_KEY = "site"  # the hash key of the lease item {site, holder, epoch, counter} (HA.md)


def lease_table(name: str, table_name: str, opts: pulumi.ResourceOptions) -> aws.dynamodb.Table:
    return aws.dynamodb.Table(
        f"{name}-lease",
        name=table_name,
        billing_mode="PAY_PER_REQUEST",
        hash_key=LEASE_KEY,
        attributes=[aws.dynamodb.TableAttributeArgs(name=LEASE_KEY, type="S")],
        opts=opts,
    )


def dynamodb_endpoint(
    name: str, site: AwsSite, vpc_id: pulumi.Input[str], route_table_id: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> aws.ec2.VpcEndpoint:
    """A gateway endpoint: a prefix-list route in the gateway subnets' table to DynamoDB in the site's region."""
    return aws.ec2.VpcEndpoint(
        f"{name}-dynamodb",
        vpc_id=vpc_id,
        service_name=f"com.amazonaws.{site.region}.dynamodb",
        vpc_endpoint_type="Gateway",
        route_table_ids=[route_table_id],
        tags={"Name": f"wg-mesh-{site.name}-dynamodb"},
        opts=opts,
    )


def ec2_endpoint(
    name: str,
    site: AwsSite,
    vpc_id: pulumi.Input[str],
    subnet_ids: list[pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
) -> aws.ec2.VpcEndpoint:
    """An EC2 interface endpoint in both gateway subnets (created networks), so that a gateway without a public
    address still reaches EC2 (docs/ha.md 5.5): the demoted one, whose Elastic IP moved away, gets a new
    auto-assigned public IPv4 only "within a few minutes" (Amazon VPC user guide, "Elastic IP address concepts and
    rules": https://docs.aws.amazon.com/vpc/latest/userguide/vpc-eip-overview.html), and a second failover in that
    window must still move the address and the routes. Billed per AZ-hour plus per GB
    (https://aws.amazon.com/privatelink/pricing/): docs/ha.md 12.

    **No private DNS** (issue 32): with it, "a private hosted zone ... contains a record set for the default public
    DNS name for the service for the Region ..., which resolves to the private IP addresses of the endpoint network
    interfaces in the VPC" (EC2 API reference, CreateVpcEndpoint, PrivateDnsEnabled): every workload of the VPC would
    call EC2 through this endpoint, which admits only the gateways, and could not create its own endpoint with
    private DNS ("private-dns-enabled cannot be set because there is already a conflicting DNS domain": one per
    service and VPC). The agents use the endpoint's Regional DNS name instead (`regional_dns_name`, in agent.json),
    which resolves to the endpoint's addresses from any network. Its security group admits HTTPS from the two
    gateway subnets only: nothing else calls it."""
    first = site.cidrs[0]
    sources = [str(topology.gateway_subnet(first)), str(topology.standby_gateway_subnet(first))]
    group = aws.ec2.SecurityGroup(
        f"{name}-ec2-endpoint",
        description=f"wg-mesh {site.name}: HTTPS from the gateway subnets to the EC2 API endpoint",
        vpc_id=vpc_id,
        ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=443, to_port=443, cidr_blocks=sources)],
        tags={"Name": f"wg-mesh-{site.name}-ec2-endpoint"},
        opts=pulumi.ResourceOptions.merge(opts, description_kept()),  # kept across a rename
    )
    return aws.ec2.VpcEndpoint(
        f"{name}-ec2",
        vpc_id=vpc_id,
        service_name=f"com.amazonaws.{site.region}.ec2",
        vpc_endpoint_type="Interface",
        subnet_ids=subnet_ids,
        security_group_ids=[group.id],
        private_dns_enabled=False,
        tags={"Name": f"wg-mesh-{site.name}-ec2"},
        opts=opts,
    )


def regional_dns_name(names: Sequence[str]) -> str:
    """The endpoint's Regional DNS name among its DNS entries: AWS PrivateLink names an interface endpoint
    `vpce-<id>-<suffix>.<service>.<region>.vpce.amazonaws.com` (Regional) and once per zone with `-<zone>` after the
    suffix (Zonal); the Regional one, the shortest, answers in every zone the endpoint is in."""
    regional = sorted((n for n in names if n.startswith("vpce-")), key=len)
    if not regional:
        raise ValueError(f"the EC2 endpoint has no vpce- DNS name among {list(names)}")
    return regional[0]


def endpoint_dns_name(endpoint: aws.ec2.VpcEndpoint) -> pulumi.Output[str]:
    return endpoint.dns_entries.apply(lambda entries: regional_dns_name([e.dns_name or "" for e in entries]))


def tag_interface(prefix: str, site: AwsSite, instance: aws.ec2.Instance, opts: pulumi.ResourceOptions) -> None:
    """The project, stack and site tags on the instance's primary ENI (see the module docstring)."""
    tags = awsiam.site_tags(site.name, pulumi.get_project(), pulumi.get_stack())
    for key, value in tags.items():
        suffix = key.removeprefix("wg-mesh-")
        aws.ec2.Tag(
            f"{prefix}-eni-{suffix}",
            resource_id=instance.primary_network_interface_id,
            key=key,
            value=value,
            opts=opts,
        )


def _ha_object(letter: str, site: AwsSite, table: str, values: dict[str, Any]) -> dict[str, Any]:
    objects = (values["allocation_id"], values["route_table_ids"], values["ec2_endpoint"])
    return ha.aws_ha(letter, site.region, table, *objects)


def ha_object(
    letter: str,
    site: AwsSite,
    table: str,
    allocation_id: pulumi.Input[str],
    route_table_ids: list[pulumi.Input[str]],
    ec2_endpoint: pulumi.Input[str] | None = None,
) -> pulumi.Output[dict[str, Any]]:
    """ec2_endpoint: the EC2 endpoint's Regional DNS name (created networks), else None (the regional EC2 name)."""
    values = pulumi.Output.all(
        allocation_id=allocation_id, route_table_ids=pulumi.Output.all(*route_table_ids), ec2_endpoint=ec2_endpoint
    )
    return values.apply(functools.partial(_ha_object, letter, site, table))


def _policy(site: AwsSite, project: str, stack: str, table: str, tagged: bool, values: dict[str, Any]) -> str:
    return awsiam.ha_policy(
        site.region,
        values["account"],
        site.name,
        project,
        stack,
        values["allocation_id"],
        list(values["route_table_ids"]),
        table,
        tagged,
    )


def policy(
    site: AwsSite,
    table: str,
    allocation_id: pulumi.Input[str],
    route_table_ids: list[pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
    tables_tagged: bool = False,
) -> pulumi.Output[str]:
    """The HA policy (wg_mesh.plan.awsiam.ha_policy) with the account the site's provider deploys to; `tables_tagged`:
    the route tables are wg-mesh's own (a created network), with the provider's default tags."""
    account = aws.get_caller_identity_output(
        opts=pulumi.InvokeOutputOptions(parent=opts.parent, provider=opts.provider)
    ).account_id
    values = pulumi.Output.all(
        account=account, allocation_id=allocation_id, route_table_ids=pulumi.Output.all(*route_table_ids)
    )
    scope = (pulumi.get_project(), pulumi.get_stack())
    return values.apply(functools.partial(_policy, site, *scope, table, tables_tagged))
