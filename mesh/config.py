"""The mesh configuration: one pydantic model for the `wg-mesh:mesh` stack config key.

Everything a user can get wrong is caught here, before a single resource is declared.
`load_mesh` returns a valid `MeshConfig` or raises `ConfigError` carrying *every* problem,
each prefixed with its field path (`sites[1].overlay_ip: ...`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mesh import addressing, awsfacts, zones
from mesh.messages import EXPECTED, bounded, describe, one_line, quote

WIREGUARD_IPV4_OVERHEAD = 60  # outer IPv4 (20) + UDP (8) + WireGuard header (32)
MIN_TUNNEL_MTU = 1280  # IPv6 minimum; WireGuard refuses to be useful below it
MAX_TUNNEL_MTU = 8920  # AWS in-VPC jumbo frames (9001) minus the overhead, rounded down
DEFAULT_AWS_INSTANCE_TYPE = "c6i.2xlarge"
DEFAULT_GCP_INSTANCE_TYPE = "n2-standard-8"
DEFAULT_AWS_UNDERLAY_MTU = 1500  # the internet path out of an internet gateway
DEFAULT_GCP_UNDERLAY_MTU = 1460  # GCP VPC default MTU
DEFAULT_STATIC_UNDERLAY_MTU = 1500
GCP_ARM_MACHINE_SERIES = ("t2a", "c4a")  # Ampere Altra, Google Axion
MAX_SITE_NAME_LENGTH = 32  # leaves room for the suffixes cloud resource names get

_DNS_LABEL = re.compile(r"^[a-z]([a-z0-9-]*[a-z0-9])?$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d+$")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_GCP_IMAGE = re.compile(r"^(https://[a-z.]+/compute/v1/)?[a-z0-9][a-z0-9./-]*[a-z0-9]$")
_GCP_NETWORK_TAG = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_GCP_SERVICE_ACCOUNT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.:-]+\.iam\.gserviceaccount\.com$")
# EC2 instance types are family.size (c6i.2xlarge, u-6tb1.112xlarge, mac2-m2pro.metal); GCE machine types are
# lowercase words and numbers joined by dashes (n2-standard-8, e2-custom-4-8192).
_AWS_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
_GCP_MACHINE_TYPE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")
# EC2 resource IDs: a prefix and 8 or 17 hexadecimal characters (vpc-0a1b2c3d, subnet-0123456789abcdef0).
_AWS_ID = "{}-(?:[0-9a-f]{{8}}|[0-9a-f]{{17}})"
# A GCP network or subnetwork: its name (RFC 1035 label) or a self link / partial URL ending in one.
_GCP_RESOURCE = re.compile(r"(\S+/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


class ConfigError(ValueError):
    """Invalid mesh configuration. `problems` holds one line per problem, field path first."""

    def __init__(self, problems: Sequence[str]):
        self.problems = bounded([one_line(p) for p in problems])
        super().__init__("invalid wg-mesh:mesh configuration:\n" + "\n".join(f"  {p}" for p in self.problems))


# --- field types with messages a human can act on ---------------------------------------


def _parse_network(value: Any) -> Any:
    if isinstance(value, IPv4Network):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected an IPv4 CIDR such as 10.10.0.0/16, got {quote(value)}")
    shown = value if value and value.isprintable() and " " not in value and len(value) <= 60 else quote(value)
    if "/" not in value:
        raise ValueError(f"{shown} has no prefix length (write it as a CIDR, e.g. {shown}/16)")
    try:
        return IPv4Network(value, strict=True)
    except ValueError as exc:
        try:
            loose = IPv4Network(value, strict=False)
        except ValueError:
            raise ValueError(f"{shown} is not an IPv4 CIDR ({quote(str(exc))})") from None
        raise ValueError(f"{value} has host bits set (did you mean {loose}?)") from None


def _parse_address(value: Any) -> Any:
    if isinstance(value, IPv4Address):
        return value
    try:
        return IPv4Address(str(value))
    except ValueError:
        raise ValueError(f"{quote(value)} is not an IPv4 address") from None


Cidr = Annotated[IPv4Network, BeforeValidator(_parse_network)]
Address = Annotated[IPv4Address, BeforeValidator(_parse_address)]
Port = Annotated[int, Field(ge=1, le=65535)]


def _not_the_internet(net: IPv4Network) -> IPv4Network:
    if net.prefixlen == 0:
        raise ValueError(
            f"{net} would open node-exporter (no authentication, no TLS) to the whole internet; "
            "list the networks of your Prometheus servers instead"
        )
    return net


def _usable(net: IPv4Network) -> IPv4Network:
    problem = addressing.cidr_problem(net)
    if problem is not None:
        raise ValueError(problem)
    return net


def _reachable(ip: IPv4Address) -> IPv4Address:
    problem = addressing.endpoint_problem(ip)
    if problem is not None:
        raise ValueError(problem)
    return ip


MonitoringCidr = Annotated[
    IPv4Network, BeforeValidator(_parse_network), AfterValidator(_not_the_internet), AfterValidator(_usable)
]
# A site's network or the overlay: routed by every gateway, so no special-purpose range and not half the internet.
UsableCidr = Annotated[IPv4Network, BeforeValidator(_parse_network), AfterValidator(_usable)]
Endpoint = Annotated[IPv4Address, BeforeValidator(_parse_address), AfterValidator(_reachable)]


def _pattern(regex: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"{quote(value)} is not {what}")
        return value

    return AfterValidator(check)


class _Strict(BaseModel):
    # strict: YAML's `yes`/`true` are booleans and must not become 1 in an integer field; "1400" is not 1400.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --- sites ------------------------------------------------------------------------------


class _SiteBase(_Strict):
    name: str
    overlay_ip: Address
    cidrs: list[UsableCidr] = Field(min_length=1)
    masquerade: bool | None = None  # None: inherit the mesh-wide setting
    key_epoch: int = Field(default=0, ge=0)
    underlay_mtu: int = DEFAULT_STATIC_UNDERLAY_MTU  # each cloud sets its own default and bounds
    # Names this site had before: its address, key and other resources are carried over (Pulumi aliases).
    previous_names: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, name: str) -> str:
        if len(name) > MAX_SITE_NAME_LENGTH:
            raise ValueError(f"{quote(name)} is longer than {MAX_SITE_NAME_LENGTH} characters")
        if not _DNS_LABEL.fullmatch(name):
            raise ValueError(
                f"{quote(name)} is not a DNS label (lowercase letters, digits and '-', starting with a letter)"
            )
        return name

    @field_validator("previous_names")
    @classmethod
    def _previous_dns_labels(cls, names: list[str]) -> list[str]:
        for name in names:
            cls._dns_label(name)
        return names


_ROLE_ARN = re.compile(r"^arn:(aws|aws-us-gov|aws-cn):iam::\d{12}:role/[\w+=,.@/-]{1,512}$")


def _role_arn(arn: str) -> str:
    if not _ROLE_ARN.match(arn):
        raise ValueError(f"{arn!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/NAME)")
    return arn


class AwsSite(_SiteBase):
    cloud: Literal["aws"]
    region: str
    zone: str | None = None  # availability zone of the gateway subnet; AWS picks one when unset
    instance_type: Annotated[str, _pattern(_AWS_INSTANCE_TYPE, "an EC2 instance type (e.g. c6i.2xlarge)")] = (
        DEFAULT_AWS_INSTANCE_TYPE
    )
    underlay_mtu: int = Field(default=DEFAULT_AWS_UNDERLAY_MTU, ge=1280, le=9001)
    vpc_id: Annotated[str, _pattern(re.compile(_AWS_ID.format("vpc")), "a VPC id (vpc-0123abcd)")] | None = None
    subnet_id: (
        Annotated[str, _pattern(re.compile(_AWS_ID.format("subnet")), "a subnet id (subnet-0123abcd)")] | None
    ) = None
    route_table_ids: (
        list[Annotated[str, _pattern(re.compile(_AWS_ID.format("rtb")), "a route table id (rtb-0123abcd)")]] | None
    ) = Field(default=None, min_length=1)
    # Per-site credentials for the site's aws.Provider: a named profile, a role to assume, the account it must be.
    profile: str | None = Field(default=None, min_length=1)
    assume_role_arn: Annotated[str, AfterValidator(_role_arn)] | None = None
    account_id: Annotated[str, Field(pattern=r"^\d{12}$")] | None = None
    # An AMI id or an Ubuntu serial; None: the newest Ubuntu 24.04 when the gateway is created, then kept.
    image: Annotated[str, AfterValidator(awsfacts.check_image)] | None = None

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        if not _AWS_REGION.fullmatch(region):
            raise ValueError(f"{quote(region)} is not an AWS region name (e.g. us-east-1)")
        awsfacts.partition(region)  # the isolated partitions have no Ubuntu AMIs: refused here
        return region

    @property
    def zone_name(self) -> str | None:
        """`zone` when it is a zone name (Subnet.availability_zone), else None."""
        return self.zone if self.zone is not None and zones.aws_zone_kind(self.zone, self.region) == "name" else None

    @property
    def zone_id(self) -> str | None:
        """`zone` when it is a zone ID such as use1-az1 (Subnet.availability_zone_id), else None."""
        return self.zone if self.zone is not None and zones.aws_zone_kind(self.zone, self.region) == "id" else None

    @property
    def uses_existing_network(self) -> bool:
        return self.vpc_id is not None

    @model_validator(mode="after")
    def _role_in_the_sites_partition(self) -> AwsSite:
        if self.assume_role_arn is not None:
            role_partition, region_partition = self.assume_role_arn.split(":")[1], awsfacts.partition(self.region)
            if role_partition != region_partition:
                raise ValueError(
                    f"assume_role_arn: {self.assume_role_arn} is in partition {role_partition}, "
                    f"region {self.region} in {region_partition}"
                )
        return self


class GcpSite(_SiteBase):
    cloud: Literal["gcp"]
    project: str
    region: str
    zone: str
    instance_type: Annotated[str, _pattern(_GCP_MACHINE_TYPE, "a GCE machine type (e.g. n2-standard-8)")] = (
        DEFAULT_GCP_INSTANCE_TYPE
    )
    underlay_mtu: int = Field(default=DEFAULT_GCP_UNDERLAY_MTU, ge=1300, le=8896)  # GCP VPC MTU range
    network: Annotated[str, _pattern(_GCP_RESOURCE, "a GCP network name or self link")] | None = None
    subnetwork: Annotated[str, _pattern(_GCP_RESOURCE, "a GCP subnetwork name or self link")] | None = None
    # Deploy this site as that service account (the caller needs roles/iam.serviceAccountTokenCreator on it).
    impersonate_service_account: str | None = None
    # Which instances of the network accept traffic from the other sites: those with these network tags, or running
    # as these service accounts, or (workload_scope: network) every instance. None: no such rule (admit the remote
    # ranges with your own firewall rules, as on AWS).
    # The boot image, pinned (e.g. ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130); None: the Ubuntu 24.04 LTS
    # family of the machine's architecture, resolved when an instance is created.
    image: str | None = None
    workload_tags: list[str] = Field(default_factory=list)
    workload_service_accounts: list[str] = Field(default_factory=list)
    workload_scope: Literal["network"] | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, image: str | None) -> str | None:
        if image is not None and not _GCP_IMAGE.match(image):
            raise ValueError(
                f"{image!r} is not a GCE image reference (PROJECT/IMAGE, projects/PROJECT/global/images/IMAGE, "
                "or its URL)"
            )
        return image

    @field_validator("workload_tags")
    @classmethod
    def _network_tags(cls, tags: list[str]) -> list[str]:
        bad = [tag for tag in tags if not _GCP_NETWORK_TAG.match(tag)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a GCP network tag (lowercase letters, digits, '-', at most 63)")
        return tags

    @field_validator("workload_service_accounts")
    @classmethod
    def _workload_service_accounts(cls, emails: list[str]) -> list[str]:
        bad = [email for email in emails if not _GCP_SERVICE_ACCOUNT.match(email)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a service account email (NAME@PROJECT.iam.gserviceaccount.com)")
        return emails

    @field_validator("impersonate_service_account")
    @classmethod
    def _service_account(cls, email: str | None) -> str | None:
        if email is not None and not _GCP_SERVICE_ACCOUNT.match(email):
            raise ValueError(f"{email!r} is not a service account email (NAME@PROJECT.iam.gserviceaccount.com)")
        return email

    @field_validator("project")
    @classmethod
    def _project(cls, project: str) -> str:
        if not _GCP_PROJECT.fullmatch(project):
            raise ValueError(f"{quote(project)} is not a GCP project id (6-30 lowercase letters, digits, '-')")
        return project

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        if not _GCP_REGION.fullmatch(region):
            raise ValueError(f"{quote(region)} is not a GCP region name (e.g. europe-west3)")
        return region

    @property
    def uses_existing_network(self) -> bool:
        return self.network is not None


class StaticSite(_SiteBase):
    """A bare-metal or VPS host that already exists: it gets a config, not resources."""

    cloud: Literal["static"]
    endpoint: Endpoint
    underlay_mtu: int = Field(default=DEFAULT_STATIC_UNDERLAY_MTU, ge=1280, le=9216)


Site = Annotated[AwsSite | GcpSite | StaticSite, Field(discriminator="cloud")]
CloudSite = AwsSite | GcpSite


# --- the mesh ---------------------------------------------------------------------------


class MeshConfig(_Strict):
    overlay_cidr: UsableCidr
    listen_port: Port = 51820
    mtu: Literal["auto"] | Annotated[int, Field(ge=MIN_TUNNEL_MTU, le=MAX_TUNNEL_MTU)] = "auto"
    persistent_keepalive: int = Field(default=25, ge=0, le=65535)
    masquerade: bool = False
    sites: list[Site] = Field(min_length=2)
    # Who may scrape the gateways' node-exporter on exporter_port (TCP), besides the mesh itself: none by default.
    monitoring_cidrs: list[MonitoringCidr] = Field(default_factory=list)
    exporter_port: Port = 9100
    # cloud: operators reach gateways through the cloud's own access path (GCP: IAP TCP forwarding + OS Login;
    # AWS: Session Manager), never through a port open to the internet. none: no access path at all.
    operator_access: Literal["none", "cloud"] = "none"
    # Pulumi `protect` on what other environments remember: public addresses and keys (on in Pulumi.prod.yaml).
    protect: bool = False

    @model_validator(mode="after")
    def _mesh_wide(self) -> MeshConfig:
        problems = [p for i, site in enumerate(self.sites) for p in site_rule_problems(i, site.__dict__)]
        problems += previous_name_problems([site.__dict__ for site in self.sites])
        problems += cross_site_problems(self.overlay_cidr, [SiteFacts.of(s) for s in self.sites], self.mtu)
        problems += monitoring_problems(self.monitoring_cidrs)
        if problems:
            raise ConfigError(problems)
        return self

    def site(self, name: str) -> AwsSite | GcpSite | StaticSite:
        for site in self.sites:
            if site.name == name:
                return site
        raise KeyError(name)

    def masquerades(self, site: _SiteBase) -> bool:
        return self.masquerade if site.masquerade is None else site.masquerade


@dataclass(frozen=True)
class SiteFacts:
    """The fields mesh-wide checks look at; built from a parsed site or, leniently, from raw input."""

    name: str | None
    overlay_ip: IPv4Address | None
    cidrs: tuple[tuple[int, IPv4Network], ...]
    underlay_mtu: int | None
    endpoint: IPv4Address | None = None  # static sites: the public address known from config

    @classmethod
    def of(cls, site: _SiteBase) -> SiteFacts:
        endpoint = site.endpoint if isinstance(site, StaticSite) else None
        return cls(site.name, site.overlay_ip, tuple(enumerate(site.cidrs)), site.underlay_mtu, endpoint)

    @classmethod
    def from_raw(cls, raw: Any) -> SiteFacts:
        raw = raw if isinstance(raw, dict) else {}
        name = raw.get("name") if isinstance(raw.get("name"), str) else None
        cidrs = raw.get("cidrs") if isinstance(raw.get("cidrs"), list) else []
        mtu = raw.get("underlay_mtu", _DEFAULT_UNDERLAY_MTU.get(str(raw.get("cloud"))))
        return cls(
            name=name,
            overlay_ip=_lenient(_parse_address, raw.get("overlay_ip")),
            cidrs=tuple((j, net) for j, c in enumerate(cidrs) if (net := _lenient(_parse_network, c)) is not None),
            underlay_mtu=mtu if isinstance(mtu, int) and not isinstance(mtu, bool) else None,
            endpoint=_lenient(_parse_address, raw.get("endpoint")) if raw.get("cloud") == "static" else None,
        )


_DEFAULT_UNDERLAY_MTU = {
    "aws": DEFAULT_AWS_UNDERLAY_MTU,
    "gcp": DEFAULT_GCP_UNDERLAY_MTU,
    "static": DEFAULT_STATIC_UNDERLAY_MTU,
}


def _lenient(parse: Any, value: Any) -> Any:
    try:
        return parse(value)
    except ValueError:
        return None


EXISTING_NETWORK_KEYS = {"aws": ("vpc_id", "subnet_id", "route_table_ids"), "gcp": ("network", "subnetwork")}


def site_rule_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """Rules between fields of one site; `site` is a parsed site's fields or the raw input."""
    problems = []
    zone, region, cloud = site.get("zone"), site.get("region"), site.get("cloud")
    if isinstance(zone, str) and isinstance(region, str):
        check = {"aws": zones.aws_zone_problem, "gcp": zones.gcp_zone_problem}.get(str(cloud))
        zone_problem = check(zone, region) if check is not None else None
        if zone_problem is not None:
            problems.append(f"sites[{i}].zone: {zone_problem}")
    problems += _identifier_problems(i, site) + gcp_workload_problems(i, site) + gcp_image_problems(i, site)
    keys = EXISTING_NETWORK_KEYS.get(str(cloud), ())
    given = [key for key in keys if site.get(key) is not None]
    for key in keys:
        if given and key not in given:
            problems.append(
                f"sites[{i}].{key}: required with {', '.join(given)} (an existing network is given by "
                f"{', '.join(keys)} together; leave all out to have wg-mesh create one)"
            )
    if not given and isinstance(cloud, str) and cloud in EXISTING_NETWORK_KEYS and isinstance(site.get("cidrs"), list):
        nets = [_lenient(_parse_network, c) for c in site["cidrs"]]
        if all(net is not None for net in nets):
            problems += addressing.created_network_problems(f"sites[{i}]", str(cloud), nets)
    return problems


