"""The lab's HA sites (issue 11): the plan (two gateways, their addresses and namespaces), the internet router's NAT
rules for the Elastic IP's holder, the VPC route table's routes, the IMDSv2 model (pure, loopback); and on a built
fabric (integration, root): moto's EIP moved with boto3 moves the 1:1 NAT, a ReplaceRoute moves the workload
host's route, each gateway's IMDS answers with its own instance."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.test_lab_live_drill import PROD
from wg_mesh.lab.clouds.controlplane import AWS_ENDPOINT, ControlPlane, agent_configs
from wg_mesh.lab.clouds.hacloud import HaCloud, ha_artifacts, ha_env
from wg_mesh.lab.clouds.imds import make_server
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.fabric.haplan import ha_from_json, ha_to_json, nat_rules, plan_ha, route_targets
from wg_mesh.lab.fabric.netns import Node, list_netns, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import LabKeys, LabPlanError, plan_lab, render_artifacts
from wg_mesh.lab.fabric.procs import stop
from wg_mesh.lab.fabric.session import _Cleanup, new_prefix
from wg_mesh.lab.fabric.teardown import find_labs
from wg_mesh.lab.machines.build import build
from wg_mesh.lab.machines.machine import NamespaceGateway
from wg_mesh.tools.stackfile import load

HA = {"aws-use1"}
HA_STACK = load(Path(__file__).resolve().parent.parent / "Pulumi.ha.yaml")


def test_an_ha_site_has_two_gateways_in_its_vpc_with_their_own_addresses() -> None:
    plan = plan_lab(PROD, "wgl0000", ha_sites=HA)
    site = plan.site("aws-use1")
    assert site.gateway_ns == "wgl0000-gw-aws-use1-a" and site.standby_ns == "wgl0000-gw-aws-use1-b"
    assert {"wgl0000-gw-aws-use1-a", "wgl0000-gw-aws-use1-b"} <= set(plan.namespaces)
    assert plan.site("gcp-euw3").gateway_ns == "wgl0000-gw-gcp-euw3" and plan.site("gcp-euw3").standby_ns is None
    ha = plan_ha(plan)["aws-use1"]
    a, b = ha.gateway("a"), ha.gateway("b")
    assert (a.private_ip, b.private_ip) == (IPv4Interface("10.10.0.10/24"), IPv4Interface("10.10.0.11/24"))
    assert ha.eip == site.public_ip and len({ha.eip, a.instance_public, b.instance_public}) == 3
    assert a.bridge_port != b.bridge_port
    c = ha.gateway("c")  # the spare place (a replacement beside the old instance, the drill's steps 8 and 9)
    assert c.private_ip == IPv4Interface("10.10.0.12/24") and site.spare_ns == c.netns in plan.namespaces
    assert (
        len({a.bridge_port, b.bridge_port, c.bridge_port})
        == len({a.instance_public, b.instance_public, c.instance_public})
        == 3
    )
    assert plan.site("gcp-euw3").spare_ns is None
    assert ha_from_json(ha_to_json(ha)) == ha
    with pytest.raises(LabPlanError, match="vps-fra is a static site"):
        plan_lab(PROD, "wgl0000", ha_sites={"vps-fra"})
    with pytest.raises(LabPlanError, match="nowhere is not a site"):
        plan_lab(PROD, "wgl0000", ha_sites={"nowhere"})
    assert plan_lab(HA_STACK, "wgl0000").site("aws-use1").gateways == 1  # only when asked (`--drill ha`)


def test_the_eip_follows_its_holder_with_a_new_conntrack_zone_per_move() -> None:
    ha = plan_ha(plan_lab(PROD, "wgl0000", ha_sites=HA))["aws-use1"]
    text = nat_rules(ha, "b", 3)
    assert "-A wgha0-pre -d 198.18.0.1/32 -j DNAT --to-destination 10.10.0.11\n" in text
    assert "-A wgha0-post -s 10.10.0.11/32 -j SNAT --to-source 198.18.0.1\n" in text
    assert "-A wgha0 -d 198.18.0.1/32 -j CT --zone 1003\n" in text and "-s 10.10.0.11/32 -j CT --zone 1003" in text
    # a, not holding it, keeps its own public IPv4, and its WireGuard packets are dropped (the peers' filters).
    a = ha.gateway("a")
    assert f"-A wgha0-post -s 10.10.0.10/32 -j SNAT --to-source {a.instance_public}\n" in text
    assert "-A wgha0-fwd -s 10.10.0.10/32 -p udp --sport 51820 -j DROP\n" in text
    assert "10.10.0.11/32 -p udp" not in text
    assert "--zone 1004" in nat_rules(ha, "a", 4)
    nobody = nat_rules(ha, None, 0)
    assert "198.18.0.1" not in nobody and nobody.count("-j DROP") == 3  # a, b and the spare place c
    # Each table declares its chains (flushing them) before its rules and commits once.
    for table in ("*raw\n:wgha0 - [0:0]\n", "*nat\n:wgha0-pre - [0:0]\n:wgha0-post - [0:0]\n", "*filter\n:wgha0-fwd"):
        assert table in text
    assert text.count("COMMIT") == 3
    # the new DNAT before the new zone: a packet between the two commits stays in the old zone and its entry
    assert text.index("*nat\n") < text.index("*raw\n")


def test_routes_point_at_the_eni_the_route_table_names_or_nowhere() -> None:
    ha = plan_ha(plan_lab(PROD, "wgl0000", ha_sites=HA))["aws-use1"]
    argv = route_targets(ha, {"10.100.0.0/16": "10.10.0.11", "192.168.50.0/24": "10.10.0.99"})
    assert ("route", "replace", "10.100.0.0/16", "via", "10.10.0.11") in argv
    assert ("route", "replace", "blackhole", "192.168.50.0/24") in argv  # an ENI of no gateway of the site
    assert ("route", "replace", "blackhole", "10.200.0.0/24") in argv  # no route in the table
    assert len(argv) == len(ha.remote_ranges)


def test_the_agent_gets_the_metadata_endpoint_and_the_lab_cloud_s_ids() -> None:
    env = "# lab\nAWS_ENDPOINT_URL=http://x:5000\nAWS_EC2_METADATA_DISABLED=true\n"
    assert (
        ha_env(env)
        == "# lab\nAWS_ENDPOINT_URL=http://x:5000\nAWS_EC2_METADATA_SERVICE_ENDPOINT=http://169.254.169.254/\n"
    )
    plan = plan_lab(HA_STACK, "wgl0000")
    a = render_artifacts(HA_STACK, plan, LabKeys.generate(HA_STACK))["aws-use1"]
    ids = {"allocation_id": "eipalloc-1", "route_table_ids": ["rtb-1"], "lease_table": "t"}
    configs = {
        letter: agent_configs({"x": ha_artifacts(HA_STACK, plan, a, letter, ids).user_data})["x"] for letter in "ab"
    }
    assert configs["b"]["ha"] == {"cloud": "aws", "gateway": "b", "allocation_id": "eipalloc-1", "lease_table": "t",
                                  "route_table_ids": ["rtb-1"], "health_port": 9181, "region": "us-east-1"}  # fmt: skip
    assert configs["a"]["ha"]["gateway"] == "a" and {**configs["a"], "ha": None} == {**configs["b"], "ha": None}


@pytest.fixture
def imds() -> Iterator[str]:
    facts = {"instance_id": "i-0b", "mac": "02:00:00:00:00:0b", "interface_id": "eni-0b", "local_ipv4": "10.0.0.11",
             "region": "us-east-1"}  # fmt: skip
    server = make_server(facts, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def request(url: str, method: str = "GET", **headers: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_imdsv2_needs_a_token_from_a_put_with_a_ttl(imds: str) -> None:
    token_url = f"{imds}/latest/api/token"
    assert request(token_url, "PUT")[0] == 400  # no TTL
    assert request(token_url, "PUT", **{"X-aws-ec2-metadata-token-ttl-seconds": "21601"})[0] == 400
    forwarded = {"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "1.2.3.4"}
    assert request(token_url, "PUT", **forwarded)[0] == 403
    status, token = request(token_url, "PUT", **{"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    assert status == 200 and token
    assert request(f"{imds}/latest/meta-data/instance-id")[0] == 401  # IMDSv1 refused
    assert request(f"{imds}/latest/meta-data/instance-id", **{"X-aws-ec2-metadata-token": "forged"})[0] == 401
    auth = {"X-aws-ec2-metadata-token": token}
    assert request(f"{imds}/latest/meta-data/instance-id", **auth) == (200, "i-0b")
    assert request(f"{imds}/latest/meta-data/mac", **auth) == (200, "02:00:00:00:00:0b")
    macs = f"{imds}/latest/meta-data/network/interfaces/macs/02:00:00:00:00:0b/interface-id"
    assert request(macs, **auth) == (200, "eni-0b")
    assert request(f"{imds}/latest/meta-data/nothing", **auth)[0] == 404
    status, _ = request(token_url, "PUT", **{"X-aws-ec2-metadata-token-ttl-seconds": "1"})
    assert status == 200


# --- on a built fabric (root) ---------------------------------------------------------------------------------

CANNOT_RUN = missing_requirements()

_MOVE = """
import sys, boto3
ec2 = boto3.client("ec2", region_name=sys.argv[2], endpoint_url=sys.argv[1], aws_access_key_id="lab",
                   aws_secret_access_key="lab")
