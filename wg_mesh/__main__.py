"""`python -m wg_mesh`: offline commands that need no cloud account and no Pulumi CLI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wg_mesh.config import ConfigError, MeshConfig, summary
from wg_mesh.gateway import doctor
from wg_mesh.lab.cli import add_arguments as add_lab_arguments
from wg_mesh.lab.cli import cmd_lab
from wg_mesh.tools import cost, monitoring
from wg_mesh.tools.stackfile import load, stack_file

EXIT_INVALID = 2


def _add_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="read Pulumi.STACK.yaml in the current directory")
    source.add_argument("--file", type=Path, help="read this stack file")


def _load(args: argparse.Namespace) -> MeshConfig:
    path = args.file if args.file is not None else stack_file(args.stack)
    return load(path)


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = _load(args)
    print(summary(cfg))
    return 0


def cmd_monitoring(args: argparse.Namespace) -> int:
    cfg = _load(args)
    source = f"stack {args.stack} (Pulumi.{args.stack}.yaml)" if args.stack else args.file.name
    ha_gateways = None
    if args.ha_gateways is not None:
        try:
            ha_gateways = monitoring.parse_ha_gateways(args.ha_gateways.read_text(), cfg)
        except (OSError, ValueError) as exc:
            print(f"{args.ha_gateways}: {exc}", file=sys.stderr)
            return 2
    for path in monitoring.write(cfg, source, args.out, ha_gateways):
        print(f"wrote {path}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    return doctor.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m wg_mesh", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="check a stack's wg-mesh:mesh config; exit 2 on problems")
    _add_source(validate)
    validate.set_defaults(run=cmd_validate)
    rules = commands.add_parser("monitoring", help="write a stack's Prometheus rules and scrape job to --out")
    _add_source(rules)
    rules.add_argument("--out", type=Path, required=True, help="directory for the rules and the scrape job")
    rules.add_argument(
        "--ha-gateways",
        type=Path,
        help="`pulumi stack output ha_gateways --json` saved to a file: scrape HA gateways by their VPC addresses",
    )
    rules.set_defaults(run=cmd_monitoring)
    check = commands.add_parser("doctor", help="check this gateway's WireGuard, forwarding, routes; exit 1 on failure")
    doctor.add_arguments(check)
    check.set_defaults(run=cmd_doctor)
    prices = commands.add_parser("cost", help="monthly cost of joining us-east-1 and us-east4, four ways, with sources")
    cost.add_arguments(prices)
    prices.set_defaults(run=cost.run)
    lab = commands.add_parser("lab", help="bring the mesh up in network namespaces and check it (root)")
    add_lab_arguments(lab)
    lab.set_defaults(run=cmd_lab)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
