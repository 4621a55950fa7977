"""What the operator does around `pulumi up` in a rehearsal, as the docs tell them: before it, nothing; after it, a
static site whose config changed gets the new one (docs/how-to/static-sites.md): `delivery: user-data` stops wg-quick
with the running file in place, moves the new wg0.conf in and starts it; `delivery: live` copies the key (when it was
rotated) and then the document into /etc/wg-mesh, which the agent applies in place; a static site the change adds is
installed then (its cloud-init), one it removes is switched off."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from wg_mesh.lab.clouds.controlplane import write_atomic
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.machines import cloudinit
from wg_mesh.lab.rehearse.world import World

WG_CONF = PurePosixPath("/etc/wireguard/wg0.conf")


def changed_static(world: World, outputs: tuple[Mapping[str, Mapping[str, str]], Mapping[str, Mapping[str, str]]]
                   ) -> dict[str, str]:  # fmt: skip
    """Fabric name -> what the operator does, for every static site the change touches (`outputs`: each config's
    static outputs' digests, wg_mesh.cli.plancmd.Planned.outputs)."""
    before, after = outputs
    todo = {}
    for site in world.layout.fabric.sites:
        if site.is_cloud:
            continue
        old, new = world.name_in("before", site.name), world.name_in("after", site.name)
        if old is None and new is not None:
            todo[site.name] = "install"
        elif old is not None and new is None:
            todo[site.name] = "remove"
        elif old is not None and new is not None and before.get(old) != after.get(new):
            todo[site.name] = "apply"
    return todo


def operate(world: World, site: str, what: str) -> tuple[str, list[str]]:
    """Carry out `what` (changed_static) on the static site: a line for the report, and what went wrong (the
    documented procedure failing is a violation: the operator would see it fail)."""
    if what == "install":
        name = world.name_in("after", site)
        if name is not None and name in world.configs["after"]:  # live: its key and document first (its --once waits)
            world.publish_key("after", site)
            world.publish_document("after", site)
        world.start(site, "after")
        return "installed with the new config", []
    place = "a"
    occupant = world.occupant(site, place)
    if occupant is None:
        return "not running", []
    if what == "remove":
        world.terminate(site, place)
        return "switched off", []
    name = world.name_in("after", site)
    assert name is not None
    if world.configs["after"].get(name):  # live: the key (if rotated), then the document, copied into place
        if world.keys["after"].private[name] != world.keys["before"].private.get(world.name_in("before", site) or ""):
            world.publish_key("after", site)
        world.publish_document("after", site)
        return "copied the new document (and key, if rotated) into /etc/wg-mesh", []
    setup = cloudinit.interpret(world.artifacts["after"][name].user_data)
    conf = next(f for f in setup.files if f.path == WG_CONF)
    node = occupant.machine.node
    failed = []
    try:  # `systemctl stop wg-quick@wg0` with the running file in place: its PostDown undoes its PostUp
        occupant.machine.tunnel("down")
    except LabError as exc:
        failed.append(f"operator step failed: {site}: `systemctl stop wg-quick@wg0`: {exc}")
    write_atomic(node.path(str(WG_CONF)), conf.content, conf.mode)  # mv wg0.conf.new wg0.conf
    occupant.machine.tunnel("up")  # systemctl enable --now wg-quick@wg0
    occupant.which = "after"
    return "stopped wg-quick, moved the new wg0.conf in, started it", failed
