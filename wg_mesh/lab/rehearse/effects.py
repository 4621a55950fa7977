"""What one step of `pulumi up` (wg_mesh.plan.engine) does in the rehearsal's lab (world.py), by the role of its
resource (roles.py):

    instance   create / create-replacement: a machine with AFTER's user data in a free place, started (beside the
               old one); delete / delete-replaced: the old one (BEFORE's, that letter) terminated at the end of up
    gate       the machine is ready (its user data done); a single GCP gateway's gate then moves the static address
               to it: off the old VM (deleteAccessConfig), onto the new one (addAccessConfig)
    associate  create: the Elastic IP on gateway a's newest machine; delete: off it
    route      create / update / create-replacement: through gateway a's newest machine; delete: none
    document   the AFTER document written to the site's store, every machine of the site reading it
    key, agent the AFTER private key / agent package written to the store
    address    replaced or deleted while the site stays: a new public address (a violation where the docs promise the
               address is kept: every site both configs have)

Returns what was done (a line for the report) or None when the step has no effect the lab models.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wg_mesh.lab.rehearse.roles import Role
from wg_mesh.lab.rehearse.world import World, Written
from wg_mesh.plan.engine import Step

CREATES = ("create", "create-replacement")
DELETES = ("delete", "delete-replaced")


@dataclass
class Effect:
    done: str | None  # what the lab did, None: nothing it models
    violations: list[str] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)  # the documents written


def _old_place(world: World, site: str, letter: str) -> str | None:
    """The place of the site's machine of BEFORE's config running as `letter`."""
    return next((p for p, o in world.places[site].items() if o.which == "before" and o.letter == letter), None)


def apply(world: World, step: Step, role: Role) -> Effect:
    if role.site is None or role.role == "cloud":
        return Effect(None)
    site = world.layout.fabric_name(role.site)
    handler = _HANDLERS.get(role.role)
    return handler(world, step, role, site) if handler is not None else Effect(None)


def _instance(world: World, step: Step, role: Role, site: str) -> Effect:
    op = step.op
    if op in CREATES:
        started = world.start(site, "after", role.letter)
        return Effect(f"machine {role.letter} started in place {started} with the new user data")
    old = _old_place(world, site, role.letter)
    if op in DELETES:
        if old is None:
            return Effect(f"no machine of the old config as gateway {role.letter}")
        world.terminate(site, old)
        return Effect(f"machine in place {old} terminated")
    return Effect(None)  # updated in place (tags, metadata other than the first boot's): nothing for traffic


def _gate(world: World, step: Step, role: Role, site: str) -> Effect:
    if step.op not in CREATES:
        return Effect(None)
    place = world.newest(site, role.letter)
    if place is None:
        return Effect(None, [f"{site}: the readiness gate of gateway {role.letter} has no machine to wait for"])
    cloud = world.site_config(site).cloud
    gateways = getattr(world.site_config(site), "gateways", 1)
    if cloud == "gcp" and gateways == 1 and world.holder.get(site) != place:
        world.hold(site, None)  # deleteAccessConfig on the old VM
        world.hold(site, place)  # addAccessConfig on the new one
        return Effect(f"ready; the static address moved to place {place}")
    return Effect("ready")


def _associate(world: World, step: Step, role: Role, site: str) -> Effect:
    """AWS: AssociateAddress moves the Elastic IP (reassociation is automatic in a VPC), with a new association id;
    deleting an association (DisassociateAddress by its id) takes the address off only while that association is
    the current one: an older id is InvalidAssociationID.NotFound, which terraform-provider-aws ignores
    (internal/service/ec2/ec2_eip_association.go, resourceEIPAssociationDelete)."""
    if step.op in DELETES:
        if world.association.get(site) != "before":
            return Effect("no effect: the association it names was replaced (NotFound, ignored)")
        world.association[site] = None
        world.hold(site, None)
        return Effect("the Elastic IP disassociated: on nothing")
    place = world.newest(site, "a")
    world.association[site] = "after"
    world.hold(site, place)
    return Effect(f"the Elastic IP on place {place}")


def _route(world: World, step: Step, role: Role, site: str) -> Effect:
    if role.cidr is None:
        return Effect(None)
    if step.op in DELETES:
        world.route(site, role.cidr, None)
        return Effect(f"route {role.cidr}: deleted")
    place = world.newest(site, "a")
    world.route(site, role.cidr, place)
    return Effect(f"route {role.cidr} through place {place}")


def _document(world: World, step: Step, role: Role, site: str) -> Effect:
    if step.op in DELETES:
        return Effect(None)
    written = world.publish_document("after", site)
    return Effect(f"document written (serial {written.serial})", written=[written])


def _key(world: World, step: Step, role: Role, site: str) -> Effect:
    if step.op in DELETES:
        return Effect(None)
    world.publish_key("after", site)
    return Effect("private key written")


def _agent(world: World, step: Step, role: Role, site: str) -> Effect:
    if step.op in DELETES:
        return Effect(None)
    world.publish_agent("after", site)
    return Effect("agent package written")


def _address(world: World, step: Step, role: Role, site: str) -> Effect:
    kept = world.name_in("before", site) is not None and world.name_in("after", site) is not None
    if kept and step.op == "create-replacement":
        return Effect(None, [f"{site}: its public address is replaced (a new address: the docs promise it is kept)"])
    return Effect(None)


_HANDLERS = {
    "instance": _instance,
    "gate": _gate,
    "associate": _associate,
    "route": _route,
    "document": _document,
    "key": _key,
    "agent": _agent,
    "address": _address,
}
