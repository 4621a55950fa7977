"""A GCP site with `gateways: 2` (docs/ha.md 6): the internal passthrough load balancer the routes point at, and
the agents' permissions. Failover itself is wg-mesh-agent's (wg_mesh/gateway/ha*.py): Google's health check sends the
VPC's traffic to whichever gateway answers 200 on /healthz (only the holder of the static address does), and the
standby's agent moves the static address.

- One unmanaged instance group per VM (a group and its members are in one zone; a backend service takes groups of
  several zones: pulumi-gcp RegionBackendService, backend `group`).
- A regional HTTP health check on the agent's port: `check_interval_sec` 1, `timeout_sec` 1 (the timeout must not
  exceed the interval), `unhealthy_threshold` 2, `healthy_threshold` 1 (defaults 5/5/2/2; pulumi-gcp 10.2.0
  compute.RegionHealthCheck docstrings; registry example https://www.pulumi.com/registry/packages/gcp/api-docs/compute/
  regionhealthcheck/).
- A regional backend service, INTERNAL, protocol UNSPECIFIED (with an L3_DEFAULT forwarding rule), group a primary
  and group b `failover`, failover ratio 0, drop traffic when both are unhealthy, no connection drain on failover
  (else up to 10 minutes), and NEVER_PERSIST so that existing flows leave an unhealthy backend
  (https://cloud.google.com/load-balancing/docs/internal/failover-overview).
- A forwarding rule with ip_protocol L3_DEFAULT and all ports, so that ICMP (path-MTU "fragmentation needed") is
  carried too (https://cloud.google.com/load-balancing/docs/internal/setting-up-ilb-multiple-protocols).
- A firewall rule admitting the health port from Google's probers, 35.191.0.0/16 and 130.211.0.0/22
  (https://cloud.google.com/load-balancing/docs/health-check-concepts), to the gateways' tag.
- The agents' IAM: a custom role (the gate's permissions, README "Prerequisites", plus
  compute.regionBackendServices.get for getHealth) bound to each gateway's service account at the project, with an
  IAM Condition that pins the instances, the address and the backend service by `resource.name` (resource attributes:
  https://cloud.google.com/iam/docs/conditions-resource-attributes, whose type list has compute.googleapis.com/Instance
  and /BackendService; /Address was not visible in the copy read on 2026-12-03). Each clause only narrows its own
  type, so a type the condition does not recognise (zone operations, the network and subnetwork of `useExternalIp`)
  passes: the narrowest one binding allows. Whether Compute evaluates the condition for each of these permissions is
  to verify in a real project (docs/ha.md, open question 3).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_random

from wg_mesh import ha
from wg_mesh.config import GcpSite

PROBER_RANGES = ["35.191.0.0/16", "130.211.0.0/22"]
AGENT_PERMISSIONS = [
    "compute.addresses.get",
    "compute.addresses.use",
    "compute.instances.addAccessConfig",
    "compute.instances.deleteAccessConfig",
    "compute.instances.get",
    "compute.networks.useExternalIp",
    "compute.regionBackendServices.get",
    "compute.subnetworks.useExternalIp",
    "compute.zoneOperations.get",
]


def standby_zone(site: GcpSite, opts: pulumi.ResourceOptions) -> pulumi.Input[str]:
    """`standby_zone`, else the next zone of the region by letter after `zone` (wg_mesh.ha.next_zone)."""
    if site.standby_zone is not None:
        return site.standby_zone
    zones = gcp.compute.get_zones_output(
        project=site.project,
        region=site.region,
        opts=pulumi.InvokeOutputOptions(parent=opts.parent, provider=opts.provider),
    ).names
    return zones.apply(functools.partial(ha.next_zone, site.zone))


def instance_group(
    prefix: str,
    group_name: str,
    zone: pulumi.Input[str],
    instance: gcp.compute.Instance,
    network: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> gcp.compute.InstanceGroup:
    return gcp.compute.InstanceGroup(
        f"{prefix}-ig",
        name=group_name,
        zone=zone,
        instances=[instance.self_link],
        network=network,
        description="wg-mesh gateway (high availability backend)",
        opts=opts,
    )


def load_balancer(
    name: str,
    site: GcpSite,
    names: ha.HaNames,
    network: pulumi.Input[str],
    subnetwork: pulumi.Input[str],
    groups: list[gcp.compute.InstanceGroup],
    opts: pulumi.ResourceOptions,
) -> tuple[gcp.compute.RegionBackendService, gcp.compute.ForwardingRule]:
    """The health check, backend service (a primary, b failover) and L3_DEFAULT forwarding rule."""
    check = gcp.compute.RegionHealthCheck(
        f"{name}-hc",
        name=names.health_check,
        region=site.region,
        check_interval_sec=ha.HEALTH_CHECK.check_interval_sec,
        timeout_sec=ha.HEALTH_CHECK.timeout_sec,
        unhealthy_threshold=ha.HEALTH_CHECK.unhealthy_threshold,
        healthy_threshold=ha.HEALTH_CHECK.healthy_threshold,
        http_health_check=gcp.compute.RegionHealthCheckHttpHealthCheckArgs(
            port=ha.HEALTH_PORT, request_path=ha.HEALTH_PATH
        ),
        description=f"wg-mesh {site.name}: 200 only on the active gateway (wg-mesh-agent)",
        opts=opts,
    )
    backend = gcp.compute.RegionBackendService(
        f"{name}-bs",
        name=names.backend_service,
        region=site.region,
        load_balancing_scheme="INTERNAL",
        protocol="UNSPECIFIED",
        health_checks=check.id,
        # CONNECTION: the balancing mode of passthrough backends (the SDK's default UTILIZATION is for proxies;
        # https://cloud.google.com/load-balancing/docs/backend-service#balancing-mode).
        backends=[
            gcp.compute.RegionBackendServiceBackendArgs(
                group=group.self_link, balancing_mode="CONNECTION", failover=letter != "a"
            )
            for letter, group in zip(ha.LETTERS, groups, strict=True)
        ],
        failover_policy=gcp.compute.RegionBackendServiceFailoverPolicyArgs(
            failover_ratio=ha.FAILOVER_POLICY.failover_ratio,
            drop_traffic_if_unhealthy=ha.FAILOVER_POLICY.drop_traffic_if_unhealthy,
            disable_connection_drain_on_failover=ha.FAILOVER_POLICY.disable_connection_drain_on_failover,
        ),
        connection_tracking_policy=gcp.compute.RegionBackendServiceConnectionTrackingPolicyArgs(
            connection_persistence_on_unhealthy_backends="NEVER_PERSIST"
        ),
        description=f"wg-mesh {site.name}: the site's gateways, a active, b failover",
        opts=opts,
    )
    rule = gcp.compute.ForwardingRule(
        f"{name}-fr",
        name=names.forwarding_rule,
        region=site.region,
        load_balancing_scheme="INTERNAL",
        ip_protocol="L3_DEFAULT",
        all_ports=True,
        backend_service=backend.id,
        network=network,
        subnetwork=subnetwork,
        description=f"wg-mesh {site.name}: next hop of the routes to the other sites",
        opts=opts,
    )
    return backend, rule


def _ha_object(letter: str, site: GcpSite, names: ha.HaNames, values: dict[str, Any]) -> dict[str, Any]:
    groups = {g: {"zone": values[f"zone_{g}"], "name": names.groups[g]} for g in ha.LETTERS}
    return ha.gcp_ha(
        letter, site.project, site.region, values["address"], values["address_ip"], names.backend_service, groups
    )


def ha_object(
    letter: str,
    site: GcpSite,
    names: ha.HaNames,
    address: gcp.compute.Address,
    zone_b: pulumi.Input[str],
) -> pulumi.Output[dict[str, Any]]:
    """Plain names and the address (which exists before both VMs): never instance b's outputs (HA.md)."""
    values = pulumi.Output.all(address=address.name, address_ip=address.address, zone_a=site.zone, zone_b=zone_b)
    return values.apply(functools.partial(_ha_object, letter, site, names))


