"""What every site component (AWS, GCP, static) shares: its output shape and its rendered config.

A site's wg0.conf needs its own private key and every peer's public address and key (the mesh's
*directory*). Rendering happens in one `apply` over those values, with the pure functions of
`wg_mesh.plan.topology` and `wg_mesh.plan.render`; the result holds the private key, so it is a secret.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import pulumi

from wg_mesh import announce
from wg_mesh.config import AwsSite, Deferred, GcpSite, MeshConfig, StaticSite
from wg_mesh.keys import SigningKey, WireGuardKey
from wg_mesh.plan import ha as plan_ha
from wg_mesh.plan import live, render, topology, userdata
from wg_mesh.plan.topology import PeerAddress
from wg_mesh.tools import serial as wg_serial

Directory = pulumi.Output[dict[str, PeerAddress]]
SiteT = TypeVar("SiteT", bound=AwsSite | GcpSite | StaticSite)


@dataclass(frozen=True)
class SiteComponentArgs(Generic[SiteT]):
    """What every site component is built from: AwsGatewayArgs, GcpGatewayArgs and StaticSiteArgs are this, each for
    its kind of site."""

    mesh: MeshConfig
    site: SiteT
    directory: Directory
    signing_key: SigningKey | None = None  # delivery: live: the mesh's document signing key (wg_mesh.mesh)


class SiteComponent(pulumi.ComponentResource):
    """The base of every site component (AwsGateway, GcpGateway, StaticSite): one output shape for all clouds."""

    key: WireGuardKey
    public_ip: pulumi.Output[str]
    overlay_ip: pulumi.Output[str]
    public_key: pulumi.Output[str]
    wg_config: pulumi.Output[str]  # secret
    user_data: pulumi.Output[str]  # secret in user-data mode (it embeds wg0.conf); live: public, nothing secret in it
    # delivery: live: the site's signed peer document (public keys and addresses only, and a signature)
    document: pulumi.Output[str] | None
    signing_key: SigningKey | None  # delivery: live: the mesh's, which signs the document and agent.json pins
    key_at: pulumi.Output[int] | None  # delivery: live: from when its current key is valid (wg_mesh.announce)
    serial: pulumi.Output[int] | None  # delivery: live: the document's serial (wg_mesh.tools.serial)

    def __init__(self, t: str, name: str, props: Any = None, opts: pulumi.ResourceOptions | None = None) -> None:
        """`protect` on a site component, given or inherited from its parent, means what it means on a Mesh and what
        `protect: true` means: the site's address and key are protected (`kept`), nothing else. The component itself is
        registered unprotected, so that its instances, gates, routes and rules do not inherit it (a protected resource
        cannot be replaced: every agent upgrade or type change would stop `pulumi up` part-way)."""
        opts = opts or pulumi.ResourceOptions()
        inherited = opts.parent._protect if opts.parent is not None else None
        self._keeps = bool(opts.protect if opts.protect is not None else inherited)
        super().__init__(t, name, props, pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=False)))

    def kept(self, mesh: MeshConfig) -> pulumi.ResourceOptions:
        """The options of the site's address and key: protected when the component was asked to, else `kept`."""
        return pulumi.ResourceOptions(protect=True) if self._keeps else kept(mesh)

    def _create_identity(
        self,
        name: str,
        mesh: MeshConfig,
        site: AwsSite | GcpSite | StaticSite,
        directory: Directory,
        signing_key: SigningKey | None = None,
    ) -> None:
        """The site's key pair and its rendered wg0.conf and cloud-init: the same on every cloud. delivery: live needs
        the mesh's `signing_key` (wg_mesh.mesh.Mesh makes one)."""
        key_opts = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), self.kept(mesh))
        self.key = WireGuardKey(f"{name}-key", site.key_epoch, key_opts)
        self.public_key = self.key.public_key
        self.overlay_ip = pulumi.Output.from_input(str(site.overlay_ip))
        self.wg_config = wg_config(mesh, site.name, self.key, directory)
        self.signing_key = signing_key
        self.key_at = self.serial = None
        # when a new gateway of the site may take traffic at the earliest (its gate holds: live.switch_floor)
        self.switch_floor: pulumi.Output[int | None] | None = None
        if mesh.delivery == "live":
            if signing_key is None:
                raise ValueError(f"{site.name}: delivery: live needs the mesh's SigningKey (build sites through Mesh)")
            # announced rotation (wg_mesh.announce): from when this site's current key is valid
            self.key_at = announce.key_at(f"{name}-key-at", site.key_epoch, mesh.rotation_lead_seconds, self)
            # Nothing peer- or key-dependent: the peers and the key reach the gateway through the stores; the
            # mesh's verify key is the same for the life of the stack (signing_key_epoch).
            not_after = live.expires(site, wg_serial.now())
            self.document, self.serial = peer_document(
                name, mesh, site.name, self.key, directory, signing_key, self, self.key_at, not_after
            )
            self._floor_prefix = name
            floor = functools.partial(_switch_floor, mesh, site.name)
            self.switch_floor = pulumi.Output.all(directory=directory, key_at=self.key_at).apply(floor)
            # gateways: 2: each gateway has its own (the cloud component: _ha_user_data), none is the site's
            self.user_data = self._live_user_data(mesh, site, None) if _single(site) else pulumi.Output.from_input("")
        else:
            self.document = None
            self.user_data = user_data(mesh, site.name, self.wg_config, directory)

    def _live_user_data(
        self, mesh: MeshConfig, site: AwsSite | GcpSite | StaticSite, ha: pulumi.Output[Any] | None, letter: str = "a"
    ) -> pulumi.Output[str]:
        """The live user data: agent.json names the site's stores and pins the mesh's verify key and the floor (its
        `trust`). The floor is the document's serial when this user data was first rendered without it (`rest`),
        kept until `rest` changes, which replaces the gateway anyway (wg_mesh.tools.serial.floor_pin): a mesh change
        leaves the user data as it is."""
        assert self.signing_key is not None and self.serial is not None
        project, stack = pulumi.get_project(), pulumi.get_stack()
        render_it = functools.partial(_render_live_user_data, mesh, site, project, stack)
        values = pulumi.Output.all(verify_key=self.signing_key.verify_key, ha=ha)
        rest = values.apply(lambda v: render_it({**v, "floor": 0}))
        # what else replaces the gateway (its type, its pinned image) renews its floor too
        replaced_by = [str(getattr(site, "instance_type", "")), str(getattr(site, "image", None) or "")]
        name = plan_ha.child_name(self._floor_prefix, letter)
        floor = wg_serial.floor_pin(name, self.serial, rest, replaced_by, self)
        return pulumi.Output.all(verify_key=self.signing_key.verify_key, ha=ha, floor=floor).apply(render_it)

    def _ha_user_data(
        self, mesh: MeshConfig, site: AwsSite | GcpSite, ha: pulumi.Output[Any], letter: str
    ) -> pulumi.Output[str]:
        """gateways: 2: gateway `letter`'s live user data, with its `ha` object in agent.json (wg_mesh.plan.ha) and its
        own floor. Public: the object names cloud resources only, and like the rest of live user data nothing peer-
        or key-dependent."""
        return self._live_user_data(mesh, site, ha, letter)

    def _register_site_outputs(self, **cloud_outputs: pulumi.Output[str]) -> None:
        self.register_outputs(
            {"public_ip": self.public_ip, "overlay_ip": self.overlay_ip, "public_key": self.public_key, **cloud_outputs}
        )


