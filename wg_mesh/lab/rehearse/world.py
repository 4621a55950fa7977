"""The lab a change is rehearsed on: the fabric of both configs (layout.py), the gateway machines as `pulumi up` makes
and deletes them, the clouds' state that its steps move, and the stores it writes.

* **Places.** Every cloud site has places for gateway machines (haplan.py: a, b and c, each a network namespace
  with its NIC on the site's VPC bridge and its own private address). BEFORE's gateway runs in place a; a
  replacement starts in a free place beside it, and a deleted machine frees its place (`start`, `terminate`).
  A static site has one place, its host.
* **The cloud's state**: per cloud site, which place holds its public address (the Elastic IP's association, the
  GCP access config) and where each remote range's route points, applied to the namespaces by the one mechanism the
  lab's cloud models use (haapply.Applier: the internet namespace's 1:1 NAT, the VPC route table). Pulumi is its only
  writer here (`hold`, `route`): a site with `gateways: 2` in either config is refused (not rehearsed yet: its agents
  move its address and routes through the lab's cloud models, hacloud.py).
* **The stores** (`delivery: live`): the lab's control plane (controlplane.py): every machine of a site reads its
  document from the site's secret (Secrets Manager, Secret Manager); a GCP machine has its own metadata server (its
  VM's name, zone and token).
* **Keys**: keys.py; each state's artifacts (wg0.conf, user data, agent.json) are rendered as `pulumi up` renders
  them for that config (fabric.plan.render_artifacts).

Every process is recorded in the lab's state by pid; the caller tears the lab down (fabric.teardown).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wg_mesh.config import StaticSite
from wg_mesh.lab.clouds.controlplane import ControlPlane, documents, published_generation, write_atomic
from wg_mesh.lab.clouds.haapply import Applier
from wg_mesh.lab.clouds.hacloud import StandbyGateway
from wg_mesh.lab.clouds.live import live_configs
from wg_mesh.lab.fabric.haplan import HaSite, ha_site
from wg_mesh.lab.fabric.netns import LabError, LabState, pids_in_netns, proc_start_time
from wg_mesh.lab.fabric.plan import GatewayArtifacts, LabKeys, LabPlan, SitePlan, render_artifacts
from wg_mesh.lab.machines.build import BuiltLab, build
from wg_mesh.lab.machines.machine import NamespaceGateway
from wg_mesh.lab.rehearse.keys import KeyRing
from wg_mesh.lab.rehearse.layout import Layout

STATES = ("before", "after")
ROTATION_LEAD_MARGIN_S = 5.0
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Written:
    """A document `pulumi up` (or the operator) wrote: its serial and generation (None: one no agent of that config
    accepts), the places whose machines read it, when (epoch)."""

    site: str
    serial: int
    generation: int | None
    places: tuple[str, ...]
    at: float


@dataclass
class Occupant:
    """A gateway machine in a place: which state's artifacts it runs, as which gateway letter."""

    machine: NamespaceGateway
    which: str  # "before" / "after"
    letter: str
    started_at: float = 0.0


