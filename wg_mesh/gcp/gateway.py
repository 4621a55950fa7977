"""A GCP site: a WireGuard gateway instance in the site's VPC network and the routes through it.

The static external address exists before the instance (peers need it). A new instance (first or
replacement) boots with an ephemeral external address; the readiness gate (wg_mesh.tools.gcpgate) waits for its
guest attribute wg-mesh/ready, then moves the static address to it, and only then do the routes (and
the ICMP rule) follow it; Pulumi deletes the old instance last. Firewall rules admit
WireGuard from the peers' addresses only, the site's own traffic to the gateway (to forward it),
the remote sites' ranges to the workloads the site names (tags, service accounts, or the whole
network when asked), and ICMP from the gateway's internal address (path-MTU discovery).
Network tags carry a hash of the Pulumi project and stack, so stacks sharing a network stay apart.
With `gateways: 2` (docs/ha.md 6) a second VM and an internal load balancer (wg_mesh.gcp.ha) carry the site: the routes
point at the load balancer, and the agents, not the gate, move the static address.

The constructor is a list of steps; the parts are beside it: network.py, firewall.py, instance.py (the VM and its
gate), ha.py (gateways: 2), live.py (delivery: live), fit.py and facts.py (the machine type and its boot disk).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_gcp as gcp

from wg_mesh import component
from wg_mesh.config import GcpSite, MeshConfig
from wg_mesh.gcp import firewall, instance
from wg_mesh.gcp import ha as gcp_ha
from wg_mesh.gcp import live as gcp_live
from wg_mesh.gcp.network import Network, site_network
from wg_mesh.plan import ha, live, topology
from wg_mesh.providers import given_provider

GATEWAY_TYPE = "wg-mesh:gcp:Gateway"
ROUTE_PRIORITY = 900  # ahead of the default 1000, so the mesh wins a tie with a broader route


def stack_scope(project: str, stack: str) -> str:
    """A short, stable id of the Pulumi project and stack, for names that are shared network-wide (network tags):
    two stacks in one network, even with equal site names, never target each other's instances."""
    return live.scope(project, stack)


def gateway_tag(name: str, scope: str) -> str:
    """The network tag the gateway's firewall rules target (at most 32 + 7 + 8 characters; GCP allows 63)."""
    return f"{name}-wg-gw-{scope}"


def rule_targets(site: GcpSite, tag: str, scope: str) -> list[str]:
    """What the gateways' firewall rules target: their tag, and the tags of the site's previous names. A rename gives
    the new VM the new tag while the old one, which Pulumi replaces and so never updates, keeps its own until it is
    deleted at the end of `pulumi up`; the rules, updated in place early in that `up`, must still admit WireGuard and
    the site's traffic to it meanwhile. An earlier name's tag is this stack's (the scope) and no other site's (a
    previous name is no site's name: wg_mesh.config.rules)."""
    return [tag, *(gateway_tag(old, scope) for old in site.previous_names)]


class GcpGatewayArgs(component.SiteComponentArgs[GcpSite]):
    """A GCP site's gateway component's inputs (wg_mesh.component.SiteComponentArgs)."""


@dataclass(frozen=True)
class _Pair:
    """gateways: 2: the pair's names (wg_mesh.plan.ha.ha_names) and gateway b's zone."""

    names: ha.HaNames
    zone_b: pulumi.Input[str]


