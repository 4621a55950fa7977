"""Generated full meshes of N sites (mixed AWS / GCP / static) and what they ask of the clouds' quotas.

Pure: no Pulumi import. The quota curve is computed with the same topology functions the program uses
to declare its routes and firewall rules (`topology.remote_ranges`, `topology.peer_names`); the scale
benchmark checks it against what the program really declared under mocks at the measured sizes.
"""

from __future__ import annotations

import math
from ipaddress import IPv4Network
from typing import Any

from wg_mesh.config import AwsSite, GcpSite, MeshConfig
from wg_mesh.config.quotas import AWS_QUOTA_MAX, AWS_ROUTES_DEFAULT, AWS_SG_RULES_DEFAULT
from wg_mesh.plan import topology, userdata
from wg_mesh.plan.validate import load_mesh

AWS_REGIONS = ("us-east-1", "eu-central-1", "ap-southeast-1", "us-west-2")
GCP_LOCATIONS = (("europe-west3", "europe-west3-a"), ("us-central1", "us-central1-a"), ("asia-east1", "asia-east1-b"))
OVERLAY_BASE = "10.200.0.0"
RESERVED_SECOND_OCTETS = range(200, 204)  # the overlay lives in 10.200.0.0/22 at most

# Default quotas: AWS's from wg_mesh.config.quotas (validate's, with their sources); GCP's as the scale issue gave it.
AWS_ROUTES_PER_TABLE = AWS_ROUTES_DEFAULT
GCP_ROUTES_PER_NETWORK = 250
AWS_SG_INBOUND_RULES = AWS_SG_RULES_DEFAULT


def _overlay(n: int) -> str:
    prefix = min(24, 32 - math.ceil(math.log2(n + 2)))
    return f"{OVERLAY_BASE}/{prefix}"


def _cloud_cidr(k: int) -> str:
    octets = [o for o in range(256) if o not in RESERVED_SECOND_OCTETS]
    if k >= len(octets):
        raise ValueError("too many cloud sites for 10.0.0.0/8 in /16s")
    return f"10.{octets[k]}.0.0/16"


def _static_cidr(k: int) -> str:
    if k < 256:
        return f"192.168.{k}.0/24"
    k -= 256
    return f"172.{16 + k // 256}.{k % 256}.0/24"


def _static_endpoint(k: int) -> str:
    nets = ("203.0.113", "198.51.100", "192.0.2")
    return f"{nets[k // 250]}.{k % 250 + 2}"


