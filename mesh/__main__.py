"""`python -m mesh`: offline commands that need no cloud account and no Pulumi CLI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mesh.config import ConfigError, MeshConfig, summary
from mesh.stackfile import load, stack_file

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mesh", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="check a stack's wg-mesh:mesh config; exit 2 on problems")
    _add_source(validate)
    validate.set_defaults(run=cmd_validate)
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
