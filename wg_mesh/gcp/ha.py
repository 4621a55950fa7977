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
- Global access on the forwarding rule (`allow_global_access`): the routes through it are VPC routes, which apply
  in every region of the network, but the load balancer takes traffic only from its own region unless "set to
  `TRUE`, [then] clients can access ILB from all regions. Otherwise only allows access from clients in the same
  region as the internal load balancer" (pulumi-gcp 10.2.0 compute.ForwardingRule `allow_global_access`; the REST
  field `allowGlobalAccess`, https://cloud.google.com/compute/docs/reference/rest/v1/forwardingRules; next hops:
  https://cloud.google.com/load-balancing/docs/internal/ilb-next-hop-overview). A single gateway
  (`next_hop_instance`) serves every region of the network, so HA turns it on to keep that. Cost: we know of no
  charge for the setting itself (not checked against https://cloud.google.com/vpc/network-pricing in this session:
  docs/ha.md 12); traffic from other regions is inter-region VPC traffic, billed as it is to a single gateway, and
  the load balancer's per-GB processing applies to all of its traffic, global access or not.
- The agents' IAM: a custom role (the gate's permissions, README "Prerequisites", plus
  compute.regionBackendServices.get for getHealth) bound to each gateway's service account at the project, with an
  IAM Condition: on compute.googleapis.com/Instance, the one resource type of these that IAM Conditions recognise
  (DOCUMENTED_RESOURCE_TYPES), add/deleteAccessConfig and instances.get only on this stack's gateways of the site, by
  the name prefix every VM of a gateway letter shares (old and replacement alike), which carries the stack's scope
  (issue 32: wg_mesh.plan.ha.vm_name; before, another stack's VMs of the same site name, project and zone matched);
  on addresses, by the name the condition reads, only the site's own (`condition_expression`: effective if Compute
  gives IAM the address's name, inert otherwise). The regional backend service (to IAM a `RegionBackendService`,
  issue 21, not a `BackendService`), zone operations and useExternalIp are not narrowed: the gateways may read any
  backend service of the project. Whether Compute evaluates the condition for each permission is to verify in a real
  project (docs/ha.md, open question 3).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_random

from wg_mesh.config import GcpSite
from wg_mesh.plan import ha

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


