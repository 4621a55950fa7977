"""The component contract (issue 21 item 5), as a user's program meets it: the providers given to the Mesh reach every
cloud child, component-level `protect` protects addresses and keys (and leaves what must be replaceable alone), and
URNs are unique by construction for every config validate accepts (hostile site names refused; two meshes in one
program work, or are refused with one line when their sites' names meet). Programs run under Pulumi's mocks
(wg_mesh.testing); the contract's pure parts (wg_mesh.config.names) are checked without a run."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from wg_mesh import ConfigError, MeshConfigError
from wg_mesh.config import names
from wg_mesh.plan import ha
from wg_mesh.plan.validate import load_mesh
from wg_mesh.testing import ProgramRun, execute, new_run
from wg_mesh.tools.stackfile import read_raw

GOLDEN_URNS = REPO / "tests" / "golden" / "urns"


def stack_raw(stack: str) -> dict[str, Any]:
    raw = read_raw(REPO / f"Pulumi.{stack}.yaml")
    assert isinstance(raw, dict)
    return copy.deepcopy(raw)


def ha_with_static() -> dict[str, Any]:
    """Both clouds with gateways: 2 (live delivery), and prod's static site: every kind of child wg-mesh declares."""
    raw = stack_raw("ha")
    raw["sites"].append(next(s for s in stack_raw("prod")["sites"] if s["cloud"] == "static"))
    return raw


def run_program(tmp_path: Path, body: str, **values: Any) -> ProgramRun:
    """Run `body` as a user's __main__.py; `values` are JSON values bound to names before it (configs as dicts)."""
    header = (
        "import json\nimport pulumi, pulumi_aws as aws, pulumi_gcp as gcp\nfrom wg_mesh import Mesh, MeshConfigError\n"
    )
    bound = "".join(f"{k} = json.loads({json.dumps(json.dumps(v))})\n" for k, v in values.items())
    program = tmp_path / "__main__.py"
    program.write_text(header + bound + body)
    return execute(new_run(preview=False), program, {}, project="user")


def provider_of(run: ProgramRun, typ: str, name: str) -> str:
    """The provider reference a registration named: `urn::id`, as the engine receives it."""
    return run.named(typ, name).provider


def name_of_reference(reference: str) -> str:
    """`urn:pulumi:...::pulumi:providers:aws::acct::id` -> `acct`."""
    return reference.split("::")[-2]


def cloud_children(run: ProgramRun, package: str) -> list[Any]:
    return [r for r in run.resources if r.type.startswith(f"{package}:")]


# --- providers --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def given_providers(tmp_path_factory: pytest.TempPathFactory) -> ProgramRun:
    """A user's program: its own component holding the GCP provider, the Mesh under it given the AWS provider and
    protect=True; both clouds with gateways: 2, and a static site."""
    return run_program(
        tmp_path_factory.mktemp("given"),
        "acct = aws.Provider('acct', region='us-east-1')\n"
        "proj = gcp.Provider('proj', project='my-project', region='europe-west3')\n"
        "class Platform(pulumi.ComponentResource):\n"
        "    def __init__(self, name, opts=None):\n"
        "        super().__init__('user:index:Platform', name, None, opts)\n"
        "platform = Platform('platform', pulumi.ResourceOptions(providers={'gcp': proj}))\n"
        "mesh = Mesh('mesh', raw, pulumi.ResourceOptions(parent=platform, provider=acct, protect=True))\n",
        raw=ha_with_static(),
    )