def gcp_image_problems(i: int, site: Mapping[str, Any]) -> list[str]:
    """A pinned image must be built for the machine type's architecture (arm64 on T2A/C4A, amd64 elsewhere)."""
    image, machine = site.get("image"), site.get("instance_type", DEFAULT_GCP_INSTANCE_TYPE)
    if site.get("cloud") != "gcp" or not isinstance(image, str) or not isinstance(machine, str):
        return []
    arch = "arm64" if machine.split("-", 1)[0] in GCP_ARM_MACHINE_SERIES else "amd64"
    other = "amd64" if arch == "arm64" else "arm64"
    return [f"sites[{i}].image: {image} is an {other} image, but {machine} is {arch}"] if other in image else []


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
    smallest = min(s.underlay_mtu for _, s in known if s.underlay_mtu is not None)
    auto = smallest - WIREGUARD_IPV4_OVERHEAD
    if MIN_TUNNEL_MTU <= auto <= MAX_TUNNEL_MTU:
        return []
    names = ", ".join(f"sites[{i}] ({s.name})" for i, s in known if s.underlay_mtu == smallest)
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


# --- loading and error reporting ---------------------------------------------------------

_SITE_FIELDS = {
    tag: set(model.model_fields) for tag, model in (("aws", AwsSite), ("gcp", GcpSite), ("static", StaticSite))
}


