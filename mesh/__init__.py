"""wg-mesh: a WireGuard mesh between AWS, GCP and bare-metal sites, as a Pulumi component.

    from mesh import Mesh, MeshArgs
    Mesh("mesh", MeshArgs(overlay_cidr=..., sites=[...]))

The names below are imported when first used, so that `python -m mesh validate`, the readiness gate and the pure
modules do not load the Pulumi SDKs they do not need.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mesh.args import MeshArgs, MeshConfigError, SiteArgs, SiteOutputs
    from mesh.aws import AwsGateway
    from mesh.config import ConfigError
    from mesh.gcp import GcpGateway
    from mesh.mesh import Mesh
    from mesh.static import StaticSite

__version__ = "0.1.0"

_EXPORTS = {
    "Mesh": "mesh.mesh",
    "MeshArgs": "mesh.args",
    "SiteArgs": "mesh.args",
    "SiteOutputs": "mesh.args",
    "MeshConfigError": "mesh.args",
    "ConfigError": "mesh.config",
    "AwsGateway": "mesh.aws",
    "GcpGateway": "mesh.gcp",
    "StaticSite": "mesh.static",
}
__all__ = [
    "AwsGateway",
    "ConfigError",
    "GcpGateway",
    "Mesh",
    "MeshArgs",
    "MeshConfigError",
    "SiteArgs",
    "SiteOutputs",
    "StaticSite",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