def test_the_given_providers_are_every_cloud_childs_provider(given_providers: ProgramRun) -> None:
    """`provider=` on the Mesh (AWS) and `providers=` on its parent (GCP, inherited): every AWS child is on `acct`,
    every GCP child on `proj`, and wg-mesh creates no provider of its own (Pulumi docs, "Resource option: providers":
    the map flows to every child via parent inheritance; an explicit `provider=` on a child would override it)."""
    run = given_providers
    assert run.error is None, run.error
    registered = {r.name for r in run.resources if r.type.startswith("pulumi:providers:")}
    assert registered == {"acct", "proj"}, "wg-mesh made a provider although one was given"
    for package, expected in (("aws", "acct"), ("gcp", "proj")):
        children = cloud_children(run, package)
        assert len(children) > 20
        wrong = {
            (r.type, r.name, name_of_reference(r.provider))
            for r in children
            if name_of_reference(r.provider) != expected
        }
        assert not wrong, f"{package} children not on the given provider: {sorted(wrong)[:5]}"
    invokes = {name_of_reference(c.provider) for c in run.mocks.calls if c.token.startswith(("aws:", "gcp:"))}
    assert invokes <= {"acct", "proj"}, invokes
    # command (the gates, the stamps) and random (the keys) use their default providers, as before
    gates = [r for r in run.resources if r.type == "command:local:Command"]
    assert gates and all(r.provider == "" for r in gates)  # (the mocks record no reference for a default provider)


def test_an_aws_site_on_a_given_provider_keeps_its_tags(given_providers: ProgramRun) -> None:
    """What wg-mesh's own provider set in default_tags/ignore_tags (the gateways' IAM conditions need the site and stack
    tags on the instance and the Elastic IP), on the resources themselves."""
    run = given_providers
    for typ, name in (("aws:ec2/eip:Eip", "aws-use1-eip"), ("aws:ec2/instance:Instance", "aws-use1-b-instance")):
        tags = run.named(typ, name).inputs["tags"]
        assert tags["wg-mesh-site"] == "aws-use1" and tags["wg-mesh-stack"] == "test", tags
        assert tags["Name"] == "wg-mesh-aws-use1" and tags["managed-by"] == "wg-mesh"
    assert 'tags["wg-mesh:ready"]' in run.options("aws:ec2/instance:Instance", "aws-use1-instance").ignore_changes


@pytest.fixture(scope="module")
def own_providers(tmp_path_factory: pytest.TempPathFactory) -> ProgramRun:
    """The stack program's way: no providers in opts; `protect: true` in the config; live delivery (the signing key)."""
    raw = stack_raw("dev") | {"protect": True, "delivery": "live"}
    return run_program(tmp_path_factory.mktemp("own"), "Mesh('mesh', raw)\n", raw=raw)


def test_without_given_providers_each_site_has_its_own(own_providers: ProgramRun) -> None:
    """One provider per cloud site, its children on it, and the site's tags in its default_tags (the URNs of this
    way are pinned in tests/golden/urns)."""
    run = own_providers
    assert run.error is None, run.error
    assert {r.name for r in run.resources if r.type.startswith("pulumi:providers:")} >= {
        "aws-use1-provider",
        "gcp-euw3-provider",
    }
    assert {name_of_reference(r.provider) for r in cloud_children(run, "aws")} == {"aws-use1-provider"}
    assert {name_of_reference(r.provider) for r in cloud_children(run, "gcp")} == {"gcp-euw3-provider"}
    provider = run.named("pulumi:providers:aws", "aws-use1-provider").inputs  # (a provider's inputs are JSON)
    assert json.loads(provider["defaultTags"])["tags"]["wg-mesh-site"] == "aws-use1"
    assert run.named("aws:ec2/instance:Instance", "aws-use1-instance").inputs["tags"] == {"Name": "wg-mesh-aws-use1"}


def test_a_site_with_its_own_credentials_and_a_given_provider_is_one_line(tmp_path: Path) -> None:
    raw = stack_raw("dev")
    next(s for s in raw["sites"] if s["cloud"] == "aws").update(profile="prod", account_id="123456789012")
    next(s for s in raw["sites"] if s["cloud"] == "gcp").update(
        impersonate_service_account="deployer@my-project.iam.gserviceaccount.com"
    )
    run = run_program(
        tmp_path,
        "acct = aws.Provider('acct', region='us-east-1')\n"
        "proj = gcp.Provider('proj', project='my-project')\n"
        "Mesh('mesh', raw, pulumi.ResourceOptions(providers=[acct, proj]))\n",
        raw=raw,
    )
    assert isinstance(run.error, MeshConfigError)
    assert run.error.problems == [
        "sites[0] (aws-use1): profile, account_id and the Mesh's `aws` provider (opts providers/provider) both choose "
        "the account: drop the keys or the provider",
        "sites[1] (gcp-euw3): impersonate_service_account and the Mesh's `gcp` provider (opts providers/provider) both "
        "choose the account: drop the keys or the provider",
    ]
    assert not [r for r in run.resources if not r.type.startswith("pulumi:providers:")], "refused after resources"


