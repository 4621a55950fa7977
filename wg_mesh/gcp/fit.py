"""Does a GCP gateway's machine type fit its zone: machineTypes.list there has it; and which CPU architecture it is.

A `machine_type` change replaces the gateway (wg_mesh.gcp.instance: `replace_on_changes`, through the readiness gate),
and a VM never leaves its zone: a type the zone lacks would fail the new VM's creation. Looked up while the program
runs (an invoke), so `pulumi preview` (and the preview `pulumi up` starts with) fails with one line before anything
changes. The same lookup reports the type's architecture (MachineType.architecture, "X86_64" or "ARM64"), which picks
the boot image family and checks a pinned image (wg_mesh.gcp.facts.boot_image); for a type it reports none for, the
series decides (wg_mesh.config.gcp_machine_architecture, which `validate` uses offline). Part of the GcpGateway
component.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from wg_mesh.config import GcpSite
from wg_mesh.gcp import facts


@dataclass(frozen=True)
class Machine:
    """The gateway's machine type, once its zone offers it, and its architecture as machineTypes.list reports it
    ("X86_64", "ARM64", or "" for none)."""

    machine_type: pulumi.Output[str]
    reported_architecture: pulumi.Output[str]


def _reported(machine_type: str, types: Sequence[Any]) -> str:
    return next((str(t.architecture or "") for t in types if t.name == machine_type), "")


def offered_machine(site: GcpSite, zone: pulumi.Input[str], opts: pulumi.InvokeOutputOptions) -> Machine:
    """The site's machine type once machineTypes.list in `zone` has it (the instance's `machine_type`, so a type the
    zone lacks never reaches the instance), and its reported architecture."""
    offered = gcp.compute.get_machine_types_output(
        zone=zone, project=site.project, filter=facts.machine_type_filter(site.instance_type), opts=opts
    )
    names = offered.machine_types.apply(lambda types: [t.name for t in types])
    found = pulumi.Output.all(zone=zone, names=names)
    machine_type = found.apply(lambda v: facts.check_offered(site.instance_type, v["zone"], v["names"]))
    return Machine(machine_type, offered.machine_types.apply(lambda types: _reported(site.instance_type, types)))
