"""`--boot`: what a run needs to boot its gateways as containers: the cached image, the package source for their
user data, and the machine factory that makes each gateway a booted container."""

from __future__ import annotations

from typing import Any

from wg_mesh.lab.fabric.netns import LabState, missing_requirements
from wg_mesh.lab.fabric.plan import GatewayArtifacts, LabPlan, SitePlan
from wg_mesh.lab.machines.build import MachineFactory


def boot_machines(artifacts: dict[str, GatewayArtifacts]) -> tuple[MachineFactory, str, dict[str, Any]]:
    """--boot: the cached image and the package source for these user data (built first when missing).
    Returns the machine factory, a note for the report and the image's summary (the reports' `image`)."""

    from wg_mesh.lab.machines import image as images
    from wg_mesh.lab.machines.container import ContainerGateway
    from wg_mesh.lab.machines.seed import user_data_facts

    image = images.ensure_image()
    repos, filled = {}, []
    for name, a in artifacts.items():
        facts = user_data_facts(a.user_data)
        repos[name], seconds = images.ensure_repo(image, facts.packages, facts.apt_files)
        if seconds is not None:
            filled.append(seconds)
    built = f"built in {image.built_s:.0f} s" if image.built_s is not None else "cached"
    note = f"--boot: Debian {images.SUITE} image {image.root} ({image.size_bytes / 1e6:.0f} MB, {built})"
    summary = {
        **images.image_summary(image),
        "package_source": sorted({str(r) for r in repos.values()}),
        "package_source_filled_s": round(sum(filled), 1) if filled else None,
    }

    def machine(plan: LabPlan, site: SitePlan, a: GatewayArtifacts, state: LabState) -> ContainerGateway:
        return ContainerGateway(plan, site, a, state, image=image, repo=repos[site.name])

    return machine, note, summary


def boot_requirements() -> list[str]:
    """What this machine lacks to boot gateways (the lab's tools, then --boot's own)."""
    from wg_mesh.lab.machines.image import missing_boot_tools

    return missing_requirements() + missing_boot_tools()