class World:
    """Build with `build()`; then the steps' effects (`start`, `terminate`, `hold`, `route`, `publish_*`)."""

    def __init__(self, layout: Layout, ring: KeyRing, state: LabState) -> None:
        self.layout = layout
        self.state = state
        self.cfgs = {"before": layout.before, "after": layout.after}
        self.plans = {which: layout.state_plan(which) for which in STATES}
        identity = dict(layout.renamed)
        self.keys: dict[str, LabKeys] = {"before": ring.keys(layout.before), "after": ring.keys(layout.after, identity)}
        self.artifacts = {w: render_artifacts(self.cfgs[w], self.plans[w], self.keys[w]) for w in STATES}
        # each state's agent.json per site (delivery: live; {} for user-data)
        self.configs: dict[str, dict[str, dict[str, Any]]] = {
            w: {name: dict(config) for name, config in live_configs(self.artifacts[w]).items()} for w in STATES
        }
        self.ha: dict[str, HaSite] = {s.name: ha_site(layout.fabric, s) for s in layout.fabric.sites if s.is_cloud}
        self.appliers = {name: Applier(ha) for name, ha in self.ha.items()}
        self.holder: dict[str, str | None] = dict.fromkeys(self.ha)
        self.association: dict[str, str | None] = {}  # AWS: which config's EipAssociation is the current one
        self.routes: dict[str, dict[str, str | None]] = {name: {} for name in self.ha}
        self.places: dict[str, dict[str, Occupant]] = {s.name: {} for s in layout.fabric.sites}
        self.plane: ControlPlane | None = None
        self.lab: BuiltLab | None = None
        self.metadata_pids: set[int] = set()
        self._served: set[str] = set()  # GCP places whose metadata server runs
        self._key_at: dict[str, int] | None = None

    # --- names ------------------------------------------------------------------------------------------

    def name_in(self, which: str, fabric_name: str) -> str | None:
        """A fabric site's name in a state (None: not in it)."""
        if which == "before":
            return fabric_name if fabric_name in {s.name for s in self.layout.before.sites} else None
        return self.layout.after_name(fabric_name)

    def site_config(self, fabric_name: str) -> Any:
        """The site's config: AFTER's where it has it, else BEFORE's."""
        for which in ("after", "before"):
            if (name := self.name_in(which, fabric_name)) is not None:
                return self.cfgs[which].site(name)
        raise LabError(f"{fabric_name}: in neither config")

    def site_plan(self, which: str, fabric_name: str) -> SitePlan:
        name = self.name_in(which, fabric_name)
        if name is None:
            raise LabError(f"{fabric_name}: not a site of the {which} config")
        return self.plans[which].site(name)

    # --- building -----------------------------------------------------------------------------------------

    def build(self, step: Callable[[str], None]) -> BuiltLab:
        """The fabric of both configs, the control plane (either config live), every place's NIC; no machine runs."""
        fabric = self.layout.fabric
        artifacts = {}
        for site in fabric.sites:
            which = "before" if self.name_in("before", site.name) else "after"
            artifacts[site.name] = self.artifacts[which][self.name_in(which, site.name) or site.name]
        configs = {**self.configs["after"], **self.configs["before"]}
        self.lab = build(fabric, artifacts, self.state, step, self._machine, before_gateways=self._clouds(configs),
                         start=[])  # fmt: skip
        for name, ha in self.ha.items():
            for g in ha.gateways[1:]:
                site = fabric.site(name)
                StandbyGateway(fabric, site, artifacts[name], self.state, g).attach()
            self.appliers[name].apply(None, {})
        return self.lab

    def _machine(self, plan: LabPlan, site: SitePlan, artifacts: GatewayArtifacts, state: LabState) -> NamespaceGateway:
        return NamespaceGateway(plan, site, artifacts, state)

    def _clouds(self, configs: Mapping[str, Mapping[str, Any]]) -> Callable[[BuiltLab], None] | None:
        if not configs:
            return None

        def hook(lab: BuiltLab) -> None:
            self.plane = ControlPlane(lab, configs, self.keys["before"].signing)
            self.plane.start()

        return hook

    # --- machines -----------------------------------------------------------------------------------------

    def free_place(self, fabric_name: str) -> str:
        taken = self.places[fabric_name]
        site = self.layout.fabric.site(fabric_name)
        places = [g.letter for g in self.ha[fabric_name].gateways] if site.is_cloud else ["a"]
        for place in places:
            if place not in taken:
                return place
        raise LabError(f"{fabric_name}: no free place for another gateway machine (places: {', '.join(places)})")

    def start(self, fabric_name: str, which: str, letter: str = "a", place: str | None = None) -> str:
        """A new gateway machine of the site with `which` config's user data (as gateway `letter`), in a free place,
        started (its user data carried out: files, sysctl, wg-quick, the agent); its place."""
        assert self.lab is not None
        place = place or self.free_place(fabric_name)
        name = self.name_in(which, fabric_name)
        assert name is not None
        site = self.site_plan(which, fabric_name)
        artifacts = self.artifacts[which][name]
        machine: NamespaceGateway
        if place == "a":
            machine = NamespaceGateway(self.plans[which], site, artifacts, self.state)
        else:
            g = self.ha[fabric_name].gateway(place)
            machine = StandbyGateway(self.plans[which], site, artifacts, self.state, g)
        machine.provisioner = self
        occupant = self.places[fabric_name][place] = Occupant(machine, which, letter)
        machine.start()
        occupant.started_at = time.monotonic()
        if fabric_name in self.ha:
            self._apply(fabric_name)  # the routes to this place, if any, lead somewhere now
        self.lab.machines[fabric_name] = machine  # the site's newest machine (what the checks and logs look at)
        return place

    def occupant(self, fabric_name: str, place: str) -> Occupant | None:
        return self.places[fabric_name].get(place)

    def newest(self, fabric_name: str, letter: str = "a") -> str | None:
        """The place of the site's newest machine running as gateway `letter`."""
        found = [(o.started_at, p) for p, o in self.places[fabric_name].items() if o.letter == letter]
        return max(found)[1] if found else None

    def terminate(self, fabric_name: str, place: str) -> list[int]:
        """The instance in `place` deleted: its agent stopped as systemd stops it (SIGTERM), then every process of the
        machine killed (not the cloud's metadata server); the cloud forgets it: an address or route it held is on
        nothing (AWS disassociates an Elastic IP from a terminated instance, a GCP access config goes with its VM,
        a route to a deleted instance or ENI is a blackhole). Its place is free."""
        occupant = self.places[fabric_name].pop(place, None)
        if occupant is None:
            raise LabError(f"{fabric_name}: no machine in place {place}")
        for proc in occupant.machine.daemons:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        netns = occupant.machine.site.gateway_ns
        pids = [p for p in pids_in_netns(netns) if p not in self.metadata_pids]
        starts = {p: proc_start_time(p) for p in pids}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and any(proc_start_time(p) == starts[p] is not None for p in pids):
            for pid in pids:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            time.sleep(0.02)
        if fabric_name in self.ha:
            if self.holder[fabric_name] == place:
                self.holder[fabric_name] = None
            self._apply(fabric_name)  # its routes stay, through nothing (a blackhole)
        return pids

    # --- the cloud's state -------------------------------------------------------------------------------

    def hold(self, fabric_name: str, place: str | None) -> None:
        """The site's public address on the machine in `place` (None: on nothing)."""
        self.holder[fabric_name] = place
        self._apply(fabric_name)

    def route(self, fabric_name: str, cidr: str, place: str | None) -> None:
        """The VPC route of `cidr` through the machine in `place` (None: no route, a blackhole)."""
        self.apply_routes(fabric_name, {**self.routes[fabric_name], cidr: place})

    def apply_routes(self, fabric_name: str, routes: Mapping[str, str | None]) -> None:
        self.routes[fabric_name] = dict(routes)
        self._apply(fabric_name)

    def _apply(self, fabric_name: str) -> None:
        ha = self.ha[fabric_name]
        running = self.places[fabric_name]
        targets = {
            str(cidr): ha.gateway(p).private if (p := self.routes[fabric_name].get(str(cidr))) in running else None
            for cidr in ha.remote_ranges
        }
        self.appliers[fabric_name].apply(self.holder[fabric_name], targets)

    # --- stores (delivery: live) ------------------------------------------------------------------------

    def _plane(self, which: str, name: str) -> ControlPlane:
        if self.plane is None:
            raise LabError(f"{name}: the {which} config delivers no document (delivery: user-data)")
        config = self.configs[which].get(name)
        if config is None:
            raise LabError(f"{name}: no agent.json in the {which} config's user data")
        self.plane.configs[name] = config  # the stores this state names
        return self.plane

    def publish_key(self, which: str, fabric_name: str) -> None:
        name = self.name_in(which, fabric_name)
        assert name is not None
        self._plane(which, name).publish_key(name, self.keys[which].private[name])

    def publish_agent(self, which: str, fabric_name: str) -> None:
        name = self.name_in(which, fabric_name)
        assert name is not None
        self._plane(which, name).publish_agent(name)

    def rotated(self) -> list[str]:
        """AFTER's names of the sites whose key the change rotates (another key than BEFORE's for the same site)."""
        before = self.keys["before"].public
        found = []
        for name, key in self.keys["after"].public.items():
            old = self.name_in("before", self.layout.fabric_name(name))
            if old is not None and before[old] != key:
                found.append(name)
        return found

    def key_at(self, which: str) -> dict[str, int]:
        """AFTER's announced keys (wg_mesh.announce): from when each rotated key is valid. `pulumi up` stamps it
        `rotation_lead_seconds` after the stamp's run (600 s by default); the rehearsal compresses the lead to the
        slowest agent's poll interval + ROTATION_LEAD_MARGIN_S from its first AFTER document, so that both sides
        have the announcing documents before the switch, as the lead is for."""
        if which != "after":
            return {}
        if self._key_at is None:
            polls = [float(c.get("poll_seconds") or 10) for c in self.configs["after"].values()] or [10.0]
            at = int(time.time() + max(polls) + ROTATION_LEAD_MARGIN_S) + 1
            self._key_at = dict.fromkeys(self.rotated(), at)
        return self._key_at

    def document(self, which: str, fabric_name: str) -> tuple[str, int]:
        """The site's signed document in `which` config (a new serial), and that serial."""
        name = self.name_in(which, fabric_name)
        assert name is not None
        key_at = self.key_at(which)
        plane = self._plane(which, name)
        plane.serial = max(plane.serial + 1, int(time.time()))
        cfg = self.cfgs[which]
        scope = str(self.configs[which][name]["trust"]["scope"])
        names = [s.name for s in cfg.sites]
        docs = documents(cfg, self.plans[which], self.keys[which].public, names, key_at, scope=scope,
                         serial=plane.serial, seed=self.keys[which].signing)  # fmt: skip
        return docs[name], plane.serial

    def publish_document(self, which: str, fabric_name: str) -> Written:
        """Write the site's document of `which` config to its store (a secret every machine of the site reads). What
        was written, and which machines read it."""
        name = self.name_in(which, fabric_name)
        assert name is not None
        text, serial = self.document(which, fabric_name)
        plane = self._plane(which, name)
        generation = published_generation(text, self.configs[which][name]["trust"])
        plane.publish_document(name, text)
        return Written(fabric_name, serial, generation, tuple(self.places[fabric_name]), time.time())

    # --- machine.Provisioner -------------------------------------------------------------------------------

    def _metadata_root(self, fabric_name: str, place: str) -> Path:
        assert self.plane is not None
        return self.plane.root / "gce" / f"{fabric_name}-{place}"

    def provision_files(self, site: str, path: Callable[[str], Path]) -> None:
        if self.plane is not None and site in self.plane.configs:
            self.plane.provision_files(site, path)

    def provision_network(self, site: str, netns: str) -> None:
        """A GCP gateway's metadata server, its place's own (its VM's document, name and zone), once per place."""
        if self.plane is None or site not in self.plane.tokens or netns in self._served:
            return
        fabric_name = self.layout.fabric_name(site)
        place = next(p for p, o in self.places[fabric_name].items() if o.machine.site.gateway_ns == netns)
        root = self._metadata_root(fabric_name, place)
        write_atomic(root / "instance" / "name", netns.encode(), 0o644)
        zone = str(getattr(self.site_config(fabric_name), "zone", ""))
        write_atomic(root / "instance" / "zone", f"projects/123456789/zones/{zone}".encode(), 0o644)
        token = self.plane.root / "gce" / site / "token"
        if not (root / "token").exists():
            (root / "token").symlink_to(token)
        self.metadata_pids.add(self.plane.serve_metadata(netns, f"metadata-{fabric_name}-{place}", root))
        self._served.add(netns)

    def running(self) -> Iterable[tuple[str, str, Occupant]]:
        for site, places in self.places.items():
            for place, occupant in places.items():
                yield site, place, occupant


def static_sites(world: World, which: str) -> list[str]:
    """Fabric names of the static sites of a state."""
    cfg = world.cfgs[which]
    return [world.layout.fabric_name(s.name) for s in cfg.sites if isinstance(s, StaticSite)]