alloc, eni, table = sys.argv[3:6]
ec2.associate_address(AllocationId=alloc, NetworkInterfaceId=eni, AllowReassociation=True)
for cidr in sys.argv[6:]:
    ec2.replace_route(RouteTableId=table, DestinationCidrBlock=cidr, NetworkInterfaceId=eni)
"""

_WHO = """
import socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 7000))
srv.listen(8)
print("listening", flush=True)
while True:
    conn, peer = srv.accept()
    conn.sendall(f"{sys.argv[1]} {peer[0]}".encode())
    conn.close()
"""

_ASK = """
import socket, sys
with socket.create_connection((sys.argv[1], 7000), timeout=2) as c:
    print(c.recv(100).decode())
"""


def _ask(node: Node, address: str) -> str:
    result = node.run([sys.executable, "-I", "-c", _ASK, address], check=False, timeout=10)
    return result.stdout.strip() if result.returncode == 0 else f"failed: {result.stderr.strip()[-200:]}"


def _imds_instance(node: Node) -> str:
    script = (
        "import urllib.request as u\n"
        "t = u.urlopen(u.Request('http://169.254.169.254/latest/api/token', method='PUT',"
        " headers={'X-aws-ec2-metadata-token-ttl-seconds': '60'}), timeout=5).read().decode()\n"
        "print(u.urlopen(u.Request('http://169.254.169.254/latest/meta-data/instance-id',"
        " headers={'X-aws-ec2-metadata-token': t}), timeout=5).read().decode())\n"
    )
    return node.run([sys.executable, "-I", "-c", script], timeout=10).stdout.strip()


def _until(check: Any, timeout: float = 5.0) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    return None


@pytest.mark.integration
@pytest.mark.skipif(bool(CANNOT_RUN), reason="; ".join(CANNOT_RUN))
def test_moving_the_eip_and_the_routes_in_moto_moves_the_nat_and_the_vpc_routes() -> None:
    plan = plan_lab(PROD, new_prefix(), ha_sites=HA)
    keys = LabKeys.generate(PROD)
    artifacts = render_artifacts(PROD, plan, keys)
    configs = live_configs(artifacts)
    state = new_state(plan.prefix, "HA fabric test")
    state.save()
    cleanup = _Cleanup(state, Console(stderr=True))
    planes: list[ControlPlane] = []
    clouds: list[HaCloud] = []
    servers: list[subprocess.Popen[str]] = []

    def hook(lab: Any) -> None:
        control_plane_hook(PROD, keys, configs, [], started=planes.append)(lab)

    try:
        lab = build(plan, artifacts, state, lambda _: None, NamespaceGateway, before_gateways=hook, start=[])
        clouds.append(HaCloud(PROD, lab, planes[0]))  # once the fabric exists, as wg_mesh.lab.drills.harun does
        clouds[0].start()
        cloud, ha = clouds[0], clouds[0].sites["aws-use1"]
        ids = cloud.ids["aws-use1"]
        nodes = {g.letter: Node(g.netns) for g in ha.gateways}
        peer = Node(plan.site("gcp-euw3").gateway_ns)  # another site's gateway, through the internet
        for letter, node in [*nodes.items(), ("peer", peer)]:
            servers.append(node.popen([sys.executable, "-I", "-u", "-c", _WHO, letter], stdout=subprocess.PIPE))
            state.track(servers[-1].pid, node.netns, "who-am-i server (test)")
            assert servers[-1].stdout is not None and "listening" in servers[-1].stdout.readline()
        peer_public = str(plan.site("gcp-euw3").public_ip)
        host = Node(ha.host_ns)
        remote = "10.100.0.5"

        def route_via() -> str:
            return host.run(["ip", "route", "get", remote], timeout=5).stdout

        # Nobody holds the EIP yet (the program allocates it unassociated); routes start on a, as created.
        assert cloud.holder("aws-use1") is None and _ask(peer, str(ha.eip)).startswith("failed")
        assert _until(lambda: "via 10.10.0.10 " in route_via()) is not None
        # Each gateway reaches out with its own public IPv4 while it does not hold the EIP.
        assert _ask(peer, str(ha.gateway("a").instance_public)).startswith("a ")
        assert _ask(nodes["b"], peer_public) == f"peer {ha.gateway('b').instance_public}"
        # Each gateway's IMDS names its own instance.
        assert {k: _imds_instance(n) for k, n in nodes.items()} == {
            k: v["instance_id"] for k, v in ids["instances"].items()
        }
        cloud_node = Node(planes[0].netns)
        cidrs = [str(c) for c in ha.remote_ranges]
        for letter in ("b", "a", "b"):
            eni = ids["instances"][letter]["interface_id"]
            cloud_node.run([sys.executable, "-c", _MOVE, AWS_ENDPOINT, "us-east-1", ids["allocation_id"], eni,
                            ids["route_table_ids"][0], *cidrs], timeout=30)  # fmt: skip
            private = ha.gateway(letter).private
            assert _until(lambda letter=letter: cloud.holder("aws-use1") == letter) is not None, cloud.events[-3:]
            assert _until(lambda private=private: f"via {private} " in route_via()) is not None, route_via()
            # A peer reaches the holder at the EIP, and the holder's own connections leave with the EIP.
            answer = _ask(peer, str(ha.eip))
            assert answer.startswith(f"{letter} "), answer
            assert _ask(nodes[letter], peer_public) == f"peer {ha.eip}"
            other = "a" if letter == "b" else "b"
            assert _ask(nodes[other], peer_public) == f"peer {ha.gateway(other).instance_public}"
        holders = {e["moves"]: e["holder"] for e in cloud.events if "holder" in e}  # each move, in order
        assert [holders[k] for k in sorted(holders)][-3:] == ["b", "a", "b"]
        assert all("error" not in e for e in cloud.events), cloud.events
    finally:
        for server in servers:
            stop(server)
        for cloud in clouds:
            cloud.stop()
        cleanup()
    assert not cleanup.problems
    assert plan.prefix not in find_labs()  # (other labs may come and go meanwhile)
    assert not [n for n in list_netns() if n.startswith(plan.prefix)]
