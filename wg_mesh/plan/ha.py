"""High-availability sites (`gateways: 2`, issue 11, docs/ha.md), the pure part: names and the agent's `ha` object.

Both gateways of a site share one identity (key, overlay address, peer document, public address); gateway `a` keeps
today's resource names and `b`'s are today's with `-b` after the site's component name (/work/wt/HA.md). The cloud
names an agent must know are computed here from plain strings, never from Outputs, so that gateway a's user data
never refers to gateway b (a dependency cycle). Failover itself is wg-mesh-agent's (wg_mesh/gateway/ha*.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wg_mesh.plan import live

HEALTH_PORT = 9181  # wg-mesh-agent serves GET /healthz here (HA.md); GCP's health check probes it
HEALTH_PATH = "/healthz"
LETTERS = ("a", "b")


@dataclass(frozen=True)
class GcpHealthCheck:
    """GCP: the regional health check's timing and thresholds, as wg_mesh.gcp.ha declares them (docs/ha.md 6.2); the
    lab's GCP model (wg_mesh/lab/clouds/gcpprober.py) probes with the same values."""

    check_interval_sec: int = 1
    timeout_sec: int = 1  # must not exceed check_interval_sec
    unhealthy_threshold: int = 2
    healthy_threshold: int = 1


@dataclass(frozen=True)
class GcpFailoverPolicy:
    """GCP: the backend service's failover policy (group a primary, b failover), as wg_mesh.gcp.ha declares it."""

    failover_ratio: float = 0.0
    drop_traffic_if_unhealthy: bool = True
    disable_connection_drain_on_failover: bool = True


HEALTH_CHECK = GcpHealthCheck()
FAILOVER_POLICY = GcpFailoverPolicy()


def child_name(name: str, letter: str) -> str:
    """The logical name prefix of a gateway's children: the component's own for `a`, `<name>-b` for `b`."""
    return name if letter == "a" else f"{name}-{letter}"


def vm_name(prefix: str, scope: str | None) -> str:
    """A GCP gateway VM's logical name (Pulumi auto-names the VM `<logical name>-<7 hex>`): `<prefix>-instance` for a
    single gateway; with `gateways: 2`, `<prefix>-instance-<scope>` (the stack's scope, wg_mesh.plan.live.scope), so
    that the agents' IAM Condition, which admits the site's VMs by name prefix (old and replacement alike), admits no
    VM of another stack with the same site name in the same project and zone (issue 32; wg_mesh.gcp.ha)."""
    return f"{prefix}-instance" if scope is None else f"{prefix}-instance-{scope}"


@dataclass(frozen=True)
class HaNames:
    """Cloud names of one HA site (plain strings; `ha_names`)."""

    lease_table: str  # AWS: the DynamoDB lease table (hash key `site`, S)
    backend_service: str  # GCP: the regional backend service
    health_check: str  # GCP: the regional HTTP health check
    forwarding_rule: str  # GCP: the internal passthrough forwarding rule (the routes' next hop)
    groups: Mapping[str, str]  # GCP: letter -> unmanaged instance group


def ha_names(project: str, stack: str, site: str) -> HaNames:
    """Unique per Pulumi project, stack and site. GCP: RFC 1035 names of at most 4 + 8 + 32 + 7 = 51 characters (the
    limit is 63); AWS: DynamoDB table names are 3-255 characters of [a-zA-Z0-9_.-]."""
    prefix = f"wgm-{live.scope(project, stack)}-{site}"
    return HaNames(
        lease_table=f"wg-mesh-{live.scope(project, stack)}-{site}-lease",
        backend_service=f"{prefix}-bs",
        health_check=f"{prefix}-hc",
        forwarding_rule=f"{prefix}-fr",
        groups={letter: f"{prefix}-ig-{letter}" for letter in LETTERS},
    )


def aws_ha(
    letter: str,
    region: str,
    lease_table: str,
    allocation_id: str,
    route_table_ids: Sequence[str],
    ec2_endpoint: str | None = None,
) -> dict[str, Any]:
    """The `ha` object of an AWS gateway's agent.json (HA.md); ec2_endpoint: the Regional DNS name of the site's EC2
    interface endpoint (created networks), which the agent calls EC2 by (wg_mesh.aws.ha.ec2_endpoint)."""
    return {
        "cloud": "aws",
        "gateway": letter,
        "health_port": HEALTH_PORT,
        "region": region,
        "lease_table": lease_table,
        "allocation_id": allocation_id,
        "route_table_ids": list(route_table_ids),
        **({"ec2_endpoint": f"https://{ec2_endpoint}"} if ec2_endpoint else {}),
    }


def gcp_ha(
    letter: str,
    project: str,
    region: str,
    address: str,
    address_ip: str,
    backend_service: str,
    groups: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    """The `ha` object of a GCP gateway's agent.json (HA.md); groups: letter -> {zone, name}."""
    return {
        "cloud": "gcp",
        "gateway": letter,
        "health_port": HEALTH_PORT,
        "project": project,
        "region": region,
        "address": address,
        "address_ip": address_ip,
        "backend_service": backend_service,
        "groups": {letter: dict(group) for letter, group in groups.items()},
    }


def next_zone(zone: str, offered: Sequence[str]) -> str:
    """GCP's default standby zone: the next zone of the region by letter after `zone` (wrapping round), among the
    zones the region has (`offered`, from compute.get_zones). ValueError when the region has no other zone."""
    others = sorted(z for z in offered if z != zone)
    if not others:
        raise ValueError(f"no zone other than {zone} in its region: set standby_zone (equal to zone: no redundancy)")
    later = [z for z in others if z > zone]
    return later[0] if later else others[0]


def other_zone(instance_type: str, region: str, first: str, offered_in: Sequence[str]) -> str:
    """AWS's default standby zone: the first zone, by name, that offers the instance type and is not `first`."""
    others = sorted(z for z in offered_in if z != first)
    if not others:
        raise ValueError(
            f"instance type {instance_type} is offered in no availability zone of {region} other than {first}: "
            "choose another instance type (the pair's EC2 endpoint takes one subnet per zone), or give an existing "
            "network's two subnets (subnet_id, standby_subnet_id)"
        )
    return others[0]
