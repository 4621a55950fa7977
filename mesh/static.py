"""A bare-metal or VPS site: no cloud resources, only its key and its rendered (secret) config.

Its operator applies the config by hand from the secret stack outputs (`wireguard_configs`,
`static_site_cloud_init`); its public address is the configured `endpoint`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from mesh import component, config
from mesh.component import Directory
from mesh.keys import WireGuardKey

SITE_TYPE = "wg-mesh:static:Site"


@dataclass(frozen=True)
class StaticSiteArgs:
    mesh: config.MeshConfig
    site: config.StaticSite
    directory: Directory


class StaticSite(pulumi.ComponentResource):
    key: WireGuardKey
    public_ip: pulumi.Output[str]
    overlay_ip: pulumi.Output[str]
    public_key: pulumi.Output[str]
    wg_config: pulumi.Output[str]
    user_data: pulumi.Output[str]

    def __init__(self, name: str, args: StaticSiteArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(SITE_TYPE, name, None, opts)
        site = args.site
        self.key = WireGuardKey(f"{name}-key", site.key_epoch, pulumi.ResourceOptions(parent=self))
        self.public_ip = pulumi.Output.from_input(str(site.endpoint))
        self.overlay_ip = pulumi.Output.from_input(str(site.overlay_ip))
        self.public_key = self.key.public_key
        self.wg_config = component.wg_config(args.mesh, site.name, self.key, args.directory)
        self.user_data = component.user_data(args.mesh, site.name, self.wg_config, args.directory)
        self.register_outputs(
            {"public_ip": self.public_ip, "overlay_ip": self.overlay_ip, "public_key": self.public_key}
        )
