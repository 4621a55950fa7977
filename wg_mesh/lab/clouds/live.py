"""`delivery: live` in the lab: the clouds' stores (controlplane.py) started and filled before the gateways are
attached, as `pulumi up` fills them before the instances boot; each gateway is handed its agent's EnvironmentFile
(a booted one in its root before it is launched) and, on GCP, its metadata server.

The lab sees live delivery in the rendered user data itself (an /etc/wg-mesh/agent.json), not in the config: what
it carries out is what the gateways would get.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from wg_mesh.config import MeshConfig
from wg_mesh.lab.clouds.controlplane import ControlPlane, agent_configs
from wg_mesh.lab.fabric.plan import GatewayArtifacts, LabKeys
from wg_mesh.lab.machines.build import BuiltLab
from wg_mesh.lab.machines.cloudinit import UserDataError


def live_configs(artifacts: Mapping[str, GatewayArtifacts]) -> dict[str, dict[str, object]]:
    """site -> agent.json when the user data delivers peers live (every site or none), else {}."""
    configs = agent_configs({name: a.user_data for name, a in artifacts.items()})
    if configs and set(configs) != set(artifacts):
        missing = sorted(set(artifacts) - set(configs))
        raise UserDataError(f"the user data of {', '.join(missing)} installs no agent while the others' do")
    return configs


def control_plane_hook(
    cfg: MeshConfig,
    keys: LabKeys,
    configs: Mapping[str, Mapping[str, object]],
    sites: Iterable[str] | None = None,
    started: Callable[[ControlPlane], None] | None = None,
) -> Callable[[BuiltLab], None]:
    """For `build(before_gateways=...)`: start the lab's clouds, hand every gateway its provisioning, publish the
    keys and documents of `sites` (default: every site)."""
    names = list(sites) if sites is not None else [s.name for s in cfg.sites]

    def hook(lab: BuiltLab) -> None:
        plane = ControlPlane(lab, configs, keys.signing)
        if started is not None:
            started(plane)
        plane.start()
        for machine in lab.machines.values():
            machine.provisioner = plane
        plane.publish(cfg, keys.private, keys.public, names)

    return hook
