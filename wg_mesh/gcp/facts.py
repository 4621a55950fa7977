"""Plain facts about GCP that the GcpGateway component decides on: images and boot disks per machine type.

Pure (no Pulumi); wg_mesh.gcp.instance and wg_mesh.gcp.fit use them.
"""

from __future__ import annotations

from collections.abc import Sequence

from wg_mesh.config import GcpSite, gcp_image_problem, gcp_machine_architecture

# Canonical's Ubuntu 24.04 LTS image families in the ubuntu-os-cloud project, one per architecture: an arm64 machine
# (T2A, C4A, N4A) boots only an arm64 image (`gcloud compute images list --project ubuntu-os-cloud`: e.g.
# ubuntu-2404-noble-arm64-v20260422 in family ubuntu-2404-lts-arm64, ubuntu-2404-noble-amd64-... in
# ubuntu-2404-lts-amd64). The family follows the machine type, so a move across architectures changes the boot image
# too, and the boot image forces a new instance: one replacement.
UBUNTU_IMAGE = "ubuntu-os-cloud/ubuntu-2404-lts-{arch}"
# Machine series whose boot disk can be a Persistent Disk (pd-balanced: SSD-backed, cheaper than Hyperdisk, and
# faster to boot than the API's pd-standard default on first/second-generation series). Every other series --
# the third-generation A3, H3, Z3, all fourth-generation ones (C4, C4A, C4D, N4, N4A, N4D, M4, X4, ...) and newer
# ones -- takes Hyperdisk only. Compute Engine API reference, AttachedDiskInitializeParams.diskType: "For C3,
# C3D, and M3 the default is Balanced Persistent Disk (pd-balanced). For other third-generation machine series
# like A3, H3, Z3, all fourth-generation types like C4, N4, M4, and newer machine series, the default is
# Hyperdisk Balanced" (https://cloud.google.com/compute/docs/reference/rest/v1/instances).
PERSISTENT_DISK_SERIES = frozenset(
    {"e2", "f1", "g1", "n1", "n2", "n2d", "t2d", "t2a", "c2", "c2d", "m1", "m2", "a2", "g2", "c3", "c3d", "m3"}
)
PD_BOOT_DISK = "pd-balanced"
HYPERDISK_BOOT_DISK = "hyperdisk-balanced"


def image_family(machine_type: str, reported: str = "") -> str:
    """The Ubuntu 24.04 LTS image family matching the machine type's CPU architecture: the one machineTypes.list
    reported (`reported`, wg_mesh.gcp.fit), else its series' (wg_mesh.config.gcp_machine_architecture)."""
    return UBUNTU_IMAGE.format(arch=gcp_machine_architecture(machine_type, reported))


def boot_image(site: GcpSite, reported: str = "") -> str:
    """The pinned `image`, or the family. A family does not drift into replacements: the provider compares it with
    the instance's resolved image by name pattern (terraform-provider-google DiskImageDiffSuppress, its cases in
    google/services/compute/resource_compute_disk_test.go: family
    `ubuntu-2404-lts-amd64` matches image `ubuntu-2404-noble-amd64-v20240423`), so a second preview after `up` stays
    empty when Canonical publishes a new image. But every replacement (new user data) boots the family's newest image
    at that moment; `image` pins it, and changing `image` is the deliberate roll (the boot image forces a new
    instance). Unlike AWS's kept AMI this is no `ignore_changes` (which Pulumi would apply to a replacement too,
    pulumi/pulumi#2657): a move across architectures (T2A/C4A) declares the other family, and the replacement is
    created from the program's inputs, so GCP needs no architecture in the instance's name (wg_mesh.awsfacts.
    instance_suffix is AWS's). `reported`: the machine type's architecture as machineTypes.list gave it; a pinned image
    of the other architecture is refused (ValueError), as `validate` refuses it by series."""
    if site.image is None:
        return image_family(site.instance_type, reported)
    if problem := gcp_image_problem(site.image, site.instance_type, reported):
        raise ValueError(f"{problem} (machineTypes.list): pin an image of its architecture; nothing was changed")
    return site.image


def machine_series(machine_type: str) -> str:
    """`n2-standard-8` -> `n2`, `c4a-highcpu-4` -> `c4a`, `e2-micro` -> `e2`."""
    return machine_type.split("-", 1)[0].lower()


def boot_disk_type(machine_type: str) -> str:
    """pd-balanced where the machine series takes Persistent Disk, hyperdisk-balanced everywhere else."""
    return PD_BOOT_DISK if machine_series(machine_type) in PERSISTENT_DISK_SERIES else HYPERDISK_BOOT_DISK


def machine_type_filter(machine_type: str) -> str:
    """The machineTypes.list filter for one machine type by name (Compute Engine API, machineTypes.list `filter`)."""
    return f'name = "{machine_type}"'


def check_offered(machine_type: str, zone: str, offered: Sequence[str]) -> str:
    """The machine type, if machineTypes.list in the gateway's zone has it; else ValueError (a VM never leaves its
    zone, and an instance of a type its zone lacks is refused on creation)."""
    if machine_type not in offered:
        raise ValueError(
            f"machine type {machine_type} is not offered in {zone}, the gateway's zone "
            f"(gcloud compute machine-types list --zones {zone} --filter 'name={machine_type}'): choose a type offered "
            "there; nothing was changed"
        )
    return machine_type
