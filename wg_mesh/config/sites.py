"""The sites of a mesh: field types with messages a human can act on, and one pydantic model per cloud.

Part of the config model (wg_mesh.config composes these into `MeshConfig`); pure, no Pulumi.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

from wg_mesh.config import addressing, awsnames, credentials, zones
from wg_mesh.config.messages import bounded, one_line, quote
from wg_mesh.config.quotas import AwsQuotas

WIREGUARD_IPV4_OVERHEAD = 60  # outer IPv4 (20) + UDP (8) + WireGuard header (32)
# The internet carries 1500-byte packets at most, whatever a network's own MTU: a GCP network at 8896 sends
# "packets larger than 1500 bytes ... dropped with an ICMP Fragmentation-Needed message if the packets are routed to
# the Internet" (pulumi-gcp compute.Network, `mtu`). A jumbo underlay counts only on a private path
# (wg_mesh.config.underlay).
INTERNET_MTU = 1500
MIN_TUNNEL_MTU = 1280  # IPv6 minimum; WireGuard refuses to be useful below it
MAX_TUNNEL_MTU = 8920  # AWS in-VPC jumbo frames (9001) minus the overhead, rounded down
# The mesh's `mtu` is the internet tunnel's: what the internet carries less WireGuard's overhead (1440). A larger one
# is sent and dropped ("Fragmentation-Needed" above); a jumbo path's MTU goes in private_paths[].mtu.
MAX_INTERNET_TUNNEL_MTU = INTERNET_MTU - WIREGUARD_IPV4_OVERHEAD
DEFAULT_AWS_INSTANCE_TYPE = "c6i.2xlarge"
DEFAULT_GCP_INSTANCE_TYPE = "n2-standard-8"
DEFAULT_AWS_UNDERLAY_MTU = 1500  # the internet path out of an internet gateway
DEFAULT_GCP_UNDERLAY_MTU = 1460  # GCP VPC default MTU
DEFAULT_STATIC_UNDERLAY_MTU = 1500
GCP_ARM_MACHINE_SERIES = ("t2a", "c4a")  # Ampere Altra, Google Axion
MAX_SITE_NAME_LENGTH = 32  # leaves room for the suffixes cloud resource names get
MAX_GATEWAYS = 2  # issue 11: an active gateway and a standby (docs/ha.md)

_DNS_LABEL = re.compile(r"^[a-z]([a-z0-9-]*[a-z0-9])?$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d+$")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_GCP_IMAGE = re.compile(r"^(https://[a-z.]+/compute/v1/)?[a-z0-9][a-z0-9./-]*[a-z0-9]$")
_GCP_NETWORK_TAG = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
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


class Deferred:
    """A value known only when Pulumi deploys: a `pulumi.Input` from the user's own program (an Output of their VPC,
    subnet, route table or network). The model checks that it is given, not what it is; the cloud components pass
    `value` on to the resources. A stack file's values are plain strings, never Deferred (wg_mesh.args makes them)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<a value known at deploy time>"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.is_instance_schema(cls)


# --- field types with messages a human can act on ---------------------------------------


def parse_network(value: Any) -> Any:
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


def parse_address(value: Any) -> Any:
    if isinstance(value, IPv4Address):
        return value
    try:
        return IPv4Address(str(value))
    except ValueError:
        raise ValueError(f"{quote(value)} is not an IPv4 address") from None


Cidr = Annotated[IPv4Network, BeforeValidator(parse_network)]
Address = Annotated[IPv4Address, BeforeValidator(parse_address)]
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
    IPv4Network, BeforeValidator(parse_network), AfterValidator(_not_the_internet), AfterValidator(_usable)
]
# A site's network or the overlay: routed by every gateway, so no special-purpose range and not half the internet.
UsableCidr = Annotated[IPv4Network, BeforeValidator(parse_network), AfterValidator(_usable)]
Endpoint = Annotated[IPv4Address, BeforeValidator(parse_address), AfterValidator(_reachable)]


def _pattern(regex: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"{quote(value)} is not {what}")
        return value

    return AfterValidator(check)


# How many gateways a cloud site runs: 1 (today's layout) or 2 (active + standby). A strict integer: `yes` is not 1.
Gateways = Annotated[int, Field(ge=1, le=MAX_GATEWAYS)]