ROLE_SUFFIX_CHARS = 6


def role_id(scope: str, site_name: str, suffix: str) -> str:
    """A custom role id ([a-zA-Z0-9_.]{3,64}; here at most 9 + 8 + 1 + 32 + 1 + 6 = 57), unique per stack and site:
    `wgMeshHa_<scope>_<site>_<suffix>`. The random suffix: a deleted custom role keeps its id for up to 37 days
    ("You can't create a role_id ... which has been marked for deletion": terraform-google-modules/
    terraform-google-bastion-host#14, hashicorp/terraform-provider-google#1681), so a site that goes 2 -> 1 -> 2 or a
    stack destroyed and brought up again within that window needs a new id."""
    return f"wgMeshHa_{scope}_{re.sub(r'[^a-zA-Z0-9]', '_', site_name)}_{suffix}"


def condition_expression(instances: list[str], address: str, backend_service: str) -> str:
    """CEL: the typed resources the role reaches are exactly these (resource names without the API prefix)."""
    names = ", ".join(f'"{n}"' for n in instances)
    return (
        f'(resource.type != "compute.googleapis.com/Instance" || resource.name in [{names}]) && '
        f'(resource.type != "compute.googleapis.com/Address" || resource.name == "{address}") && '
        f'(resource.type != "compute.googleapis.com/BackendService" || resource.name == "{backend_service}")'
    )


