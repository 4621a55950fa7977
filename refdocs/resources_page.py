"""docs/reference/resources.md: the resources `pulumi up` creates per site, from the program run under mocks
(wg_mesh.cli.plancmd, as `wg-mesh plan` runs it) on a few fixed configs, with what replaces each (the program's
replace_on_changes, AWS's user_data_replace_on_change, the provider's force-new inputs: wg_mesh/plan/forcenew.py)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from refdocs import md
from wg_mesh.cli import plancmd
from wg_mesh.plan import forcenew, live, preview

SOURCE = "the program run under mocks on the example configs in refdocs/resources_page.py (wg_mesh/cli/plancmd.py)"
AWS = {"name": "aws-use1", "cloud": "aws", "region": "us-east-1", "overlay_ip": "10.200.0.1", "cidrs": ["10.10.0.0/16"]}
GCP = {
    "name": "gcp-euw3",
    "cloud": "gcp",
    "project": "my-project",
    "region": "europe-west3",
    "zone": "europe-west3-a",
    "overlay_ip": "10.200.0.2",
    "cidrs": ["10.100.0.0/16"],
    "workload_scope": "network",
}
STATIC = {
    "name": "vps-fra",
    "cloud": "static",
    "endpoint": "203.0.113.7",
    "overlay_ip": "10.200.0.3",
    "cidrs": ["192.168.50.0/24"],
}
EXISTING = {
    "aws-use1": {"vpc_id": "vpc-0abc1234", "subnet_id": "subnet-0abc1234", "route_table_ids": ["rtb-0abc1234"]},
    "gcp-euw3": {"network": "my-network", "subnetwork": "my-subnet"},
}  # fmt: skip
CONFIGS: dict[str, Any] = {
    "new networks": {"overlay_cidr": "10.200.0.0/24", "sites": [AWS, GCP, STATIC]},
    "existing networks": {"overlay_cidr": "10.200.0.0/24",
                          "sites": [{**AWS, **EXISTING["aws-use1"]}, {**GCP, **EXISTING["gcp-euw3"]}, STATIC]},
    "delivery: live": {"overlay_cidr": "10.200.0.0/24", "delivery": "live", "sites": [AWS, GCP, STATIC]},
    "gateways: 2": {"overlay_cidr": "10.200.0.0/24", "delivery": "live",
                    "sites": [{**AWS, "gateways": 2}, {**GCP, "gateways": 2}, STATIC]},
}  # fmt: skip
CIDR = re.compile(r"\d+-\d+-\d+-\d+-\d+$")


SCOPE = live.scope("wg-mesh", "example")  # the project and stack the configs run as (_runs)


def pattern(name: str, site: str | None) -> str:
    """A resource's name as a pattern: `<site>` for the site's name, `<scope>` for the stack's (an HA VM's name),
    `<cidr>` for a range, `<n>` for a route table's index."""
    if site is not None:
        name = "<site>" + name[len(site) :]
    name = name.replace(SCOPE, "<scope>")
    name = CIDR.sub("<cidr>", name)
    return re.sub(r"-route-\d+-", "-route-<n>-", name)


@cache
def _runs() -> dict[str, list[preview.Resource]]:
    with tempfile.TemporaryDirectory() as directory:
        out = {}
        for title, raw in CONFIGS.items():
            path = Path(directory) / "Pulumi.example.yaml"
            path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
            out[title] = plancmd.plan_file(path, project="wg-mesh", stack="example").resources
    return out


Key = tuple[str, str]  # short type, name pattern
Row = tuple[str, str, int]  # replaced on a change of, notes, count