def test_a_given_provider_in_another_region_fails_the_run(tmp_path: Path) -> None:
    """The site's region is what the gates, the AMI lookup and the names assume: a given provider elsewhere fails the
    run (preview too: the provider's region is its input), not the gate 15 minutes into `pulumi up`. In a process of
    its own: a run that fails part-way leaves Pulumi's pending work behind, and the next run in this process would
    meet it (CPython 3.11's AST state is per interpreter, not per thread)."""
    program = tmp_path / "__main__.py"
    program.write_text(
        "import json\nimport pulumi, pulumi_aws as aws\nfrom wg_mesh import Mesh\n"
        f"raw = json.loads({json.dumps(json.dumps(stack_raw('dev')))})\n"
        "acct = aws.Provider('acct', region='eu-west-1')\n"
        "Mesh('mesh', raw, pulumi.ResourceOptions(providers=[acct]))\n"
    )
    driver = (
        "import sys\nfrom pathlib import Path\nfrom wg_mesh.testing import execute, new_run\n"
        "run = execute(new_run(preview=False), Path(sys.argv[1]), {}, project='user')\n"
        "print(type(run.error).__name__, run.error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", driver, str(program)], capture_output=True, text=True, cwd=REPO, timeout=600, check=True
    )
    assert done.stdout.splitlines()[0] == (
        "ProviderMismatch aws-use1: the Mesh's aws provider has region 'eu-west-1', the site's region is 'us-east-1': "
        "make them the same (or give the site its own credentials and no provider)"
    )


# --- protect ----------------------------------------------------------------------------------------------------

# What component-level protect protects: what the next `pulumi up` cannot recreate as it was
# (docs/how-to/teardown.md, "Protection").
PROTECTED_TYPES = {
    "aws:ec2/eip:Eip",  # the address in every peer's config and firewall, and in allowlists outside the mesh
    "gcp:compute/address:Address",
    "wg-mesh:index:WireGuardKey",  # the keys (their RandomBytes): a new key is a new identity to every peer
    "random:index/randomBytes:RandomBytes",
    "wg-mesh:index:SigningKey",  # every gateway pins its verify key
}


def protected_types(run: ProgramRun) -> dict[str, set[bool]]:
    """Per registered type: the `protect` values its registrations had, as the engine received them."""
    by_type: dict[str, set[bool]] = {}
    for (typ, _), options in run.monitor.options.items():
        by_type.setdefault(typ, set()).add(options.protect)
    return by_type


def test_protect_on_the_mesh_protects_addresses_and_keys_only(given_providers: ProgramRun) -> None:
    """opts.protect=True on the Mesh: the addresses and keys are protected (they were not: kept() said False
    explicitly, overriding the inheritance), and the instances, gates, routes, rules and policies are not (a protected
    resource cannot be replaced: every agent upgrade or type change would stop `pulumi up` part-way)."""
    got = protected_types(given_providers)
    expected = {typ: {typ in PROTECTED_TYPES or typ == "wg-mesh:index:Mesh"} for typ in got}  # (and the Mesh itself)
    assert got == expected


def test_protect_true_in_the_config_is_the_same(own_providers: ProgramRun) -> None:
    assert own_providers.error is None, own_providers.error
    got = protected_types(own_providers)
    assert got == {typ: {typ in PROTECTED_TYPES} for typ in got}


