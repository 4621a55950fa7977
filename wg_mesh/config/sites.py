"""The sites of a mesh: field types with messages a human can act on, and one pydantic model per cloud.

Part of the config model (wg_mesh.config composes these into `MeshConfig`); pure, no Pulumi.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationInfo,
    field_validator,
)
from pydantic_core import core_schema

from wg_mesh.config import awsnames, credentials, images, reach, zones
from wg_mesh.config.fields import Address, UsableCidr, pattern
from wg_mesh.config.messages import bounded, one_line, quote
from wg_mesh.config.quotas import AwsQuotas
from wg_mesh.config.reach import SiteEndpoint

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


# --- field types: wg_mesh.config.fields ---------------------------------------------------

# How many gateways a cloud site runs: 1 (today's layout) or 2 (active + standby). A strict integer: `yes` is not 1.
Gateways = Annotated[int, Field(ge=1, le=MAX_GATEWAYS)]


class Strict(BaseModel):
    # strict: YAML's `yes`/`true` are booleans and must not become 1 in an integer field; "1400" is not 1400.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --- sites ------------------------------------------------------------------------------


class SiteBase(Strict):
    name: str = Field(description="The site's name: a DNS label (lowercase letters, digits, `-`), unique.")
    overlay_ip: Address = Field(description="The site's wg0 address: in `overlay_cidr`, unique.")
    # A cloud site has at least one (its VPC/network: AwsSite and GcpSite require it); a static site may have none: a
    # single host reached at its overlay address.
    cidrs: list[UsableCidr] = Field(
        default_factory=list,
        description="The networks behind the site, routed through its gateway: no overlaps with each other or the "
        "overlay, no host bits, no special-purpose range, not half the internet. A static site may have none (a single "
        "host); a cloud site needs its network's.",
    )
    masquerade: bool | None = Field(  # None: inherit the mesh-wide setting
        default=None, description="SNAT to this gateway; unset: the mesh-wide `masquerade`."
    )
    key_epoch: int = Field(default=0, ge=0, description="Bump to rotate the site's WireGuard key.")
    underlay_mtu: int = Field(  # each cloud sets its own default and bounds
        default=DEFAULT_STATIC_UNDERLAY_MTU, description="The MTU of the path the tunnel runs over."
    )
    # Names this site had: aliases carry its resources over (what a rename replaces: docs/how-to/rename.md).
    previous_names: list[str] = Field(
        default_factory=list,
        description="Names the site had: a rename keeps its address, key and network (Pulumi aliases) and replaces "
        "its gateway (docs/how-to/rename.md).",
    )
    # The gateway's address on a private path (private_paths, docs/underlay.md): a static site's must be given; a
    # cloud gateway's is fixed to it (default: the 10th address of the gateway subnet wg-mesh creates).
    private_ip: Address | None = Field(
        default=None,
        description="The gateway's address on a private path: required for a static site; a cloud gateway is fixed "
        "to it (default: the 10th address of the gateway subnet wg-mesh creates).",
    )

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
    cloud: Literal["aws"] = Field(description="`aws`: a VPC with a gateway instance.")
    cidrs: list[UsableCidr] = Field(
        min_length=1, description="The VPC's blocks routed through the gateway (at least one)."
    )
    region: str = Field(description="The AWS region, e.g. `us-east-1`.")
    zone: str | None = Field(
        default=None,
        description="The gateway subnet's zone: a name (`us-east-1a`), Local Zone or zone ID (`use1-az1`); unset: "
        "the first zone, by name, that offers `instance_type`, kept once created.",
    )
    instance_type: Annotated[str, pattern(_AWS_INSTANCE_TYPE, "an EC2 instance type (e.g. c6i.2xlarge)")] = Field(
        default=DEFAULT_AWS_INSTANCE_TYPE,
        description="The gateway's EC2 instance type (Graviton types get the arm64 AMI); a change replaces it.",
    )
    underlay_mtu: int = Field(
        default=DEFAULT_AWS_UNDERLAY_MTU, ge=1280, le=9001, description="The MTU of the path the tunnel runs over."
    )
    # An existing network: plain ids (stack file) or, through wg_mesh.args.MeshArgs, Deferred outputs of the user's own
    # resources (checked when they are plain, passed on when they are not).
    vpc_id: Annotated[str, pattern(re.compile(_AWS_ID.format("vpc")), "a VPC id (vpc-0123abcd)")] | Deferred | None = (
        Field(default=None, description="An existing VPC (with `subnet_id` and `route_table_ids`); unset: created.")
    )
    subnet_id: (
        Annotated[str, pattern(re.compile(_AWS_ID.format("subnet")), "a subnet id (subnet-0123abcd)")] | Deferred | None
    ) = Field(default=None, description="The gateway's subnet in the existing VPC.")
    route_table_ids: (
        list[Annotated[str, pattern(re.compile(_AWS_ID.format("rtb")), "a route table id (rtb-0123abcd)")] | Deferred]
        | None
    ) = Field(
        default=None,
        min_length=1,
        description="The existing VPC's route tables that get a route to every remote network through the gateway.",
    )
    # Per-site credentials for the site's aws.Provider: a named profile, a role to assume, the account it must be.
    profile: Annotated[str, AfterValidator(credentials.profile)] | None = Field(
        default=None, description="The named AWS profile this site is deployed with; unset: the environment."
    )
    assume_role_arn: Annotated[str, AfterValidator(credentials.role_arn)] | None = Field(
        default=None, description="A role to assume for this site (in the partition of `region`)."
    )
    account_id: Annotated[str, Field(pattern=r"^\d{12}$")] | None = Field(
        default=None, description="The account the credentials must be (with `assume_role_arn`: the role's)."
    )
    # An AMI id or an Ubuntu serial; None: the newest Ubuntu 24.04 when the gateway is created, then kept.
    image: Annotated[str, AfterValidator(awsnames.check_image)] | None = Field(
        default=None,
        description="An AMI id (`ami-...`) or an Ubuntu serial (`20250804`); unset: the newest Ubuntu 24.04 when the "
        "gateway is created, then kept.",
    )
    # High availability (docs/ha.md): 2 = an active gateway and a standby sharing the site's identity.
    gateways: Gateways = Field(
        default=1,
        description="`2`: an active gateway and a standby sharing the site's identity (needs `delivery: live`).",
    )
    # The standby's availability zone (created network; never `zone`: rules._one_zone_pair); None: another zone.
    standby_zone: str | None = Field(
        default=None,
        description="`gateways: 2`: the standby's zone (created network), not `zone`; unset: another zone offering "
        "the type (decided once, then kept).",
    )
    # The standby's subnet (existing network, with subnet_id): required there with gateways: 2.
    standby_subnet_id: (
        Annotated[str, pattern(re.compile(_AWS_ID.format("subnet")), "a subnet id (subnet-0123abcd)")] | Deferred | None
    ) = Field(default=None, description="`gateways: 2` with `subnet_id`: the standby's subnet in the existing VPC.")
    # delivery: live: a customer managed KMS key (symmetric, in the site's region) for the private-key parameter
    # instead of aws/ssm, whose key policy lets every principal of the account decrypt (docs/security.md).
    ssm_kms_key_arn: Annotated[str, AfterValidator(credentials.kms_key_arn)] | None = Field(
        default=None,
        description="`delivery: live`: a customer managed KMS key (its ARN, in the site's region) for the private-key "
        "parameter; unset: `aws/ssm`.",
    )
    # This account's VPC quotas in the region where they are not AWS's defaults (wg_mesh.config.quotas).
    quotas: AwsQuotas = Field(
        default_factory=AwsQuotas,
        description="This account's VPC quotas in the region where they are not AWS's defaults (the `quotas` table).",
    )

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

    @field_validator("assume_role_arn")
    @classmethod
    def _role_in_the_sites_partition(cls, arn: str | None, info: ValidationInfo) -> str | None:
        region = info.data.get("region")  # absent when the region itself was refused: its own error says so
        if arn is not None and region is not None:
            role_partition, region_partition = arn.split(":")[1], awsnames.partition(region)
            if role_partition != region_partition:
                raise ValueError(f"{arn} is in partition {role_partition}, region {region} in {region_partition}")
        return arn


class GcpSite(SiteBase):
    cloud: Literal["gcp"] = Field(description="`gcp`: a VPC network with a gateway VM.")
    cidrs: list[UsableCidr] = Field(
        min_length=1, description="The network's ranges routed through the gateway (at least one)."
    )
    project: str = Field(description="The GCP project id.")
    region: str = Field(description="The GCP region, e.g. `europe-west3`.")
    zone: str = Field(description="The gateway VM's zone, in `region`, e.g. `europe-west3-a`.")
    instance_type: Annotated[str, pattern(_GCP_MACHINE_TYPE, "a GCE machine type (e.g. n2-standard-8)")] = Field(
        default=DEFAULT_GCP_INSTANCE_TYPE, description="The gateway's GCE machine type; a change replaces it."
    )
    underlay_mtu: int = Field(  # GCP VPC MTU range
        default=DEFAULT_GCP_UNDERLAY_MTU,
        ge=1300,
        le=8896,
        description="The MTU of the path the tunnel runs over (the MTU of the network wg-mesh creates).",
    )
    network: Annotated[str, pattern(_GCP_RESOURCE, "a GCP network name or self link")] | Deferred | None = Field(
        default=None, description="An existing network (with `subnetwork`), name or self link; unset: created."
    )
    subnetwork: Annotated[str, pattern(_GCP_RESOURCE, "a GCP subnetwork name or self link")] | Deferred | None = Field(
        default=None, description="The gateway's subnetwork in the existing network."
    )
    # Deploy this site as that service account (the caller needs roles/iam.serviceAccountTokenCreator on it).
    impersonate_service_account: (
        Annotated[str, pattern(credentials.SERVICE_ACCOUNT, credentials.SERVICE_ACCOUNT_FORMS)] | None
    ) = Field(default=None, description="Deploy this site as that service account (impersonated).")
    # Which instances of the network accept traffic from the other sites: those with these network tags, or running
    # as these service accounts, or (workload_scope: network) every instance. None: no such rule (admit the remote
    # ranges with your own firewall rules, as on AWS).
    # The boot image, pinned (e.g. ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130); None: the Ubuntu 24.04 LTS
    # family of the machine's architecture, resolved when an instance is created.
    image: (
        Annotated[
            str,
            pattern(
                _GCP_IMAGE, "a GCE image reference (PROJECT/IMAGE, projects/PROJECT/global/images/IMAGE, or its URL)"
            ),
            AfterValidator(images.gcp_image_serial),
        ]
        | None
    ) = Field(
        default=None,
        description="A pinned boot image (`ubuntu-os-cloud/ubuntu-2404-noble-amd64-vYYYYMMDD`); unset: the Ubuntu "
        "24.04 LTS family of the machine's architecture.",
    )
    workload_tags: list[str] = Field(
        default_factory=list, description="Network tags of the instances that accept the other sites' traffic."
    )
    workload_service_accounts: list[str] = Field(
        default_factory=list,
        description="Or: the service accounts of those instances (not both: a GCP rule targets one kind).",
    )
    workload_scope: Literal["network"] | None = Field(
        default=None, description="`network`: every instance of the network accepts the other sites' traffic."
    )
    # High availability (docs/ha.md): 2 = an active VM and a standby behind an internal load balancer.
    gateways: Gateways = Field(
        default=1,
        description="`2`: an active VM and a standby behind an internal load balancer (needs `delivery: live`).",
    )
    # The standby VM's zone; None: the next zone of the region (by letter) after `zone`.
    standby_zone: str | None = Field(
        default=None, description="`gateways: 2`: the standby's zone; unset: the next zone letter after `zone` (kept)."
    )

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

    cloud: Literal["static"] = Field(
        description="`static`: a host that exists already; it gets a config, no resources."
    )
    # Plain (stack file), or through wg_mesh.args a Deferred output of the user's program, checked when it is known
    # (wg_mesh.static.endpoint_problems).
    endpoint: SiteEndpoint | Deferred = Field(description=reach.ENDPOINT_DESCRIPTION)
    endpoint_ranges: list[reach.EndpointRange] | None = Field(
        default=None, max_length=reach.MAX_ENDPOINT_RANGES, description=reach.RANGES_DESCRIPTION
    )
    underlay_mtu: int = Field(
        default=DEFAULT_STATIC_UNDERLAY_MTU, ge=1280, le=9216, description="The MTU of the path the tunnel runs over."
    )
    gateways: int = Field(  # a static site is the one host it names: anything else is refused below
        default=1, description="Always 1: a static site is the one host it names."
    )

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