def _format_loc(loc: Iterable[int | str]) -> str:
    out = ""
    parts = list(loc)
    for k, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif k > 0 and isinstance(parts[k - 1], int) and part in _SITE_FIELDS and parts[0] == "sites":
            continue  # pydantic's discriminator tag: not something the user wrote
        elif part.startswith("function-") or part in ("literal['auto']", "constrained-int", "int"):
            continue  # union branch labels
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


def _format_error(err: Mapping[str, Any], site_tags: Mapping[int, str]) -> str:
    loc = tuple(err["loc"])
    path = _format_loc(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        known: Iterable[str] = MeshConfig.model_fields
        if len(loc) >= 2 and loc[0] == "sites" and isinstance(loc[1], int):
            known = _SITE_FIELDS.get(site_tags.get(loc[1], ""), set().union(*_SITE_FIELDS.values()))
        hint = difflib.get_close_matches(key, list(known), n=1)
        return f"{path}: unknown key" + (f" (did you mean {hint[0]!r}?)" if hint else "")
    if kind == "missing":
        return f"{path}: required"
    if loc[:1] == ("mtu",):
        return f"mtu: {quote(err['input'])} is neither 'auto' nor an integer in {MIN_TUNNEL_MTU}..{MAX_TUNNEL_MTU}"
    if kind in EXPECTED:
        return f"{path}: expected {EXPECTED[kind]}, got {describe(err.get('input'))}"
    if kind in ("less_than_equal", "greater_than_equal") and isinstance(err.get("input"), int):
        bound = err["ctx"].get("le", err["ctx"].get("ge"))
        side = "above the maximum" if kind == "less_than_equal" else "below the minimum"
        return f"{path}: {err['input']} is {side} {bound}"
    if loc == ("sites",) and kind == "too_short":
        return f"sites: a mesh needs at least two sites, got {len(err['input'])}"
    if kind == "union_tag_invalid":
        return f"{path}.cloud: {quote(err['input'].get('cloud'))} is not one of 'aws', 'gcp', 'static'"
    if kind == "union_tag_not_found":
        return f"{path}.cloud: required (one of 'aws', 'gcp', 'static')"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return f"{path}: {msg}"


def _problems_from(exc: ValidationError, raw_sites: Any) -> list[str]:
    tags = {}
    if isinstance(raw_sites, list):
        tags = {i: str(s.get("cloud")) for i, s in enumerate(raw_sites) if isinstance(s, dict)}
    problems: list[str] = []
    for err in exc.errors():
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, ConfigError):
            problems.extend(ctx_error.problems)
        else:
            problem = _format_error(err, tags)
            if problem not in problems:
                problems.append(problem)
    return problems


