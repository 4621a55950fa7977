"""GCP HA through its own replacement and a stale ex-active (issue 21 items 1 and 3; docs/ha.md 6.3, 9), with the
shipped controllers (wg_mesh.gateway.ha_run, ha_gcp) against the Compute model (tests/gce_fake.py) on a fake clock.

What `pulumi up` does when it replaces a gateway of a pair (wg_mesh.gcp): the new VM is created next to the old one,
the readiness gate waits for its ready mark, and only then is its instance group updated to hold it instead of the
old VM (`depends_on` the gate); Pulumi deletes the old VM last. The harness plays that sequence, Google's probers
(a verdict per VM from its /healthz at every 0.5 s tick, thresholds of 1: the lab's model applies the real check) and
the load balancer's failover policy (group a's healthy members, else group b's, else dropped), and counts how often
the static address and the next hop moved.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import gce_fake
from tests.agent_fake import base_plan
from tests.gce_fake import Cloud, Vm
from tests.test_ha_aws import FakeGateway
from tests.test_ha_gcp import EPHEMERAL_A, EPHEMERAL_B, HA, IP, ZONES
from wg_mesh.gateway import ha_gcp
from wg_mesh.gateway.ha import Settings
from wg_mesh.gateway.ha_config import parse_ha
from wg_mesh.gateway.ha_gcp import WITNESS_S, GcpHa, Metadata, Witness
from wg_mesh.gateway.ha_run import Controller
from wg_mesh.plan import ha as mesh_ha

SETTINGS = Settings(tunnel_fail_s=1e6)  # the fake gateways have no peers to ping: the tunnel check is not at stake
plan = functools.cache(base_plan)  # a stack file's load: once for the module


@dataclass
class Site:
    """The Compute model, one controller per running VM, the groups as `pulumi up` leaves them, the fake clock."""

    cloud: Cloud
    tmp: Path
    url: str
    ctls: dict[str, Controller] = field(default_factory=dict)  # VM name -> its agent
    gws: dict[str, FakeGateway] = field(default_factory=dict)
    clock: list[float] = field(default_factory=lambda: [0.0])
    alive: set[str] = field(default_factory=set)
    holders: list[str | None] = field(default_factory=list)  # the address's holder at each tick
    hops: list[str | None] = field(default_factory=list)  # the load balancer's next hop at each tick
    stale_200: list[tuple[float, str]] = field(default_factory=list)  # (time, backend): 200 without the address

    def boot(self, name: str, letter: str, zone: str, ephemeral: str) -> None:
        """A new VM with its agent (a replacement is created next to the old one: in no group yet)."""
        self.cloud.vms[name] = Vm(name, ephemeral, zone=zone)
        url = self.url
        config = parse_ha({**HA, "gateway": letter})
        gw = FakeGateway(self.tmp, plan=plan())
        forward = self.tmp / "ip_forward"
        forward.write_text("1\n")
        clock = self.clock

        def adapter() -> GcpHa:
            made = GcpHa(config, VmMetadata(name, zone), f"{url}/compute/v1/", lambda: clock[0])
            made.api.sleep = lambda _s: None  # the model's operations are DONE on their second read
            return made

        ctl = Controller("gcp-euw3", config, gw, adapter, gw.run, lambda: clock[0], SETTINGS)
        ctl.checks.forward_path = str(forward)
        self.ctls[name], self.gws[name] = ctl, gw
        self.alive.add(name)

    def hop(self) -> str | None:
        for group in ("ig-a", "ig-b"):
            healthy = [m for m in self.cloud.groups[group] if self.cloud.health.get(m) == "HEALTHY"]
            if healthy:
                return healthy[0]
        return None

    def run(self, seconds: float) -> None:
        end = self.clock[0] + seconds
        while self.clock[0] < end:
            for name in sorted(self.alive):
                self.ctls[name].tick()
                self.ctls[name].wait_idle()
            holder = self.cloud.holder(IP)
            members = {m for group in self.cloud.groups.values() for m in group}
            for name, ctl in self.ctls.items():
                code = ctl.healthz()[0] if name in self.alive else 503
                self.cloud.health[name] = "HEALTHY" if code == 200 else "UNHEALTHY"
                if code == 200 and name in members and (holder is None or holder.name != name):
                    self.stale_200.append((self.clock[0], name))
            self.holders.append(holder.name if holder else None)
            self.hops.append(self.hop())
            self.clock[0] = round(self.clock[0] + 0.5, 3)

    def moves(self, series: list[str | None]) -> int:
        """How often the series changed from one VM to another (None, mid-move or dropped, counts as no VM)."""
        seen = [s for s in series if s is not None]
        return sum(1 for x, y in itertools.pairwise(seen) if x != y)

    def dropped(self) -> int:
        """Ticks at which the load balancer had no healthy backend or sent the traffic to a VM without the address."""
        return sum(1 for h, n in zip(self.holders, self.hops, strict=True) if n is None or n != h)


class VmMetadata(Metadata):
    """A VM's metadata server as the adapter reads it (its name, zone and token; the tests of ha_gcp serve it)."""

    def __init__(self, name: str, zone: str) -> None:
        super().__init__("http://unused")
        self.name, self.zone = name, zone

    def token(self) -> str:
        return gce_fake.TOKEN

    def instance(self, project: str) -> str:
        return f"projects/{project}/zones/{self.zone}/instances/{self.name}"


