"""Does a GCP gateway's machine type fit its zone: machineTypes.list there has it.

A `machine_type` change replaces the gateway (wg_mesh.gcp.instance: `replace_on_changes`, through the readiness gate),
and a VM never leaves its zone: a type the zone lacks would fail the new VM's creation. Looked up while the program
runs (an invoke), so `pulumi preview` (and the preview `pulumi up` starts with) fails with one line before anything
changes. The architecture needs no lookup: the image family follows the machine type (wg_mesh.gcp.facts.image_family),
and a pinned image of the other architecture is refused by `validate` (wg_mesh.rules.gcp_image_problems). Part of the
GcpGateway component.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from wg_mesh.config import GcpSite
from wg_mesh.gcp import facts


def offered_machine_type(
    site: GcpSite, zone: pulumi.Input[str], opts: pulumi.InvokeOutputOptions
) -> pulumi.Output[str]:
    """The site's machine type once machineTypes.list in `zone` has it (the instance's `machine_type`, so a type the
    zone lacks never reaches the instance)."""
    offered = gcp.compute.get_machine_types_output(
        zone=zone, project=site.project, filter=facts.machine_type_filter(site.instance_type), opts=opts
    )
    names = offered.machine_types.apply(lambda types: [t.name for t in types])
    found = pulumi.Output.all(zone=zone, names=names)
    return found.apply(lambda v: facts.check_offered(site.instance_type, v["zone"], v["names"]))
