"""An AWS site as a Pulumi component (AwsGateway) and its parts.

    gateway   the AwsGateway component: its constructor is the list of steps, from the provider to the routes
    network   the site's VPC and gateway subnets (created or existing)
    firewall  the gateways' security group
    images    the AMI a gateway boots (Canonical's Ubuntu 24.04: the newest, kept, or the pinned one)
    machine   one gateway instance and its readiness gate
    iam       the gateway's role and policies (ready tag, live stores, HA), the site's tags
    live      delivery: live: the key parameter and the peer document secret
    ha        gateways: 2: the lease table, the endpoints, the `ha` object, the ENI tags
    fit       the instance type offered in the zone and the AMI of the type's architecture, checked in the preview
    facts     plain facts about AWS (partitions, Canonical's AMIs, zones): pure, no Pulumi

The component's names are imported when first used, so that the config's rules (which use `facts`) do not load the
Pulumi SDKs.
"""

from typing import TYPE_CHECKING

from wg_mesh import lazy_attributes

if TYPE_CHECKING:
    from wg_mesh.aws.facts import ami_architecture
    from wg_mesh.aws.firewall import SG_DESCRIPTION_CHARS
    from wg_mesh.aws.gateway import GATEWAY_TYPE, AwsGateway, AwsGatewayArgs
    from wg_mesh.aws.machine import READY_TIMEOUT_S, gate_command

_EXPORTS = {
    "AwsGateway": "wg_mesh.aws.gateway",
    "AwsGatewayArgs": "wg_mesh.aws.gateway",
    "GATEWAY_TYPE": "wg_mesh.aws.gateway",
    "READY_TIMEOUT_S": "wg_mesh.aws.machine",
    "SG_DESCRIPTION_CHARS": "wg_mesh.aws.firewall",
    "gate_command": "wg_mesh.aws.machine",
    "ami_architecture": "wg_mesh.aws.facts",
}
__all__ = [
    "GATEWAY_TYPE",
    "READY_TIMEOUT_S",
    "SG_DESCRIPTION_CHARS",
    "AwsGateway",
    "AwsGatewayArgs",
    "ami_architecture",
    "gate_command",
]

__getattr__ = lazy_attributes(__name__, _EXPORTS)
