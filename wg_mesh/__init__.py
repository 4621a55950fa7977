"""wg-mesh: a WireGuard mesh between AWS, GCP and bare-metal sites, as a Pulumi component.

    from wg_mesh import Mesh, MeshArgs
    Mesh("mesh", MeshArgs(overlay_cidr=..., sites=[...]))

The names below are imported when first used, so that `python -m wg_mesh validate`, the readiness gate and the pure
modules do not load the Pulumi SDKs they do not need.
"""

from collections.abc import Callable, Mapping
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


def lazy_attributes(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's `__getattr__` (PEP 562) that imports each name of `exports` (name -> module) when first used:
    wg_mesh's, wg_mesh.aws's and wg_mesh.gcp's public names, so that importing the package loads no Pulumi SDK."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = lazy_attributes(__name__, _EXPORTS)