def _rows(resources: Sequence[preview.Resource], site: str | None, sites: Sequence[str]) -> dict[Key, Row]:
    rows: dict[Key, Row] = {}
    for r in resources:
        if not r.listed or preview.site_of(r.name, sites) != site:
            continue
        by = ", ".join(md.code(k) + ("" if who == "provider" else f" ({who})") for k, who in preview.replaces(r))
        notes = []
        if r.delete_before_replace:
            notes.append("deleted before its replacement")
        if r.protect:
            notes.append("protected")
        if r.secret:
            notes.append("secret: " + ", ".join(md.code(k) for k in sorted(r.secret)))
        key = (md.code(preview.short_type(r.type)), md.code(pattern(r.name, site)))
        count = rows[key][2] + 1 if key in rows else 1
        rows[key] = (by or "—", "; ".join(notes), count)
    return rows


def _table(rows: dict[Key, Row]) -> list[str]:
    if not rows:
        return ["Nothing.", ""]
    columns = ("type", "name", "count", "replaced on a change of", "notes")
    return md.table(columns, [(t, n, str(c), by, notes) for (t, n), (by, notes, c) in sorted(rows.items())])


def _section(title: str, site: str | None, base: str, extra: str | None = None) -> list[str]:
    runs = _runs()
    sites = [s["name"] for s in CONFIGS[base]["sites"]]
    rows = _rows(runs[base], site, sites)
    if extra is None:
        return [f"### {title}", "", *_table(rows)]
    more = _rows(runs[extra], site, sites)
    added = {
        key: (by, notes, count - (rows[key][2] if key in rows else 0))
        for key, (by, notes, count) in more.items()
        if count > (rows[key][2] if key in rows else 0)
    }
    return [f"### {title}", "", f"In addition to the ones with {base}:", "", *_table(added)]


def render() -> str:
    lines = md.header("Resources per cloud", SOURCE)
    lines += [
        "What `pulumi up` creates per site, as the program declares it: run under Pulumi's mocks on the example",
        "configs below (no cloud), the way `wg-mesh plan --stack NAME` lists your own stack. `<site>` is the site's",
        "name, `<scope>` a hash of the Pulumi project and stack, `<cidr>` a range (the overlay's and each other",
        "site's: one route per range and route table), `<n>` a route table's index. *Replaced on a change of*: the",
        "inputs whose change makes a new resource — the program's",
        "`replace_on_changes` (program), AWS's `user_data_replace_on_change` (user data), and the provider's",
        "force-new inputs of those the program sets (from the Terraform providers' schemas the Pulumi providers wrap:",
        "`wg_mesh/plan/forcenew.py` names each source; a change anywhere under a nested input counts). What a change",
        "does to traffic: [Replacements](../concepts/replacements.md); the prose: [What up creates]"
        "(../concepts/what-up-creates.md).",
        "",
        "The example: an AWS site (`aws-use1`), a GCP site (`gcp-euw3`) and a static site (`vps-fra`); overlay",
        "`10.200.0.0/24`; components (`wg-mesh:*`) and the explicit providers are not listed.",
        "",
    ]  # fmt: skip
    for cloud, site in (("AWS site", "aws-use1"), ("GCP site", "gcp-euw3")):
        lines += [f"## {cloud}", ""]
        lines += _section("New networks (`delivery: user-data`)", site, "new networks")
        lines += _section("Existing networks", site, "existing networks")
        lines += _section("`delivery: live` extras", site, "new networks", "delivery: live")
        lines += _section("HA pair extras (`gateways: 2`, live)", site, "delivery: live", "gateways: 2")
    lines += ["## Static site", ""]
    lines += _section("`delivery: user-data`", "vps-fra", "new networks")
    lines += _section("`delivery: live` extras", "vps-fra", "new networks", "delivery: live")
    lines += ["## Mesh-wide", ""]
    lines += _section("`delivery: user-data`", None, "new networks")
    lines += _section("`delivery: live` extras", None, "new networks", "delivery: live")
    uncovered = sorted({r.type for rs in _runs().values() for r in rs if not forcenew.covered(r.type)})
    if uncovered:
        raise KeyError(f"types without force-new inputs in wg_mesh/plan/forcenew.py: {uncovered}")
    return md.page(lines)
