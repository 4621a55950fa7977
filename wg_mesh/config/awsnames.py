"""What the config model checks about AWS names: the partition a region is in, the forms of an image pin.

Plain facts, like wg_mesh.awsfacts (which re-exports `partition` for the AWS component); here because the model
refuses a region in an isolated partition and an image that is neither an AMI id nor an Ubuntu serial, and the model
imports nothing above it.
"""

from __future__ import annotations

import re

from wg_mesh.config.images import is_date

# The partition a region belongs to, by region-name prefix (AWS General Reference, "ARN formats": aws-cn for
# cn-*, aws-us-gov for us-gov-*; aws-iso* for the isolated regions, where Canonical publishes nothing).
_PARTITION_PREFIXES = (("us-gov-", "aws-us-gov"), ("cn-", "aws-cn"))
_ISOLATED = re.compile(r"^[a-z]{2}-iso[a-z]*-")
# Canonical's AMI names end in the image's serial (YYYYMMDD, sometimes .N): wg_mesh.awsfacts.UBUNTU_AMI_NAME.
AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
UBUNTU_SERIAL = re.compile(r"^\d{8}(\.\d+)?$")


def partition(region: str) -> str:
    """`aws`, `aws-us-gov` or `aws-cn`; ValueError for the isolated partitions (no Ubuntu AMIs there)."""
    if _ISOLATED.match(region):
        raise ValueError(
            f"{region} is in an isolated AWS partition, where Canonical publishes no Ubuntu AMIs; "
            "wg-mesh supports the aws, aws-us-gov (GovCloud) and aws-cn (China) partitions"
        )
    for prefix, name in _PARTITION_PREFIXES:
        if region.startswith(prefix):
            return name
    return "aws"


def check_image(image: str) -> str:
    """A site's `image`: an AMI id (`ami-...`) or an Ubuntu image serial (`20250804`, `20250804.1`: a real date)."""
    if not (AMI_ID.fullmatch(image) or UBUNTU_SERIAL.fullmatch(image)):
        raise ValueError(
            f"{image!r} is neither an AMI id (ami- and 8 or 17 hex digits) nor an Ubuntu image serial "
            "such as 20250804 (the date at the end of Canonical's AMI names)"
        )
    if UBUNTU_SERIAL.fullmatch(image) and not is_date(image[:8]):
        raise ValueError(f"{image!r}: an Ubuntu image serial starts with its date (YYYYMMDD), and {image[:8]} is none")
    return image