def load_mesh(raw: Any, *, check_limits: bool = True) -> MeshConfig:
    """Validate the raw `wg-mesh:mesh` value; raise ConfigError listing every problem.

    check_limits: also refuse a mesh whose gateways' user data would not fit the clouds' limits (the
    benchmarks turn it off to chart sizes past them)."""
    if not isinstance(raw, dict):
        raise ConfigError([f"(top level): expected a mapping with overlay_cidr and sites, got {type(raw).__name__}"])
    try:
        cfg = MeshConfig.model_validate(raw)
    except ValidationError as exc:
        problems = _problems_from(exc, raw.get("sites"))
    else:
        if check_limits:
            from mesh.userdata import size_problems  # renders user data: imports topology, which imports this

            if limits := size_problems(cfg):
                raise ConfigError(limits)
        return cfg

    # Field errors stop pydantic before the mesh-wide checks. Run those on whatever fields did
    # parse, so that a user fixing a typo is not surprised by a second round of problems.
    overlay = _lenient(_parse_network, raw.get("overlay_cidr"))
    raw_sites = raw.get("sites")
    if isinstance(raw_sites, list):
        rules = [p for i, site in enumerate(raw_sites) if isinstance(site, dict) for p in site_rule_problems(i, site)]
        problems.extend(p for p in rules if p not in problems)
        renames = previous_name_problems([site if isinstance(site, dict) else {} for site in raw_sites])
        problems.extend(p for p in renames if p not in problems)
    if overlay is not None and isinstance(raw_sites, list):
        mtu = raw.get("mtu", "auto")
        valid = isinstance(mtu, int) and not isinstance(mtu, bool) and MIN_TUNNEL_MTU <= mtu <= MAX_TUNNEL_MTU
        mtu = mtu if valid or mtu == "auto" else "invalid"  # invalid: reported above, no MTU checks
        facts = [SiteFacts.from_raw(site) for site in raw_sites]
        problems.extend(p for p in cross_site_problems(overlay, facts, mtu) if p not in problems)
    raise ConfigError(problems)


def summary(cfg: MeshConfig) -> str:
    """One line describing a valid mesh, for `python -m mesh validate`."""
    from mesh.topology import tunnel_mtu

    clouds = ", ".join(f"{s.name} ({s.cloud})" for s in cfg.sites)
    return (
        f"ok: {len(cfg.sites)} sites [{clouds}], overlay {cfg.overlay_cidr}, "
        f"port {cfg.listen_port}/udp, tunnel MTU {tunnel_mtu(cfg)}"
    )


__all__ = [
    "AwsSite",
    "CloudSite",
    "ConfigError",
    "GcpSite",
    "MeshConfig",
    "Site",
    "StaticSite",
    "cross_site_problems",
    "load_mesh",
    "summary",
]
