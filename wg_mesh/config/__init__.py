"""The mesh configuration: the model of the `wg-mesh:mesh` stack config key and its rules.

Pure: pydantic and the standard library, nothing else of ours (tests/test_layout.py checks it); every layer above
takes its decisions from a `MeshConfig`. The modules, top down:

    model        MeshConfig, parse_mesh (every problem, each with its field path), summary
    sites        one pydantic model per cloud's site, and the field types they share
    rules        rules between fields and sites: zones, addressing, overlaps, MTU fit, renames, HA
    underlay     private paths between sites: their model and rules
    reach        how the mesh reaches a static site: a fixed address or `dynamic` (issue 24), its rules
    quotas       the clouds' quotas a config would cross
    names        the logical names (URNs) a site's resources take: unique by construction
    addressing   what an address is: special-purpose ranges, gateway subnets
    zones        what a zone may look like in a region
    awsnames     an AWS region's partition, the forms of an image pin
    images       a pinned image's serial is a date (both clouds)
    credentials  AWS profiles, IAM role and KMS key ARNs, service account emails
    messages     problem lines: one problem, one line, bounded
"""

from wg_mesh.config.machines import GCP_ARM_MACHINE_SERIES, gcp_image_problem, gcp_machine_architecture
from wg_mesh.config.model import (
    MAX_ROTATION_LEAD_S,
    MIN_ROTATION_LEAD_S,
    MeshConfig,
    parse_mesh,
    summary,
)
from wg_mesh.config.rules import cross_site_problems
from wg_mesh.config.sites import (
    WIREGUARD_IPV4_OVERHEAD,
    AwsSite,
    CloudSite,
    ConfigError,
    Deferred,
    GcpSite,
    Site,
    StaticSite,
)

__all__ = [
    "GCP_ARM_MACHINE_SERIES",
    "MAX_ROTATION_LEAD_S",
    "MIN_ROTATION_LEAD_S",
    "WIREGUARD_IPV4_OVERHEAD",
    "AwsSite",
    "CloudSite",
    "ConfigError",
    "Deferred",
    "GcpSite",
    "MeshConfig",
    "Site",
    "StaticSite",
    "cross_site_problems",
    "gcp_image_problem",
    "gcp_machine_architecture",
    "parse_mesh",
    "summary",
]