class Strict(BaseModel):
    # strict: YAML's `yes`/`true` are booleans and must not become 1 in an integer field; "1400" is not 1400.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --- sites ------------------------------------------------------------------------------


class SiteBase(Strict):
    name: str
    overlay_ip: Address
    # The networks behind the gateway, routed through it. A cloud site has at least one (its VPC/network); a static
    # site may have none: a single host reached at its overlay address (AwsSite and GcpSite require one below).
    cidrs: list[UsableCidr] = Field(default_factory=list)
    masquerade: bool | None = None  # None: inherit the mesh-wide setting
    key_epoch: int = Field(default=0, ge=0)
    underlay_mtu: int = DEFAULT_STATIC_UNDERLAY_MTU  # each cloud sets its own default and bounds
    # Names this site had before: its address, key and other resources are carried over (Pulumi aliases).
    previous_names: list[str] = Field(default_factory=list)
    # The gateway's address on a private path (private_paths, docs/underlay.md): a static site's must be given; a
    # cloud gateway's is fixed to it (default: the 10th address of the gateway subnet wg-mesh creates).
    private_ip: Address | None = None

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


class AwsSite(SiteBase):
    cloud: Literal["aws"]
    cidrs: list[UsableCidr] = Field(min_length=1)  # the VPC's blocks: a cloud site has a network behind it
    region: str
    zone: str | None = None  # availability zone of the gateway subnet; AWS picks one when unset
    instance_type: Annotated[str, _pattern(_AWS_INSTANCE_TYPE, "an EC2 instance type (e.g. c6i.2xlarge)")] = (
        DEFAULT_AWS_INSTANCE_TYPE
    )
    underlay_mtu: int = Field(default=DEFAULT_AWS_UNDERLAY_MTU, ge=1280, le=9001)
    # An existing network: plain ids (stack file) or, through wg_mesh.args.MeshArgs, Deferred outputs of the user's own
    # resources (checked when they are plain, passed on when they are not).
    vpc_id: Annotated[str, _pattern(re.compile(_AWS_ID.format("vpc")), "a VPC id (vpc-0123abcd)")] | Deferred | None = (
        None
    )
    subnet_id: (
        Annotated[str, _pattern(re.compile(_AWS_ID.format("subnet")), "a subnet id (subnet-0123abcd)")]
        | Deferred
        | None
    ) = None
    route_table_ids: (
        list[Annotated[str, _pattern(re.compile(_AWS_ID.format("rtb")), "a route table id (rtb-0123abcd)")] | Deferred]
        | None
    ) = Field(default=None, min_length=1)
    # Per-site credentials for the site's aws.Provider: a named profile, a role to assume, the account it must be.
    profile: str | None = Field(default=None, min_length=1)
    assume_role_arn: Annotated[str, AfterValidator(credentials.role_arn)] | None = None
    account_id: Annotated[str, Field(pattern=r"^\d{12}$")] | None = None
    # An AMI id or an Ubuntu serial; None: the newest Ubuntu 24.04 when the gateway is created, then kept.
    image: Annotated[str, AfterValidator(awsnames.check_image)] | None = None
    # High availability (docs/ha.md): 2 = an active gateway and a standby sharing the site's identity.
    gateways: Gateways = 1
    # The standby's availability zone (created network); None: another zone of the region offering the type.
    standby_zone: str | None = None
    # The standby's subnet (existing network, with subnet_id): required there with gateways: 2.
    standby_subnet_id: (
        Annotated[str, _pattern(re.compile(_AWS_ID.format("subnet")), "a subnet id (subnet-0123abcd)")]
        | Deferred
        | None
    ) = None
    # delivery: live: a customer managed KMS key (symmetric, in the site's region) for the private-key parameter
    # instead of aws/ssm, whose key policy lets every principal of the account decrypt (docs/security.md).
    ssm_kms_key_arn: Annotated[str, AfterValidator(credentials.kms_key_arn)] | None = None
    # This account's VPC quotas in the region where they are not AWS's defaults (wg_mesh.config.quotas).
    quotas: AwsQuotas = Field(default_factory=AwsQuotas)

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        if not _AWS_REGION.fullmatch(region):
            raise ValueError(f"{quote(region)} is not an AWS region name (e.g. us-east-1)")
        awsnames.partition(region)  # the isolated partitions have no Ubuntu AMIs: refused here
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
            role_partition, region_partition = self.assume_role_arn.split(":")[1], awsnames.partition(self.region)
            if role_partition != region_partition:
                raise ValueError(
                    f"assume_role_arn: {self.assume_role_arn} is in partition {role_partition}, "
                    f"region {self.region} in {region_partition}"
                )
        return self