def _switch_floor(mesh: MeshConfig, site_name: str, values: dict[str, Any]) -> int | None:
    return live.switch_floor(mesh, site_name, values["directory"], values["key_at"])


def _render_live_user_data(
    mesh: MeshConfig, site: AwsSite | GcpSite | StaticSite, project: str, stack: str, values: dict[str, Any]
) -> str:
    source = live.agent_source(site, project, stack)
    trust = live.trust(mesh, site, project, stack, values["verify_key"], floor=values["floor"])
    return userdata.render_live_user_data(mesh, site.name, source, trust=trust, ha=values["ha"])


def _single(site: AwsSite | GcpSite | StaticSite) -> bool:
    return not isinstance(site, AwsSite | GcpSite) or site.gateways <= 1


def kept(mesh: MeshConfig) -> pulumi.ResourceOptions:
    """Options for what other environments remember (public addresses, keys): protected when `protect: true` or
    `protect=True` in the Mesh's opts (wg_mesh.mesh gives both the same meaning), else as the parent is (a site
    component asked to protect: SiteComponent.kept).

    Protected resources cannot be deleted, by `pulumi destroy`, a replacement, or a site that disappeared from the
    config, until `pulumi state unprotect` (Pulumi docs, "Resource option: protect"). Not retain_on_delete: a
    deliberate removal must release the address, not leave it allocated and billed outside any state. Unset (not
    False) otherwise: Pulumi's inheritance ("The default is to inherit this value from the parent resource").
    """
    return pulumi.ResourceOptions(protect=True if mesh.protect else None)


def description_kept() -> pulumi.ResourceOptions:
    """For a resource whose `description` names the site and is force-new (wg_mesh.plan.forcenew: an AWS security
    group, a GCP address or network): the description is written at creation and never changed, so that a rename
    (`previous_names`) or a new wording in a release does not replace the address, the network or the security group.
    Pulumi's engine sets an ignored input back to its value in the state before it diffs (pulumi/pulumi@1b59498,
    pkg/resource/deploy/step_generator.go, `processIgnoreChanges`): after a rename the description names the site's
    earlier name. A replacement made for another reason is checked again from the program's inputs (the same file:
    "we need to recompute the default values"), so it gets the current one."""
    return pulumi.ResourceOptions(ignore_changes=["description"])


