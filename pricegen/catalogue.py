"""Which instance types the bundled table prices, and every commercial region of each cloud (with its source).

The types: each cloud's default gateway type and the sizes around it that `wg-mesh init` offers (AWS: the c6i
family, large to 4xlarge; GCP: n2-standard-8 alone so far, the only GCP type read from the source in this
repository: add types here and regenerate). Any other type still works in a stack: `cost --stack` then asks for
its price in a file.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    vcpus: int
    memory_gib: float
    arch: str  # x86_64 or arm64


TYPES: dict[str, dict[str, Shape]] = {
    "aws": {
        "c6i.large": Shape(2, 4, "x86_64"),
        "c6i.xlarge": Shape(4, 8, "x86_64"),
        "c6i.2xlarge": Shape(8, 16, "x86_64"),
        "c6i.4xlarge": Shape(16, 32, "x86_64"),
    },
    "gcp": {
        "n2-standard-8": Shape(8, 32, "x86_64"),
    },
}

# GCP machine families as the Cloud Billing Catalog names their per-vCPU and per-GiB SKUs ("N2 Instance Core running in
# Frankfurt", "N2 Instance Ram running in Frankfurt"; E2 likewise).
GCP_SKU_FAMILY = {"n2": "N2", "e2": "E2", "n2d": "N2D AMD", "t2a": "T2A Arm"}

# Every commercial AWS region: the `aws` partition of botocore's partitions.json (botocore==1.44.8, requirements.txt),
# without its `aws-global` pseudo-region; aws-cn, aws-us-gov and aws-eusc are partitions of their own.
AWS_REGIONS_SOURCE = "botocore 1.44.8 botocore/data/partitions.json, partition aws (the commercial regions)"
# Every public GCP region, from Google's Workload Manager locations page
# (https://cloud.google.com/workload-manager/docs/evaluate/locations, read 2026-12-07: 41 regions) and africa-south1
# (Johannesburg, in Rubrik's GcpCloudAccountRegion enum of GCP regions and Google's own regions page).
GCP_REGIONS_SOURCE = (
    "https://cloud.google.com/workload-manager/docs/evaluate/locations (read 2026-12-07) and africa-south1; "
    "Google's list: https://cloud.google.com/compute/docs/regions-zones"
)
GCP_REGIONS = [
    "africa-south1",
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-south2",
    "asia-southeast1",
    "asia-southeast2",
    "australia-southeast1",
    "australia-southeast2",
    "europe-central2",
    "europe-north1",
    "europe-north2",
    "europe-southwest1",
    "europe-west1",
    "europe-west10",
    "europe-west12",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "me-central1",
    "me-central2",
    "me-west1",
    "northamerica-northeast1",
    "northamerica-northeast2",
    "northamerica-south1",
    "southamerica-east1",
    "southamerica-west1",
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
]


def aws_regions() -> list[str]:
    """The commercial regions, from the installed botocore (pinned): what the AWS SDK itself knows."""
    import json
    from pathlib import Path

    import botocore

    data = json.loads((Path(botocore.__file__).parent / "data" / "partitions.json").read_text())
    partition = next(p for p in data["partitions"] if p["id"] == "aws")
    return sorted(r for r in partition["regions"] if r != "aws-global")
