"""Rules that involve more than one field or site: zones, identifiers, addressing, overlaps, MTU fit, renames.

Each takes a parsed site's fields or, leniently, the raw input, so that `parse_mesh` can report them together with
field errors in one round. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from wg_mesh.config import addressing, awsnames, credentials, reach, zones
from wg_mesh.config.fields import parse_address, parse_network
from wg_mesh.config.machines import gcp_image_problem
from wg_mesh.config.messages import quote
from wg_mesh.config.sites import (
    DEFAULT_AWS_UNDERLAY_MTU,
    DEFAULT_GCP_INSTANCE_TYPE,
    DEFAULT_GCP_UNDERLAY_MTU,
    DEFAULT_STATIC_UNDERLAY_MTU,
    INTERNET_MTU,
    MAX_GATEWAYS,
    MAX_TUNNEL_MTU,
    MIN_TUNNEL_MTU,
    WIREGUARD_IPV4_OVERHEAD,
    SiteBase,
    StaticSite,
)


@dataclass(frozen=True)
class SiteFacts:
    """The fields mesh-wide checks look at; built from a parsed site or, leniently, from raw input."""

    name: str | None
    overlay_ip: IPv4Address | None
    cidrs: tuple[tuple[int, IPv4Network], ...]
    underlay_mtu: int | None
    endpoint: IPv4Address | None = None  # static sites: the public address known from config

    @classmethod
    def of(cls, site: SiteBase) -> SiteFacts:
        endpoint = site.endpoint if isinstance(site, StaticSite) and isinstance(site.endpoint, IPv4Address) else None
        return cls(site.name, site.overlay_ip, tuple(enumerate(site.cidrs)), site.underlay_mtu, endpoint)

    @classmethod
    def from_raw(cls, raw: Any) -> SiteFacts:
        raw = raw if isinstance(raw, dict) else {}
        name = raw.get("name") if isinstance(raw.get("name"), str) else None
        cidrs = raw.get("cidrs") if isinstance(raw.get("cidrs"), list) else []
        mtu = raw.get("underlay_mtu", _DEFAULT_UNDERLAY_MTU.get(str(raw.get("cloud"))))
        return cls(
            name=name,
            overlay_ip=lenient(parse_address, raw.get("overlay_ip")),
            cidrs=tuple((j, net) for j, c in enumerate(cidrs) if (net := lenient(parse_network, c)) is not None),
            underlay_mtu=mtu if isinstance(mtu, int) and not isinstance(mtu, bool) else None,
            endpoint=lenient(parse_address, raw.get("endpoint")) if raw.get("cloud") == "static" else None,
        )


HA_GATEWAYS = MAX_GATEWAYS  # `gateways: 2`: an active gateway and a standby

_DEFAULT_UNDERLAY_MTU = {
    "aws": DEFAULT_AWS_UNDERLAY_MTU,
    "gcp": DEFAULT_GCP_UNDERLAY_MTU,
    "static": DEFAULT_STATIC_UNDERLAY_MTU,
}


def lenient(parse: Any, value: Any) -> Any:
    try:
        return parse(value)
    except ValueError:
        return None


EXISTING_NETWORK_KEYS = {"aws": ("vpc_id", "subnet_id", "route_table_ids"), "gcp": ("network", "subnetwork")}


def site_rule_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """Rules between fields of one site; `site` is a parsed site's fields or the raw input."""
    problems = []
    region, cloud = site.get("region"), site.get("cloud")
    for key in ("zone", "standby_zone"):
        zone = site.get(key)
        if isinstance(zone, str) and isinstance(region, str):
            check = {"aws": zones.aws_zone_problem, "gcp": zones.gcp_zone_problem}.get(str(cloud))
            zone_problem = check(zone, region) if check is not None else None
            if zone_problem is not None:
                problems.append(f"sites[{i}].{key}: {zone_problem}")
    problems += _identifier_problems(i, site) + gcp_workload_problems(i, site) + gcp_image_problems(i, site)
    problems += ha_site_problems(i, site) + kms_region_problems(i, site) + credentials.account_problems(i, site)
    problems += reach.site_problems(i, site)
    keys = EXISTING_NETWORK_KEYS.get(str(cloud), ())
    given = [key for key in keys if site.get(key) is not None]
    for key in keys:
        if given and key not in given:
            problems.append(
                f"sites[{i}].{key}: required with {', '.join(given)} (an existing network is given by "
                f"{', '.join(keys)} together; leave all out to have wg-mesh create one)"
            )
    if not given and isinstance(cloud, str) and cloud in EXISTING_NETWORK_KEYS and isinstance(site.get("cidrs"), list):
        nets = [lenient(parse_network, c) for c in site["cidrs"]]
        if all(net is not None for net in nets):
            problems += addressing.created_network_problems(f"sites[{i}]", str(cloud), nets)
    return problems