def _relative(link: str) -> str:
    """`https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/n` -> `projects/p/zones/z/instances/n`."""
    return link[link.index("projects/") :]


def _condition(values: dict[str, Any]) -> str:
    return condition_expression(
        [_relative(link) for link in values["instances"]],
        _relative(values["address"]),
        _relative(values["backend_service"]),
    )


def agent_iam(
    name: str,
    site: GcpSite,
    scope: str,
    members: list[pulumi.Output[str]],
    instances: list[gcp.compute.Instance],
    address: gcp.compute.Address,
    backend: gcp.compute.RegionBackendService,
    opts: pulumi.ResourceOptions,
) -> gcp.projects.IAMCustomRole:
    """The custom role and one conditional project binding per gateway service account (module docstring)."""
    suffix = pulumi_random.RandomString(
        f"{name}-ha-role-suffix",
        length=ROLE_SUFFIX_CHARS,
        special=False,
        upper=False,
        opts=pulumi.ResourceOptions(parent=opts.parent),
    )
    role = gcp.projects.IAMCustomRole(
        f"{name}-ha-role",
        project=site.project,
        role_id=suffix.result.apply(functools.partial(role_id, scope, site.name)),
        title=f"wg-mesh HA agent ({site.name})",
        description="Move the site's static address and read its backend health (wg-mesh-agent, gateways: 2)",
        permissions=AGENT_PERMISSIONS,
        opts=opts,
    )
    values = pulumi.Output.all(
        instances=pulumi.Output.all(*[i.self_link for i in instances]),
        address=address.self_link,
        backend_service=backend.self_link,
    )
    expression = values.apply(_condition)
    for letter, member in zip(ha.LETTERS, members, strict=True):
        gcp.projects.IAMMember(
            f"{ha.child_name(name, letter)}-ha-member",
            project=site.project,
            role=role.name,
            member=member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title=f"wg-mesh {site.name} gateways",
                description="only this site's gateways, static address and backend service",
                expression=expression,
            ),
            opts=opts,
        )
    return role


def prober_firewall(
    name: str, network: pulumi.Input[str], tag: str, where: str, opts: pulumi.ResourceOptions
) -> gcp.compute.Firewall:
    return gcp.compute.Firewall(
        f"{name}-fw-health",
        network=network,
        description=f"{where}: the load balancer's health checks to wg-mesh-agent (/healthz)",
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(ha.HEALTH_PORT)])],
        source_ranges=PROBER_RANGES,
        target_tags=[tag],
        opts=opts,
    )
