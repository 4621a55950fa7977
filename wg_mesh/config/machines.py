"""GCP machine types' CPU architecture, for the boot image and a pinned image's check: pure facts, shared by `validate`
(offline) and the program (wg_mesh.gcp.facts, with what machineTypes.list reports)."""

from __future__ import annotations

# Arm machine series, for when machineTypes.list does not say (`validate`, offline; a type the API reports no
# architecture for): Tau T2A (Ampere Altra), C4A and N4A (Google Axion; N4A is the Arm member of the N4 family, GA
# 2026-01-26: "n4a-standard-8, 8 vCPU / 32768 MB, ARM64" as a machine-type lookup reports it). The program uses the
# API's answer where it has one (wg_mesh.gcp.fit).
GCP_ARM_MACHINE_SERIES = ("t2a", "c4a", "n4a")
# MachineType.architecture in the Compute API ("X86_64" or "ARM64", empty for legacy machine types: pulumi-gcp
# 10.2.0, GetMachineTypesMachineTypeResult.architecture) -> Ubuntu's architecture name
GCP_API_ARCHITECTURES = {"X86_64": "amd64", "ARM64": "arm64"}


def gcp_machine_architecture(machine_type: str, reported: str = "") -> str:
    """`amd64` or `arm64`: what machineTypes.list reported for the type, else its series' (GCP_ARM_MACHINE_SERIES)."""
    if reported in GCP_API_ARCHITECTURES:
        return GCP_API_ARCHITECTURES[reported]
    return "arm64" if machine_type.split("-", 1)[0].lower() in GCP_ARM_MACHINE_SERIES else "amd64"


def gcp_image_problem(image: str, machine_type: str, reported: str = "") -> str | None:
    """A pinned image named for the other architecture than the machine type's (Canonical's names carry `amd64` or
    `arm64`): it cannot boot there."""
    arch = gcp_machine_architecture(machine_type, reported)
    other = "amd64" if arch == "arm64" else "arm64"
    return f"{image} is an {other} image, but {machine_type} is {arch}" if other in image else None
