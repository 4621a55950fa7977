"""`wg-mesh init`'s sites and keys as flags give them: NAME:CLOUD:WHERE[:CIDR[,CIDR...]] and [SITE.]KEY=VALUE, turned
into the stack file's wg-mesh:mesh (its text, for the file). Pure; the command and its questions are
wg_mesh.cli.initcmd and wg_mesh.cli.initask.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from ipaddress import IPv4Network
from typing import Any

import yaml

from wg_mesh.config import ConfigError
from wg_mesh.tools.stackfile import CONFIG_KEY

CLOUDS = ("aws", "gcp", "static")
SPEC = "NAME:CLOUD:WHERE[:CIDR[,CIDR...]]"
GCP_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
DEFAULT_OVERLAY = "10.200.0.0/24"


def parse_site(spec: str, overlay_ip: str, gcp_project: str | None) -> dict[str, Any]:
    """One --site value as the stack file's site; ConfigError naming the flag (a usage error) if it is malformed."""
    parts = spec.split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise ConfigError([f"--site {spec}: expected {SPEC} (e.g. aws-use1:aws:us-east-1:10.10.0.0/16)"])
    name, cloud, where, cidrs = (*parts, "")[:4]
    if cloud not in CLOUDS:
        raise ConfigError([f"--site {spec}: cloud {cloud!r} is not one of {', '.join(CLOUDS)}"])
    site: dict[str, Any] = {"name": name, "cloud": cloud}
    if cloud == "aws":
        site["region"] = where
    elif cloud == "gcp":
        if gcp_project is None:
            raise ConfigError([f"--site {spec}: a GCP site needs --gcp-project PROJECT"])
        zone = where if GCP_ZONE.match(where) else f"{where}-a"
        site.update(project=gcp_project, region=zone.rsplit("-", 1)[0], zone=zone, workload_scope="network")
    else:
        site["endpoint"] = where
    site["overlay_ip"] = overlay_ip
    if cidrs:  # none: a single host with no network behind it (a site's networks are checked with the rest)
        site["cidrs"] = cidrs.split(",")
    return site


def apply_sets(mesh: dict[str, Any], sets: Sequence[str]) -> None:
    """`--set KEY=VALUE` (the mesh's key) or `--set SITE.KEY=VALUE` (a site's): VALUE read as YAML, so
    `route_table_ids=[rtb-1,rtb-2]` is a list. ConfigError naming the flag for a malformed one or an unknown site;
    the keys and values themselves are checked with the rest of the config."""
    sites = {site["name"]: site for site in mesh["sites"]}
    for text in sets:
        where, sep, raw = text.partition("=")
        name, dot, key = where.rpartition(".")
        if not sep or not key:
            raise ConfigError([f"--set {text}: expected KEY=VALUE or SITE.KEY=VALUE (e.g. aws-use1.vpc_id=vpc-0abc)"])
        if dot and name not in sites:
            raise ConfigError([f"--set {text}: no site {name!r} (the sites: {', '.join(sites)})"])
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        (sites[name] if dot else mesh)[key] = value


def mesh_dict(
    specs: Sequence[str], overlay_cidr: str, gcp_project: str | None, sets: Sequence[str] = ()
) -> dict[str, Any]:
    """The stack file's wg-mesh:mesh for these --site and --set values; ConfigError naming the flag for a malformed
    one (the keys and values themselves are the model's to check)."""
    try:
        hosts = [str(h) for h in IPv4Network(overlay_cidr).hosts()]
    except ValueError as exc:
        raise ConfigError([f"--overlay-cidr {overlay_cidr}: {exc}"]) from None
    if len(specs) > len(hosts):
        raise ConfigError([f"--overlay-cidr {overlay_cidr}: {len(hosts)} addresses for {len(specs)} sites"])
    sites = [parse_site(spec, hosts[i], gcp_project) for i, spec in enumerate(specs)]
    mesh: dict[str, Any] = {"overlay_cidr": overlay_cidr, "sites": sites}
    apply_sets(mesh, sets)
    return mesh


def stack_text(
    stack: str, specs: Sequence[str], overlay_cidr: str, gcp_project: str | None, sets: Sequence[str] = ()
) -> str:
    mesh = mesh_dict(specs, overlay_cidr, gcp_project, sets)
    header = (
        f"# {stack}: written by `wg-mesh init`. Check it offline: wg-mesh validate --stack {stack}\n"
        "# Every key: the configuration reference. GCP sites: workload_scope network lets every instance of the\n"
        "# network reach the other sites (narrow it with workload_tags or workload_service_accounts).\n"
    )
    return header + yaml.safe_dump({"config": {CONFIG_KEY: mesh}}, sort_keys=False, default_flow_style=None)
