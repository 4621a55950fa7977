"""`gateways: 2` on GCP under mocks (docs/ha.md 6): fixtures and shared names in tests/test_program_ha.py."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ProgramRun
from tests.test_program import GCP_FIREWALL, GCP_INSTANCE, GCP_ROUTE
from tests.test_program_ha import (
    BACKEND,
    CHECK,
    COMMAND,
    CUSTOM_ROLE,
    GCP_SA,
    GCP_SUBNET,
    GROUP,
    PROJECT_IAM,
    RULE,
    SECRET_IAM,
    STACK,
    agent_json,
    ha_raw,
    run,
    sites,
)
from wg_mesh.gcp import ha as gcp_ha
from wg_mesh.plan import ha
from wg_mesh.testing.mocks import STASH


@pytest.fixture(scope="module")
def applied() -> ProgramRun:
    return run(ha_raw())


# --- GCP -------------------------------------------------------------------------------------


def test_gcp_runs_two_vms_in_two_zones_with_an_account_each(applied: ProgramRun) -> None:
    _, gcp = sites(applied)
    a, b = (applied.vm(GCP_INSTANCE, f"{gcp.name}{s}") for s in ("", "-b"))
    assert (a.inputs["zone"], b.inputs["zone"]) == ("europe-west3-a", "europe-west3-b")
    assert a.inputs["canIpForward"] is True and b.inputs["canIpForward"] is True
    for key in ("machineType", "bootDisk", "tags", "networkInterfaces", "shieldedInstanceConfig"):
        assert a.inputs[key] == b.inputs[key], key
    accounts = {applied.named(GCP_SA, f"{gcp.name}{s}-sa").outputs["email"] for s in ("", "-b")}
    assert {a.inputs["serviceAccount"]["email"], b.inputs["serviceAccount"]["email"]} == accounts
    assert len(accounts) == 2
    ua, ub = a.inputs["metadata"]["user-data"], b.inputs["metadata"]["user-data"]
    assert ua != ub and ua.replace('"gateway": "a"', '"gateway": "b"') == ub
    address = applied.named("gcp:compute/address:Address", f"{gcp.name}-address")
    assert address.outputs["name"].startswith(f"{gcp.name}-address-")  # the mocks auto-name as Pulumi does
    names = ha.ha_names("wg-mesh", STACK, gcp.name)
    assert agent_json(ua)["ha"] == {
        "cloud": "gcp",
        "gateway": "a",
        "health_port": ha.HEALTH_PORT,
        "project": "my-project",
        "region": "europe-west3",
        "address": address.outputs["name"],
        "address_ip": address.outputs["address"],
        "backend_service": names.backend_service,
        "groups": {
            "a": {"zone": "europe-west3-a", "name": names.groups["a"]},
            "b": {"zone": "europe-west3-b", "name": names.groups["b"]},
        },
    }
    assert not applied.of_type(STASH)  # a written standby_zone is used as written (no stash: tests/..._placement.py)
    assert applied.depends_on(GCP_INSTANCE, b.name, COMMAND, f"{gcp.name}-ready")
    for gate in (f"{gcp.name}-ready", f"{gcp.name}-b-ready"):  # the gates wait, the agents move the address
        assert "--wait-only" in applied.named(COMMAND, gate).inputs["create"]


def test_gcp_standby_zone_defaults_to_the_next_zone() -> None:
    raw = ha_raw()
    (site,) = [s for s in raw["sites"] if s["cloud"] == "gcp"]
    del site["standby_zone"]
    done = run(raw)
    b = done.vm(GCP_INSTANCE, f"{site['name']}-b")
    assert b.inputs["zone"] == "europe-west3-b"  # the mocks list -c, -a, -b: next after -a by letter
    assert ha.next_zone("europe-west3-c", ["europe-west3-a", "europe-west3-c"]) == "europe-west3-a"
    with pytest.raises(ValueError, match="set standby_zone"):
        ha.next_zone("europe-west3-a", ["europe-west3-a"])


def test_gcp_load_balancer_fails_over_to_b(applied: ProgramRun) -> None:
    _, gcp = sites(applied)
    names = ha.ha_names("wg-mesh", STACK, gcp.name)
    groups = [applied.named(GROUP, f"{gcp.name}{s}-ig") for s in ("", "-b")]
    for group, letter in zip(groups, "ab", strict=True):
        instance = applied.vm(GCP_INSTANCE, f"{gcp.name}{'' if letter == 'a' else '-b'}")
        assert group.inputs["instances"] == [instance.outputs["selfLink"]]
        assert group.inputs["name"] == names.groups[letter] and group.inputs["zone"] == instance.inputs["zone"]
        # a (new) VM becomes a backend only once its readiness gate passed (issue 21)
        gate = f"{gcp.name}{'' if letter == 'a' else '-b'}-ready"
        assert applied.depends_on(GROUP, group.name, COMMAND, gate), (group.name, gate)
    check = applied.named(CHECK, f"{gcp.name}-hc")
    assert {
        k: check.inputs[k] for k in ("checkIntervalSec", "timeoutSec", "unhealthyThreshold", "healthyThreshold")
    } == {
        "checkIntervalSec": 1,
        "timeoutSec": 1,
        "unhealthyThreshold": 2,
        "healthyThreshold": 1,
    }
    assert check.inputs["httpHealthCheck"] == {"port": 9181, "requestPath": "/healthz"}
    backend = applied.named(BACKEND, f"{gcp.name}-bs")
    assert backend.inputs["loadBalancingScheme"] == "INTERNAL" and backend.inputs["protocol"] == "UNSPECIFIED"
    assert backend.inputs["healthChecks"] == check.id
    assert backend.inputs["backends"] == [
        {"group": groups[0].outputs["selfLink"], "balancingMode": "CONNECTION", "failover": False},
        {"group": groups[1].outputs["selfLink"], "balancingMode": "CONNECTION", "failover": True},
    ]
    assert backend.inputs["failoverPolicy"] == {
        "failoverRatio": 0,
        "dropTrafficIfUnhealthy": True,
        "disableConnectionDrainOnFailover": True,
    }
    assert backend.inputs["connectionTrackingPolicy"] == {"connectionPersistenceOnUnhealthyBackends": "NEVER_PERSIST"}
    rule = applied.named(RULE, f"{gcp.name}-fr")
    assert (rule.inputs["ipProtocol"], rule.inputs["allPorts"], rule.inputs["loadBalancingScheme"]) == (
        "L3_DEFAULT",
        True,
        "INTERNAL",
    )
    assert rule.inputs["backendService"] == backend.id
    assert rule.inputs["allowGlobalAccess"] is True  # the routes are global: workloads of every region use them
    routes = [r for r in applied.of_type(GCP_ROUTE) if r.name.startswith(f"{gcp.name}-to-")]
    assert routes
    for route in routes:
        assert route.inputs["nextHopIlb"] == rule.outputs["selfLink"] and "nextHopInstance" not in route.inputs
        assert route.inputs["priority"] == 900
    subnet = applied.named(GCP_SUBNET, f"{gcp.name}-subnet")
    assert subnet.inputs["privateIpGoogleAccess"] is True


def test_gcp_probers_reach_only_the_health_port_of_the_gateways(applied: ProgramRun) -> None:
    _, gcp = sites(applied)
    rule = applied.named(GCP_FIREWALL, f"{gcp.name}-fw-health")
    assert sorted(rule.inputs["sourceRanges"]) == ["130.211.0.0/22", "35.191.0.0/16"]
    assert rule.inputs["allows"] == [{"protocol": "tcp", "ports": ["9181"]}]
    wireguard = applied.named(GCP_FIREWALL, f"{gcp.name}-fw-wireguard")
    assert rule.inputs["targetTags"] == wireguard.inputs["targetTags"]  # the gateways' tag
    # Path-MTU ICMP comes from either gateway.
    pmtu = applied.named(GCP_FIREWALL, f"{gcp.name}-fw-pmtu")
    ips = {
        f"{applied.vm(GCP_INSTANCE, f'{gcp.name}{s}').outputs['networkInterfaces'][0]['networkIp']}/32"
        for s in ("", "-b")
    }
    assert set(pmtu.inputs["sourceRanges"]) == ips


def test_gcp_both_accounts_read_the_key_and_the_document_and_nothing_else(applied: ProgramRun) -> None:
    """Both gateways read the site's one document secret (a VM's metadata would reach one VM only: an old pair being
    retired, `gateways: 2` -> 1, never saw the document that stands it down) and its one key secret."""
    _, gcp = sites(applied)
    secrets = {applied.named("gcp:secretmanager/secret:Secret", f"{gcp.name}-{s}-secret").id for s in ("key", "peers")}
    members = {f"serviceAccount:{applied.named(GCP_SA, f'{gcp.name}{s}-sa').outputs['email']}" for s in ("", "-b")}
    bindings = applied.of_type(SECRET_IAM)
    assert {(b.inputs["member"], b.inputs["secretId"]) for b in bindings} == {(m, s) for m in members for s in secrets}
    assert len(bindings) == 4 and {b.inputs["role"] for b in bindings} == {"roles/secretmanager.secretAccessor"}
    for suffix in ("", "-b"):  # the first boot reads the key and the document with the bindings in place
        vm = applied.vm(GCP_INSTANCE, f"{gcp.name}{suffix}").name
        for store in ("key", "peers"):
            accessor = f"{gcp.name}{suffix}-{store}-accessor"
            assert applied.depends_on(GCP_INSTANCE, vm, SECRET_IAM, accessor), accessor
    # Their only other grant: the agent's custom role, conditioned on the site's own resources.
    (role,) = applied.of_type(CUSTOM_ROLE)
    assert re.fullmatch(r"wgMeshHa_[0-9a-f]{8}_gcp_euw3_[0-9a-z]{6}", role.inputs["roleId"]), role.inputs["roleId"]
    assert "compute.instances.addAccessConfig" in role.inputs["permissions"]
    assert not any(p.startswith(("compute.routes.", "iam.", "resourcemanager.")) for p in role.inputs["permissions"])
    project = applied.of_type(PROJECT_IAM)
    assert {b.inputs["member"] for b in project} == members and len(project) == 2
    for binding in project:
        assert binding.inputs["role"] == role.outputs["name"]
        expression = binding.inputs["condition"]["expression"]
        for suffix in ("", "-b"):  # each VM by its name's prefix: a replacement's too, so the binding never changes
            instance = applied.vm(GCP_INSTANCE, f"{gcp.name}{suffix}")
            prefix = f"projects/my-project/zones/{instance.inputs['zone']}/instances/{instance.name}-"
            assert f'resource.name.startsWith("{prefix}")' in expression, (prefix, expression)
        assert set(re.findall(r'resource\.type [!=]= "([^"]+)"', expression)) <= gcp_ha.DOCUMENTED_RESOURCE_TYPES
