"""Quotas a `pulumi up` would cross half-way: counted from the config, refused by `validate` with the numbers.

AWS (Amazon VPC User Guide, "Amazon VPC quotas", https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html,
read through a copy fetched 2026-09-26):
- "Inbound or outbound rules per security group": 60 by default (quota L-0EA8095F), "enforced separately for
  inbound and outbound rules" and for IPv4 and IPv6; every CIDR of a rule counts as one rule (a rule naming three
  CIDRs is three). A raise applies to both directions; "This quota multiplied by the quota for security groups per
  network interface cannot exceed 1,000".
- "Routes per route table (non-propagated routes)": 500 by default (quota L-93826ACB; it was 50 until AWS raised
  the default), "You can increase this quota up to a maximum of 1,000".
- "Elastic IP addresses per Region": 5 (quota L-0263D0A3) and "VPCs per Region": 5 (quota L-F678F1CE), per account:
  every AWS site holds one Elastic IP (an HA pair shares it) and, without an existing network, one VPC. Sites share
  an account and region when they name the same region and credentials (account_id, profile, assume_role_arn); what
  else the account holds there counts too, but only the mesh's own can be counted here.
A raised (or, in an older account, lower) quota is stated per site under `quotas:` (README, "Config reference"; for
the per-Region quotas, on any site of that account and region).

GCP: the VPC quota page ("Quotas and limits", https://cloud.google.com/vpc/docs/quota) gives static routes per VPC
network and firewall rules per project as per-project quotas shown in the console, with no documented default to
count against; a site adds a fixed handful of firewall rules and one route per remote range. Nothing is refused
there: read the project's quota page before a mesh of hundreds of ranges.

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from wg_mesh.config.reach import address_unknown

if TYPE_CHECKING:
    from wg_mesh.config.model import MeshConfig

AWS_SG_RULES_DEFAULT, AWS_SG_RULES_CODE = 60, "L-0EA8095F"
AWS_ROUTES_DEFAULT, AWS_ROUTES_CODE = 500, "L-93826ACB"
AWS_EIPS_DEFAULT, AWS_EIPS_CODE = 5, "L-0263D0A3"
AWS_VPCS_DEFAULT, AWS_VPCS_CODE = 5, "L-F678F1CE"
AWS_QUOTA_MAX = 1000  # both quotas: routes "up to a maximum of 1,000"; rules x security groups per ENI <= 1,000


class AwsQuotas(BaseModel):
    """An AWS site's account quotas in its region, where they differ from AWS's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    rules_per_security_group: Annotated[int, Field(ge=1, le=AWS_QUOTA_MAX)] = Field(
        default=AWS_SG_RULES_DEFAULT, description=f"Inbound rules per security group ({AWS_SG_RULES_CODE})."
    )
    routes_per_route_table: Annotated[int, Field(ge=1, le=AWS_QUOTA_MAX)] = Field(
        default=AWS_ROUTES_DEFAULT, description=f"Routes per route table ({AWS_ROUTES_CODE})."
    )
    elastic_ips_per_region: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=AWS_EIPS_DEFAULT, description=f"Elastic IP addresses per region ({AWS_EIPS_CODE})."
    )
    vpcs_per_region: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=AWS_VPCS_DEFAULT, description=f"VPCs per region ({AWS_VPCS_CODE})."
    )


def aws_inbound_rules(cfg: MeshConfig, name: str) -> dict[str, int]:
    """The inbound rules of an AWS gateway's security group (wg_mesh.aws), counted as AWS counts them: one per CIDR."""
    site = cfg.site(name)
    peers = [s.name for s in cfg.sites if s.name != name]
    on_path = [p for p in peers if any(name in path.sites and p in path.sites for path in cfg.private_paths)]
    return {
        # each peer's public /32, a private-path peer's private /32 too, a dynamic peer's endpoint_ranges or
        # 0.0.0.0/0 (topology.peer_source_ranges); distinct sources only, as the rule has them
        "WireGuard": len(_wireguard_sources(cfg, peers)) + len(on_path),
        "ICMP echo from path peers": len(on_path),  # topology.path_probe_sources
        "the site's cidrs": len(site.cidrs),
        "monitoring_cidrs": len(cfg.monitoring_cidrs),
    }


