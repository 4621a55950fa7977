"""wg-mesh: a WireGuard mesh between AWS, GCP and bare-metal sites, as a Pulumi component.

    from wg_mesh import Mesh, MeshArgs
    Mesh("mesh", MeshArgs(overlay_cidr=..., sites=[...]))

The names below are imported when first used, so that `python -m wg_mesh validate`, the readiness gate and the pure
modules do not load the Pulumi SDKs they do not need.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wg_mesh.args import MeshArgs, MeshConfigError, PrivatePathArgs, SiteArgs, SiteOutputs
    from wg_mesh.aws.gateway import AwsGateway
    from wg_mesh.config import ConfigError
    from wg_mesh.gcp import GcpGateway
    from wg_mesh.mesh import Mesh
    from wg_mesh.static import StaticSite

__version__ = "0.1.0"

_EXPORTS = {
    "Mesh": "wg_mesh.mesh",
    "MeshArgs": "wg_mesh.args",
    "PrivatePathArgs": "wg_mesh.args",
    "SiteArgs": "wg_mesh.args",
    "SiteOutputs": "wg_mesh.args",
    "MeshConfigError": "wg_mesh.args",
    "ConfigError": "wg_mesh.config",
    "AwsGateway": "wg_mesh.aws.gateway",
    "GcpGateway": "wg_mesh.gcp",
    "StaticSite": "wg_mesh.static",
}
__all__ = [
    "AwsGateway",
    "ConfigError",
    "GcpGateway",
    "Mesh",
    "MeshArgs",
    "MeshConfigError",
    "PrivatePathArgs",
    "SiteArgs",
    "SiteOutputs",
    "StaticSite",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
