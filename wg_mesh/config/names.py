"""The logical names a site's resources are registered under (the name part of their URNs): unique by construction.

A site component is named after its site and each of its children after the component (`<site>-eip`, `<site>-key`,
...); gateway b of a `gateways: 2` site is `<site>-b-...` (wg_mesh.plan.ha.child_name), and each previous name is an
alias that Pulumi carries over to every child (`<old>-eip`, `<old>-b-instance`: wg_mesh.component.site_options). A URN
holds the type chain and this name, not the parent's name, so a site named `<ha-site>-b`, or a previous name equal to
it, would register or alias the URN of the HA site's gateway b: the engine stops the update at the second registration
("Duplicate resource URN"), part-way through a `pulumi up`. validate refuses those configs here, one line each; the
name-against-name cases (a previous name that is a site's name or another site's previous name) are
wg_mesh.config.rules.previous_name_problems. Every other child suffix is a fixed word or a CIDR slug that no site suffix
reaches (tests/test_component_contract.py checks the golden URNs for it). An AWS instance of another architecture than
x86_64 ends in `-instance-arm64` (wg_mesh.aws.facts.instance_suffix): after `-instance`, which ends every gateway's
instance name, so it adds no prefix to check here (tests/test_program_arch_move.py enumerates the near misses).

Two Mesh components in one program share the same space (their children's type chains are the same), and the cloud
names derived from a site's name (GCP network tags, HA lease tables and load balancers) are per project and stack, not
per Mesh: `claimed` gives what a mesh takes, and a second Mesh that meets one of those is refused (wg_mesh.mesh).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

STANDBY_LETTER = "b"  # wg_mesh.plan.ha.LETTERS[1]; ha.child_name(site, "b") is f"{site}-b" (a test ties them)
HA_GATEWAYS = 2


def declared(site: Mapping[str, Any]) -> dict[str, str]:
    """The names a site declares (its name, its previous names) -> where, as a field path under the site."""
    found: dict[str, str] = {}
    if isinstance(name := site.get("name"), str):
        found[name] = "name"
    previous = site.get("previous_names")
    for j, old in enumerate(previous if isinstance(previous, list) else []):
        if isinstance(old, str):
            found.setdefault(old, f"previous_names[{j}]")
    return found


def standby_prefixes(site: Mapping[str, Any]) -> dict[str, str]:
    """The name prefixes of gateway b's resources and their aliases (`gateways: 2`) -> which declared name made it."""
    if site.get("gateways") != HA_GATEWAYS:
        return {}
    return {f"{name}-{STANDBY_LETTER}": where for name, where in declared(site).items()}


def claimed(sites: Sequence[Mapping[str, Any]]) -> set[str]:
    """Every name prefix the sites' resources are registered or aliased under."""
    return {name for site in sites for name in (*declared(site), *standby_prefixes(site))}


def name_problems(sites: Sequence[Mapping[str, Any]]) -> list[str]:
    """A site name or previous name that is the prefix of an HA site's gateway b (its own included): one line each.
    `sites` are parsed sites' fields or the raw input; values of the wrong type are left to field validation."""
    standby = {prefix: (j, where) for j, site in enumerate(sites) for prefix, where in standby_prefixes(site).items()}
    problems = []
    for i, site in enumerate(sites):
        for name, field in declared(site).items():
            if name in standby:
                j, where = standby[name]
                made = f"sites[{j}].{where}" if where != "name" else f"sites[{j}] ({sites[j].get('name')})"
                problems.append(
                    f"sites[{i}].{field}: {name!r} is the name of gateway b of {made} (gateways: {HA_GATEWAYS}): "
                    "their resources would have the same URNs; choose another name"
                )
    return problems