def ha_site_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """Rules of `gateways: 2` within one site (docs/ha.md 5.1, 6.2): where the standby goes."""
    where, cloud, ha = f"sites[{i}]", site.get("cloud"), site.get("gateways") == HA_GATEWAYS
    problems = []
    for key in {"aws": ("standby_zone", "standby_subnet_id"), "gcp": ("standby_zone",)}.get(str(cloud), ()):
        if site.get(key) is not None and not ha:
            problems.append(f"{where}.{key}: only with gateways: {HA_GATEWAYS} (it places the standby gateway)")
    if cloud != "aws" or not ha:
        return problems
    if site.get("subnet_id") is not None:
        if site.get("standby_subnet_id") is None:
            problems.append(
                f"{where}.standby_subnet_id: required with gateways: {HA_GATEWAYS} and subnet_id (the standby "
                "gateway's subnet, in another availability zone than subnet_id's for zone redundancy)"
            )
        if site.get("standby_zone") is not None:
            problems.append(
                f"{where}.standby_zone: in an existing network standby_subnet_id's zone is the standby's zone; "
                "leave standby_zone out"
            )
    elif site.get("standby_subnet_id") is not None:
        problems.append(
            f"{where}.standby_subnet_id: only with an existing network (subnet_id); wg-mesh creates the standby's "
            "subnet in the network it creates (standby_zone chooses its zone)"
        )
    else:
        problems += _one_zone_pair(where, site)
        cidrs = site.get("cidrs")
        first = lenient(parse_network, cidrs[0]) if isinstance(cidrs, list) and cidrs else None
        if first is not None and addressing.standby_gateway_subnet(first) is None:
            problems.append(
                f"{where}.gateways: {HA_GATEWAYS} needs a second gateway subnet in cidrs[0], but {first} is "
                f"a /{first.prefixlen}: make cidrs[0] a /{addressing.GATEWAY_SUBNET_PREFIX - 1} or larger"
            )
    return problems


def _one_zone_pair(where: str, site: Mapping[str, Any]) -> list[str]:
    """AWS, gateways: 2 in the network wg-mesh creates: both gateway subnets in one zone cannot work. The pair's EC2
    API endpoint (wg_mesh.aws.ha.ec2_endpoint) is an interface endpoint in both, and an interface endpoint takes one
    subnet per availability zone ("You can specify more than one subnet in different Availability Zones": Amazon VPC
    User Guide, Interface VPC endpoints; CreateVpcEndpoint answers two in one zone with DuplicateSubnetsInSameZone,
    "Found another VPC endpoint subnet in the availability zone of subnet-..."). Decided here when both are written
    in the same form; a zone name and a zone ID are mapped per account, so not compared (`zone` left out: wg-mesh
    chooses gateway a's zone apart from a written standby_zone, wg_mesh.aws.network). In an existing network no endpoint
    is created and two subnets of one zone work, without zone redundancy; GCP's pair has no such endpoint either."""
    zone = site.get("zone")
    if zone is None or zone != site.get("standby_zone"):
        return []
    return [
        f"{where}.standby_zone: {quote(zone)} is also zone: the EC2 API endpoint wg-mesh creates in the two gateway "
        "subnets takes one subnet per availability zone (CreateVpcEndpoint refuses two in one zone: "
        "DuplicateSubnetsInSameZone); choose another zone of the region, or leave standby_zone out"
    ]


def ha_delivery_problems(sites: Sequence[Mapping[str, Any]], delivery: Any) -> list[str]:
    """`gateways: 2` needs `delivery: live`: only that mode runs wg-mesh-agent, which does the failover."""
    if delivery == "live":
        return []
    return [
        f"sites[{i}].gateways: {HA_GATEWAYS} needs delivery: live (the failover is done by wg-mesh-agent, which runs "
        f"only in live delivery; delivery is {delivery!r})"
        for i, site in enumerate(sites)
        if site.get("gateways") == HA_GATEWAYS and site.get("cloud") in ("aws", "gcp")
    ]


