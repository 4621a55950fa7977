"""The GCP side of HA (wg_mesh.gateway.ha_gcp, ha_run) against tests/gce_fake.py (the documented Compute REST subset,
extended for HA: zonal VMs in two zones, regionBackendServices.getHealth, the metadata server's name, zone and
token). Google's probers are not modelled here: the test sets the health they would report."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import gce_fake
from tests.gce_fake import PROJECT, REGION, Cloud, Vm
from tests.test_ha_aws import FakeGateway
from wg_mesh.gateway.ha import Settings
from wg_mesh.gateway.ha_config import parse_ha
from wg_mesh.gateway.ha_gcp import ORPHAN_WAIT_S, SETTLE_S, UNHELD_TAKE_S, GcpHa, Metadata
from wg_mesh.gateway.ha_run import Controller
from wg_mesh.tools import gcpgate

IP, EPHEMERAL_A, EPHEMERAL_B = "203.0.113.7", "198.51.100.1", "198.51.100.2"
ZONES = {"a": "europe-west3-a", "b": "europe-west3-b"}
HA = {
    "cloud": "gcp",
    "project": PROJECT,
    "region": REGION,
    "address": "gw-ip",
    "address_ip": IP,
    "backend_service": "gw-bs",
    "groups": {g: {"zone": ZONES[g], "name": f"ig-{g}"} for g in "ab"},
}


@pytest.fixture
def gcp() -> Iterator[tuple[Cloud, dict[str, str], str]]:
    """ga holds the address (as `pulumi up` left it), gb has an ephemeral one; one metadata server per VM."""
    cloud = Cloud(
        vms={"ga": Vm("ga", IP, zone=ZONES["a"]), "gb": Vm("gb", EPHEMERAL_B, zone=ZONES["b"])},
        addresses={"gw-ip": IP},
        groups={"ig-a": ["ga"], "ig-b": ["gb"]},
        health={"ga": "HEALTHY", "gb": "UNHEALTHY"},
    )
    servers = {g: gce_fake.serve(cloud, metadata_of=f"g{g}") for g in "ab"}
    urls = {g: f"http://127.0.0.1:{s.server_address[1]}" for g, s in servers.items()}
    try:
        yield cloud, urls, f"{urls['a']}/compute/v1/"
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def adapter(g: str, urls: dict[str, str], compute: str, clock: Callable[[], float] = time.monotonic) -> GcpHa:
    return GcpHa(parse_ha({**HA, "gateway": g}), Metadata(urls[g]), compute, clock)


def test_identity_from_the_metadata_server(
    gcp: tuple[Cloud, dict[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _cloud, urls, compute = gcp
    monkeypatch.setenv("GCE_METADATA_HOST", urls["b"].removeprefix("http://"))
    monkeypatch.setenv("WG_MESH_COMPUTE_ENDPOINT", compute)
    b = GcpHa(parse_ha({**HA, "gateway": "b"}))
    assert b.instance == f"projects/{PROJECT}/zones/{ZONES['b']}/instances/gb"
    assert (
        b.group_url("a")
        == f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONES['a']}/instanceGroups/ig-a"
    )


def test_holder_and_the_other_gateways_health(gcp: tuple[Cloud, dict[str, str], str]) -> None:
    cloud, urls, compute = gcp
    clock = [100.0]
    a, b = (adapter(g, urls, compute, lambda: clock[0]) for g in "ab")
    assert (a.holder(), b.holder()) == ("me", "other")
    # the holder's health, wherever Google reports it (a holder has no "other" to judge), once b has seen it hold
    # the address for SETTLE_S
    assert b.other_health() is None and a.other_health() is None
    clock[0] += SETTLE_S
    assert b.other_health() == "HEALTHY"
    cloud.health["ga"] = "UNHEALTHY"
    assert b.other_health() == "UNHEALTHY"
    cloud.vms["ga"].nat_ip = None
    assert b.holder() == "none"
    assert b.reconcile([], lambda: True) == []  # unheld for a moment: maybe a claim in flight
    clock[0] += UNHELD_TAKE_S
    assert b.reconcile([], lambda: True) == ["address gw-ip"]  # nobody held it for 10 s: the active takes it
    assert b.holder() == "me" and a.holder() == "other"
    assert a.reconcile([], lambda: True) == []  # never from another holder without a claim


def controllers(
    urls: dict[str, str], compute: str, tmp_path: Path
) -> tuple[dict[str, Controller], dict[str, FakeGateway], list[float]]:
    clock = [0.0]
    forward = tmp_path / "ip_forward"
    forward.write_text("1\n")
    gws, ctls = {}, {}
    for g in "ab":
        gws[g] = FakeGateway(tmp_path)
        config = parse_ha({**HA, "gateway": g})
        make = functools.partial(adapter, g, urls, compute, lambda: clock[0])
        ctl = Controller("gcp-euw3", config, gws[g], make, gws[g].run, lambda: clock[0], Settings())
        ctl.checks.forward_path = str(forward)
        ctls[g] = ctl
    return ctls, gws, clock


def run_for(ctls: dict[str, Controller], clock: list[float], seconds: float, cloud: Cloud, alive: str = "ab") -> None:
    """Tick the alive gateways; Google's verdict per VM follows its /healthz at each tick (a prober with a 0.5 s
    interval and thresholds of 1; the lab's model applies the real check_interval/timeout/thresholds)."""
    end = clock[0] + seconds
    while clock[0] < end:
        for g in alive:
            ctls[g].tick()
            ctls[g].wait_idle()
        for g, ctl in ctls.items():
            cloud.health[f"g{g}"] = "HEALTHY" if g in alive and ctl.healthz()[0] == 200 else "UNHEALTHY"
        clock[0] = round(clock[0] + 0.5, 3)


