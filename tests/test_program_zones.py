"""Under Pulumi mocks: an AWS zone name or zone ID reaches the subnet argument that takes it."""

from __future__ import annotations

import pytest

from tests.conftest import run_program
from tests.test_program import dev_raw, site_raw

AWS_SUBNET = "aws:ec2/subnet:Subnet"


@pytest.mark.parametrize(
    ("zone", "name", "zone_id"),
    # unset: the first zone by name that offers the instance type (the mocks offer us-east-1c and us-east-1b)
    [("us-east-1b", "us-east-1b", None), ("use1-az4", None, "use1-az4"), (None, "us-east-1b", None)],
)
def test_aws_zone_name_or_id_goes_to_the_subnet(zone: str | None, name: str | None, zone_id: str | None) -> None:
    raw = dev_raw()
    if zone is not None:
        site_raw(raw, "aws")["zone"] = zone
    run = run_program(raw, preview=True)
    assert run.error is None
    inputs = run.named(AWS_SUBNET, "aws-use1-subnet").inputs
    assert (inputs.get("availabilityZone"), inputs.get("availabilityZoneId")) == (name, zone_id)