def kms_region_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """A SecureString is encrypted with a KMS key of the parameter's own region and partition."""
    arn, region = site.get("ssm_kms_key_arn"), site.get("region")
    if site.get("cloud") != "aws" or not isinstance(arn, str) or not isinstance(region, str):
        return []
    parts = arn.split(":")
    partition = lenient(awsnames.partition, region)
    if len(parts) < 6 or (parts[1], parts[3]) == (partition or parts[1], region):
        return []  # not an ARN, or not a region: the field's own error says so
    return [f"sites[{i}].ssm_kms_key_arn: the key is in {parts[1]} {parts[3]}, the site in {partition} {region} "
            "(Parameter Store encrypts with a key of the parameter's own region)"]  # fmt: skip


def kms_delivery_problems(sites: Sequence[Mapping[str, Any]], delivery: Any) -> list[str]:
    """`ssm_kms_key_arn` encrypts the private-key parameter, which only `delivery: live` creates."""
    if delivery == "live":
        return []
    return [
        f"sites[{i}].ssm_kms_key_arn: only with delivery: live (it encrypts the SSM parameter holding the private key; "
        f"with delivery {delivery!r} the key is in the user data)"
        for i, site in enumerate(sites)
        if site.get("ssm_kms_key_arn") is not None and site.get("cloud") == "aws"
    ]


def gcp_image_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """A pinned image must be built for the machine type's architecture (arm64 on T2A, C4A, N4A; amd64 elsewhere:
    offline, by series; the program checks it again with the architecture machineTypes.list reports)."""
    image, machine = site.get("image"), site.get("instance_type", DEFAULT_GCP_INSTANCE_TYPE)
    if site.get("cloud") != "gcp" or not isinstance(image, str) or not isinstance(machine, str):
        return []
    problem = gcp_image_problem(image, machine)
    return [f"sites[{i}].image: {problem}"] if problem else []


def gcp_workload_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """A GCP firewall rule targets network tags or service accounts, never both; `network` excludes either."""
    chosen = [key for key in ("workload_tags", "workload_service_accounts") if site.get(key)]
    if site.get("workload_scope") is not None and chosen:
        return [f"sites[{i}].workload_scope: network (every instance) cannot be combined with {chosen[0]}"]
    if len(chosen) == 2:
        return [
            f"sites[{i}].workload_service_accounts: a GCP firewall rule targets network tags or service accounts, "
            "not both: choose workload_tags or workload_service_accounts"
        ]
    return []


def _identifier_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """Lists of identifiers: each one once."""
    ids = site.get("route_table_ids")
    if not isinstance(ids, list):
        return []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for j, value in enumerate(ids):
        if isinstance(value, str) and value in seen:
            problems.append(
                f"sites[{i}].route_table_ids[{j}]: {quote(value)} is already route_table_ids[{seen[value]}]"
            )
        elif isinstance(value, str):
            seen[value] = j
    return problems


def monitoring_problems(cidrs: Sequence[IPv4Network]) -> list[str]:
    total = sum(net.num_addresses for net in cidrs)
    if len(cidrs) > 1 and total >= addressing.HALF_THE_INTERNET:
        return [
            f"monitoring_cidrs: together cover {total} addresses, half the internet or more: node-exporter has no "
            "authentication; list the networks of your Prometheus servers instead"
        ]
    return []


def previous_name_problems(sites: Sequence[Mapping[str, Any]]) -> list[str]:
    """A previous name belongs to one site and is no site's current name: each alias must be unambiguous.

    `sites` are parsed sites' fields or the raw input; values of the wrong type are left to field validation."""
    problems = []
    current = {site.get("name"): i for i, site in enumerate(sites) if isinstance(site.get("name"), str)}
    claimed: dict[str, int] = {}
    for i, site in enumerate(sites):
        previous = site.get("previous_names")
        for j, old in enumerate(previous if isinstance(previous, list) else []):
            if not isinstance(old, str):
                continue
            where = f"sites[{i}].previous_names[{j}]"
            if old in current:
                problems.append(f"{where}: {old!r} is the name of sites[{current[old]}]")
            elif old in claimed:
                problems.append(f"{where}: {old!r} is already a previous name of sites[{claimed[old]}]")
            else:
                claimed[old] = i
    return problems