def test_standby_takes_over_when_google_reports_the_active_unhealthy(
    gcp: tuple[Cloud, dict[str, str], str], tmp_path: Path
) -> None:
    cloud, urls, compute = gcp
    ctls, gws, clock = controllers(urls, compute, tmp_path)
    run_for(ctls, clock, 2, cloud)
    assert (ctls["a"].machine.role, ctls["b"].machine.role) == ("active", "standby")
    assert ctls["a"].healthz() == (200, "active") and ctls["b"].healthz() == (503, "standby")
    run_for(ctls, clock, 20, cloud)  # a partition between the pair changes nothing: Google still sees a healthy
    assert ctls["b"].machine.role == "standby" and cloud.holder(IP) is cloud.vms["ga"]

    # a dies: its /healthz stops answering, Google reports it UNHEALTHY
    run_for(ctls, clock, 1, cloud, alive="b")
    assert ctls["b"].machine.role == "active" and cloud.holder(IP) is cloud.vms["gb"]
    assert cloud.events == ["gb -" + EPHEMERAL_B, "ga -" + IP, "gb +" + IP]  # its own ephemeral first, one per NIC
    assert any("claimed the active role (unhealthy)" in line for line in gws["b"].logs)
    assert 'reason="unhealthy"} 1' in gws["b"].metrics

    run_for(ctls, clock, 2, cloud)  # a comes back: it sees another holder twice and demotes; it never takes it back
    assert ctls["a"].machine.role == "standby" and gws["a"].roles[-1] == "standby", gws["a"].logs
    assert cloud.holder(IP) is cloud.vms["gb"]


def test_the_active_turns_503_when_its_checks_fail(gcp: tuple[Cloud, dict[str, str], str], tmp_path: Path) -> None:
    cloud, urls, compute = gcp
    ctls, gws, clock = controllers(urls, compute, tmp_path)
    run_for(ctls, clock, 2, cloud)
    gws["a"].wg_answers = False
    run_for(ctls, clock, 1, cloud)
    assert ctls["a"].healthz() == (503, "unhealthy: wg hung (no answer in 1 s)") and ctls["a"].machine.role == "standby"
    assert cloud.holder(IP) is cloud.vms["ga"]  # GCP has no lease: Google's health check moves the traffic


def test_a_retired_pair_stands_down_and_the_gates_move_stays(
    gcp: tuple[Cloud, dict[str, str], str], tmp_path: Path
) -> None:
    """`gateways: 2` -> 1 (issue 32 item 2) against the Compute model: the pair's document says `gateways: 1`, the new
    single VM `gn` (in no group, no HA agent) is gated and its readiness gate moves the static address to it
    (gcpgate.move_address, as `pulumi up` runs it), the routes follow it (re-created: not the pair's concern), and the
    old VMs are deleted last. Before the field, b took the address from `gn` as an orphan ~5 s after the move."""
    cloud, urls, compute = gcp
    cloud.vms["gn"] = Vm("gn", "198.51.100.9", zone=ZONES["a"])
    ctls, gws, clock = controllers(urls, compute, tmp_path)
    run_for(ctls, clock, 2, cloud)
    assert ctls["a"].machine.role == "active" and cloud.holder(IP) is cloud.vms["ga"]
    for gw in gws.values():
        gw.single = True
    run_for(ctls, clock, 1, cloud)
    assert ctls["a"].healthz() == (200, "active")  # still the load balancer's backend until the routes move
    api = gcpgate.Compute(lambda: gce_fake.TOKEN, compute, sleep=lambda _: None)
    gcpgate.move_address(api, gcpgate.instance_path(PROJECT, ZONES["a"], "gn"),
                         f"projects/{PROJECT}/regions/{REGION}/addresses/gw-ip")  # fmt: skip
    assert cloud.holder(IP) is cloud.vms["gn"]
    events = len(cloud.events)
    run_for(ctls, clock, 2 * ORPHAN_WAIT_S + UNHELD_TAKE_S, cloud)
    assert cloud.holder(IP) is cloud.vms["gn"] and len(cloud.events) == events  # no access config touched since
    assert ctls["a"].machine.role == "standby" and ctls["a"].healthz()[0] == 503  # it read the new holder
    assert sum(ctls["b"].machine.claims.values()) == 0
    ctls["a"].shutdown()
    run_for(ctls, clock, ORPHAN_WAIT_S + 1, cloud, alive="b")
    assert cloud.holder(IP) is cloud.vms["gn"] and len(cloud.events) == events