def standby_zone(name: str, site: GcpSite, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """`standby_zone`, else the next zone of the region by letter after `zone` (wg_mesh.plan.ha.next_zone) as the
    first `up` found it, kept in the stack's state (issue 32): the zone list is a lookup on every run, and a zone the
    region gains (or loses) would change the choice, and with it gateway b's VM, its group and both gateways' user
    data. A `pulumi.Stash` keeps "the original `input` value even when the `input` property is updated in subsequent
    deployments" (Pulumi docs, "Stash"; its preview answers the input, so a first `up` previews the real zone); its
    `replacement_trigger` is `zone`, so moving gateway a decides b's zone again (never the same as a's); removing
    `standby_zone` decides it again too (a new stash). Needs Pulumi CLI 3.208.0 or newer (Stash and
    replacement_trigger: pulumi/pulumi#20819, #20936)."""
    if site.standby_zone is not None:
        return pulumi.Output.from_input(site.standby_zone)
    zones = gcp.compute.get_zones_output(
        project=site.project,
        region=site.region,
        opts=pulumi.InvokeOutputOptions(parent=opts.parent, provider=opts.provider),
    ).names
    chosen = zones.apply(functools.partial(ha.next_zone, site.zone))
    kept = pulumi.Stash(
        f"{ha.child_name(name, 'b')}-zone",
        input=chosen,
        opts=pulumi.ResourceOptions(parent=opts.parent, replacement_trigger=site.zone),
    )
    return kept.output.apply(str)


def instance_group(
    prefix: str,
    group_name: str,
    instance: gcp.compute.Instance,
    ready: pulumi.Resource,
    network: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> gcp.compute.InstanceGroup:
    """The VM's group, updated to hold a new VM only after its readiness gate (`depends_on`): Pulumi updates a
    resource only once all its dependencies are done, so a replacement that is not ready never becomes a backend,
    and the old VM stays the group's member (and the load balancer's healthy backend) meanwhile. The group's
    `instances` change is an in-place update (removeInstances/addInstances): the old VM leaves the group in the same
    step, and the agents hand the address to the new one (wg_mesh.gateway.ha_gcp.GcpHa.other_health; docs/ha.md 9)."""
    return gcp.compute.InstanceGroup(
        f"{prefix}-ig",
        name=group_name,
        zone=instance.zone,
        instances=[instance.self_link],
        network=network,
        description="wg-mesh gateway (high availability backend)",
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[ready])),
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
        allow_global_access=True,  # the routes are global (module docstring)
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


# The resource types IAM Conditions recognise for Compute Engine, as far as this program names them: the "Resource type
# values" table of https://cloud.google.com/iam/docs/conditions-resource-attributes (read 2026-12-03; its compute rows
# begin BackendService, Disk, Firewall, ForwardingRule, GlobalForwardingRule, Image, Instance, InstanceTemplate). It
# has no `Address`, and a regional backend service is no `BackendService`: a clause on a type IAM does not
# recognise narrows nothing ("Other services and resource types do not recognize resource attributes"), so the
# condition names the one type it can narrow (tests/test_gcp_ha_iam.py checks every type it names is in this list).
DOCUMENTED_RESOURCE_TYPES = frozenset(
    f"compute.googleapis.com/{t}"
    for t in ("BackendService", "Disk", "Firewall", "ForwardingRule", "GlobalForwardingRule", "Image", "Instance",
              "InstanceTemplate")
)  # fmt: skip
INSTANCE_TYPE = "compute.googleapis.com/Instance"


def instance_prefix(project: str, zone: str, logical: str) -> str:
    """The resource name (IAM's form: projects/P/zones/Z/instances/N) every VM of one gateway letter starts with:
    Pulumi names a VM `<logical name>-<random suffix>`, so the old VM and its replacement both match, and the binding
    does not change while `pulumi up` replaces a gateway (the handover needs both: wg_mesh.gateway.ha_gcp). The
    logical name carries the stack's scope (wg_mesh.plan.ha.vm_name), so another stack's VMs never match."""
    return f"projects/{project}/zones/{zone}/instances/{logical}-"


ADDRESS_NAME = 'resource.name.extract("/addresses/{name}")'  # "" for any resource that is not an address


def condition_expression(prefixes: list[str], address: str) -> str:
    """CEL: on instances, only this stack's gateways of the site, old or new (`prefixes`); on addresses, only the
    site's own (`address`, its name); everything else (the regional backend service, zone operations, the network and
    subnetwork's useExternalIp) is not narrowed.

    Instances: the type is one IAM Conditions recognise (DOCUMENTED_RESOURCE_TYPES), and `resource.name` is supported
    for Compute Engine with `startsWith`, `endsWith`, `extract`, `==` and `!=` (IAM docs, "Attribute reference for IAM
    Conditions", resource name attribute). Addresses: IAM's type table has no `Address`, so the clause does not test
    the type; it reads the name: `extract` gives what follows `/addresses/` in it, "" when it has none. If Compute
    gives IAM the address's name for `compute.addresses.use` (projects/P/regions/R/addresses/N), another stack's
    address is refused; if it gives none, the clause passes and admits what the binding admitted before (not
    verified in a real project: docs/ha.md 6.3)."""
    names = " || ".join(f'resource.name.startsWith("{p}")' for p in prefixes)
    addresses = f'{ADDRESS_NAME} == "" || {ADDRESS_NAME} == "{address}"'
    return f'(resource.type != "{INSTANCE_TYPE}" || {names}) && ({addresses})'


def agent_iam(
    name: str,
    site: GcpSite,
    scope: str,
    members: list[pulumi.Output[str]],
    zones: list[pulumi.Input[str]],
    address: gcp.compute.Address,
    opts: pulumi.ResourceOptions,
) -> gcp.projects.IAMCustomRole:
    """The custom role and one conditional project binding per gateway service account (module docstring). The
    condition depends on the config (zones: a's and b's, as configured or kept: `standby_zone`) and on the address,
    which exists before both VMs, never on a VM: a new condition is in place before a VM that needs it boots, and the
    binding it replaces (create before delete) is deleted at the end of `up`, after the VMs it admitted."""
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
    logical = [ha.vm_name(ha.child_name(name, letter), scope) for letter in ha.LETTERS]  # wg_mesh.gcp.instance's
    values = pulumi.Output.all(address.name, *zones)
    expression = values.apply(
        lambda v: condition_expression(
            [instance_prefix(site.project, z, n) for z, n in zip(v[1:], logical, strict=True)], v[0]
        )
    )
    for letter, member in zip(ha.LETTERS, members, strict=True):
        gcp.projects.IAMMember(
            f"{ha.child_name(name, letter)}-ha-member",
            project=site.project,
            role=role.name,
            member=member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title=f"wg-mesh {site.name} gateways",
                description="on instances and addresses: only this stack's gateways and address of the site",
                expression=expression,
            ),
            opts=opts,
        )
    return role


def prober_firewall(
    name: str, network: pulumi.Input[str], targets: list[str], where: str, opts: pulumi.ResourceOptions
) -> gcp.compute.Firewall:
    return gcp.compute.Firewall(
        f"{name}-fw-health",
        network=network,
        description=f"{where}: the load balancer's health checks to wg-mesh-agent (/healthz)",
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(ha.HEALTH_PORT)])],
        source_ranges=PROBER_RANGES,
        target_tags=targets,
        opts=opts,
    )