def _wireguard_sources(cfg: MeshConfig, peers: list[str]) -> set[str]:
    out: set[str] = set()
    for peer in peers:
        site = cfg.site(peer)
        ranges = getattr(site, "endpoint_ranges", None) or ["0.0.0.0/0"]
        out |= {str(r) for r in ranges} if address_unknown(site) else {peer}
    return out


def aws_routes_per_table(cfg: MeshConfig, name: str) -> tuple[int, bool]:
    """Routes wg-mesh writes into each of the site's route tables (topology.remote_ranges: the overlay and every
    other site's cidrs), plus the default route of a table it creates; and whether it creates the table."""
    created = getattr(cfg.site(name), "route_table_ids", None) is None
    remote = 1 + sum(len(s.cidrs) for s in cfg.sites if s.name != name)
    return remote + (1 if created else 0), created


def problems(cfg: MeshConfig) -> list[str]:
    out = regional_problems(cfg)
    for i, site in enumerate(cfg.sites):
        quotas = getattr(site, "quotas", None)
        if site.cloud != "aws" or not isinstance(quotas, AwsQuotas):
            continue
        where = f"sites[{i}]"
        rules = aws_inbound_rules(cfg, site.name)
        needed, allowed = sum(rules.values()), quotas.rules_per_security_group
        if needed > allowed:
            parts = ", ".join(f"{n} {what}" for what, n in rules.items() if n)
            out.append(
                f"{where}: needs {needed} inbound rules in the security group of {site.name} ({parts}); AWS allows "
                f"{allowed}{_by_default(allowed, AWS_SG_RULES_DEFAULT)} (quota {AWS_SG_RULES_CODE}, Amazon VPC "
                f"quotas): raise it in Service Quotas and set {where}.quotas.rules_per_security_group"
            )
        routes, created = aws_routes_per_table(cfg, site.name)
        if routes > quotas.routes_per_route_table:
            table = "the route table wg-mesh creates" if created else "each of route_table_ids (besides their own)"
            allowed = quotas.routes_per_route_table
            out.append(
                f"{where}: needs {routes} routes in {table} of {site.name} (one per remote range and the overlay"
                f"{', and the default route' if created else ''}); AWS allows {allowed}"
                f"{_by_default(allowed, AWS_ROUTES_DEFAULT)} (quota {AWS_ROUTES_CODE}, Amazon VPC quotas): raise it "
                f"in Service Quotas and set {where}.quotas.routes_per_route_table, or merge remote cidrs"
            )
    return out


def regional_problems(cfg: MeshConfig) -> list[str]:
    """Elastic IPs and VPCs per Region, per account: the mesh's own, by (region, credentials)."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, site in enumerate(cfg.sites):
        if site.cloud == "aws":
            key = tuple(getattr(site, k) for k in ("region", "account_id", "profile", "assume_role_arn"))
            groups.setdefault(key, []).append(i)
    out = []
    for (region, *_), members in groups.items():
        created = [i for i in members if getattr(cfg.sites[i], "vpc_id", None) is None]
        for what, used, field, default, code in (
            ("Elastic IPs", members, "elastic_ips_per_region", AWS_EIPS_DEFAULT, AWS_EIPS_CODE),
            ("VPCs", created, "vpcs_per_region", AWS_VPCS_DEFAULT, AWS_VPCS_CODE),
        ):
            allowed = max(getattr(getattr(cfg.sites[i], "quotas", AwsQuotas()), field) for i in members)
            if len(used) > allowed:
                last = f"sites[{used[allowed]}]"
                names = ", ".join(cfg.sites[i].name for i in used)
                out.append(
                    f"{last}: the mesh needs {len(used)} {what} in {region} in one account ({names}); AWS allows "
                    f"{allowed}{_by_default(allowed, default)} per Region (quota {code}, Amazon VPC quotas): raise it "
                    f"in Service Quotas and set quotas.{field} on one of these sites"
                )
    return out


def _by_default(allowed: int, default: int) -> str:
    return " by default" if allowed == default else " (quotas:)"
