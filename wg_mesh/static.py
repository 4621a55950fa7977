"""A bare-metal or VPS site: no cloud resources, only its key and its rendered (secret) config.

Its operator applies the config by hand from the secret stack outputs (`wireguard_configs`,
`static_site_cloud_init`); its public address is the configured `endpoint`. With `delivery: live` the cloud-init
installs wg-mesh-agent reading two files the operator keeps current from the secret outputs
`static_site_documents` (the signed documents) and `static_site_private_keys` (wg_mesh.plan.live.STATIC_DOCUMENT_PATH,
STATIC_PRIVATE_KEY_PATH); its agent.json pins the mesh's signing key, so a document edited or written by anyone but
`pulumi up` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from wg_mesh import component, config
from wg_mesh.component import Directory
from wg_mesh.keys import SigningKey

SITE_TYPE = "wg-mesh:static:Site"


@dataclass(frozen=True)
class StaticSiteArgs:
    mesh: config.MeshConfig
    site: config.StaticSite
    directory: Directory
    signing_key: SigningKey | None = None  # delivery: live: the mesh's document signing key (wg_mesh.mesh)


class StaticSite(component.SiteComponent):
    def __init__(self, name: str, args: StaticSiteArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(SITE_TYPE, name, None, opts)
        site = args.site
        self._create_identity(name, args.mesh, site, args.directory, args.signing_key)
        self.public_ip = pulumi.Output.from_input(str(site.endpoint))
        self._register_site_outputs()