@pytest.fixture(scope="module")
def compute() -> Iterator[tuple[Cloud, str]]:
    """One Compute model for the module (a server's start costs a name lookup); each test resets its state."""
    cloud = Cloud()
    server = gce_fake.serve(cloud)
    try:
        yield cloud, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def site(compute: tuple[Cloud, str], tmp_path: Path) -> Site:
    """ga active with the address (as the first `pulumi up` leaves the pair after its agents settled), gb standby."""
    cloud, url = compute
    with cloud.lock:
        cloud.vms, cloud.addresses, cloud.health = {}, {"gw-ip": IP}, {}
        cloud.groups = {"ig-a": ["ga"], "ig-b": ["gb"]}
        cloud.events.clear()
    s = Site(cloud, tmp_path, url)
    s.boot("ga", "a", ZONES["a"], EPHEMERAL_A)
    s.boot("gb", "b", ZONES["b"], EPHEMERAL_B)
    s.run(3)
    assert s.cloud.holder(IP) is s.cloud.vms["ga"] and s.hop() == "ga", s.gws["ga"].logs
    s.holders.clear()
    s.hops.clear()
    return s


def test_the_witness_needs_a_read_that_says_me_and_no_gap_longer_than_two_probes() -> None:
    clock = [0.0]
    w = Witness(lambda: clock[0])
    assert not w.serving()  # nothing read yet
    w.read("me")
    for _ in range(10):  # probes a second apart keep it serving (the API may be down meanwhile)
        clock[0] += 1.0
        assert w.serving()
    clock[0] += WITNESS_S + 0.1  # frozen, or cut off from the probers: Google may have moved on
    assert not w.serving()
    clock[0] += 0.1
    assert not w.serving()  # sticky: a probe alone does not bring it back
    w.read("me")
    assert w.serving()
    w.read("other")
    assert not w.serving()


def test_the_witness_window_is_the_health_checks_detection_time() -> None:
    """Google marks a backend UNHEALTHY after unhealthy_threshold probes check_interval_sec apart (wg_mesh.gcp.ha
    declares them): only after that may the standby have taken the address."""
    check = mesh_ha.HEALTH_CHECK
    assert check.check_interval_sec * check.unhealthy_threshold == WITNESS_S


