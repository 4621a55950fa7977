"""The GCP HA agents' IAM Condition (wg_mesh.gcp.ha) against IAM's documented resource types, pure: every type the
expression names must be one IAM Conditions recognises (a clause on any other type narrows nothing), and the
clause it has must admit the site's gateways, old and replacement, and nothing else."""

from __future__ import annotations

import re

from wg_mesh.gcp import ha as gcp_ha

PREFIXES = [
    gcp_ha.instance_prefix("p", "europe-west3-a", "gcp-euw3-instance"),
    gcp_ha.instance_prefix("p", "europe-west3-b", "gcp-euw3-b-instance"),
]


def named_types(expression: str) -> set[str]:
    """Every resource type the CEL expression compares `resource.type` with."""
    return set(re.findall(r'resource\.type\s*(?:==|!=)\s*"([^"]+)"', expression))


def unknown_types(expression: str) -> set[str]:
    return named_types(expression) - gcp_ha.DOCUMENTED_RESOURCE_TYPES


def allows(expression: str, resource_type: str, name: str) -> bool:
    """The expression's verdict for one resource, for the shape condition_expression builds (a tiny evaluator:
    `resource.type != T || startsWith(...) || ...`)."""
    first, *rest = expression.split(" || ")
    (negated,) = named_types(first)
    prefixes = [re.fullmatch(r'resource\.name\.startsWith\("([^"]+)"\)', r) for r in rest]
    assert all(prefixes), expression
    return resource_type != negated or any(name.startswith(p.group(1)) for p in prefixes if p)


def test_the_condition_names_only_resource_types_iam_conditions_recognise() -> None:
    expression = gcp_ha.condition_expression(PREFIXES)
    assert named_types(expression) == {"compute.googleapis.com/Instance"}
    assert not unknown_types(expression)
    # the check can fail: the expression before issue 21 named two types IAM does not know
    before = (
        '(resource.type != "compute.googleapis.com/Instance" || resource.name in ["x"]) && '
        '(resource.type != "compute.googleapis.com/Address" || resource.name == "y") && '
        '(resource.type != "compute.googleapis.com/BackendService" || resource.name == "z")'
    )
    assert unknown_types(before) == {"compute.googleapis.com/Address"}


def test_the_condition_admits_the_gateways_and_their_replacements_only() -> None:
    expression = gcp_ha.condition_expression(PREFIXES)
    instance = "compute.googleapis.com/Instance"
    for name in (
        "projects/p/zones/europe-west3-a/instances/gcp-euw3-instance-1a2b3c4",
        "projects/p/zones/europe-west3-a/instances/gcp-euw3-instance-9f8e7d6",  # its replacement
        "projects/p/zones/europe-west3-b/instances/gcp-euw3-b-instance-0c0c0c0",
    ):
        assert allows(expression, instance, name), name
    for name in (
        "projects/p/zones/europe-west3-a/instances/database-1",
        "projects/p/zones/europe-west3-a/instances/gcp-euw3-b-instance-0c0c0c0",  # b's name in a's zone
        "projects/q/zones/europe-west3-a/instances/gcp-euw3-instance-1a2b3c4",  # another project
        "projects/p/zones/europe-west3-a/instances/gcp-euw3-instancex",
    ):
        assert not allows(expression, instance, name), name
    # other types pass: IAM would not narrow them anyway (wg_mesh.gcp.ha's docstring says what that grants)
    assert allows(expression, "", "projects/p/regions/europe-west3/addresses/gcp-euw3-address-1")