def fixed_private_ip(mesh: MeshConfig, site: AwsSite | GcpSite) -> str | None:
    """The gateway's fixed VPC address when the site is on a private path (docs/underlay.md), else None (the
    cloud's choice)."""
    return topology.private_directory(mesh).get(site.name)


def site_options(site: AwsSite | GcpSite | StaticSite) -> pulumi.ResourceOptions:
    """A site component's options: its previous names as aliases. Child names start with the site's name,
    so Pulumi carries the alias over to each child (`inherited_child_alias` in the Pulumi SDK): a renamed
    site keeps its address and key."""
    return pulumi.ResourceOptions(aliases=[pulumi.Alias(name=old) for old in site.previous_names])


def _render_wg_conf(mesh: MeshConfig, site_name: str, values: dict[str, Any]) -> str:
    plan = topology.interface_plan(mesh, site_name, values["directory"])
    return render.wg_quick_conf(plan, values["private_key"])


def wg_config(mesh: MeshConfig, site_name: str, key: WireGuardKey, directory: Directory) -> pulumi.Output[str]:
    """The site's wg0.conf (secret)."""
    values = pulumi.Output.all(private_key=key.private_key, directory=directory)
    return pulumi.Output.secret(values.apply(functools.partial(_render_wg_conf, mesh, site_name)))


def peer_document(
    name: str,
    mesh: MeshConfig,
    site_name: str,
    key: WireGuardKey,
    directory: Directory,
    signing_key: SigningKey,
    parent: pulumi.Resource,
    key_at: pulumi.Output[int] | None = None,
    not_after: int | None = None,
) -> tuple[pulumi.Output[str], pulumi.Output[int]]:
    """The site's signed peer document (delivery: live), from the directory and its own public key, and its serial.
    `not_after`: its expiry (wg_mesh.plan.live.expires; None: a static site's, none).

    Its serial counts its content's changes (wg_mesh.tools.serial, `<name>-serial`, kept in state): the Command records
    the SHA-256 of the content with serial 0, so an unchanged document keeps its serial, and with it its bytes, run
    after run, and a document is never signed with a serial counted for other content. The envelope holds nothing
    secret (the signature is public), so it is not a secret Output, although it is computed from the seed; where it
    was a secret (a static site's stack output) it still is."""
    scope = live.document_scope(pulumi.get_project(), pulumi.get_stack())
    content = pulumi.Output.all(directory=directory, public_key=key.public_key, key_at=key_at, not_after=not_after)
    digest = content.apply(functools.partial(live.unsigned_digest, mesh, site_name, scope))
    serial = wg_serial.document_serial(name, digest, parent)
    values = pulumi.Output.all(
        directory=directory,
        public_key=key.public_key,
        key_at=key_at,
        not_after=not_after,
        serial=serial,
        seed=signing_key.seed,
    )
    signed = values.apply(functools.partial(live.signed_document, mesh, site_name, scope))
    return pulumi.Output.unsecret(signed), serial


def _render_user_data(mesh: MeshConfig, site_name: str, values: dict[str, Any]) -> str:
    return userdata.render_user_data(mesh, site_name, values["wg_conf"], values["directory"])


def user_data(
    mesh: MeshConfig, site_name: str, wg_conf: pulumi.Output[str], directory: Directory
) -> pulumi.Output[str]:
    """The `#cloud-config` that installs and starts the site's wg0 and its metrics, then the cloud's own last
    steps (wg_mesh.plan.userdata: e.g. AWS's readiness mark). Secret: it embeds wg0.conf."""
    values = pulumi.Output.all(wg_conf=wg_conf, directory=directory)
    return pulumi.Output.secret(values.apply(functools.partial(_render_user_data, mesh, site_name)))


def monitoring_ranges(mesh: MeshConfig) -> list[str]:
    """Who may scrape a gateway's node-exporter from outside the mesh: `monitoring_cidrs` (none by default)."""
    return [str(cidr) for cidr in mesh.monitoring_cidrs]


def peer_source_ranges(mesh: MeshConfig, site_name: str, directory: Directory) -> pulumi.Output[list[str]]:
    """The peers' public /32s: the only sources allowed to the site's WireGuard port."""
    return directory.apply(functools.partial(topology.peer_source_ranges, mesh, site_name))


def given(value: str | Deferred) -> pulumi.Input[str]:
    """An existing network's id as the resources take it: the plain string of a stack file, or the user's own
    `pulumi.Input` that the model carried as Deferred (wg_mesh.args)."""
    return cast("pulumi.Input[str]", value.value) if isinstance(value, Deferred) else value


def cidr_slug(cidr: object) -> str:
    """`10.10.0.0/16` -> `10-10-0-0-16`, for readable, stable resource names."""
    return str(cidr).replace(".", "-").replace("/", "-")
