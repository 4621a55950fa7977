"""A hostile review of the keys added since the first one (issue 21 item 6): each rule a cloud enforces (or a
misroute), both ways: the boundary value accepted, one past it refused with one field-path line. Pure: the config
model and its limits (user data sizes included), no Pulumi."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from wg_mesh.config import ConfigError, MeshConfig, quotas
from wg_mesh.plan.validate import load_mesh

AWS = {"name": "aws-use1", "cloud": "aws", "region": "us-east-1", "overlay_ip": "10.200.0.1", "cidrs": ["10.10.0.0/16"]}
GCP = {
    "name": "gcp-euw3", "cloud": "gcp", "project": "my-project", "region": "europe-west3", "zone": "europe-west3-a",
    "overlay_ip": "10.200.0.2", "cidrs": ["10.100.0.0/16"], "underlay_mtu": 8896,
}  # fmt: skip
VPS = {"name": "vps-fra", "cloud": "static", "endpoint": "203.0.113.7", "overlay_ip": "10.200.0.3",
       "cidrs": ["192.168.50.0/24"], "private_ip": "10.60.0.5", "underlay_mtu": 9000}  # fmt: skip
EXISTING_AWS = {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d", "route_table_ids": ["rtb-0a1b2c3d"]}
EXISTING_GCP = {"network": "net", "subnetwork": "subnet"}


def mesh(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "overlay_cidr": "10.200.0.0/24",
        "delivery": "live",
        "sites": [copy.deepcopy(AWS), copy.deepcopy(GCP), copy.deepcopy(VPS)],
        "private_paths": [{"name": "core", "sites": ["aws-use1", "gcp-euw3", "vps-fra"], "mtu": 8896}],
    }
    raw.update(changes)
    return raw


def site(raw: dict[str, Any], i: int, **fields: Any) -> dict[str, Any]:
    raw["sites"][i].update(fields)
    return raw


def accepted(raw: dict[str, Any]) -> MeshConfig:
    """Valid, quotas included (wg_mesh.config.quotas, as load_mesh checks them), without rendering user data (slow)."""
    cfg = load_mesh(raw, check_limits=False)
    assert quotas.problems(cfg) == []
    return cfg


def refused(raw: dict[str, Any]) -> list[str]:
    try:
        cfg = load_mesh(raw, check_limits=False)
    except ConfigError as err:
        problems = err.problems
    else:
        problems = ConfigError(quotas.problems(cfg)).problems
    assert problems
    for line in problems:  # one line each, a field path first
        assert "\n" not in line and re.match(r"^[a-z_]+(\[\d+\])?(\.[a-z_]+(\[\d+\])?)*: ", line), line
    return problems


def one(raw: dict[str, Any], *parts: str) -> str:
    problems = refused(raw)
    assert len(problems) == 1, problems
    assert all(part in problems[0] for part in parts), problems
    return problems[0]


def test_the_base_mesh_is_valid() -> None:
    accepted(mesh())


# --- private paths: a gateway's private address ------------------------------------------------------------------


@pytest.mark.parametrize(("ip", "ok"), [("10.10.0.3", False), ("10.10.0.4", True), ("10.10.0.254", True),
                                        ("10.10.0.255", False), ("10.10.0.0", False)])  # fmt: skip
def test_aws_reserved_addresses_of_the_created_gateway_subnet(ip: str, ok: bool) -> None:
    raw = site(mesh(), 0, private_ip=ip)
    if ok:
        accepted(raw)
    else:
        one(raw, "sites[0].private_ip:", f"{ip} is a reserved address of 10.10.0.0/24", "AWS reserves")


@pytest.mark.parametrize(("ip", "ok"), [("10.100.0.1", False), ("10.100.0.2", True), ("10.100.0.253", True),
                                        ("10.100.0.254", False), ("10.100.0.255", False)])  # fmt: skip
def test_gcp_reserved_addresses_of_the_created_gateway_subnet(ip: str, ok: bool) -> None:
    raw = site(mesh(), 1, private_ip=ip)
    if ok:
        accepted(raw)
    else:
        one(raw, "sites[1].private_ip:", "is a reserved address of 10.100.0.0/24", "GCP reserves")


@pytest.mark.parametrize(("ip", "ok"), [("10.10.0.3", False), ("10.10.0.4", True), ("10.10.255.254", True),
                                        ("10.10.255.255", False)])  # fmt: skip
def test_aws_reserved_addresses_at_the_ends_of_an_existing_networks_cidr(ip: str, ok: bool) -> None:
    raw = site(mesh(), 0, private_ip=ip, **EXISTING_AWS)
    if ok:
        accepted(raw)
    else:
        one(raw, "sites[0].private_ip:", "of 10.10.0.0/16")


@pytest.mark.parametrize(("ip", "ok"), [("10.100.0.1", False), ("10.100.0.2", True), ("10.100.255.253", True),
                                        ("10.100.255.254", False)])  # fmt: skip
def test_gcp_reserved_addresses_at_the_ends_of_an_existing_networks_cidr(ip: str, ok: bool) -> None:
    raw = site(mesh(), 1, private_ip=ip, **EXISTING_GCP)
    if ok:
        accepted(raw)
    else:
        one(raw, "sites[1].private_ip:", "of 10.100.0.0/16")


@pytest.mark.parametrize(("ip", "why"), [("127.0.0.1", "loopback"), ("169.254.169.254", "link-local"),
                                         ("224.0.0.5", "multicast")])  # fmt: skip
def test_a_static_private_address_is_not_special_purpose(ip: str, why: str) -> None:
    one(site(mesh(), 2, private_ip=ip), "sites[2].private_ip:", why)


def test_a_static_private_address_is_not_inside_another_sites_network() -> None:
    one(site(mesh(), 2, private_ip="10.10.7.7"), "sites[2].private_ip:", "inside sites[0] (aws-use1)'s 10.10.0.0/16")
    accepted(site(mesh(), 2, private_ip="192.168.50.9"))  # its own network: the host route keeps it off wg0


def test_two_static_sites_cannot_share_a_private_address() -> None:
    raw = mesh()
    raw["sites"].append({**VPS, "name": "vps-ams", "endpoint": "203.0.113.8", "overlay_ip": "10.200.0.4",
                         "cidrs": ["192.168.60.0/24"]})  # fmt: skip
    raw["private_paths"][0]["sites"].append("vps-ams")
    one(raw, "sites[3].private_ip: 10.60.0.5 is already the private address of sites[2]")
    raw["sites"][3]["private_ip"] = "10.60.0.6"
    accepted(raw)


# --- the internet tunnel's MTU -----------------------------------------------------------------------------------


def test_an_explicit_mtu_is_at_most_what_the_internet_carries() -> None:
    raw = mesh()
    for s in raw["sites"]:
        s["underlay_mtu"] = 8896  # jumbo everywhere: the internet still carries 1500
    assert accepted({**raw, "mtu": 1440}).mtu == 1440
    one({**raw, "mtu": 1441}, "mtu: 1441 is neither 'auto' nor an integer in 1280..1440", "private_paths[].mtu")


# --- credentials ---------------------------------------------------------------------------------------------------


def test_account_id_is_the_assumed_roles_account() -> None:
    role = "arn:aws:iam::123456789012:role/deployer"
    accepted(site(mesh(), 0, assume_role_arn=role, account_id="123456789012"))
    one(site(mesh(), 0, assume_role_arn=role, account_id="210987654321"), "sites[0].account_id: 210987654321",
        "(123456789012)")  # fmt: skip


@pytest.mark.parametrize(
    "email",
    [
        "123456789012-compute@developer.gserviceaccount.com",  # the Compute Engine default: the false refusal fixed
        "my-project@appspot.gserviceaccount.com",
        "workloads@my-project.iam.gserviceaccount.com",
    ],
)
def test_every_kind_of_service_account_is_a_workload_target_and_can_be_impersonated(email: str) -> None:
    accepted(site(mesh(), 1, workload_service_accounts=[email]))
    accepted(site(mesh(), 1, impersonate_service_account=email))


NOT_SERVICE_ACCOUNTS = [
    "compute@developer.gserviceaccount.com",
    "x@my-project.iam.gserviceaccount.com",
    "12-compute@developer.gserviceaccount.com.evil",
    "Me@appspot.gserviceaccount.com",
]


@pytest.mark.parametrize("email", NOT_SERVICE_ACCOUNTS)
def test_what_is_not_a_service_account_is_refused(email: str) -> None:
    one(site(mesh(), 1, workload_service_accounts=[email]), "sites[1].workload_service_accounts:", "not a service")
    one(site(mesh(), 1, impersonate_service_account=email), "sites[1].impersonate_service_account:", "not a service")


# --- quotas ----------------------------------------------------------------------------------------------------------


def many_static(n: int, cidrs_each: int = 1) -> list[dict[str, Any]]:
    """n static sites, each with its own endpoint, overlay address and cidrs."""
    nets = iter(f"172.{16 + k // 256}.{k % 256}.0/24" for k in range(4096))
    return [
        {"name": f"vps-{k}", "cloud": "static", "endpoint": f"198.51.{100 + k // 250}.{1 + k % 250}",
         "overlay_ip": f"10.201.{k // 250}.{1 + k % 250}", "cidrs": [next(nets) for _ in range(cidrs_each)]}
        for k in range(n)
    ]  # fmt: skip


def quota_mesh(peers: int, cidrs_each: int = 1, **aws: Any) -> dict[str, Any]:
    return {"overlay_cidr": "10.201.0.0/16", "sites": [{**AWS, "overlay_ip": "10.201.200.1", **aws},
                                                       *many_static(peers, cidrs_each)]}  # fmt: skip


def test_security_group_rules_both_ways() -> None:
    accepted(quota_mesh(59))  # 59 peers' /32s + the site's one cidr = 60
    line = one(quota_mesh(60), "sites[0]: needs 61 inbound rules in the security group of aws-use1",
               "60 WireGuard", "1 the site's cidrs", "AWS allows 60 by default (quota L-0EA8095F",
               "sites[0].quotas.rules_per_security_group")  # fmt: skip
    assert "ICMP" not in line
    accepted(quota_mesh(60, quotas={"rules_per_security_group": 61}))
    one(quota_mesh(61, quotas={"rules_per_security_group": 61}), "needs 62", "AWS allows 61 (quotas:)")


def test_path_peers_and_monitoring_count_too() -> None:
    raw = mesh(monitoring_cidrs=["192.0.2.0/24"])
    raw["sites"][0]["quotas"] = {"rules_per_security_group": 6}  # 2 public + 2 private + 2 ICMP + 1 cidr + 1 = 8
    one(raw, "needs 8 inbound rules", "2 ICMP echo from path peers", "1 monitoring_cidrs", "AWS allows 6 (quotas:)")
    raw["sites"][0]["quotas"] = {"rules_per_security_group": 8}
    accepted(raw)


def test_routes_per_route_table_both_ways() -> None:
    # created network: the overlay, 498 remote /24s and the default route = 500
    accepted(quota_mesh(2, cidrs_each=249))
    one(quota_mesh(1, cidrs_each=499), "sites[0]: needs 501 routes in the route table wg-mesh creates",
        "AWS allows 500 by default (quota L-93826ACB", "sites[0].quotas.routes_per_route_table")  # fmt: skip
    accepted(quota_mesh(1, cidrs_each=499, quotas={"routes_per_route_table": 501}))
    # an existing network's tables: no default route of ours
    accepted(quota_mesh(1, cidrs_each=499, **EXISTING_AWS))
    one(quota_mesh(1, cidrs_each=500, **EXISTING_AWS), "needs 501 routes in each of route_table_ids")


@pytest.mark.parametrize(("value", "ok"), [(1000, True), (1001, False), (0, False), (True, False), ("61", False)])
def test_a_stated_quota_is_an_integer_aws_could_grant(value: Any, ok: bool) -> None:
    raw = site(mesh(), 0, quotas={"routes_per_route_table": value})
    if ok:
        accepted(raw)
    else:
        assert refused(raw)[0].startswith("sites[0].quotas.routes_per_route_table: ")
    bad = site(mesh(), 0, quotas={"routes_per_table": 60})
    assert refused(bad) == ["sites[0].quotas.routes_per_table: unknown key (did you mean 'routes_per_route_table'?)"]
    typo = mesh()
    typo["private_paths"][0]["kinds"] = "vpn"
    assert refused(typo) == ["private_paths[0].kinds: unknown key (did you mean 'kind'?)"]  # not a mesh key's name


# --- all at once ---------------------------------------------------------------------------------------------------


def test_every_new_rule_reports_at_once_one_line_each() -> None:
    raw = mesh()
    raw["sites"][0].update(private_ip="10.10.0.1", account_id="210987654321",
                           assume_role_arn="arn:aws:iam::123456789012:role/deployer")  # fmt: skip
    raw["sites"][1].update(private_ip="10.100.0.255")
    raw["sites"][2].update(private_ip="10.10.9.9")
    problems = refused(raw)
    assert [p.split(":", 1)[0] for p in problems] == [
        "sites[0].account_id", "sites[0].private_ip", "sites[1].private_ip", "sites[2].private_ip",
    ], problems  # fmt: skip


def test_a_field_error_elsewhere_does_not_hide_the_path_and_quota_rules() -> None:
    raw = site(mesh(listen_port=0), 0, private_ip="10.10.0.2")
    raw["sites"][0]["quotas"] = {"rules_per_security_group": 3}
    with pytest.raises(ConfigError) as err:
        load_mesh(raw)  # a field error: nothing rendered, the quotas counted all the same
    problems = err.value.problems
    assert [p.split(":", 1)[0] for p in problems] == ["listen_port", "sites[0].private_ip", "sites[0]"], problems
    assert "needs 7 inbound rules" in problems[2]


def aws_sites(n: int, **fields: Any) -> dict[str, Any]:
    sites = [{**AWS, "name": f"aws-{k}", "overlay_ip": f"10.200.0.{k + 1}", "cidrs": [f"10.{k}.0.0/16"], **fields}
             for k in range(n)]  # fmt: skip
    return {"overlay_cidr": "10.200.0.0/24", "sites": sites}


def test_load_mesh_refuses_a_quota_crossing() -> None:
    load_mesh(aws_sites(5))
    with pytest.raises(ConfigError, match="needs 6 Elastic IPs"):
        load_mesh(aws_sites(6))


def test_elastic_ips_and_vpcs_per_region_both_ways() -> None:
    accepted(aws_sites(5))
    eips, vpcs = refused(aws_sites(6))
    assert eips.startswith("sites[5]: the mesh needs 6 Elastic IPs in us-east-1 in one account (aws-0, aws-1, ")
    assert "AWS allows 5 by default per Region (quota L-0263D0A3" in eips
    assert vpcs.startswith("sites[5]: the mesh needs 6 VPCs in us-east-1") and "L-F678F1CE" in vpcs
    raised = aws_sites(6)
    raised["sites"][0]["quotas"] = {"elastic_ips_per_region": 6, "vpcs_per_region": 6}
    accepted(raised)
    other_account = aws_sites(6)
    other_account["sites"][5]["profile"] = "other"  # other credentials: another account's quota
    accepted(other_account)
    existing = aws_sites(6)
    existing["sites"][5].update(EXISTING_AWS)  # no VPC of ours: only the Elastic IPs cross
    assert [p.split(" in ")[0] for p in refused(existing)] == ["sites[5]: the mesh needs 6 Elastic IPs"]


def test_the_benchmarks_chart_past_the_quotas() -> None:
    """check_limits=False (bench/meshgen.py charts quota use past the defaults) skips the quota rules, nothing else."""
    load_mesh(quota_mesh(60), check_limits=False)
    with pytest.raises(ConfigError):
        load_mesh(site(mesh(), 0, private_ip="10.10.0.1"), check_limits=False)
