"""A user's program as mypy sees it (pyproject's [tool.mypy] checks this file): MeshArgs with the fixed choices
typed. The lines marked `type: ignore[...]` must stay errors: mypy (strict: warn_unused_ignores) fails on an ignore
that nothing needs, so if a field lost its Literal type (a plain `str` accepts 'azure'), the check would go red."""

import pulumi

from wg_mesh import MeshArgs, PrivatePathArgs, SiteArgs

vpc: pulumi.Output[str] = pulumi.Output.from_input("vpc-0123abcd")

aws: SiteArgs = {
    "name": "aws-use1",
    "cloud": "aws",
    "overlay_ip": "10.255.0.1",
    "cidrs": ["10.10.0.0/16"],
    "region": "us-east-1",
    "vpc_id": vpc,
    "subnet_id": "subnet-0123abcd",
    "route_table_ids": [vpc.apply(lambda _: "rtb-0123abcd")],
}
static: SiteArgs = {
    "name": "vps-fra",
    "cloud": "static",
    "overlay_ip": "10.255.0.3",
    "cidrs": ["192.168.50.0/24"],
    "endpoint": "203.0.113.7",
}
path: PrivatePathArgs = {"name": "dx", "sites": ["aws-use1", "vps-fra"], "kind": "vpn"}
mesh: MeshArgs = {
    "overlay_cidr": "10.255.0.0/24",
    "sites": [aws, static],
    "mtu": "auto",
    "delivery": "live",
    "operator_access": "cloud",
    "private_paths": [path],
}
explicit_mtu: MeshArgs = {"overlay_cidr": "10.255.0.0/24", "sites": [aws, static], "mtu": 1380}

# Each of these is a typo mypy must catch.
azure: SiteArgs = {"name": "a", "cloud": "azure", "overlay_ip": "10.255.0.9", "cidrs": []}  # type: ignore[typeddict-item]
push: MeshArgs = {"overlay_cidr": "10.255.0.0/24", "sites": [], "delivery": "push"}  # type: ignore[typeddict-item]
ssh: MeshArgs = {"overlay_cidr": "10.255.0.0/24", "sites": [], "operator_access": "ssh"}  # type: ignore[typeddict-item]
jumbo: MeshArgs = {"overlay_cidr": "10.255.0.0/24", "sites": [], "mtu": "jumbo"}  # type: ignore[typeddict-item]
mpls: PrivatePathArgs = {"name": "p", "sites": [], "kind": "mpls"}  # type: ignore[typeddict-item]
scope: SiteArgs = {"name": "g", "cloud": "gcp", "overlay_ip": "10.255.0.2", "cidrs": [], "workload_scope": "all"}  # type: ignore[typeddict-item]
