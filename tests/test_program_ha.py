"""`gateways: 2` under mocks (issue 11, docs/ha.md 5-6): the second gateway, what the pair shares, what the agents
may do, and what Pulumi must not do (move the address or the routes back). Failover itself is the agent's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, ProgramRun, Recorded, run_program
from tests.signed import verified_body
from tests.test_program import (
    AWS_INSTANCE,
    GCP_FIREWALL,
    GCP_INSTANCE,
    GCP_ROUTE,
    mesh_of,
    user_data_input,
)
from tests.test_program_live import GCP_SECRET, GCP_SECRET_VERSION, SM_SECRET, SM_VERSION, day_two, stored_document
from wg_mesh.config import AwsSite, GcpSite
from wg_mesh.tools.stackfile import read_raw

HA_STACK = REPO / "Pulumi.ha.yaml"
STACK = "ha"
EIP_ASSOC = "aws:ec2/eipAssociation:EipAssociation"
TABLE = "aws:dynamodb/table:Table"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
EC2_TAG = "aws:ec2/tag:Tag"
SUBNET = "aws:ec2/subnet:Subnet"
GCP_SUBNET = "gcp:compute/subnetwork:Subnetwork"
GROUP = "gcp:compute/instanceGroup:InstanceGroup"
CHECK = "gcp:compute/regionHealthCheck:RegionHealthCheck"
BACKEND = "gcp:compute/regionBackendService:RegionBackendService"
RULE = "gcp:compute/forwardingRule:ForwardingRule"
GCP_SA = "gcp:serviceaccount/account:Account"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
COMMAND = "command:local:Command"


def ha_raw() -> dict[str, Any]:
    raw = read_raw(HA_STACK)
    assert isinstance(raw, dict)
    return raw


def single(raw: dict[str, Any]) -> dict[str, Any]:
    """The same stack with one gateway per site: what a site looked like before `gateways: 2`."""
    raw = copy.deepcopy(raw)
    for site in raw["sites"]:
        for key in ("gateways", "standby_zone", "standby_subnet_id"):
            site.pop(key, None)
    return raw


def run(raw: dict[str, Any]) -> ProgramRun:
    done = run_program(raw, preview=False, stack=STACK)
    assert done.error is None, done.error
    return done


@pytest.fixture(scope="module")
def applied() -> ProgramRun:
    return run(ha_raw())


@pytest.fixture(scope="module")
def one_gateway() -> ProgramRun:
    return run(single(ha_raw()))


def sites(run: ProgramRun) -> tuple[AwsSite, GcpSite]:
    cfg = mesh_of(run)
    (aws,) = [s for s in cfg.sites if isinstance(s, AwsSite)]
    (gcp,) = [s for s in cfg.sites if isinstance(s, GcpSite)]
    assert aws.gateways == gcp.gateways == 2
    return aws, gcp


def agent_json(user_data: str) -> dict[str, Any]:
    import yaml

    (config,) = [f for f in yaml.safe_load(user_data)["write_files"] if f["path"] == "/etc/wg-mesh/agent.json"]
    loaded = json.loads(config["content"])
    assert isinstance(loaded, dict)
    return loaded


# --- both clouds ------------------------------------------------------------------------------


def test_the_stack_exports_both_gateways_private_addresses(applied: ProgramRun) -> None:
    aws, gcp = sites(applied)
    out = applied.exports["ha_gateways"]
    assert not out.secret
    assert set(out.value) == {aws.name, gcp.name}
    assert set(out.value[aws.name]) == {"a", "b"} and set(out.value[gcp.name]) == {"a", "b"}
    assert out.value[gcp.name]["a"] == applied.vm(GCP_INSTANCE, gcp.name).outputs["networkInterfaces"][0]["networkIp"]


def test_one_gateway_exports_no_ha_addresses(one_gateway: ProgramRun) -> None:
    assert "ha_gateways" not in one_gateway.exports


def comparable(resource: Recorded) -> dict[str, Any]:
    inputs = copy.deepcopy(resource.inputs)
    for key in ("userDataBase64",):
        inputs.pop(key, None)
    if "metadata" in inputs:
        inputs["metadata"].pop("user-data", None)
    return inputs


def test_adding_the_standby_keeps_every_resource_of_gateway_a(applied: ProgramRun, one_gateway: ProgramRun) -> None:
    """1 -> 2 renames nothing and changes nothing of gateway a but its instance's user data (agent.json gains the
    `ha` object; cloud-init reads it once, so the instance is replaced: create-before-delete, and the new pair's
    takeover makes it a planned handover). Removed: the EipAssociation (AWS) only; GCP routes get the ILB next hop;
    the document no longer says `gateways: 1` (a new version and serial; test_going_back_to_one_gateway_...)."""
    before = {(r.type, r.name): r for r in one_gateway.resources}
    after = {(r.type, r.name): r for r in applied.resources}
    # what the engine follows: a resource by its aliases (GCP's VM a carries the stack's scope with gateways: 2)
    after |= {(r.type, alias): r for r in applied.resources for alias in applied.options(r.type, r.name).aliases}
    removed = set(before) - set(after)
    assert {t for t, _ in removed} == {EIP_ASSOC}
    changed = []
    for key, old in before.items():
        if key not in after:
            continue
        new = after[key]
        if old.inputs == new.inputs:
            continue
        changed.append(key)
    aws, gcp = sites(applied)
    # What may change, and why: the instances' user data (the ha object) and so their floors (wg_mesh.tools.serial),
    # the gates' command lines (GCP: --wait-only), the GCP routes' next hop (the load balancer), the ICMP rule's
    # sources (both gateways), Private Google Access.
    allowed = {
        (AWS_INSTANCE, f"{aws.name}-instance"),
        (GCP_INSTANCE, f"{gcp.name}-instance"),
        (COMMAND, f"{aws.name}-floor"),
        (COMMAND, f"{gcp.name}-floor"),
        (COMMAND, f"{gcp.name}-ready"),
        (GCP_FIREWALL, f"{gcp.name}-fw-pmtu"),
        (GCP_SUBNET, f"{gcp.name}-subnet"),
        *((GCP_ROUTE, r.name) for r in applied.of_type(GCP_ROUTE)),
        (SM_VERSION, f"{aws.name}-peers-version"),
        (GCP_SECRET_VERSION, f"{gcp.name}-peers-version"),
        *((COMMAND, f"{s.name}-serial") for s in (aws, gcp)),
    }
    assert set(changed) <= allowed, sorted(set(changed) - allowed)
    for typ in (AWS_INSTANCE, GCP_INSTANCE):
        (name,) = [n for t, n in allowed if t == typ]
        assert comparable(before[(typ, name)]) == comparable(after[(typ, name)]), name
    # The public address, the key, the AWS routes: the same resources with the same inputs.
    for typ, name in (
        ("aws:ec2/eip:Eip", f"{aws.name}-eip"),
        ("gcp:compute/address:Address", f"{gcp.name}-address"),
        *(
            ("random:index/randomBytes:RandomBytes", r.name)
            for r in one_gateway.of_type("random:index/randomBytes:RandomBytes")
        ),
    ):
        assert (typ, name) in before and before[(typ, name)].inputs == after[(typ, name)].inputs


def test_going_back_to_one_gateway_tells_the_old_pair_to_stand_down(
    applied: ProgramRun, one_gateway: ProgramRun
) -> None:
    """Issue 32 item 2, the program's part of `gateways: 2` -> 1. The old pair runs until Pulumi deletes it, last,
    and its agents took the address and routes back from the new gateway within a second. In that `up` the store
    both of its agents read (the same secret for a and b: their agent.json) gets the site's document saying
    `gateways: 1`, signed like every document: they stand down (wg_mesh.gateway.ha) long before the new gateway's
    readiness gate lets Pulumi move the address and routes. A pair's own documents never say it (an agent of before
    the field would refuse it), and the field can make an agent write less, never claim."""
    aws, gcp = sites(applied)
    for site in (aws, gcp):
        typ = AWS_INSTANCE if site is aws else GCP_INSTANCE
        pair = [agent_json(user_data_input(applied.vm(typ, f"{site.name}{s}"))) for s in ("", "-b")]
        assert pair[0]["source"] == pair[1]["source"] and pair[0]["trust"] == pair[1]["trust"]
        trust, source = pair[0]["trust"], pair[0]["source"]
        assert "gateways" not in verified_body(stored_document(applied, site), trust)
        single = mesh_of(one_gateway).site(site.name)
        assert verified_body(stored_document(one_gateway, single), trust)["gateways"] == 1  # what the pair reads
        if site is aws:  # ... from the store the pair's agent.json names
            assert one_gateway.named(SM_SECRET, f"{site.name}-peers").inputs["name"] == source["document_secret"]
        else:
            secret = one_gateway.named(GCP_SECRET, f"{site.name}-peers-secret").inputs["secretId"]
            assert source["document_secret"] == f"projects/{site.project}/secrets/{secret}/versions/latest"
        assert one_gateway.named(SM_VERSION if site is aws else GCP_SECRET_VERSION, f"{site.name}-peers-version")


def test_a_mesh_change_leaves_both_gateways_inputs_byte_identical(applied: ProgramRun) -> None:
    """Live delivery's invariant for gateway b too: a peer change (new sites, rotated keys) reaches the stores only."""
    changed = run(day_two(ha_raw()))
    for site in sites(applied):
        for suffix in ("", "-b"):
            typ = AWS_INSTANCE if isinstance(site, AwsSite) else GCP_INSTANCE
            old, new = (r.vm(typ, f"{site.name}{suffix}") for r in (applied, changed))
            assert old.inputs == new.inputs, old.name  # (GCP's document: a secret both VMs read)


def test_no_key_material_in_any_public_input_or_output(applied: ProgramRun) -> None:
    keys = applied.private_keys()
    from tests.test_program import strings_in

    public: list[tuple[str, Any]] = [(f"{r.type} {r.name}", r.public_inputs()) for r in applied.resources]
    public += [
        (f"{r.type} {r.name} outputs", r.outputs)
        for r in applied.resources
        if r.type != "random:index/randomBytes:RandomBytes"
    ]
    public += [(f"stack output {k}", v.value) for k, v in applied.exports.items() if not v.secret]
    for where, value in public:
        for text in strings_in(value):
            assert not any(key in text for key in keys), f"key material in {where}"


def test_the_ha_stack_file_is_one_of_the_stacks(tmp_path: Path) -> None:
    assert HA_STACK.exists()
    raw = ha_raw()
    assert raw["delivery"] == "live"
    assert [s.get("gateways") for s in raw["sites"] if s["cloud"] in ("aws", "gcp")] == [2, 2]