def test_a_stale_ex_active_never_answers_200(site: Site) -> None:
    """ga freezes (a stalled VM: no tick, no /healthz answer), gb takes over, ga resumes with its role still active:
    its /healthz must answer 503 from the first request on, so the load balancer never prefers it again."""
    site.alive.discard("ga")
    site.run(4)
    assert site.cloud.holder(IP) is site.cloud.vms["gb"] and site.hop() == "gb"
    assert site.ctls["ga"].machine.role == "active"  # it does not know yet
    assert site.ctls["ga"].healthz()[0] == 503  # a probe that arrives before its first tick
    site.alive.add("ga")
    site.run(5)
    assert site.ctls["ga"].machine.role == "standby" and site.cloud.holder(IP) is site.cloud.vms["gb"]
    assert site.stale_200 == [] and site.hops[-1] == "gb" and "ga" not in site.hops


def test_replacing_the_active_while_it_runs_moves_the_address_once(site: Site) -> None:
    """ga2 replaces ga: it boots next to ga (ga keeps the address: Google reports ga HEALTHY in group a), `pulumi up`
    puts it in group a once ready, in ga's place; ga2 takes the address from ga (in no group now) at once, gb does
    not race it; ga is deleted at the end (SIGTERM: 503)."""
    site.boot("ga2", "a", ZONES["a"], "198.51.100.3")
    site.run(6)  # booted and ready, not a member yet
    assert site.cloud.holder(IP) is site.cloud.vms["ga"] and set(site.hops) == {"ga"}
    site.cloud.groups["ig-a"] = ["ga2"]  # the group's update, after the readiness gate
    site.run(6)
    assert site.cloud.holder(IP) is site.cloud.vms["ga2"] and site.hop() == "ga2", site.gws["ga2"].logs
    site.ctls["ga"].shutdown()  # Pulumi deletes the old VM: systemd stops its agent
    site.alive.discard("ga")
    site.run(6)
    assert site.moves(site.holders) == 1 and site.moves(site.hops) == 1, (site.holders, site.hops)
    assert site.ctls["gb"].machine.role == "standby" and site.ctls["ga2"].machine.role == "active"
    assert site.stale_200 == []
    assert site.dropped() <= 2  # the move itself: ga2's claim and its first probe (the drill measures it)


def test_replacing_the_standby_moves_nothing(site: Site) -> None:
    site.boot("gb2", "b", ZONES["b"], "198.51.100.4")
    site.run(6)
    site.cloud.groups["ig-b"] = ["gb2"]
    site.run(8)  # more than gateway b's 5 s wait for a holder in no group: ga is in its group, HEALTHY
    site.ctls["gb"].shutdown()
    site.alive.discard("gb")
    site.run(3)
    assert site.moves(site.holders) == 0 and site.moves(site.hops) == 0 and site.dropped() == 0
    assert site.ctls["gb2"].machine.role == "standby" and site.cloud.holder(IP) is site.cloud.vms["ga"]


def test_replacing_the_active_b_after_a_failover_gives_the_address_to_a_once(site: Site) -> None:
    """b is active (after a failover) and is replaced: its old VM leaves group b; gateway a claims at once, the new
    b waits its 5 s and then finds a holding it in group a: one move, and b2 ends standby."""
    site.alive.discard("ga")
    site.run(4)
    site.alive.add("ga")
    site.run(3)
    assert site.cloud.holder(IP) is site.cloud.vms["gb"]
    site.holders.clear()
    site.hops.clear()
    site.boot("gb2", "b", ZONES["b"], "198.51.100.4")
    site.run(4)
    site.cloud.groups["ig-b"] = ["gb2"]
    site.run(ha_gcp.ORPHAN_WAIT_S + 3)
    site.ctls["gb"].shutdown()
    site.alive.discard("gb")
    site.run(3)
    assert site.cloud.holder(IP) is site.cloud.vms["ga"] and site.ctls["gb2"].machine.role == "standby"
    assert site.moves(site.holders) == 1 and site.moves(site.hops) == 1, (site.holders, site.hops)
    assert site.stale_200 == []