class GcpSite(SiteBase):
    cloud: Literal["gcp"]
    cidrs: list[UsableCidr] = Field(min_length=1)  # the network's ranges: a cloud site has a network behind it
    project: str
    region: str
    zone: str
    instance_type: Annotated[str, _pattern(_GCP_MACHINE_TYPE, "a GCE machine type (e.g. n2-standard-8)")] = (
        DEFAULT_GCP_INSTANCE_TYPE
    )
    underlay_mtu: int = Field(default=DEFAULT_GCP_UNDERLAY_MTU, ge=1300, le=8896)  # GCP VPC MTU range
    network: Annotated[str, _pattern(_GCP_RESOURCE, "a GCP network name or self link")] | Deferred | None = None
    subnetwork: Annotated[str, _pattern(_GCP_RESOURCE, "a GCP subnetwork name or self link")] | Deferred | None = None
    # Deploy this site as that service account (the caller needs roles/iam.serviceAccountTokenCreator on it).
    impersonate_service_account: (
        Annotated[str, _pattern(credentials.SERVICE_ACCOUNT, credentials.SERVICE_ACCOUNT_FORMS)] | None
    ) = None
    # Which instances of the network accept traffic from the other sites: those with these network tags, or running
    # as these service accounts, or (workload_scope: network) every instance. None: no such rule (admit the remote
    # ranges with your own firewall rules, as on AWS).
    # The boot image, pinned (e.g. ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130); None: the Ubuntu 24.04 LTS
    # family of the machine's architecture, resolved when an instance is created.
    image: (
        Annotated[
            str,
            _pattern(
                _GCP_IMAGE, "a GCE image reference (PROJECT/IMAGE, projects/PROJECT/global/images/IMAGE, or its URL)"
            ),
        ]
        | None
    ) = None
    workload_tags: list[str] = Field(default_factory=list)
    workload_service_accounts: list[str] = Field(default_factory=list)
    workload_scope: Literal["network"] | None = None
    # High availability (docs/ha.md): 2 = an active VM and a standby behind an internal load balancer.
    gateways: Gateways = 1
    # The standby VM's zone; None: the next zone of the region (by letter) after `zone`.
    standby_zone: str | None = None

    @field_validator("workload_tags")
    @classmethod
    def _network_tags(cls, tags: list[str]) -> list[str]:
        bad = [tag for tag in tags if not _GCP_NETWORK_TAG.fullmatch(tag)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a GCP network tag (lowercase letters, digits, '-', at most 63)")
        return tags

    @field_validator("workload_service_accounts")
    @classmethod
    def _workload_service_accounts(cls, emails: list[str]) -> list[str]:
        bad = [email for email in emails if not credentials.SERVICE_ACCOUNT.fullmatch(email)]
        if bad:
            raise ValueError(f"{quote(bad[0])} is not {credentials.SERVICE_ACCOUNT_FORMS}")
        return emails

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


class StaticSite(SiteBase):
    """A bare-metal or VPS host that already exists: it gets a config, not resources."""

    cloud: Literal["static"]
    endpoint: Endpoint
    underlay_mtu: int = Field(default=DEFAULT_STATIC_UNDERLAY_MTU, ge=1280, le=9216)
    gateways: int = 1  # a static site is the one host it names: anything else is refused below

    @field_validator("gateways")
    @classmethod
    def _one_host(cls, gateways: int) -> int:
        if gateways != 1:
            raise ValueError(
                f"a static site is one host (got {gateways}); "
                "two gateways (high availability) are for aws and gcp sites"
            )
        return gateways


Site = Annotated[AwsSite | GcpSite | StaticSite, Field(discriminator="cloud")]
CloudSite = AwsSite | GcpSite
