"""A GCP site as a Pulumi component: GcpGateway and its parts.

- gateway: the component (GcpGateway, GcpGatewayArgs): network, address, firewall rules, the gateway VM(s), the
  readiness gate and the routes through it;
- ha: `gateways: 2`: the instance groups, the internal load balancer, the prober rule and the agents' IAM;
- live: `delivery: live`: the gateway's service account and its key in Secret Manager;
- fit: the machine type checked against the gateway's zone (an invoke);
- facts: plain facts (no Pulumi): images and boot disks per machine type.

The component is imported when first used, so that the pure `facts` does not load the Pulumi SDKs.
"""

from typing import TYPE_CHECKING

from wg_mesh import lazy_attributes

if TYPE_CHECKING:
    from wg_mesh.gcp.gateway import GcpGateway, GcpGatewayArgs

__all__ = ["GcpGateway", "GcpGatewayArgs"]
__getattr__ = lazy_attributes(__name__, dict.fromkeys(__all__, "wg_mesh.gcp.gateway"))
