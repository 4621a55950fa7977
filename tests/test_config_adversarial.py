"""Configs that validate but would break the mesh or the host: each class is refused, naming its field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.stacks import STACK_FILES
from tests.test_config import base, problems_for, with_change
from wg_mesh.config import AwsSite, ConfigError
from wg_mesh.plan import topology
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import MAX_DEPTH, read_raw

REPO = Path(__file__).resolve().parent.parent


def only(problems: list[str], start: str) -> str:
    hits = [p for p in problems if p.startswith(start)]
    assert len(hits) == 1, problems
    return hits[0]


# 2^31 addresses in five prefixes that avoid every special-purpose range
HALF_IN_PIECES = ["16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/3", "128.0.0.0/3", "176.0.0.0/4"]
SPECIAL = [
    "0.0.0.0/8",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "169.254.169.254/32",
    "192.0.0.0/24",
    "224.0.0.0/4",
    "239.1.0.0/16",
    "240.0.0.0/4",
    "255.255.255.255/32",
]


@pytest.mark.parametrize("cidr", SPECIAL)
def test_special_purpose_ranges_are_no_site_network(cidr: str) -> None:
    assert "overlaps" in only(problems_for(with_change("sites.2.cidrs", [cidr])), "sites[2].cidrs[0]: ")


@pytest.mark.parametrize("cidr", ["127.0.0.0/24", "169.254.0.0/24", "224.0.0.0/24", "0.0.0.0/24"])
def test_special_purpose_ranges_are_no_overlay(cidr: str) -> None:
    raw = with_change("overlay_cidr", cidr)
    assert "overlaps" in only(problems_for(raw), "overlay_cidr: ")


@pytest.mark.parametrize("cidr", ["169.254.169.254/32", "127.0.0.0/8", "224.0.0.0/4"])
def test_special_purpose_ranges_are_no_monitoring_source(cidr: str) -> None:
    assert "overlaps" in only(problems_for(with_change("monitoring_cidrs", [cidr])), "monitoring_cidrs[0]: ")


@pytest.mark.parametrize(
    ("ip", "why"),
    [
        ("169.254.169.254", "link-local"),
        ("127.0.0.1", "loopback"),
        ("0.0.0.1", "this network"),
        ("224.0.0.5", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("10.1.2.3", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
    ],
)
def test_endpoints_must_be_reachable_from_the_internet(ip: str, why: str) -> None:
    assert why in only(problems_for(with_change("sites.2.endpoint", ip)), "sites[2].endpoint: ")


def test_documentation_endpoints_stay_allowed_for_examples() -> None:
    assert str(load_mesh(with_change("sites.2.endpoint", "198.51.100.9")).sites[2].endpoint) == "198.51.100.9"  # type: ignore[union-attr]


@pytest.mark.parametrize("cidrs", [["0.0.0.0/1"], ["128.0.0.0/1"], ["0.0.0.0/0"]])
def test_half_the_internet_in_one_prefix(cidrs: list[str]) -> None:
    problems = problems_for(with_change("sites.2.cidrs", cidrs))
    assert any(p.startswith("sites[2].cidrs[0]: ") for p in problems), problems


def test_half_the_internet_in_pieces_within_a_site() -> None:
    pieces = HALF_IN_PIECES
    assert "half the internet" in only(problems_for(with_change("sites.2.cidrs", pieces)), "sites[2].cidrs: ")


def test_half_the_internet_in_pieces_across_sites() -> None:
    raw = with_change("sites.2.cidrs", HALF_IN_PIECES[:3])
    raw["sites"][1]["cidrs"] = HALF_IN_PIECES[3:]
    raw["sites"][1]["network"], raw["sites"][1]["subnetwork"] = "n", "s"  # not created: size rules do not apply
    assert "half the internet" in only(problems_for(raw), "sites: ")


def test_monitoring_half_the_internet_in_pieces() -> None:
    problems = problems_for(with_change("monitoring_cidrs", HALF_IN_PIECES))
    assert "half the internet" in only(problems, "monitoring_cidrs: ")


def test_a_site_cidr_containing_an_endpoint_is_a_routing_loop() -> None:
    raw = with_change("sites.0.cidrs", ["203.0.113.0/24"])  # vps-fra's endpoint is 203.0.113.7
    problem = only(problems_for(raw), "sites[0].cidrs[0]: ")
    assert "contains sites[2].endpoint 203.0.113.7" in problem


def test_a_static_site_cannot_route_its_own_endpoint() -> None:
    assert "contains sites[2].endpoint" in only(
        problems_for(with_change("sites.2.cidrs", ["203.0.113.0/28"])), "sites[2].cidrs[0]: "
    )


def test_the_overlay_containing_an_endpoint_is_a_routing_loop() -> None:
    raw = with_change("overlay_cidr", "203.0.113.0/24")
    for i, site in enumerate(raw["sites"]):
        site["overlay_ip"] = f"203.0.113.{i + 10}"
    assert "contains sites[2].endpoint" in only(problems_for(raw), "overlay_cidr: ")


def test_two_sites_with_one_endpoint() -> None:
    raw = base()
    raw["sites"].append(
        {**raw["sites"][2], "name": "vps-ber", "overlay_ip": "10.200.0.4", "cidrs": ["192.168.51.0/24"]}
    )
    assert only(problems_for(raw), "sites[3].endpoint: ") == (
        "sites[3].endpoint: 203.0.113.7 is already the endpoint of sites[2]"
    )


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("listen_port", True),
        ("listen_port", "51820"),
        ("persistent_keepalive", True),
        ("exporter_port", False),
        ("sites.0.key_epoch", True),
        ("sites.0.underlay_mtu", True),
        ("mtu", True),
        ("listen_port", 51820.0),
    ],
)
def test_booleans_and_strings_are_not_integers(path: str, value: Any) -> None:
    field = path.replace("sites.0.", "sites[0].")
    problem = only(problems_for(with_change(path, value)), f"{field}: ")
    if isinstance(value, bool):
        assert "boolean" in problem or "neither 'auto'" in problem


@pytest.mark.parametrize("name", ["aws-use1\n", "aws-use1 ", " aws-use1", "aws-use1\t", "aws\u2028use1"])
def test_names_with_whitespace_are_refused(name: str) -> None:
    assert "is not a DNS label" in only(problems_for(with_change("sites.0.name", name)), "sites[0].name: ")


@pytest.mark.parametrize(("path", "value"), [("sites.0.region", "us-east-1\n"), ("sites.1.project", "my-project\n")])
def test_other_names_with_trailing_newline_are_refused(path: str, value: str) -> None:
    field = path.replace("sites.0.", "sites[0].").replace("sites.1.", "sites[1].")
    only(problems_for(with_change(path, value)), f"{field}: ")


def test_a_quoted_value_cannot_forge_a_problem_line() -> None:
    forged = "x\nsites[9].name: forged problem"
    raw = with_change("sites.0.name", forged)
    raw["sites"][1]["zone"] = forged
    raw["sites"][2]["cidrs"] = [forged]
    raw["sites"][0]["unknown\nsites[8].x: forged"] = 1
    problems = problems_for(raw)
    assert all("\n" not in p for p in problems)
    assert not any(p.startswith(("sites[9]", "sites[8]")) for p in problems)
    assert str(ConfigError(problems)).count("\n") == len(problems)


def test_output_stays_bounded_for_huge_inputs() -> None:
    raw = with_change("sites.2.cidrs", ["not a cidr " * 10_000] * 2_000)
    problems = problems_for(raw)
    assert len(problems) <= 51 and all(len(p) <= 400 for p in problems)
    assert problems[-1].startswith("(more): ")


def test_auto_mtu_below_the_minimum_names_the_sites() -> None:
    raw = with_change("sites.0.underlay_mtu", 1300)
    assert only(problems_for(raw), "mtu: ").startswith("mtu: auto gives 1240 (underlay_mtu 1300 of sites[0] (aws-use1)")


def test_auto_mtu_counts_a_jumbo_underlay_as_the_internet_s_1500() -> None:
    """Two hosts with 9216-byte NICs still meet over the internet (1500): auto gives 1440, not 9156 (refused as above
    8920 before private paths existed); a jumbo path between them is a private path (docs/underlay.md)."""
    raw = base()
    raw["sites"] = [raw["sites"][2], {**raw["sites"][2], "name": "vps-b", "overlay_ip": "10.200.0.4",
                                      "endpoint": "198.51.100.4", "cidrs": ["192.168.60.0/24"]}]  # fmt: skip
    for site in raw["sites"]:
        site["underlay_mtu"] = 9216
    assert topology.tunnel_mtu(load_mesh(raw)) == 1440


def test_route_table_ids_must_be_distinct_and_well_formed() -> None:
    raw = base()
    raw["sites"][0].update(vpc_id="vpc-0123abcd", subnet_id="subnet-0123abcd", route_table_ids=["rtb-0a1b2c3d"] * 2)
    assert "is already route_table_ids[0]" in only(problems_for(raw), "sites[0].route_table_ids[1]: ")
    raw["sites"][0]["route_table_ids"] = ["", "rtb-0a1b2c3d"]
    assert "is not a route table id" in only(problems_for(raw), "sites[0].route_table_ids[0]: ")


@pytest.mark.parametrize("value", ["", " ", "c6i.2xlarge\n", "C6I.2XLARGE", "c6i"])
def test_instance_type_must_be_an_instance_type(value: str) -> None:
    only(problems_for(with_change("sites.0.instance_type", value)), "sites[0].instance_type: ")


@pytest.mark.parametrize("value", ["", "n2 standard 8", "n2-standard-8\n"])
def test_machine_type_must_be_a_machine_type(value: str) -> None:
    only(problems_for(with_change("sites.1.instance_type", value)), "sites[1].instance_type: ")


# --- zones (issue 9, item 1) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "name", "zone_id"),
    [
        ("us-east-1a", "us-east-1a", None),
        ("us-east-1f", "us-east-1f", None),
        ("us-east-1-bos-1a", "us-east-1-bos-1a", None),
        ("use1-az1", None, "use1-az1"),
        ("use1-bos1-az1", None, "use1-bos1-az1"),
    ],
)
def test_aws_zone_names_and_ids_are_accepted(zone: str, name: str | None, zone_id: str | None) -> None:
    site = load_mesh(with_change("sites.0.zone", zone)).sites[0]
    assert isinstance(site, AwsSite) and (site.zone_name, site.zone_id) == (name, zone_id)


@pytest.mark.parametrize(
    ("region", "zone"),
    [
        ("ap-southeast-2", "apse2-az3"),
        ("eu-west-1", "euw1-az2"),
        ("us-gov-west-1", "usgw1-az1"),
        ("eu-west-1", "eu-west-1c"),
    ],
)
def test_aws_zone_ids_follow_the_region(region: str, zone: str) -> None:
    raw = with_change("sites.0.region", region)
    raw["sites"][0]["zone"] = zone
    assert isinstance(load_mesh(raw).sites[0], AwsSite)


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("us-west-2a", "'us-west-2a' is not in region us-east-1"),
        ("use2-az1", "'use2-az1' is not in region us-east-1"),
        ("us-east-1-a", "is not an AWS zone name or ID"),
        ("europe-west3-a", "is not an AWS zone name or ID"),
    ],
)
def test_wrong_aws_zones_are_refused_clearly(zone: str, expected: str) -> None:
    assert expected in only(problems_for(with_change("sites.0.zone", zone)), "sites[0].zone: ")


@pytest.mark.parametrize(
    ("zone", "expected"),
    [("europe-west3a", "is not a GCP zone name"), ("europe-west4-b", "is not in region europe-west3")],
)
def test_wrong_gcp_zones_are_refused_clearly(zone: str, expected: str) -> None:
    assert expected in only(problems_for(with_change("sites.1.zone", zone)), "sites[1].zone: ")


# --- networks wg-mesh creates (issue 9, item 3) -----------------------------------------------------


@pytest.mark.parametrize("cidr", ["10.0.0.0/12", "10.10.0.0/15", "10.10.0.0/29"])
def test_created_aws_vpc_blocks_are_16_to_28(cidr: str) -> None:
    assert "AWS accepts /16 to /28" in only(problems_for(with_change("sites.0.cidrs", [cidr])), "sites[0].cidrs[0]: ")


def test_every_created_aws_vpc_block_is_checked() -> None:
    problems = problems_for(with_change("sites.0.cidrs", ["10.10.0.0/16", "10.16.0.0/12"]))
    assert "AWS accepts /16 to /28" in only(problems, "sites[0].cidrs[1]: ")


@pytest.mark.parametrize(
    ("cidrs", "expected"),
    [
        (["10.10.0.0/16", "172.20.0.0/16"], "cannot add a block from 172.16.0.0/12"),
        (["192.168.0.0/16", "10.20.0.0/16"], "cannot add a block from 10.0.0.0/8"),
        (["172.20.0.0/16", "172.31.0.0/16"], "cannot add a block from 172.31.0.0/16"),
        (["10.1.0.0/16", "10.0.0.0/16"], "cannot add a block from 10.0.0.0/16"),
        (["10.10.0.0/16", "198.19.0.0/16"], "unless its first block is in it"),
        (["198.19.0.0/16", "10.20.0.0/16"], "198.19.0.0/16 (not RFC 1918) cannot add a block from 10.0.0.0/8"),
        (["100.64.0.0/16", "10.20.0.0/16"], "(not RFC 1918) cannot add a block from 10.0.0.0/8"),
    ],
)
def test_created_aws_vpc_secondary_blocks_follow_the_association_rules(cidrs: list[str], expected: str) -> None:
    raw = with_change("sites.0.cidrs", cidrs)
    raw["sites"][2]["cidrs"] = ["192.168.77.0/24"] if not cidrs[0].startswith("192.168.0") else ["203.0.113.64/26"]
    assert expected in only(problems_for(raw), "sites[0].cidrs[1]: ")


@pytest.mark.parametrize("cidrs", [["10.10.0.0/16", "10.20.0.0/16"], ["10.10.0.0/16", "100.64.0.0/16"]])
def test_created_aws_vpc_secondary_blocks_that_aws_permits(cidrs: list[str]) -> None:
    load_mesh(with_change("sites.0.cidrs", cidrs))


def test_existing_aws_vpc_blocks_are_the_users() -> None:
    raw = with_change("sites.0.cidrs", ["10.0.0.0/12"])
    raw["sites"][0].update(vpc_id="vpc-0123abcd", subnet_id="subnet-0123abcd", route_table_ids=["rtb-0123abcd"])
    load_mesh(raw)


def test_created_gcp_subnet_is_a_29_or_larger() -> None:
    problem = only(problems_for(with_change("sites.1.cidrs", ["10.100.0.0/30"])), "sites[1].cidrs[0]: ")
    assert "GCP subnets are /29 or larger" in problem
    load_mesh(with_change("sites.1.cidrs", ["10.100.0.0/29"]))
    raw = with_change("sites.1.cidrs", ["10.100.0.0/30"])
    raw["sites"][1].update(network="shared", subnetwork="shared-euw3")
    load_mesh(raw)


# --- YAML that is not what it seems ----------------------------------------------------------------


def stack(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "Pulumi.t.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def dev_text() -> str:
    return (REPO / "Pulumi.dev.yaml").read_text()


def read_problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        read_raw(path)
    return caught.value.problems


def test_duplicate_keys_are_refused_with_their_field(tmp_path: Path) -> None:
    text = dev_text().replace(
        "        overlay_ip: 10.200.0.1\n", "        overlay_ip: 10.200.0.1\n        overlay_ip: 10.200.0.9\n"
    )
    assert text != dev_text()
    assert "duplicate key" in only(read_problems(stack(tmp_path, text)), "sites[0].overlay_ip: ")


def test_yaml_booleans_in_integer_fields(tmp_path: Path) -> None:
    text = dev_text().replace("listen_port: 51820", "listen_port: yes")
    assert text != dev_text()
    problems = load_problems(stack(tmp_path, text))
    assert only(problems, "listen_port: ").startswith("listen_port: expected an integer, got the boolean true")


def load_problems(path: Path) -> list[str]:
    from wg_mesh.tools.stackfile import load

    with pytest.raises(ConfigError) as caught:
        load(path)
    return caught.value.problems


def test_alias_bombs_are_refused_before_expansion(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 values
    text = "\n".join(lines) + "\nconfig:\n  wg-mesh:mesh:\n    sites: *a8\n"
    problems = read_problems(stack(tmp_path, text))
    assert len(problems) == 1 and "expands to more than" in problems[0]


def test_ordinary_anchors_still_work(tmp_path: Path) -> None:
    text = dev_text().replace("cidrs: [10.10.0.0/16]", "cidrs: &aws [10.10.0.0/16]")
    assert text != dev_text()
    read_raw(stack(tmp_path, text))


def test_a_value_that_contains_itself(tmp_path: Path) -> None:
    problems = read_problems(stack(tmp_path, "config:\n  wg-mesh:mesh: &m\n    sites: [*m]\n"))
    assert "refers to itself" in only(problems, "sites[0]: ")


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    text = "config:\n  wg-mesh:mesh:\n    sites: " + "[" * 100_000 + "]" * 100_000 + "\n"
    problems = read_problems(stack(tmp_path, text))
    assert f"nested deeper than {MAX_DEPTH} levels" in only(problems, "sites[0]")


def test_non_utf8_files_are_refused(tmp_path: Path) -> None:
    data = dev_text().encode().replace(b"aws-use1", b"aws-\xe9use1", 1)
    problems = read_problems(stack(tmp_path, data))
    assert "not UTF-8 (byte 0xe9 on line" in problems[0]


@pytest.mark.parametrize(
    "text",
    [
        "config:\n  wg-mesh:mesh:\n    sites: [}\n",
        "config:\n  wg-mesh:mesh:\n    listen_port: yes\n    listen_port: no\n",
        "\x00",
        "config: {wg-mesh:mesh: {overlay_cidr: !!python/object:os.system x}}\n",
        "config:\n  wg-mesh:mesh:\n    sites: *nope\n",
    ],
)
def test_validate_never_prints_a_traceback(tmp_path: Path, text: str) -> None:
    path = stack(tmp_path, text)
    result = subprocess.run(
        [sys.executable, "-m", "wg_mesh", "validate", "--file", str(path)],
        cwd=REPO, capture_output=True, text=True, check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.strip()
    assert all(": " in line for line in result.stderr.splitlines())


def test_yaml_roundtrip_of_the_shipped_stacks_is_unchanged() -> None:
    for path in STACK_FILES:
        assert read_raw(path) == yaml.safe_load(path.read_text())["config"]["wg-mesh:mesh"]


@pytest.mark.parametrize(
    ("cloud", "key", "value"),
    [
        ("gcp", "image", "ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20250130\n"),
        ("gcp", "impersonate_service_account", "deployer@my-project.iam.gserviceaccount.com\n"),
        ("gcp", "workload_tags", ["db\n"]),
        ("gcp", "workload_service_accounts", ["app@my-project.iam.gserviceaccount.com\n"]),
        ("aws", "assume_role_arn", "arn:aws:iam::123456789012:role/deployer\n"),
        ("aws", "image", "ami-0123456789abcdef0\n"),
        ("aws", "account_id", "123456789012\n"),
    ],
)
def test_identifiers_with_a_trailing_newline_are_refused(cloud: str, key: str, value: object) -> None:
    """`$` in a pattern matches before a trailing newline: every identifier must match the whole value."""
    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    site = next(s for s in raw["sites"] if s["cloud"] == cloud)
    site.pop("workload_tags", None)
    site[key] = value
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    assert any(p.startswith(f"sites[{raw['sites'].index(site)}].{key}") for p in info.value.problems), info.value


@pytest.mark.parametrize(
    ("cloud", "key", "value", "problem"),
    [
        ("aws", "profile", "default\n", "sites[0].profile: 'default\\n' is not an AWS profile name"),
        ("aws", "profile", " default", "sites[0].profile: ' default' is not an AWS profile name"),
        ("aws", "image", "20251399", "sites[0].image: '20251399': an Ubuntu image serial starts with its date"),
        ("aws", "image", "20250230.1", "sites[0].image: '20250230.1': an Ubuntu image serial starts with its date"),
        ("gcp", "image", "ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20251399",
         "sites[1].image: 'ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20251399': its -v serial 20251399 is no date"),
    ],
)  # fmt: skip
def test_a_malformed_profile_or_image_serial_is_refused_naming_its_field(
    cloud: str, key: str, value: str, problem: str
) -> None:
    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    site = next(s for s in raw["sites"] if s["cloud"] == cloud)
    site[key] = value
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    assert [p for p in info.value.problems if p.startswith(problem)], info.value.problems


def test_a_real_profile_and_serials_are_accepted() -> None:
    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    aws = next(s for s in raw["sites"] if s["cloud"] == "aws")
    gcp = next(s for s in raw["sites"] if s["cloud"] == "gcp")
    aws.update(profile="prod admin", image="20240229.1")  # a leap day
    gcp["image"] = "ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20251001"
    load_mesh(raw)


def test_a_role_in_another_partition_names_assume_role_arn() -> None:
    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    aws = next(s for s in raw["sites"] if s["cloud"] == "aws")
    aws.update(region="cn-north-1", assume_role_arn="arn:aws:iam::123456789012:role/deployer")
    aws.pop("zone", None)
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    i = raw["sites"].index(aws)
    assert (
        f"sites[{i}].assume_role_arn: arn:aws:iam::123456789012:role/deployer is in partition aws, region "
        "cn-north-1 in aws-cn" in info.value.problems
    ), info.value.problems


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda r: r["sites"][0].update(delivery="live"),
         "sites[0].delivery: unknown key (delivery is a mesh key: beside sites, not in a site)"),
        (lambda r: r.update(region="us-east-1"),
         "region: unknown key (region is a key of a site (aws, gcp): under one of sites)"),
        (lambda r: r["sites"][1].update(standby_subnet_id="subnet-0a1b2c3d"),
         "sites[1].standby_subnet_id: unknown key (a key of aws sites only)"),
        (lambda r: r["sites"][0].update(flavour="x"), "sites[0].flavour: unknown key"),
    ],
)  # fmt: skip
def test_a_key_at_the_wrong_level_says_where_it_belongs(edit: Any, problem: str) -> None:
    """Issue 34 item 3: a mesh key on a site, a site's key on the mesh, another cloud's key: where it belongs."""
    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    edit(raw)
    with pytest.raises(ConfigError) as info:
        load_mesh(raw)
    assert problem in info.value.problems, info.value.problems
