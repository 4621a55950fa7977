"""`wg-mesh init`: a stack file for a topology, from --site flags or, in a terminal, from questions (each site;
for a cloud site, a new network or an existing one's ids; a malformed answer is said and asked again).

Each site is NAME:CLOUD:WHERE[:CIDR[,CIDR...]] where WHERE is an AWS region, a GCP zone (or region: its zone `-a`),
or a static site's public IPv4 address (`dynamic` for one with no fixed address: `office:static:dynamic:10.50.0.0/24`);
`--set [SITE.]KEY=VALUE` gives any other key (an existing network's ids,
an instance type, delivery). Overlay addresses are given in order from --overlay-cidr. The text is
validated exactly as `wg-mesh validate` reads a file before it is written; an existing file is never overwritten.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import yaml

from wg_mesh.config import ConfigError, MeshConfig, summary
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import CONFIG_KEY, parse

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


def stack_text(
    stack: str, specs: Sequence[str], overlay_cidr: str, gcp_project: str | None, sets: Sequence[str] = ()
) -> str:
    try:
        hosts = [str(h) for h in IPv4Network(overlay_cidr).hosts()]
    except ValueError as exc:
        raise ConfigError([f"--overlay-cidr {overlay_cidr}: {exc}"]) from None
    if len(specs) > len(hosts):
        raise ConfigError([f"--overlay-cidr {overlay_cidr}: {len(hosts)} addresses for {len(specs)} sites"])
    sites = [parse_site(spec, hosts[i], gcp_project) for i, spec in enumerate(specs)]
    mesh: dict[str, Any] = {"overlay_cidr": overlay_cidr, "sites": sites}
    apply_sets(mesh, sets)
    header = (
        f"# {stack}: written by `wg-mesh init`. Check it offline: wg-mesh validate --stack {stack}\n"
        "# Every key: the configuration reference. GCP sites: workload_scope network lets every instance of the\n"
        "# network reach the other sites (narrow it with workload_tags or workload_service_accounts).\n"
    )
    return header + yaml.safe_dump({"config": {CONFIG_KEY: mesh}}, sort_keys=False, default_flow_style=None)


EXISTING = {  # per cloud: the questions for an existing network, as (key, question, a list?)
    "aws": (
        ("vpc_id", "existing VPC id (empty: wg-mesh creates the VPC)", False),
        ("subnet_id", "its public subnet for the gateway (subnet-...)", False),
        ("route_table_ids", "the route tables that get routes to the other sites (rtb-..., comma-separated)", True),
    ),
    "gcp": (
        ("network", "existing network, name or self link (empty: wg-mesh creates the network)", False),
        ("subnetwork", "its subnetwork for the gateway, name or self link", False),
    ),
}


def ask_site(read: Callable[[str], str], number: int) -> tuple[str, list[str]] | None:
    """One site's spec and, for a cloud site, its existing network as --set values; asked again until the spec
    parses (the problem printed); None: the list is finished (an empty answer)."""
    while True:
        spec = read(f"site {number} (empty to finish): ").strip()
        if not spec:
            return None
        try:
            site = parse_site(spec, "0.0.0.0", "-")  # the form only: addresses and project come later
        except ConfigError as exc:
            print(*exc.problems, sep="\n")
            continue
        sets: list[str] = []
        for key, question, listed in EXISTING.get(site["cloud"], ()):
            answer = read(f"  {site['name']}: {question}: ").strip()
            if not answer:
                break  # a new network: no more questions (the model wants all of an existing network's ids or none)
            value = f"[{answer}]" if listed else answer
            sets.append(f"{site['name']}.{key}={value}")
        return spec, sets


def ask(read: Callable[[str], str], gcp_project: str | None) -> tuple[list[str], str | None, list[str]]:
    """The sites, asked one at a time (an empty answer ends the list), each cloud site's network (new, or an
    existing one's ids), and the GCP project if a GCP site needs it."""
    print(f"Sites, one a line as {SPEC}; WHERE is an AWS region, a GCP zone, a static site's public IPv4 or dynamic.")
    specs: list[str] = []
    sets: list[str] = []
    while (answer := ask_site(read, len(specs) + 1)) is not None:
        specs.append(answer[0])
        sets.extend(answer[1])
    if gcp_project is None and any(s.split(":")[1:2] == ["gcp"] for s in specs):
        gcp_project = read("GCP project for the GCP sites: ").strip() or None
    return specs, gcp_project, sets


def init(args: argparse.Namespace, path: Path, read: Callable[[str], str] = input) -> MeshConfig:
    """Write the stack file at `path` and return its config; ConfigError for a flag's (usage) or the config's
    problem, with nothing written."""
    if path.exists():
        raise ConfigError([f"--stack {args.stack}: {path} exists; wg-mesh init never overwrites a stack file"])
    specs, project, sets = list(args.site or []), args.gcp_project, list(args.set or ())
    if not specs:
        if not sys.stdin.isatty():
            raise ConfigError([f"--site: give one per site ({SPEC}), or run in a terminal to be asked"])
        specs, project, asked = ask(read, project)
        sets = asked + sets  # a --set given with the questions still wins
    text = stack_text(args.stack, specs, args.overlay_cidr, project, sets)
    cfg = load_mesh(parse(text, path)["config"][CONFIG_KEY])
    with path.open("x", encoding="utf-8") as out:  # "x": another writer in between is not overwritten either
        out.write(text)
    return cfg


def report(cfg: MeshConfig, path: Path, stack: str) -> str:
    return (
        f"wrote {path}\n{summary(cfg)}\n"
        f"next: edit it (instance types, existing networks...), then `wg-mesh validate --stack {stack}`,"
        f" `pulumi stack init {stack}`, `pulumi preview`\n"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", required=True, help="write Pulumi.STACK.yaml in the current directory")
    parser.add_argument(
        "--site", action="append", metavar=SPEC, help="a site (repeat for each); none: asked, in a terminal"
    )
    parser.add_argument("--gcp-project", metavar="PROJECT", help="the GCP project of the GCP sites")
    parser.add_argument(
        "--set",
        action="append",
        metavar="[SITE.]KEY=VALUE",
        help="any other key of the mesh or of a site, VALUE as YAML: an existing network "
        "(SITE.vpc_id=..., SITE.subnet_id=..., SITE.route_table_ids=[...]; GCP: SITE.network=..., SITE.subnetwork=...),"
        " SITE.instance_type=..., delivery=live",
    )
    parser.add_argument(
        "--overlay-cidr", default=DEFAULT_OVERLAY, help=f"the tunnel addresses, one a site (default {DEFAULT_OVERLAY})"
    )