SITES_BUILT_DIRECTLY = (
    "from wg_mesh.args import to_config\n"
    "from wg_mesh.aws.gateway import AwsGateway, AwsGatewayArgs\n"
    "from wg_mesh.gcp.gateway import GcpGateway, GcpGatewayArgs\n"
    "from wg_mesh.plan.topology import PeerAddress\n"
    "cfg = to_config(raw)\n"
    "directory, publish = pulumi.deferred_output()\n"
    "protect = pulumi.ResourceOptions(protect=True)\n"
    "aws_site, gcp_site = cfg.site('aws-use1'), cfg.site('gcp-euw3')\n"
    "sites = {'aws-use1': AwsGateway('aws-use1', AwsGatewayArgs(cfg, aws_site, directory), protect),\n"
    "         'gcp-euw3': GcpGateway('gcp-euw3', GcpGatewayArgs(cfg, gcp_site, directory), protect)}\n"
    "peers = {n: pulumi.Output.all(s.public_ip, s.public_key) for n, s in sites.items()}\n"
    "publish(pulumi.Output.all(**peers).apply(lambda v: {n: PeerAddress(*pair) for n, pair in v.items()}))\n"
)


def test_protect_on_a_site_component_protects_its_address_and_key_only(tmp_path: Path) -> None:
    """A site component built without a Mesh, protect=True in its opts: its address and key (the WireGuardKey and its
    RandomBytes) are protected, as on a Mesh; its instance, gate, routes, rules, network are not (they inherited the
    component's protect, and the key's RandomBytes was registered with protect=False)."""
    run = run_program(tmp_path, SITES_BUILT_DIRECTLY, raw=stack_raw("dev"))
    assert run.error is None, run.error
    got = protected_types(run)
    assert {"aws:ec2/instance:Instance", "gcp:compute/instance:Instance"} <= set(got)
    assert got == {typ: {typ in PROTECTED_TYPES} for typ in got}


# --- URNs unique by construction -----------------------------------------------------------------------------------


def test_two_meshes_in_one_program_work_and_a_common_site_name_is_one_line(tmp_path: Path) -> None:
    dev, other = stack_raw("dev"), stack_raw("dev")
    for site in other["sites"]:
        site["name"] = site["name"].replace("use1", "usw2").replace("euw3", "euw1")
    run = run_program(
        tmp_path,
        "east = Mesh('east', dev)\nwest = Mesh('west', other)\n"
        "try:\n    Mesh('again', dev)\nexcept MeshConfigError as e:\n    refused = e.problems\n",
        dev=dev,
        other=other,
    )
    assert run.error is None, run.error
    assert run.namespace["refused"] == [
        "sites: 'aws-use1' is also a site's name (or previous name, or HA standby) in Mesh 'east' of this program: the "
        "meshes' resources would have the same URNs and cloud names; give their sites different names",
        "sites: 'gcp-euw3' is also a site's name (or previous name, or HA standby) in Mesh 'east' of this program: the "
        "meshes' resources would have the same URNs and cloud names; give their sites different names",
    ]
    urns = Counter(run.monitor.urns)
    assert [urn for urn, n in urns.items() if n > 1] == []
    assert {u.rsplit("::", 1)[1] for u in urns if u.endswith(("::east", "::west", "::again"))} == {"east", "west"}


def ha_site(raw: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in raw["sites"] if s["cloud"] == "aws")


def plus_site(raw: dict[str, Any], name: str, **keys: Any) -> dict[str, Any]:
    """`raw` with one more single-gateway AWS site, valid but for what is tested."""
    site = {"name": name, "cloud": "aws", "region": "us-west-2", "overlay_ip": "10.200.0.9", "cidrs": ["10.9.0.0/16"]}
    raw["sites"].append(site | keys)
    return raw