def generate_mesh(n: int, raised_quotas: bool = False) -> dict[str, Any]:
    """The raw `wg-mesh:mesh` value of a full mesh of n sites: AWS, GCP, static, AWS, GCP, ... (one CIDR each).

    raised_quotas: each AWS site declares the largest quotas `quotas:` accepts (an account that raised them), so
    that a large mesh passes validate's quota rules and only its other limits (user data sizes) decide."""
    if n < 2:
        raise ValueError("a mesh needs at least two sites")
    overlay = IPv4Network(_overlay(n))
    sites: list[dict[str, Any]] = []
    clouds = statics = 0
    for i in range(n):
        kind = ("aws", "gcp", "static")[i % 3]
        site: dict[str, Any] = {"name": f"{kind}-{i:03d}", "cloud": kind, "overlay_ip": str(overlay[i + 1])}
        if kind == "aws":
            site |= {"region": AWS_REGIONS[(i // 3) % len(AWS_REGIONS)], "cidrs": [_cloud_cidr(clouds)]}
            if raised_quotas:
                site["quotas"] = {"rules_per_security_group": AWS_QUOTA_MAX, "routes_per_route_table": AWS_QUOTA_MAX,
                                  "elastic_ips_per_region": 1000, "vpcs_per_region": 1000}  # fmt: skip
            clouds += 1
        elif kind == "gcp":
            region, zone = GCP_LOCATIONS[(i // 3) % len(GCP_LOCATIONS)]
            site |= {"project": "wg-mesh-bench", "region": region, "zone": zone, "cidrs": [_cloud_cidr(clouds)]}
            clouds += 1
        else:
            site |= {"endpoint": _static_endpoint(statics), "cidrs": [_static_cidr(statics)]}
            statics += 1
        sites.append(site)
    return {"overlay_cidr": str(overlay), "listen_port": 51820, "mtu": "auto", "sites": sites}


def quota_usage(cfg: MeshConfig, first_of_each_cloud: bool = False) -> dict[str, int]:
    """The largest per-table / per-network / per-group counts the program declares for this mesh.

    AWS: one route per remote range in each of the site's route tables, plus the internet gateway's
    default route in the table wg-mesh creates; one security-group ingress entry per peer /32 and per
    site CIDR. GCP: one route per remote range in the site's network.
    """
    aws = [s for s in cfg.sites if isinstance(s, AwsSite)]
    gcp = [s for s in cfg.sites if isinstance(s, GcpSite)]
    weight = {s.name: 1 for s in (*aws, *gcp)}
    if first_of_each_cloud:  # every site of a generated mesh holds one CIDR: all its tables have the same size
        weight = {**({aws[0].name: len(aws)} if aws else {}), **({gcp[0].name: len(gcp)} if gcp else {})}
        aws, gcp = aws[:1], gcp[:1]
    aws_table = max(
        (len(topology.remote_ranges(cfg, s.name)) + (0 if s.uses_existing_network else 1) for s in aws), default=0
    )
    gcp_network = max((len(topology.remote_ranges(cfg, s.name)) for s in gcp), default=0)
    sg_inbound = max((len(topology.peer_names(cfg, s.name)) + len(s.cidrs) for s in aws), default=0)
    total_routes = sum(
        len(topology.remote_ranges(cfg, s.name)) * len(s.route_table_ids or [None]) * weight[s.name] for s in aws
    ) + sum(len(topology.remote_ranges(cfg, s.name)) * weight[s.name] for s in gcp)
    return {
        "aws_routes_per_table": aws_table,
        "gcp_routes_per_network": gcp_network,
        "aws_sg_inbound_entries": sg_inbound,
        "mesh_routes_total": total_routes,
    }


def usage_for(n: int) -> dict[str, int]:
    return {"n": n, **quota_usage(load_mesh(generate_mesh(n), check_limits=False))}


USER_DATA_KEYS = {"aws": "aws_user_data_bytes", "gcp": "gcp_user_data_bytes"}


def user_data_usage(cfg: MeshConfig) -> dict[str, int]:
    """The largest gateway user data per cloud, in the bytes the cloud counts (AWS gzip'd, GCP plain text)."""
    out = {}
    for cloud, key in USER_DATA_KEYS.items():
        found = userdata.largest(cfg, cloud, exhaustive=False, exact=True)
        out[key] = found[2] if found is not None else 0
    return out


def user_data_curve(n_max: int, step: int = 8) -> list[dict[str, int]]:
    """user_data_usage at N = 2, step, 2*step, ... n_max (rendering costs ~0.1-0.5 s a mesh, so not every N)."""
    full = load_mesh(generate_mesh(n_max), check_limits=False)
    ns = sorted({2, *range(step, n_max + 1, step), n_max})
    return [{"n": n, **user_data_usage(full.model_copy(update={"sites": full.sites[:n]}))} for n in ns]


def user_data_crossing(n_max: int, key: str, limit: int) -> int | None:
    """The smallest N (2..n_max) whose user data passes the limit, by bisection (it grows with N)."""
    full = load_mesh(generate_mesh(n_max), check_limits=False)

    cloud = next(c for c, k in USER_DATA_KEYS.items() if k == key)

    def over(n: int) -> bool:
        found = userdata.largest(full.model_copy(update={"sites": full.sites[:n]}), cloud, exhaustive=False)
        return found is not None and found[2] > limit

    if not over(n_max):
        return None
    lo, hi = 2, n_max  # over(hi) holds
    if over(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if over(mid) else (mid, hi)
    return hi


def quota_curve(n_max: int) -> list[dict[str, int]]:
    """usage_for(n) for every n in 2..n_max, cheaply: site i of a generated mesh does not depend on n (only the
    overlay's prefix length does, which no count depends on), so the largest mesh is validated once and sliced,
    and one site per cloud stands for all (each holds one CIDR). The scale bench checks the curve against the
    program's own declarations at the measured sizes."""
    full = load_mesh(generate_mesh(n_max), check_limits=False)
    return [
        {"n": n, **quota_usage(full.model_copy(update={"sites": full.sites[:n]}), first_of_each_cloud=True)}
        for n in range(2, n_max + 1)
    ]


def first_crossing(curve: list[dict[str, int]], key: str, quota: int) -> int | None:
    """The smallest N whose usage exceeds the quota (None if none in the curve)."""
    return next((row["n"] for row in curve if row[key] > quota), None)