def _auto_mtu_problems(sites: Sequence[SiteFacts]) -> list[str]:
    """`mtu: auto` must land where an explicit mtu may: MIN_TUNNEL_MTU..MAX_TUNNEL_MTU."""
    known = [(i, s) for i, s in enumerate(sites) if s.underlay_mtu is not None]
    if not known:
        return []
    # the internet's 1500 at most (sites.INTERNET_MTU): a jumbo underlay counts on a private path only
    smallest = min(min(s.underlay_mtu, INTERNET_MTU) for _, s in known if s.underlay_mtu is not None)
    auto = smallest - WIREGUARD_IPV4_OVERHEAD
    if MIN_TUNNEL_MTU <= auto <= MAX_TUNNEL_MTU:
        return []
    names = ", ".join(f"sites[{i}] ({s.name})" for i, s in known if min(s.underlay_mtu or 0, INTERNET_MTU) == smallest)
    if auto < MIN_TUNNEL_MTU:
        return [
            f"mtu: auto gives {auto} (underlay_mtu {smallest} of {names} - {WIREGUARD_IPV4_OVERHEAD}), below the "
            f"minimum {MIN_TUNNEL_MTU}: raise that underlay_mtu to at least {MIN_TUNNEL_MTU + WIREGUARD_IPV4_OVERHEAD}"
        ]
    return [
        f"mtu: auto gives {auto} (underlay_mtu {smallest} of {names} - {WIREGUARD_IPV4_OVERHEAD}), above the "
        f"maximum {MAX_TUNNEL_MTU}: set mtu explicitly (at most {MAX_TUNNEL_MTU})"
    ]


def cross_site_problems(overlay_cidr: IPv4Network, sites: Sequence[SiteFacts], mtu: int | str = "auto") -> list[str]:
    """Problems that involve more than one site: addressing, overlaps, duplicates, MTU fit."""
    problems: list[str] = []
    seen_names: dict[str, int] = {}
    seen_overlay: dict[IPv4Address, int] = {}
    claimed: list[tuple[IPv4Network, str]] = [(overlay_cidr, "overlay_cidr")]

    for i, site in enumerate(sites):
        where = f"sites[{i}]"
        if site.name is not None:
            if site.name in seen_names:
                problems.append(f"{where}.name: {site.name!r} is already used by sites[{seen_names[site.name]}]")
            else:
                seen_names[site.name] = i

        ip = site.overlay_ip
        if ip is not None:
            if ip not in overlay_cidr:
                problems.append(f"{where}.overlay_ip: {ip} is outside overlay_cidr {overlay_cidr}")
            elif overlay_cidr.prefixlen < 31 and ip in (overlay_cidr.network_address, overlay_cidr.broadcast_address):
                kind = "network" if ip == overlay_cidr.network_address else "broadcast"
                problems.append(f"{where}.overlay_ip: {ip} is the {kind} address of overlay_cidr {overlay_cidr}")
            if ip in seen_overlay:
                problems.append(f"{where}.overlay_ip: {ip} is already used by sites[{seen_overlay[ip]}]")
            else:
                seen_overlay[ip] = i

        for j, cidr in site.cidrs:
            here = f"{where}.cidrs[{j}]"
            clash = next(((net, owner) for net, owner in claimed if net.overlaps(cidr)), None)
            if clash is not None:
                problems.append(f"{here}: {cidr} overlaps {clash[1]} {clash[0]}")
            claimed.append((cidr, here))

        if isinstance(mtu, int) and site.underlay_mtu is not None:
            limit = site.underlay_mtu - WIREGUARD_IPV4_OVERHEAD
            if mtu > limit:
                problems.append(
                    f"mtu: {mtu} does not fit {where} ({site.name}): its underlay_mtu {site.underlay_mtu} "
                    f"leaves at most {limit} after WireGuard's {WIREGUARD_IPV4_OVERHEAD} bytes "
                    "(use mtu: auto, or raise that site's underlay_mtu if its path really carries more)"
                )
    if mtu == "auto":
        problems += _auto_mtu_problems(sites)
    ranges = [addressing.Ranges(f"sites[{i}]", s.cidrs, s.endpoint) for i, s in enumerate(sites)]
    problems += addressing.mesh_problems(overlay_cidr, ranges)
    return problems
