"""The GCP HA agents' IAM Condition (wg_mesh.gcp.ha) against IAM's documented resource types and against another
stack: every type the expression names must be one IAM Conditions recognise (a clause on any other type narrows
nothing); it must admit the site's gateways, old and replacement, and its own address, and nothing of another stack
with the same site name in the same project and zones (issue 32: before, the instance prefix was the site's name
only, and addresses were not narrowed)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tests.conftest import ProgramRun
from tests.test_program import GCP_INSTANCE
from tests.test_program_ha import PROJECT_IAM, ha_raw, run_program
from wg_mesh.gcp import ha as gcp_ha
from wg_mesh.plan import ha, live

INSTANCE = "compute.googleapis.com/Instance"
SCOPE = live.scope("wg-mesh", "ha")
LOGICAL = [ha.vm_name(p, SCOPE) for p in ("gcp-euw3", "gcp-euw3-b")]
PREFIXES = [
    gcp_ha.instance_prefix("p", "europe-west3-a", LOGICAL[0]),
    gcp_ha.instance_prefix("p", "europe-west3-b", LOGICAL[1]),
]
ADDRESS = "gcp-euw3-address-1a2b3c4"


def named_types(expression: str) -> set[str]:
    """Every resource type the CEL expression compares `resource.type` with."""
    return set(re.findall(r'resource\.type\s*(?:==|!=)\s*"([^"]+)"', expression))


def unknown_types(expression: str) -> set[str]:
    return named_types(expression) - gcp_ha.DOCUMENTED_RESOURCE_TYPES


class Name(str):
    """`resource.name` with the CEL functions IAM supports on it (IAM docs, "Attribute reference for IAM
    Conditions": startsWith, endsWith, extract, ==, !=)."""

    def startsWith(self, prefix: str) -> bool:
        return self.startswith(prefix)

    def endsWith(self, suffix: str) -> bool:
        return self.endswith(suffix)

    def extract(self, template: str) -> str:
        """What the `{...}` of the template matches, up to the template's next fixed part; "" without a match."""
        before, _, rest = template.partition("{")
        after = rest.partition("}")[2]
        at = self.find(before)
        if at < 0:
            return ""
        tail = self[at + len(before) :]
        return tail.split(after, 1)[0] if after else tail


TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|\|\||&&|[^"|&]+')


def allows(expression: str, resource_type: str, name: str) -> bool:
    """The expression's verdict for one resource: CEL's `||`, `&&`, `==`, `!=`, parentheses, string literals and the
    resource attributes above, evaluated as Python (the strings are the program's own)."""
    python = "".join({"||": " or ", "&&": " and "}.get(t, t) for t in TOKENS.findall(expression))
    resource = SimpleNamespace(type=resource_type, name=Name(name))
    return bool(eval(python, {"__builtins__": {}}, {"resource": resource}))  # the program's own expression


def test_the_condition_names_only_resource_types_iam_conditions_recognise() -> None:
    expression = gcp_ha.condition_expression(PREFIXES, ADDRESS)
    assert named_types(expression) == {INSTANCE}
    assert not unknown_types(expression)
    # the check can fail: the expression before issue 21 named two types IAM does not know
    before = (
        '(resource.type != "compute.googleapis.com/Instance" || resource.name in ["x"]) && '
        '(resource.type != "compute.googleapis.com/Address" || resource.name == "y") && '
        '(resource.type != "compute.googleapis.com/BackendService" || resource.name == "z")'
    )
    assert unknown_types(before) == {"compute.googleapis.com/Address"}


def test_the_condition_admits_the_gateways_and_their_replacements_only() -> None:
    expression = gcp_ha.condition_expression(PREFIXES, ADDRESS)
    for name in (
        f"projects/p/zones/europe-west3-a/instances/{LOGICAL[0]}-1a2b3c4",
        f"projects/p/zones/europe-west3-a/instances/{LOGICAL[0]}-9f8e7d6",  # its replacement
        f"projects/p/zones/europe-west3-b/instances/{LOGICAL[1]}-0c0c0c0",
    ):
        assert allows(expression, INSTANCE, name), name
    for name in (
        "projects/p/zones/europe-west3-a/instances/database-1",
        f"projects/p/zones/europe-west3-a/instances/{LOGICAL[1]}-0c0c0c0",  # b's name in a's zone
        f"projects/q/zones/europe-west3-a/instances/{LOGICAL[0]}-1a2b3c4",  # another project
        "projects/p/zones/europe-west3-a/instances/gcp-euw3-instance-1a2b3c4",  # the name before issue 32
        f"projects/p/zones/europe-west3-a/instances/gcp-euw3-instance-{live.scope('wg-mesh', 'other')}-1a2b3c4",
    ):
        assert not allows(expression, INSTANCE, name), name
    region = "projects/p/regions/europe-west3"
    assert allows(expression, "", f"{region}/addresses/{ADDRESS}")
    assert allows(expression, "compute.googleapis.com/Address", f"{region}/addresses/{ADDRESS}")
    for other in ("gcp-euw3-address-9f8e7d6", f"{ADDRESS}x", "x"):
        assert not allows(expression, "", f"{region}/addresses/{other}"), other
    # what IAM does not narrow passes: the backend service, zone operations, the subnetwork; and an address IAM
    # would name otherwise (or not at all) is not refused either: the clause can only narrow
    for name in (f"{region}/backendServices/bs", "projects/p/zones/europe-west3-a/operations/op-1",
                 f"{region}/subnetworks/s", ""):  # fmt: skip
        assert allows(expression, "", name), name


def conditions(done: ProgramRun) -> set[str]:
    return {m.inputs["condition"]["expression"] for m in done.of_type(PROJECT_IAM)}


@pytest.fixture(scope="module")
def two_stacks() -> tuple[ProgramRun, ProgramRun]:
    """The same stack file as two Pulumi stacks of one project: same site names, same GCP project and zones."""
    runs = tuple(run_program(ha_raw(), preview=False, stack=stack) for stack in ("ha", "other"))
    assert all(r.error is None for r in runs)
    return runs  # type: ignore[return-value]


def test_another_stack_with_the_same_site_name_is_refused(two_stacks: tuple[ProgramRun, ProgramRun]) -> None:
    """Issue 32: both gateways' bindings (one condition) admit this stack's VMs, replacements (a new random suffix)
    and address; not the other stack's VMs of the same site, zones and project, nor its address."""
    ours, theirs = two_stacks
    (expression,) = conditions(ours)
    assert conditions(theirs) != {expression}

    def vms(done: ProgramRun) -> list[str]:
        found = [r for r in done.of_type(GCP_INSTANCE) if r.name.startswith("gcp-euw3")]
        assert len(found) == 2
        return [f"projects/my-project/zones/{r.inputs['zone']}/instances/{r.outputs['name']}" for r in found]

    for name in vms(ours):
        assert allows(expression, INSTANCE, name), name
        assert allows(expression, INSTANCE, name[:-7] + "0f0f0f0"), name  # its replacement
    for name in vms(theirs):
        assert not allows(expression, INSTANCE, name), name
    region = "projects/my-project/regions/europe-west3"
    address = ours.named("gcp:compute/address:Address", "gcp-euw3-address").outputs["name"]
    assert allows(expression, "", f"{region}/addresses/{address}")
    assert not allows(expression, "", f"{region}/addresses/gcp-euw3-address-0f0f0f0")  # theirs (Pulumi's suffix)


def test_the_binding_before_issue_32_admits_the_new_vms_during_the_upgrade(
    two_stacks: tuple[ProgramRun, ProgramRun],
) -> None:
    """The upgrade replaces every GCP HA gateway (agent.json pins the agent bundle's SHA-256, which this version
    changes), and the new VMs carry the scoped name. The binding of the previous version (`<site>-instance-` prefixes)
    is replaced create-before-delete, so it stays until the end of `up`: it admits the new VMs too (their names
    start with its prefixes), so no gateway is without its rights at any step. The VMs keep their resource: an alias
    names their logical name before issue 32."""
    ours, _ = two_stacks
    for letter_prefix, (logical, zone) in zip(("gcp-euw3", "gcp-euw3-b"), zip(LOGICAL, ("a", "b"), strict=True),
                                              strict=True):  # fmt: skip
        previous = gcp_ha.instance_prefix("my-project", f"europe-west3-{zone}", f"{letter_prefix}-instance")
        vm = ours.named(GCP_INSTANCE, logical)
        assert f"projects/my-project/zones/europe-west3-{zone}/instances/{vm.outputs['name']}".startswith(previous)
        assert ours.options(GCP_INSTANCE, logical).aliases == (f"{letter_prefix}-instance",)
