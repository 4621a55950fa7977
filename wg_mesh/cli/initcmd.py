"""`wg-mesh init`: a stack file for a topology, from --site flags or, in a terminal, from questions (each site;
for a cloud site, a new network or an existing one's ids and the gateway's size, priced; each answer checked when it
is given and asked again if wrong: wg_mesh.cli.initask).

Each site is NAME:CLOUD:WHERE[:CIDR[,CIDR...]] where WHERE is an AWS region, a GCP zone (or region: its zone `-a`),
or a static site's public IPv4 address (`dynamic` for one with no fixed address: `office:static:dynamic:10.50.0.0/24`);
`--set [SITE.]KEY=VALUE` gives any other key (an existing network's ids,
an instance type, delivery). Overlay addresses are given in order from --overlay-cidr. The text is
validated exactly as `wg-mesh validate` reads a file before it is written; an existing file is never overwritten.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from wg_mesh.cli import initask
from wg_mesh.cli.initspec import DEFAULT_OVERLAY, SPEC, mesh_dict, stack_text
from wg_mesh.config import ConfigError, MeshConfig, StaticSite, summary
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import CONFIG_KEY, parse


def init(args: argparse.Namespace, path: Path, read: Callable[[str], str] = input) -> MeshConfig:
    """Write the stack file at `path` and return its config; ConfigError for a flag's (usage) or the config's
    problem, with nothing written. In a terminal with no --site, the sites are asked (wg_mesh.cli.initask)."""
    if path.exists():
        raise ConfigError([f"--stack {args.stack}: {path} exists; wg-mesh init never overwrites a stack file"])
    specs, project, sets = list(args.site or []), args.gcp_project, list(args.set or ())
    if specs:
        return _write(path, stack_text(args.stack, specs, args.overlay_cidr, project, sets))
    if not sys.stdin.isatty():
        raise ConfigError([f"--site: give one per site ({SPEC}), or run in a terminal to be asked"])
    mesh_dict((), args.overlay_cidr, project)  # a bad --overlay-cidr before the first question, not after
    answers = initask.Answers(args.stack, args.overlay_cidr, project)
    initask.ask(read, answers)
    answers.sets += sets  # a --set given with the questions still wins
    try:
        return _write(path, stack_text(args.stack, answers.specs, args.overlay_cidr, answers.gcp_project, answers.sets))
    except ConfigError as exc:  # the answers were checked: only a --set given with them can be wrong here
        raise ConfigError([*exc.problems, f"nothing written. Your answers: {answers.command()}"]) from None


def _write(path: Path, text: str) -> MeshConfig:
    cfg = load_mesh(parse(text, path)["config"][CONFIG_KEY])
    with path.open("x", encoding="utf-8") as out:  # "x": another writer in between is not overwritten either
        out.write(text)
    return cfg


def report(cfg: MeshConfig, path: Path, stack: str) -> str:
    """What was written, and the newcomer's path from here to a checked mesh, each step one command."""
    steps = [
        f"wg-mesh validate --stack {stack}            # after any edit (instance types, existing networks...)",
        f"wg-mesh plan --stack {stack}                # what pulumi up creates, and what a change would replace",
        f"wg-mesh cost --stack {stack}                # the gateways' idle month",
        f"sudo .venv/bin/wg-mesh lab --stack {stack}  # this mesh in network namespaces, checked (as root: no sudo)",
        f"pulumi stack init {stack} && pulumi preview --stack {stack} && pulumi up --stack {stack}",
    ]
    if any(not isinstance(site, StaticSite) and site.uses_existing_network for site in cfg.sites):
        steps.append("your networks' security groups and firewalls: the checklist in docs/how-to/existing-networks.md")
    if any(isinstance(site, StaticSite) for site in cfg.sites):
        steps.append(
            f"each static site: its files (wg-mesh render --stack {stack} --site NAME shows them), installed "
            "as docs/how-to/static-sites.md says"
        )
    steps.append("on a gateway, as root, check it: python3 -m wg_mesh.gateway.doctor (docs/how-to/troubleshooting.md)")
    return f"wrote {path}\n{summary(cfg)}\nnext:\n" + "".join(f"  {line}\n" for line in steps)


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
