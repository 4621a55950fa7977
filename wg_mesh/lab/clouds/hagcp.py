"""What the lab's HA cloud (hacloud.py) needs for a GCP site with `gateways: 2` (docs/ha.md 6 and 11), pure except
`metadata_root`: the names the program would give (wg_mesh.plan.ha.ha_names: backend service, instance groups), the spec
of the GCP model process (gcpmodel.py), each gateway's `ha` object (wg_mesh.plan.ha.gcp_ha) and its metadata server's
files.

* The VMs are named after their network namespaces, a in the site's `zone`, b in `standby_zone` (else the next zone
  of the region, wg_mesh.plan.ha.next_zone over zones a, b, c: the lab has no zone list);
* the spare place c (haplan.SPARE) has a metadata server from the start and a VM only once the drill creates one,
  in the zone of the gateway it replaces (`place_vm`);
* the static address's IP is the site's public address in the lab (as every lab public address replaces a cloud's);
* each gateway's metadata server serves its own `instance/name` and `instance/zone` and the site's service-account
  token (gce/<site>/token: one token for both, the only accessor of the site's key and document secrets; the program
  gives each VM its own service account, the lab's Compute model admits the site's token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wg_mesh.config import GcpSite, MeshConfig
from wg_mesh.lab.clouds.controlplane import CLOUD_API, write_atomic
from wg_mesh.lab.fabric.haplan import SPARE, HaSite, ha_to_json
from wg_mesh.lab.fabric.plan import LAB_PROJECT
from wg_mesh.plan import ha as mesh_ha

COMPUTE_PORT = 8082
COMPUTE_ENDPOINT = f"http://{CLOUD_API.ip}:{COMPUTE_PORT}/compute/v1/"
ENV_LINE = f"WG_MESH_COMPUTE_ENDPOINT={COMPUTE_ENDPOINT}"  # wg_mesh.gateway.ha_gcp reads it


def zones(site: GcpSite) -> dict[str, str]:
    """Each place's zone at the start (the spare place c: a's, until the drill puts a replacement there, `move_vm`)."""
    standby = site.standby_zone or mesh_ha.next_zone(site.zone, [f"{site.region}-{z}" for z in "abc"])
    return {"a": site.zone, "b": standby, SPARE: site.zone}


def site_entry(cfg: MeshConfig, prefix: str, ha: HaSite, token: str) -> dict[str, Any]:
    """One site of gcpmodel.py's spec."""
    site = cfg.site(ha.site)
    assert isinstance(site, GcpSite)
    names = mesh_ha.ha_names(LAB_PROJECT, prefix, ha.site)
    where = zones(site)
    return {
        **ha_to_json(ha),
        "project": site.project,
        "region": site.region,
        "address": f"{names.backend_service.removesuffix('-bs')}-address",
        "backend_service": names.backend_service,
        "vms": {g.letter: {"name": g.netns, "zone": where[g.letter]} for g in ha.gateways},
        "groups": dict(names.groups),
        "tokens": [token],
    }


def ha_object(letter: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Gateway `letter`'s agent.json `ha` object, as wg_mesh.gcp.ha.ha_object renders it from the program's values."""
    groups = {g: {"zone": entry["vms"][g]["zone"], "name": entry["groups"][g]} for g in mesh_ha.LETTERS}
    return mesh_ha.gcp_ha(letter, entry["project"], entry["region"], entry["address"], entry["eip"],
                          entry["backend_service"], groups)  # fmt: skip


def metadata_root(site_root: Path, entry: dict[str, Any], letter: str) -> Path:
    """gce/<site>-<letter>: this VM's name and zone, a link to the site's token (what controlplane.py publishes into
    gce/<site>)."""
    root = site_root.with_name(f"{site_root.name}-{letter}")
    vm = entry["vms"][letter]
    place_vm(root, vm["name"], vm["zone"])
    if not (root / "token").is_symlink():
        (root / "token").symlink_to(Path("..") / site_root.name / "token")
    return root


def place_vm(root: Path, name: str, zone: str) -> None:
    """The VM a place's metadata server answers for: a replacement in a place gets the zone of the gateway it
    replaces (its instance group's zone: groups are zonal), written before its agent starts."""
    write_atomic(root / "instance" / "name", name.encode(), 0o644)
    write_atomic(root / "instance" / "zone", f"projects/123456789/zones/{zone}".encode(), 0o644)
