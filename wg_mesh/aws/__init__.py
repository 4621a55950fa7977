"""An AWS site as a Pulumi component (AwsGateway) and its parts.

    gateway   the AwsGateway component: its constructor's steps, the instances, the readiness gate, the routes
    network   the site's VPC and gateway subnets (created or existing)
    iam       the gateway's role and policies (ready tag, live stores, HA), the site's tags
    live      delivery: live: the key parameter and the peer document secret
    ha        gateways: 2: the lease table, the endpoints, the `ha` object, the ENI tags
    fit       the instance type offered in the zone and the AMI of the type's architecture, checked in the preview
    facts     plain facts about AWS (partitions, Canonical's AMIs, zones): pure, no Pulumi

The component's names are imported when first used, so that the config's rules (which use `facts`) do not load the
Pulumi SDKs.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wg_mesh.aws.facts import ami_architecture
    from wg_mesh.aws.gateway import (
        GATE_COMMAND,
        GATEWAY_TYPE,
        READY_TIMEOUT_S,
        SG_DESCRIPTION_CHARS,
        AwsGateway,
        AwsGatewayArgs,
    )

_EXPORTS = {
    "AwsGateway": "wg_mesh.aws.gateway",
    "AwsGatewayArgs": "wg_mesh.aws.gateway",
    "GATEWAY_TYPE": "wg_mesh.aws.gateway",
    "GATE_COMMAND": "wg_mesh.aws.gateway",
    "READY_TIMEOUT_S": "wg_mesh.aws.gateway",
    "SG_DESCRIPTION_CHARS": "wg_mesh.aws.gateway",
    "ami_architecture": "wg_mesh.aws.facts",
}
__all__ = [
    "GATEWAY_TYPE",
    "GATE_COMMAND",
    "READY_TIMEOUT_S",
    "SG_DESCRIPTION_CHARS",
    "AwsGateway",
    "AwsGatewayArgs",
    "ami_architecture",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
