"""The lab's GCP control plane for HA sites (docs/ha.md 6 and 11): a documented model, as no Compute Engine emulator
exists (none on PyPI, none from Google; the Cloud SDK's emulators cover Pub/Sub, Datastore, Firestore, Bigtable and
Spanner only). One process in the lab's cloud namespace:

1. the Compute REST subset the agents call (compute.py: instances.get, add/deleteAccessConfig with zonal operations,
   addresses.get with `users`, regionBackendServices.getHealth), at `WG_MESH_COMPUTE_ENDPOINT`, seeded with what the
   program creates for a `gateways: 2` site: VM a in `zone`, VM b in `standby_zone`, each with one ephemeral access
   config (its own public IPv4, wg_mesh.gcp: an access config without `nat_ip`), the static address reserved and not
   attached (the agents move it), one instance group per VM;
2. Google's probers (gcpprober.py): per gateway, a thread in the site's VPC namespace that GETs
   http://<private address>:9181/healthz every `check_interval_sec` with `timeout_sec` and applies the thresholds
   wg_mesh.plan.ha.HEALTH_CHECK (the values wg_mesh.gcp.ha declares); getHealth answers their verdicts;
3. every 50 ms, the state applied to the namespaces by haapply.Applier (the one mechanism the AWS model uses too):
   the 1:1 NAT of the site's public address to the VM whose access config holds it, and the VPC router's remote
   routes to the ILB's next hop (gcpprober.next_hop under wg_mesh.plan.ha.FAILOVER_POLICY; None: blackhole, the dropped
   traffic of `drop_traffic_if_unhealthy`).

Stdout: one JSON line `{"ok": true, "sites": {site: {...}}}` once serving, then one line per change: applied state
`{"t", "site", "holder", "holders", "routes", "moves", "health", "applied_s"}`, a health verdict
`{"t", "site", "gateway", "health"}`, a 200 from a group member without the address `{"t", "site", "gateway",
"stale_200": 1}`, two group members HEALTHY at once and its end `{"t", "site", "two_healthy": [places] | []}`, a
command's acknowledgement `{"t", "site", "ack"}`. Stdin's later lines are what `pulumi up` does in a replacement
(`Site.command`: a new VM in a place, a group update, a VM deleted; the drill's hareplace.py) and in `gateways: 2` -> 1
(a VM's ready mark, the routes re-created with an instance as next hop; hadowngrade.py). The spare place `c`
has no VM until one is created; the next hop follows the groups' members. `python -m wg_mesh.lab.clouds.gcpmodel HOST
PORT` with the spec as the first stdin line: `{"interval", "sites": [haplan.ha_to_json(site) + {"project",
"region", "address", "vms": {place: {"name", "zone"}}, "groups": {letter: name}, "tokens": [...]}]}`.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from wg_mesh.lab.clouds import compute
from wg_mesh.lab.clouds.gcpprober import HEALTHY, UNHEALTHY, Prober, next_hop
from wg_mesh.lab.clouds.haapply import Applier
from wg_mesh.lab.fabric.haplan import HaSite, ha_from_json
from wg_mesh.lab.fabric.netns import NETNS_DIR, LabError
from wg_mesh.plan import ha as mesh_ha

CLONE_NEWNET = 0x40000000
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def enter_netns(name: str) -> None:
    """Move the calling thread (only it: a network namespace is per thread) into the named namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)


def probe(url: str, timeout: float) -> bool:
    """One HTTP health probe: success is a 200 within `timeout` (anything else, or no answer, fails)."""
    try:
        with NO_PROXY.open(url, timeout=timeout) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


