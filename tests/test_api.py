"""The package's API: Mesh(name, MeshArgs) as a program uses it, validated by the config model before any resource,
with the existing-network keys taking the program's own Outputs; and the identity of what it declares pinned."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pulumi
import pytest

from tests.conftest import REPO, ProgramRun
from tests.golden import assert_golden
from wg_mesh import ConfigError, Mesh, MeshArgs, MeshConfigError, SiteArgs
from wg_mesh.args import INPUT_KEYS, to_config
from wg_mesh.config import AwsSite, Deferred, GcpSite, MeshConfig, StaticSite
from wg_mesh.mesh import MESH_TYPE
from wg_mesh.plan.validate import load_mesh
from wg_mesh.testing import execute, new_run
from wg_mesh.tools.stackfile import read_raw


def dev_raw() -> dict[str, Any]:
    raw = read_raw(REPO / "Pulumi.dev.yaml")
    assert isinstance(raw, dict)
    return copy.deepcopy(raw)


def site_of(raw: dict[str, Any], cloud: str) -> dict[str, Any]:
    site = next(s for s in raw["sites"] if s["cloud"] == cloud)
    assert isinstance(site, dict)
    return site


class Later:
    """An awaitable: a `pulumi.Input` that is neither plain nor an Output. (Outputs made outside a program run would
    leave Pulumi's runtime waiting in the next run of this process: the programs' tests make real ones.)"""

    def __init__(self, value: str) -> None:
        self.value = value

    def __await__(self) -> Any:
        yield from ()
        return self.value


def problems(call: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        call()
    return list(caught.value.problems)


# --- MeshArgs is the config model's vocabulary ------------------------------------------------


def test_mesh_args_have_exactly_the_config_models_keys() -> None:
    """One vocabulary for the stack file, Python and (wg_mesh.provider) other languages: no key added or dropped."""
    assert set(MeshArgs.__annotations__) == set(MeshConfig.model_fields)
    site_fields = set(AwsSite.model_fields) | set(GcpSite.model_fields) | set(StaticSite.model_fields)
    assert set(SiteArgs.__annotations__) == site_fields
    required = {name for name, field in AwsSite.model_fields.items() if field.is_required()}
    required &= {name for name, field in StaticSite.model_fields.items() if field.is_required()}
    assert SiteArgs.__required_keys__ == required - {"region", "endpoint"}


@pytest.mark.parametrize(
    "breakage",
    [
        lambda raw: site_of(raw, "aws").update(vpc_id="vpc-nothex!"),
        lambda raw: site_of(raw, "aws").update(vpc_id="vpc-0123abcd", subnet_id=5, route_table_ids=["rtb-0123abcd"]),
        lambda raw: site_of(raw, "gcp").update(network="Not A Name"),
        lambda raw: site_of(raw, "aws").update(zone="mars-1a", typo_key=1),
        lambda raw: raw.update(mtu="jumbo", sites=raw["sites"][:1]),
    ],
)
def test_plain_args_get_the_stack_files_messages(breakage: Any) -> None:
    raw = dev_raw()
    breakage(raw)
    expected = problems(lambda: load_mesh(copy.deepcopy(raw)))
    assert expected and problems(lambda: to_config(raw)) == expected


def test_outputs_in_the_existing_network_keys_are_carried_not_checked() -> None:
    raw = dev_raw()
    vpc, subnet, table = Later("anything"), Later("at all"), Later("here")
    site_of(raw, "aws").update(vpc_id=vpc, subnet_id=subnet, route_table_ids=[table, "rtb-0123abcd"])
    site_of(raw, "gcp").update(network=Later("n"), subnetwork="projects/p/regions/r/subnetworks/s")
    cfg = to_config(raw)
    aws_site = cfg.site(site_of(raw, "aws")["name"])
    assert isinstance(aws_site, AwsSite)
    assert isinstance(aws_site.vpc_id, Deferred) and aws_site.vpc_id.value is vpc
    assert isinstance(aws_site.subnet_id, Deferred) and aws_site.subnet_id.value is subnet
    assert aws_site.route_table_ids is not None
    assert [type(t) for t in aws_site.route_table_ids] == [Deferred, str]
    assert aws_site.uses_existing_network


def test_an_output_does_not_excuse_a_missing_sibling_or_a_bad_plain_value() -> None:
    raw = dev_raw()
    site_of(raw, "aws").update(vpc_id=Later("v"), route_table_ids=[Later("t")])
    site_of(raw, "gcp").update(network=Later("n"), subnetwork="Bad Name")
    found = problems(lambda: to_config(raw))
    assert found == [
        "sites[1].subnetwork: 'Bad Name' is not a GCP subnetwork name or self link",
        "sites[0].subnet_id: required with vpc_id, route_table_ids (an existing network is given by vpc_id, subnet_id, "
        "route_table_ids together; leave all out to have wg-mesh create one)",
    ]


def test_input_keys_are_the_existing_network_keys() -> None:
    from wg_mesh.config.rules import EXISTING_NETWORK_KEYS

    existing = {key for keys in EXISTING_NETWORK_KEYS.values() for key in keys} - {"route_table_ids"}
    assert set(INPUT_KEYS) == existing | {"standby_subnet_id", "endpoint"}  # and a static site's address


def test_the_config_error_is_a_run_error_and_a_config_error() -> None:
    raw = dev_raw()
    raw["overlay_cidr"] = "10.0.0.0"
    with pytest.raises(MeshConfigError) as caught:
        to_config(raw)
    assert isinstance(caught.value, pulumi.RunError) and isinstance(caught.value, ConfigError)
    assert caught.value.problems == [
        "overlay_cidr: 10.0.0.0 has no prefix length (write it as a CIDR, e.g. 10.0.0.0/16)"
    ]


def test_invalid_args_stop_a_program_before_any_resource(tmp_path: Path) -> None:
    raw = dev_raw()
    site_of(raw, "aws")["subnet_id"] = "subnet-xyz"
    program = tmp_path / "__main__.py"
    program.write_text(
        "import json, pulumi\nfrom wg_mesh import Mesh\n"
        f"vpc = pulumi.Output.from_input('vpc-0123abcd')\nraw = json.loads({json.dumps(json.dumps(raw))})\n"
        "raw['sites'][0].update(vpc_id=vpc, route_table_ids=[vpc])\nMesh('mesh', raw)\n"
    )
    run = execute(new_run(preview=False), program, {}, project="user")
    assert isinstance(run.error, MeshConfigError)
    assert "sites[0].subnet_id: 'subnet-xyz' is not a subnet id (subnet-0123abcd)" in run.error.problems
    assert run.resources == [] and [urn.split("::")[2] for urn in run.monitor.urns] == ["pulumi:pulumi:Stack"]


def test_mesh_is_importable_from_the_top_level() -> None:
    assert Mesh.__module__ == "wg_mesh.mesh"


# --- what identifies the resources in every user's state ---------------------------------------


def test_type_tokens_and_resource_identities_do_not_change(applied: ProgramRun) -> None:
    """Every URN the stack program registers, as Pulumi's mocks build them (project, stack, the parent's type, the
    type and the name): a change to a type token,
    a component's name or a child's name would make Pulumi replace the user's resources. Pinned in tests/golden/urns
    (regenerate only on purpose, and say in the changelog what it replaces)."""
    stack = applied.monitor.urns[0].split("::")[0].removeprefix("urn:pulumi:")
    urns = sorted(set(applied.monitor.urns))
    assert any(urn.endswith(f"{MESH_TYPE}::mesh") for urn in urns)
    assert_golden(f"urns/{stack}.txt", "\n".join(urns) + "\n")
