"""The lab's GCP HA site (docs/ha.md 11, wg_mesh/lab/clouds/gcpmodel.py, hagcp.py): each gateway's `ha` object and
environment (pure); and on a built fabric (integration, root), without the agents: each gateway's metadata server
names its own VM, a static-address move through the Compute model's REST (what the agent calls) moves the 1:1 NAT,
and the probers' verdicts on each gateway's /healthz (a stand-in server the test flips between 200 and 503) move the
VPC router's routes by the failover policy: a while it is healthy, b after a's second failed probe, none (dropped)
when neither is healthy, back to a after one good probe."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from wg_mesh.gateway import ha_gcp
from wg_mesh.lab.clouds import compute, gcpmodel, hagcp
from wg_mesh.lab.clouds.controlplane import ControlPlane, agent_configs
from wg_mesh.lab.clouds.hacloud import HaCloud, ha_artifacts
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.fabric.haplan import plan_ha
from wg_mesh.lab.fabric.netns import Node, list_netns, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.fabric.procs import stop
from wg_mesh.lab.fabric.session import _Cleanup, new_prefix
from wg_mesh.lab.fabric.teardown import find_labs
from wg_mesh.lab.machines.build import build
from wg_mesh.lab.machines.machine import NamespaceGateway
from wg_mesh.tools.stackfile import load

HA_STACK = load(Path(__file__).resolve().parent.parent / "Pulumi.ha.yaml")
GCP = {"gcp-euw3"}
CANNOT_RUN = missing_requirements()


def test_each_gcp_gateway_gets_its_ha_object_and_the_compute_endpoint() -> None:
    plan = plan_lab(HA_STACK, "wgl0000", ha_sites=GCP)
    ha = plan_ha(plan)["gcp-euw3"]
    entry = hagcp.site_entry(HA_STACK, plan.prefix, ha, "tok")
    assert entry["vms"] == {"a": {"name": "wgl0000-gw-gcp-euw3-a", "zone": "europe-west3-a"},
                            "b": {"name": "wgl0000-gw-gcp-euw3-b", "zone": "europe-west3-b"},
                            "c": {"name": "wgl0000-gw-gcp-euw3-c", "zone": "europe-west3-a"}}  # fmt: skip
    assert entry["eip"] == str(ha.eip) and entry["tokens"] == ["tok"] and entry["project"] == "my-project"
    a = render_artifacts(HA_STACK, plan, LabKeys.generate(HA_STACK))["gcp-euw3"]
    configs = {
        letter: agent_configs({"x": ha_artifacts(HA_STACK, plan, a, letter, entry).user_data})["x"] for letter in "ab"
    }
    b = configs["b"]["ha"]
    assert b["cloud"] == "gcp" and b["gateway"] == "b" and b["address_ip"] == str(ha.eip)
    assert b["groups"] == {g: {"zone": entry["vms"][g]["zone"], "name": entry["groups"][g]} for g in "ab"}
    assert configs["a"]["ha"]["gateway"] == "a" and {**configs["a"], "ha": None} == {**configs["b"], "ha": None}
    assert hagcp.ENV_LINE.startswith("WG_MESH_COMPUTE_ENDPOINT=http://") and hagcp.ENV_LINE.endswith("/compute/v1/")


def test_the_standby_zone_defaults_to_the_next_zone() -> None:
    site = HA_STACK.site("gcp-euw3").model_copy(update={"standby_zone": None, "zone": "europe-west3-c"})
    assert hagcp.zones(site) == {"a": "europe-west3-c", "b": "europe-west3-a", "c": "europe-west3-c"}  # type: ignore[arg-type]


def test_the_gcp_model_plays_pulumis_replacement_new_vm_group_update_delete() -> None:
    """gcpmodel.Site's commands (the drill's replacement beside the old, hareplace.py): the spare place has no VM
    until created, a new VM is in no group (the load balancer ignores it), the group update makes it the group's
    backend, a deleted VM holds nothing; a 200 from a member without the address is reported (`stale_200`)."""
    plan = plan_lab(HA_STACK, "wgl0000", ha_sites=GCP)
    ha = plan_ha(plan)["gcp-euw3"]
    entry = hagcp.site_entry(HA_STACK, plan.prefix, ha, "tok")
    cloud = compute.Cloud(project=entry["project"], zone=entry["vms"]["a"]["zone"], tokens=set())
    site = gcpmodel.Site(ha, entry, cloud)
    assert set(cloud.vms) == {entry["vms"][g]["name"] for g in "ab"}  # c: no VM yet
    cloud.vms[entry["vms"]["a"]["name"]].nat_ip = str(ha.eip)
    for place, state in (("a", "HEALTHY"), ("b", "UNHEALTHY"), ("c", "HEALTHY")):
        site.prober.backends[place].state = state
    hop = ha.gateway("a").private
    assert site.state()[:2] == (["a"], dict.fromkeys(map(str, ha.remote_ranges), hop))
    site.command({"op": "vm", "place": "c", "zone": entry["vms"]["a"]["zone"]})
    assert site.state()[1] == dict.fromkeys(map(str, ha.remote_ranges), hop)  # healthy, but in no group
    assert not site.member("c") and site.member("a")
    site.command({"op": "group", "group": "a", "members": ["c"]})
    assert cloud.groups[entry["groups"]["a"]] == [entry["vms"]["c"]["name"]] and not site.member("a")
    assert site.state()[1] == dict.fromkeys(map(str, ha.remote_ranges), ha.gateway("c").private)
    site.command({"op": "delete", "place": "a"})
    assert site.state()[0] == [] and entry["vms"]["a"]["name"] not in cloud.vms


_HEALTH = """
import http.server, sys
from pathlib import Path
code = Path(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status = int(code.read_text())
        self.send_response(status); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", 9181), H)
print("listening", flush=True)
server.serve_forever()
"""

_MOVE = """
import sys
from wg_mesh.gateway import ha_gcp
api = ha_gcp.Compute(lambda: sys.argv[2], sys.argv[1], poll_s=0.05, timeout_s=5)
print(ha_gcp.move_address(api, sys.argv[3], sys.argv[4]))
"""

_METADATA = """
import urllib.request as u
r = u.Request('http://169.254.169.254/computeMetadata/v1/instance/name', headers={'Metadata-Flavor': 'Google'})
print(u.urlopen(r, timeout=5).read().decode())
"""


def _until(check: Any, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.05)
    return None


@pytest.mark.integration
@pytest.mark.skipif(bool(CANNOT_RUN), reason="; ".join(CANNOT_RUN))
def test_the_gcp_model_moves_nat_with_the_access_config_and_routes_with_the_probers(tmp_path: Path) -> None:
    plan = plan_lab(HA_STACK, new_prefix(), ha_sites=GCP)
    keys = LabKeys.generate(HA_STACK)
    artifacts = render_artifacts(HA_STACK, plan, keys)
    configs = live_configs(artifacts)
    state = new_state(plan.prefix, "GCP HA fabric test")
    state.save()
    cleanup = _Cleanup(state, Console(stderr=True))
    planes: list[ControlPlane] = []
    clouds: list[HaCloud] = []
    servers: list[subprocess.Popen[str]] = []

    def hook(lab: Any) -> None:
        control_plane_hook(HA_STACK, keys, configs, [], started=planes.append)(lab)

    try:
        lab = build(plan, artifacts, state, lambda _: None, NamespaceGateway, before_gateways=hook, start=[])
        clouds.append(HaCloud(HA_STACK, lab, planes[0]))
        clouds[0].start()
        cloud, ha = clouds[0], clouds[0].sites["gcp-euw3"]
        entry = cloud.ids["gcp-euw3"]
        nodes = {g.letter: Node(g.netns) for g in ha.gateways}
        codes = {letter: tmp_path / f"code-{letter}" for letter in nodes}
        for letter, node in nodes.items():
            codes[letter].write_text("503")
            servers.append(node.popen([sys.executable, "-I", "-u", "-c", _HEALTH, str(codes[letter])],
                                      stdout=subprocess.PIPE))  # fmt: skip
            state.track(servers[-1].pid, node.netns, "health stand-in (test)")
            assert servers[-1].stdout is not None and "listening" in servers[-1].stdout.readline()
        # each gateway's metadata server names its own VM
        names = {k: n.run([sys.executable, "-I", "-c", _METADATA], timeout=10).stdout.strip() for k, n in nodes.items()}
        assert names == {k: v["name"] for k, v in entry["vms"].items()}
        host = Node(ha.host_ns)
        remote = str(ha.remote_ranges[0].network_address + 5)

        def route() -> str:
            result = host.run(["ip", "route", "get", remote], timeout=5, check=False)
            return result.stdout + result.stderr  # a blackhole route: "RTNETLINK answers: Invalid argument"

        def hops() -> list[Any]:
            return [e.get("routes") for e in cloud.events if e.get("site") == "gcp-euw3" and "routes" in e]

        # nobody healthy (both 503): the ILB drops the traffic (drop_traffic_if_unhealthy), nobody holds the address
        assert _until(lambda: hops() != [], 10) is not None, cloud.events
        assert "blackhole" in route() or "unreachable" in route() or "Invalid" in route(), route()
        assert cloud.holders("gcp-euw3") == []
        # b takes the static address through the Compute REST the agent uses: the NAT follows the access config
        token = planes[0].tokens["gcp-euw3"]
        project, zone_b = entry["project"], entry["vms"]["b"]["zone"]
        instance_b = ha_gcp.instance_path(project, zone_b, entry["vms"]["b"]["name"])
        address = f"projects/{project}/regions/{entry['region']}/addresses/{entry['address']}"
        move = [sys.executable, "-c", _MOVE, hagcp.COMPUTE_ENDPOINT, token, instance_b, address]
        Node(planes[0].netns).run(move, env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}, timeout=30)
        assert _until(lambda: cloud.holders("gcp-euw3") == ["b"], 5) is not None, cloud.events[-3:]
        # a healthy: the routes go to a (the primary) after one probe (healthy_threshold 1)
        codes["a"].write_text("200")
        assert _until(lambda: f"via {ha.gateway('a').private} " in route(), 5) is not None, route()
        # b healthy too: still a (failover ratio 0); a fails: b only after its second failed probe
        codes["b"].write_text("200")
        time.sleep(2.5)
        assert f"via {ha.gateway('a').private} " in route()
        codes["a"].write_text("503")
        took = _until(lambda: f"via {ha.gateway('b').private} " in route(), 6)
        assert took is not None and took > 0.9, (took, route())  # unhealthy_threshold 2 at a 1 s interval
        # a back: failback to the primary
        codes["a"].write_text("200")
        assert _until(lambda: f"via {ha.gateway('a').private} " in route(), 4) is not None, route()
        assert all("error" not in e for e in cloud.events), [e for e in cloud.events if "error" in e]
    finally:
        for server in servers:
            stop(server)
        for cloud in clouds:
            cloud.stop()
        cleanup()
    assert not cleanup.problems
    assert plan.prefix not in find_labs()
    assert not [n for n in list_netns() if n.startswith(plan.prefix)]