class Site(Applier):
    """One HA site: its VMs in the Compute model, its prober, what was last applied."""

    def __init__(self, ha: HaSite, entry: dict[str, Any], cloud: compute.Cloud) -> None:
        super().__init__(ha)
        self.cloud = cloud
        self.address_ip = str(ha.eip)
        self.vm_of = {letter: vm["name"] for letter, vm in entry["vms"].items()}  # place -> its VM's name
        self.group_of = dict(entry["groups"])  # gateway letter -> its instance group's name
        self.members = {letter: [letter] for letter in self.group_of}  # gateway letter -> the places in its group
        self.prober = Prober(mesh_ha.HEALTH_CHECK, tuple(self.vm_of))
        self.lock = threading.Lock()
        self.two_healthy: list[str] = []
        # the routes' next hop: None, the load balancer's (an HA site's routes, next_hop_ilb); "" no route (deleted,
        # a blackhole); a place: that VM's (a single gateway's routes, next_hop_instance, wg_mesh.gcp.gateway)
        self.route_to: str | None = None
        with cloud.lock:
            cloud.addresses[entry["address"]] = self.address_ip
            for letter in self.group_of:  # the spare place has no VM until the drill creates one (`command`)
                self.create(letter, entry["vms"][letter]["zone"])
                cloud.groups[self.group_of[letter]] = [self.vm_of[letter]]
            cloud.tokens.update(entry["tokens"])

    def create(self, place: str, zone: str) -> None:
        """A new VM in `place` with its own ephemeral access config (wg_mesh.gcp), UNHEALTHY until probed. Under
        cloud.lock."""
        name = self.vm_of[place]
        self.cloud.vms[name] = compute.Vm(name, str(self.ha.gateway(place).instance_public), zone=zone)
        self.cloud.health[name] = UNHEALTHY

    def command(self, line: dict[str, Any]) -> None:
        """What `pulumi up` does to the site (the drill's replacement beside the old, hacloud.py): `vm` creates a
        VM in a place (in no group), `group` sets a gateway's instance group to the given places (the readiness
        gate passed: the old VM out, the new one in, one update), `delete` deletes a place's VM; `ready` sets a
        place's VM's ready mark (the guest attribute wg-mesh/ready, the lab's stand-in for wg_mesh.gateway.readymark:
        what the readiness gate waits for), `route` sets the routes' next hop (`place`: "" deleted, a place its VM,
        null the load balancer's)."""
        place = str(line.get("place", ""))
        with self.cloud.lock:
            if line["op"] == "vm":
                self.create(place, str(line["zone"]))
            elif line["op"] == "group":
                letter = str(line["group"])
                self.members[letter] = [str(p) for p in line["members"]]
                self.cloud.groups[self.group_of[letter]] = [self.vm_of[p] for p in self.members[letter]]
            elif line["op"] == "delete":
                self.cloud.vms.pop(self.vm_of[place], None)
                self.cloud.health.pop(self.vm_of[place], None)
            elif line["op"] == "ready":
                self.cloud.vms[self.vm_of[place]].attributes["wg-mesh/ready"] = "true"
            elif line["op"] == "route":
                self.route_to = None if line.get("place") is None else place

    def member(self, place: str) -> bool:
        return any(place in places for places in self.members.values())

    def prober_thread(self, letter: str) -> None:
        """Google's prober for one gateway, from the site's VPC (the only place its private address is reachable)."""
        enter_netns(self.ha.vpc_ns)
        check = self.prober.check
        url = f"http://{self.ha.gateway(letter).private}:{mesh_ha.HEALTH_PORT}{mesh_ha.HEALTH_PATH}"
        while True:
            started = time.monotonic()
            ok = probe(url, check.timeout_sec)
            elapsed = time.monotonic() - started
            with self.lock:
                changed = self.prober.probed(letter, started, ok, elapsed)
                state = self.prober.backends[letter].state
                wait = self.prober.backends[letter].next_probe - time.monotonic()
            with self.cloud.lock:
                vm = self.cloud.vms.get(self.vm_of[letter])
                if changed and vm is not None:
                    self.cloud.health[vm.name] = state
                # a backend answering 200 without the address (Google would send it the VPC's traffic)
                stale = ok and self.member(letter) and (vm is None or vm.nat_ip != self.address_ip)
            if changed:
                emit({"t": time.time(), "site": self.ha.site, "gateway": letter, "health": state})
            if stale:
                emit({"t": time.time(), "site": self.ha.site, "gateway": letter, "stale_200": 1})
            time.sleep(max(0.0, wait))

    def state(self) -> tuple[list[str], dict[str, str | None], dict[str, str]]:
        """(the letters of the VMs whose access config holds the address, remote range -> next hop's private
        address, each gateway's health)."""
        with self.cloud.lock:
            vms = {k: self.cloud.vms.get(name) for k, name in self.vm_of.items()}
            holders = [k for k, vm in vms.items() if vm is not None and vm.nat_ip == self.address_ip]
            primary, failover = tuple(self.members["a"]), tuple(self.members["b"])
        with self.lock:
            health = {k: v if vms[k] is not None else UNHEALTHY for k, v in self.prober.states().items()}
        hop = next_hop(health, mesh_ha.FAILOVER_POLICY, primary, failover) if self.route_to is None else self.route_to
        target = self.ha.gateway(hop).private if hop and vms.get(hop) is not None else None
        return holders, {str(cidr): target for cidr in self.ha.remote_ranges}, health