class GcpGateway(component.SiteComponent):
    provider: pulumi.ProviderResource  # the caller's (given to the Mesh) or the site's own
    address: gcp.compute.Address
    instance: gcp.compute.Instance  # gateway a (the only one unless gateways: 2)
    instances: list[gcp.compute.Instance]  # a, then b for gateways: 2
    private_ips: dict[str, pulumi.Output[str]]  # gateway letter -> its VPC address (monitoring scrapes each)
    ready: command.local.Command
    standby_ready: command.local.Command  # gateways: 2: gateway b's readiness gate
    routes: list[gcp.compute.Route]
    stores: gcp_live.GcpStores | None  # delivery: live
    instance_self_link: pulumi.Output[str]  # gateway a (HA: the routes' next hop is the internal load balancer)
    network_tag: pulumi.Output[str]  # the gateways' network tag: the target of the mesh's firewall rules

    def __init__(self, name: str, args: GcpGatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GATEWAY_TYPE, name, None, opts)
        mesh, site = args.mesh, args.site
        self.provider = self._site_provider(name, site)
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self._create_identity(name, mesh, site, args.directory, args.signing_key)
        network = site_network(name, site, child)
        self.address = self._address(name, mesh, site, child)
        self.public_ip = self.address.address
        scope = stack_scope(pulumi.get_project(), pulumi.get_stack())
        tag = gateway_tag(name, scope)
        self.network_tag = pulumi.Output.from_input(tag)
        where = f"wg-mesh {pulumi.get_project()}/{pulumi.get_stack()} {site.name}"
        rules = firewall.Rules(name, network.network, where, child)
        firewall.gateway_rules(rules, mesh, site, args.directory, rule_targets(site, tag, scope))
        firewall.workload_rule(rules, mesh, site)
        self.stores = self._stores(name, site, child)
        pair = self._pair(name, site, child)
        reader = self._gateways(name, mesh, site, network, tag, pair, child)
        after_ready = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.ready]))
        next_hop_ilb = self._load_balancer(name, site, network, tag, where, scope, pair, reader, child)
        firewall.pmtu_rule(rules, site, list(self.private_ips.values()), after_ready)
        self.routes = self._routes(name, mesh, site, network, where, next_hop_ilb, after_ready)
        self.instance_self_link = self.instance.self_link
        self._register_site_outputs(instance_self_link=self.instance_self_link, network_tag=self.network_tag)

    def _site_provider(self, name: str, site: GcpSite) -> pulumi.ProviderResource:
        """The caller's gcp provider when the Mesh was given one (wg_mesh.providers), else the site's own."""
        return given_provider(self, "gcp") or gcp.Provider(
            f"{name}-provider",
            project=site.project,
            region=site.region,
            zone=site.zone,
            # None: the credentials of whoever runs pulumi (one GCP identity for every site without this key).
            impersonate_service_account=site.impersonate_service_account,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _address(
        self, name: str, mesh: MeshConfig, site: GcpSite, child: pulumi.ResourceOptions
    ) -> gcp.compute.Address:
        """The site's static external address: the peers' endpoint, kept across every replacement and a rename (its
        description is force-new: component.description_kept)."""
        kept = pulumi.ResourceOptions.merge(self.kept(mesh), component.description_kept())
        return gcp.compute.Address(
            f"{name}-address",
            address_type="EXTERNAL",
            region=site.region,
            description=f"wg-mesh gateway {site.name}",
            opts=pulumi.ResourceOptions.merge(child, kept),
        )

    def _stores(self, name: str, site: GcpSite, child: pulumi.ResourceOptions) -> gcp_live.GcpStores | None:
        """delivery: live: the gateway's own service account, its key secret and its document secret."""
        if self.document is None:
            return None
        return gcp_live.create_stores(name, site, self.key.private_key, self.document, child)

    def _pair(self, name: str, site: GcpSite, child: pulumi.ResourceOptions) -> _Pair | None:
        """gateways: 2 (docs/ha.md 6.2): the pair's names and gateway b's zone (standby_zone, or the next one, kept
        from the first `up`: wg_mesh.gcp.ha.standby_zone)."""
        if site.gateways <= 1:
            return None
        names = ha.ha_names(pulumi.get_project(), pulumi.get_stack(), site.name)
        return _Pair(names, gcp_ha.standby_zone(name, site, child))

    def _gateways(
        self,
        name: str,
        mesh: MeshConfig,
        site: GcpSite,
        network: Network,
        tag: str,
        pair: _Pair | None,
        child: pulumi.ResourceOptions,
    ) -> gcp_live.StandbyReader | None:
        """Gateway a, then (gateways: 2) gateway b in the standby zone, each with its readiness gate. Both carry the
        `ha` object in agent.json; gateway a keeps every name it has as a single gateway. Returns b's reader."""
        metadata = instance.metadata(self.user_data)
        self.instances, self.private_ips = [], {}
        reader = None  # gateway b's, the last
        for letter in ha.LETTERS[: site.gateways]:
            prefix = ha.child_name(name, letter)
            gateway_metadata = dict(metadata)
            if pair is not None:
                objects = gcp_ha.ha_object(letter, site, pair.names, self.address, pair.zone_b)
                gateway_metadata["user-data"] = self._ha_user_data(mesh, site, objects, letter)
            account, first_boot, reader = self._account(letter, prefix, site, child)
            zone = site.zone if letter == "a" or pair is None else pair.zone_b
            fixed = component.fixed_private_ip(mesh, site)
            scope = None if pair is None else stack_scope(pulumi.get_project(), pulumi.get_stack())
            vm = instance.gateway_instance(
                prefix, site, zone, network, tag, gateway_metadata, account, first_boot, child, fixed, scope
            )
            if letter == "a":
                self.instance, self.user_data = vm, pulumi.Output.from_input(gateway_metadata["user-data"])
                # Traffic moves to a (new) gateway only once it is ready and (single gateway) holds the static address.
                self.ready = instance.readiness_gate(
                    prefix, site, vm, self.address, pair is not None, child, self.switch_floor
                )
            else:
                self.standby_ready = instance.readiness_gate(
                    prefix, site, vm, self.address, True, child, self.switch_floor
                )
            self.instances.append(vm)
            self.private_ips[letter] = vm.network_interfaces.apply(lambda nics: str(nics[0].network_ip))
        return reader

    def _account(
        self, letter: str, prefix: str, site: GcpSite, child: pulumi.ResourceOptions
    ) -> tuple[gcp.compute.InstanceServiceAccountArgs | None, list[pulumi.Resource], gcp_live.StandbyReader | None]:
        """The gateway's service account (delivery: live), what its first boot needs in place, and (gateway b) its
        own account's binding to the key secret."""
        if letter == "a":
            account = self.stores.service_account() if self.stores else None
            return account, self.stores.resources if self.stores else [], None
        assert self.stores is not None  # gateways: 2 needs delivery: live (wg_mesh.rules)
        reader = gcp_live.standby_reader(prefix, site, self.stores, child)
        # Gateway b is created (or replaced) only once a is ready: never both at once (docs/ha.md 9).
        stores = [self.stores.version, self.stores.document_version]
        return reader.service_account(), [*reader.resources, *stores, self.ready], reader

    def _load_balancer(
        self,
        name: str,
        site: GcpSite,
        network: Network,
        tag: str,
        where: str,
        scope: str,
        pair: _Pair | None,
        reader: gcp_live.StandbyReader | None,
        child: pulumi.ResourceOptions,
    ) -> pulumi.Output[str] | None:
        """gateways: 2 (wg_mesh.gcp.ha): the instance groups, the internal load balancer, the probers' rule and the
        agents' IAM; the forwarding rule's link, the routes' next hop. None for a single gateway."""
        if pair is None:
            return None
        gates = [self.ready, self.standby_ready]  # a VM joins its group only once ready (wg_mesh.gcp.ha)
        groups = [
            gcp_ha.instance_group(
                ha.child_name(name, letter), pair.names.groups[letter], vm, gate, network.network, child
            )
            for letter, vm, gate in zip(ha.LETTERS, self.instances, gates, strict=True)
        ]
        _, rule = gcp_ha.load_balancer(name, site, pair.names, network.network, network.subnetwork, groups, child)
        gcp_ha.prober_firewall(name, network.network, rule_targets(site, tag, scope), where, child)
        members = [self.stores.account.member, reader.account.member] if self.stores and reader else []
        gcp_ha.agent_iam(name, site, scope, members, [site.zone, pair.zone_b], self.address, child)
        return rule.self_link

    def _routes(
        self,
        name: str,
        mesh: MeshConfig,
        site: GcpSite,
        network: Network,
        where: str,
        next_hop_ilb: pulumi.Output[str] | None,
        after_ready: pulumi.ResourceOptions,
    ) -> list[gcp.compute.Route]:
        """The remote sites' ranges through gateway a, or (gateways: 2) through the load balancer by URL (pulumi-gcp
        10.2.0 Route.next_hop_ilb: "With the GA provider you can only specify the forwarding rule as a partial or
        full URL")."""
        next_hop_instance = self.instance.self_link if next_hop_ilb is None else None
        # A route to the old gateway is worthless once the gate has moved the static address away from it, and GCP
        # would spread flows over an old and a new route of equal priority: delete the old one first (the new route
        # is registered only after the gate has finished, so its replacement starts then).
        replace_route = pulumi.ResourceOptions.merge(after_ready, pulumi.ResourceOptions(delete_before_replace=True))
        # Logical names stay within 55 characters: GCP names are at most 63 and Pulumi appends 8.
        return [
            gcp.compute.Route(
                f"{name}-to-{component.cidr_slug(cidr)}",
                dest_range=str(cidr),
                network=network.network,
                next_hop_instance=next_hop_instance,
                next_hop_ilb=next_hop_ilb,
                priority=ROUTE_PRIORITY,
                description=f"{where}: {cidr} through the gateway",
                opts=replace_route,
            )
            for cidr in topology.remote_ranges(mesh, site.name)
        ]
