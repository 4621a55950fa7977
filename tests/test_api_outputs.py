"""A user's program giving the mesh Outputs of its own resources (issue 23 item 6): the existing networks' ids and a
static site's endpoint, under Pulumi's mocks (wg_mesh.testing). Two whole-program runs in all: one whose Outputs are
used as given, one whose endpoint's value turns out invalid when it is known (a readable MeshConfigError, as the stack
file would get). An Output in a key that must be known when the program runs is refused without a run (tests below)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.test_api import Later, problems
from wg_mesh.args import to_config
from wg_mesh.config import Deferred, MeshConfig, StaticSite
from wg_mesh.static import EndpointError, endpoint_problems
from wg_mesh.testing import ProgramRun, execute, new_run
from wg_mesh.tools.stackfile import read_raw

VPC, SUBNET = "vpc-0123456789abcdef0", "subnet-0123456789abcdef0"
TABLES = ["rtb-0aaaaaaaaaaaaaaa1", "rtb-0aaaaaaaaaaaaaaa2"]
NETWORK, SUBNETWORK, ENDPOINT = "user-vpc", "user-euw3", "198.51.100.20"


def prod_raw() -> dict[str, Any]:
    raw = read_raw(REPO / "Pulumi.prod.yaml")
    assert isinstance(raw, dict)
    return copy.deepcopy(raw)


def run_with_outputs(tmp_path: Path, endpoint: str) -> ProgramRun:
    """prod's three sites, every deploy-time key an Output (`.apply`: an Output the way a resource's attribute is)."""
    program = tmp_path / "__main__.py"
    program.write_text(
        "import json, pulumi\nfrom wg_mesh import Mesh\n"
        "def out(value):\n    return pulumi.Output.from_input(value).apply(lambda v: v)\n"
        f"raw = json.loads({json.dumps(json.dumps(prod_raw()))})\n"
        "aws, gcp, static = raw['sites']\n"
        f"aws.update(vpc_id=out({VPC!r}), subnet_id=out({SUBNET!r}), route_table_ids=[out(t) for t in {TABLES!r}])\n"
        f"gcp.update(network=out({NETWORK!r}), subnetwork=out({SUBNETWORK!r}))\n"
        f"static['endpoint'] = out({endpoint!r})\n"
        "mesh = Mesh('mesh', raw)\npulumi.export('public_ips', mesh.public_ips)\n"
    )
    return execute(new_run(preview=False), program, {}, project="user")


@pytest.fixture(scope="module")
def with_outputs(tmp_path_factory: pytest.TempPathFactory) -> ProgramRun:
    return run_with_outputs(tmp_path_factory.mktemp("outputs"), ENDPOINT)


def test_the_existing_networks_outputs_reach_the_resources(with_outputs: ProgramRun) -> None:
    run = with_outputs
    assert run.error is None, run.error
    assert run.named("aws:ec2/securityGroup:SecurityGroup", "aws-use1-sg").inputs["vpcId"] == VPC
    assert run.named("aws:ec2/instance:Instance", "aws-use1-instance").inputs["subnetId"] == SUBNET
    routes = run.of_type("aws:ec2/route:Route")
    assert {r.inputs["routeTableId"] for r in routes} == set(TABLES)
    assert not run.of_type("aws:ec2/vpc:Vpc") and not run.of_type("gcp:compute/network:Network")
    nic = run.named("gcp:compute/instance:Instance", "gcp-euw3-instance").inputs["networkInterfaces"][0]
    assert (nic["network"], nic["subnetwork"]) == (NETWORK, SUBNETWORK)


def test_a_static_endpoint_output_is_the_sites_address_everywhere(with_outputs: ProgramRun) -> None:
    """The peers' firewalls admit it and the mesh publishes it; the prod file's own address is nowhere."""
    run = with_outputs
    assert run.error is None, run.error
    assert run.exports["public_ips"].value["vps-fra"] == ENDPOINT
    sg = run.named("aws:ec2/securityGroup:SecurityGroup", "aws-use1-sg")
    udp = next(rule for rule in sg.inputs["ingress"] if rule["protocol"] == "udp")
    assert f"{ENDPOINT}/32" in udp["cidrBlocks"]
    firewall = run.named("gcp:compute/firewall:Firewall", "gcp-euw3-fw-wireguard")
    assert f"{ENDPOINT}/32" in firewall.inputs["sourceRanges"]
    assert "203.0.113.7" not in json.dumps([r.inputs for r in run.resources], default=str)


def test_an_invalid_endpoint_output_fails_the_run_with_the_stack_files_message(tmp_path: Path) -> None:
    """Inside the AWS site's cidrs: a routing loop, refused as a stack file's endpoint is (one line, field path first);
    before this, an Output endpoint was refused as "<pulumi.output.Output object at 0x...> is not an IPv4 address"."""
    run = run_with_outputs(tmp_path, "10.10.3.4")
    assert isinstance(run.error, EndpointError), run.error
    assert run.error.problems == [
        "sites[2].endpoint: 10.10.3.4 is in 10.0.0.0/8, private (RFC 1918): peers reach an endpoint over the internet"
    ]


# --- without a run: the model's side and the deploy-time check ----------------------------------------------------


def test_an_endpoint_output_is_carried_and_checked_when_known() -> None:
    raw = prod_raw()
    raw["sites"][2]["endpoint"] = Later(ENDPOINT)
    cfg = to_config(raw)
    site = cfg.sites[2]
    assert isinstance(site, StaticSite) and isinstance(site.endpoint, Deferred)
    assert endpoint_problems(cfg, "vps-fra", ENDPOINT) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not-an-ip", "sites[2].endpoint: the Output's value 'not-an-ip' is not an IPv4 address"),
        (None, "sites[2].endpoint: the Output's value None is not an IPv4 address"),
        ("127.0.0.1", "sites[2].endpoint: 127.0.0.1 is special-purpose"),
        ("10.200.0.9", "sites[2].endpoint: 10.200.0.9 is in 10.0.0.0/8"),
    ],
)
def test_the_deploy_time_check_says_what_the_model_would(value: Any, expected: str) -> None:
    raw = prod_raw()
    raw["sites"][2]["endpoint"] = Later(ENDPOINT)
    found = endpoint_problems(to_config(raw), "vps-fra", value)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_the_deploy_time_check_finds_the_mesh_wide_problems() -> None:
    """An endpoint inside another site's (public) cidrs, or another static site's endpoint: as parse_mesh says."""
    raw = prod_raw()
    raw["sites"][1]["cidrs"] = ["10.100.0.0/16", "198.51.100.0/24"]
    second = {"name": "vps-ams", "overlay_ip": "10.200.0.4", "cidrs": ["192.168.60.0/24"]}
    raw["sites"].append({**raw["sites"][2], **second})
    raw["sites"][2]["endpoint"] = Later(ENDPOINT)
    cfg: MeshConfig = to_config(raw)
    assert endpoint_problems(cfg, "vps-fra", "203.0.113.7") == [
        "sites[2].endpoint: 203.0.113.7 is already the endpoint of sites[3]"
    ]
    plain = prod_raw()
    plain["sites"][1]["cidrs"] = ["10.100.0.0/16", "198.51.100.0/24"]
    plain["sites"][2]["endpoint"] = ENDPOINT
    expected = problems(lambda: to_config(plain))
    assert endpoint_problems(to_config({**raw, "sites": raw["sites"][:3]}), "vps-fra", ENDPOINT) == expected


@pytest.mark.parametrize(
    ("place", "path"),
    [
        (lambda raw: raw["sites"][0].update(region=Later("us-east-1")), "sites[0].region"),
        (lambda raw: raw["sites"][1].update(cidrs=[Later("10.100.0.0/16")]), "sites[1].cidrs[0]"),
        (lambda raw: raw["sites"][0].update(route_table_ids=Later(["rtb-0123abcd"])), "sites[0].route_table_ids"),
        (lambda raw: raw.update(listen_port=Later(51820)), "listen_port"),
        (lambda raw: raw.update(private_paths=[{"name": Later("p"), "sites": ["aws-use1", "vps-fra"]}]),
         "private_paths[0].name"),
    ],
)  # fmt: skip
def test_an_output_where_none_can_go_is_one_readable_problem(place: Any, path: str) -> None:
    """Before: "expected a string, got Later <tests.test_api.Later object at 0x...>" (an Output's: Pulumi's warning
    text as the value). Now one line naming the key and where to read which keys take an Output; nothing else about
    that key."""
    raw = prod_raw()
    place(raw)
    found = problems(lambda: to_config(raw))
    assert found[0] == (
        f"{path}: given an Output, but it must be known when the program runs (it decides which resources exist, "
        "what they are named and what is rendered); docs/how-to/component-inputs.md lists the keys that take one"
    )
    assert not [p for p in found[1:] if p.startswith(path)], found
    assert "object at 0x" not in " ".join(found)