def commands(sites: dict[str, Site]) -> None:
    """Stdin's later lines: `{"id", "site", "op", ...}` (Site.command), each acknowledged by `{"t", "site", "ack"}`."""
    for text in sys.stdin:
        line = json.loads(text)
        try:
            sites[line["site"]].command(line)
            emit({"t": time.time(), "site": line["site"], "ack": line["id"]})
        except (KeyError, ValueError) as exc:
            emit({"t": time.time(), "site": line.get("site"), "ack": line.get("id"), "error": repr(exc)})


def main(argv: list[str]) -> int:
    host, port = argv[0], int(argv[1])
    spec = json.loads(sys.stdin.readline())
    interval = float(spec.get("interval", 0.05))
    projects = {entry["project"] for entry in spec["sites"]}
    if len(projects) != 1:
        emit({"ok": False, "error": f"the lab's GCP model takes HA sites of one project, not {sorted(projects)}"})
        return 1
    first = spec["sites"][0]
    cloud = compute.Cloud(project=projects.pop(), zone=first["vms"]["a"]["zone"], tokens=set())
    sites = [Site(ha_from_json(entry), entry, cloud) for entry in spec["sites"]]
    try:
        compute.serve(cloud, host=host, port=port)
    except OSError as exc:
        emit({"ok": False, "error": f"the Compute model could not listen on {host}:{port}: {exc}"})
        return 1
    for site in sites:
        for letter in site.vm_of:
            threading.Thread(target=site.prober_thread, args=(letter,), daemon=True).start()
    threading.Thread(target=commands, args=({s.ha.site: s for s in sites},), daemon=True).start()
    emit({"ok": True, "sites": {s.ha.site: {"vms": s.vm_of, "address": s.address_ip} for s in sites}})
    while True:
        started = time.monotonic()
        for site in sites:
            holders, routes, health = site.state()
            healthy = sorted(p for p in (*site.members["a"], *site.members["b"]) if health.get(p) == HEALTHY)
            if (len(healthy) > 1) != (len(site.two_healthy) > 1):  # two backends HEALTHY at once: a line each edge
                site.two_healthy = healthy
                emit({"t": time.time(), "site": site.ha.site, "two_healthy": healthy if len(healthy) > 1 else []})
            try:
                if site.apply(holders[0] if len(holders) == 1 else None, routes):
                    emit({"t": time.time(), **site.event(), "holders": holders, "health": health,
                          "applied_s": round(time.monotonic() - started, 3)})  # fmt: skip
            except LabError as exc:
                emit({"t": time.time(), "site": site.ha.site, "error": str(exc)})
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


__all__ = ["HEALTHY", "UNHEALTHY", "enter_netns", "main", "probe"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