def refused(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_mesh(raw)
    return list(caught.value.problems)


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            lambda raw: plus_site(raw, "aws-use1-b"),
            "sites[2].name: 'aws-use1-b' is the name of gateway b of sites[0] (aws-use1) (gateways: 2): their "
            "resources would have the same URNs; choose another name",
        ),
        (
            lambda raw: plus_site(raw, "vpn", previous_names=["gcp-euw3-b"]),
            "sites[2].previous_names[0]: 'gcp-euw3-b' is the name of gateway b of sites[1] (gcp-euw3) (gateways: 2): "
            "their resources would have the same URNs; choose another name",
        ),
        (  # an HA site's previous name carries its standby's aliases with it
            lambda raw: plus_site(ha_site(raw).update(previous_names=["old"]) or raw, "old-b"),
            "sites[2].name: 'old-b' is the name of gateway b of sites[0].previous_names[0] (gateways: 2): their "
            "resources would have the same URNs; choose another name",
        ),
        (  # its own standby
            lambda raw: ha_site(raw).update(previous_names=["aws-use1-b"]) or raw,
            "sites[0].previous_names[0]: 'aws-use1-b' is the name of gateway b of sites[0] (aws-use1) (gateways: 2): "
            "their resources would have the same URNs; choose another name",
        ),
    ],
)
def test_hostile_site_names_are_one_line_each(change: Any, line: str) -> None:
    assert refused(change(stack_raw("ha"))) == [line]


@pytest.mark.parametrize(
    "change",
    [
        lambda raw: plus_site(raw, "aws-use1-c"),  # not a letter wg-mesh uses
        lambda raw: plus_site(raw, "aws-use1-b2"),
        lambda raw: plus_site(raw, "gcp-euw3-a"),  # gateway a keeps the site's own names
        lambda raw: plus_site(raw, "vpn", previous_names=["aws-use1-bb"]),
    ],
)
def test_names_next_to_a_standbys_are_accepted(change: Any) -> None:
    """Both ways: the boundary names that collide with nothing pass validate."""
    load_mesh(change(stack_raw("ha")))


def test_a_single_gateway_sites_b_name_is_accepted_until_it_becomes_ha() -> None:
    raw = plus_site(stack_raw("ha"), "aws-use1-b")
    ha_site(raw)["gateways"] = 1
    load_mesh(copy.deepcopy(raw))
    ha_site(raw)["gateways"] = 2
    assert any("'aws-use1-b' is the name of gateway b of sites[0]" in p for p in refused(raw))


def test_the_standby_prefix_is_has_own() -> None:
    assert ha.child_name("x", ha.LETTERS[1]) == f"x-{names.STANDBY_LETTER}" and ha.LETTERS[1] == names.STANDBY_LETTER


@pytest.mark.parametrize("golden", sorted(GOLDEN_URNS.glob("*.txt")), ids=lambda p: p.name)
def test_no_other_site_name_meets_a_childs_name(golden: Path) -> None:
    """Every child of a site is `<site>-<suffix>`. A site named `<site>-<p>` would collide when some child suffix is
    `<p>-<q>` and `q` is a suffix a site's child has (same parent type): the only such `p` in every shipped stack is
    the standby's letter, which validate refuses (above). Read from the golden URNs, so a new child name is checked."""
    urns = golden.read_text().split()
    sites = {u.rsplit("::", 1)[1] for u in urns if re.search(r"\$wg-mesh:(aws|gcp|static):[A-Za-z]+::", u)}
    suffixes: dict[str, set[tuple[str, str]]] = {}  # parent type -> (type, child suffix)
    for urn in urns:
        chain, name = urn.split("::")[2], urn.rsplit("::", 1)[1]
        parent, typ = chain.split("$")[0], chain.split("$")[-1]
        for site in sites:
            if name.startswith(f"{site}-"):
                suffixes.setdefault(parent, set()).add((typ, name.removeprefix(f"{site}-")))
    meeting = {
        "-".join(parts[: i + 1])
        for found in suffixes.values()
        for typ, parts in ((typ, rest.split("-")) for typ, rest in found)
        for i in range(len(parts) - 1)
        if (typ, "-".join(parts[i + 1 :])) in found
    }
    assert meeting <= {names.STANDBY_LETTER}, meeting
