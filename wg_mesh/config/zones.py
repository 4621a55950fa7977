"""Zone names per cloud: what a `zone` may look like in a given region.

AWS (https://docs.aws.amazon.com/global-infrastructure/latest/regions/aws-availability-zones.html and
https://docs.aws.amazon.com/local-zones/latest/ug/available-local-zones.html):
- an Availability Zone name is the Region code followed by a letter: `us-east-2a`;
- a Local Zone name is the Region code, a location and a letter: `us-west-2-lax-1a`;
- an AZ ID is the same physical zone in every account: the Region's abbreviation, `-az`, a number
  (`use1-az1` in us-east-1, `euw1-az2` in eu-west-1); a Local Zone ID adds the location: `use1-bos1-az1`.
  Names and IDs go to different Subnet arguments (`availability_zone` / `availability_zone_id`).
GCP (https://cloud.google.com/compute/docs/regions-zones): a zone is the region, a dash and a letter:
`europe-west3-a`.
"""

from __future__ import annotations

import re

# How AZ IDs abbreviate a Region code: us-east-1 -> use1, ap-southeast-2 -> apse2, us-gov-west-1 -> usgw1.
_DIRECTION = {
    "east": "e",
    "west": "w",
    "north": "n",
    "south": "s",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}
_AWS_REGION_PARTS = re.compile(r"([a-z]{2})-(?:(gov)-)?([a-z]+)-(\d+)")


def aws_zone_id_prefix(region: str) -> str | None:
    """`use1` for us-east-1; None when the region's abbreviation is not known (no check then)."""
    parts = _AWS_REGION_PARTS.fullmatch(region)
    if parts is None or parts.group(3) not in _DIRECTION:
        return None
    country, gov, direction, number = parts.groups()
    return f"{country}{'g' if gov else ''}{_DIRECTION[direction]}{number}"


def aws_zone_kind(zone: str, region: str) -> str | None:
    """'name' or 'id' when `zone` is an AWS zone of `region` in one of the documented forms, else None."""
    escaped = re.escape(region)
    if re.fullmatch(rf"{escaped}[a-z]", zone) or re.fullmatch(rf"{escaped}-[a-z]+-\d+[a-z]", zone):
        return "name"
    prefix = aws_zone_id_prefix(region)
    if prefix is not None and re.fullmatch(rf"{re.escape(prefix)}(-[a-z]+\d+)?-az\d+", zone):
        return "id"
    return None


def aws_zone_problem(zone: str, region: str) -> str | None:
    if aws_zone_kind(zone, region) is not None:
        return None
    prefix = aws_zone_id_prefix(region)
    forms = f"{region}a (zone name)" + (f", {prefix}-az1 (zone ID)" if prefix else "")
    forms += f" or {region}-<location>-1a (Local Zone)"
    if re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d+([a-z]|-[a-z]+-\d+[a-z])", zone) or re.fullmatch(
        r"[a-z]+\d+(-[a-z]+\d+)?-az\d+", zone
    ):
        return f"{zone!r} is not in region {region} (zones of {region} look like {forms})"
    return f"{zone!r} is not an AWS zone name or ID (in {region}: {forms})"


def gcp_zone_problem(zone: str, region: str) -> str | None:
    if re.fullmatch(rf"{re.escape(region)}-[a-z]", zone):
        return None
    if re.fullmatch(r"[a-z]+-[a-z]+\d+-[a-z]", zone):
        return f"{zone!r} is not in region {region} (zones of {region} look like {region}-a)"
    return f"{zone!r} is not a GCP zone name (in {region}: {region}-a, {region}-b, ...)"
