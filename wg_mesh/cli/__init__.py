"""`wg-mesh` (`python -m wg_mesh`): offline commands that need no cloud account and no Pulumi CLI."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from wg_mesh import __version__
from wg_mesh.cli import helptext as clihelp
from wg_mesh.cli import initcmd as cliinit
from wg_mesh.cli import plancmd as cliplan
from wg_mesh.cli import rendercmd as clirender
from wg_mesh.cli.helptext import EXIT_CONFIG, EXIT_USAGE
from wg_mesh.config import ConfigError, MeshConfig, summary
from wg_mesh.gateway import doctor
from wg_mesh.lab.cli import add_arguments as add_lab_arguments
from wg_mesh.lab.cli import cmd_lab
from wg_mesh.tools import cost, hagateways, monitoring
from wg_mesh.tools.stackfile import load, stack_file

PROG = "wg-mesh"


def _add_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="read Pulumi.STACK.yaml in the current directory")
    source.add_argument("--file", type=Path, help="read this stack file")


def stacks_here(directory: Path) -> list[str]:
    """The stacks whose files are in `directory` (Pulumi.NAME.yaml; Pulumi.yaml is the project, not a stack)."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in directory.glob("Pulumi.?*.yaml"))


def missing_stack(stack: str, directory: Path) -> ConfigError:
    """A wrong --stack: the stacks there are, and the nearest name."""
    known = stacks_here(directory)
    if not known:
        there = f"no Pulumi.NAME.yaml in {directory}; pass --file PATH, or run from the directory with the stack files"
    else:
        near = difflib.get_close_matches(stack, known, n=1)
        there = f"the stacks in {directory}: {', '.join(known)}" + (f" (did you mean {near[0]}?)" if near else "")
    return ConfigError([f"--stack {stack}: no stack file Pulumi.{stack}.yaml; {there}"])


def _check_source(args: argparse.Namespace) -> None:
    """Every command that reads a stack: a --stack or --file that is not there is a usage error, before anything
    runs; a wrong stack name lists the stacks there are."""
    if args.run is cmd_init:
        return  # it writes the stack file
    stack, file = getattr(args, "stack", None), getattr(args, "file", None)
    if file is not None and not file.exists():
        raise ConfigError([f"--file {file}: no such stack file"])
    if stack is not None and file is None and not stack_file(stack).is_file():
        raise missing_stack(stack, Path.cwd())


def _load(args: argparse.Namespace) -> MeshConfig:
    path = args.file if args.file is not None else stack_file(args.stack)
    return load(path)


def split_problem(problem: str) -> dict[str, str]:
    """One of ConfigError's lines ("sites[1].cidrs[0]: message") as {"path", "message"}; path "" if it has none."""
    path, sep, message = problem.partition(": ")
    return {"path": path, "message": message} if sep else {"path": "", "message": problem}


def validation(args: argparse.Namespace, cfg: MeshConfig | None, problems: Sequence[str]) -> dict[str, object]:
    """`validate --json`: the verdict for machines. `warnings` is always a list (the model has none to give yet)."""
    return {
        "ok": cfg is not None,
        "stack": args.stack,
        "file": str(args.file if args.file is not None else stack_file(args.stack)),
        "summary": summary(cfg) if cfg is not None else None,
        "errors": [split_problem(p) for p in problems],
        "warnings": [],
    }


def cmd_validate(args: argparse.Namespace) -> int:
    if not args.json:
        print(summary(_load(args)))
        return 0
    try:
        cfg = _load(args)
    except ConfigError as exc:
        print(json.dumps(validation(args, None, exc.problems), indent=2))
        return EXIT_CONFIG
    print(json.dumps(validation(args, cfg, []), indent=2))
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    path = stack_file(args.stack)
    cfg = cliinit.init(args, path)
    sys.stdout.write(cliinit.report(cfg, path, args.stack))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    cfg = _load(args)
    path = args.file if args.file is not None else stack_file(args.stack)
    stack = args.stack or clirender.stack_name(path)
    label = f"stack {args.stack} ({path.name})" if args.stack else str(path)
    text = clirender.render_site(
        cfg,
        args.site,
        project=clirender.project_name(path),
        stack=stack,
        label=label,
        parts=tuple(args.part or clirender.PARTS),
        show_secrets=args.show_secrets,
    )
    sys.stdout.write(text)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    return cliplan.run(args, args.file if args.file is not None else stack_file(args.stack))


def cmd_monitoring(args: argparse.Namespace) -> int:
    cfg = _load(args)
    source = f"stack {args.stack} (Pulumi.{args.stack}.yaml)" if args.stack else args.file.name
    ha_gateways = None
    if args.ha_gateways is not None:
        try:
            ha_gateways = hagateways.parse_ha_gateways(args.ha_gateways.read_text(), cfg)
        except (OSError, ValueError) as exc:
            print(f"{args.ha_gateways}: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    for path in monitoring.write(cfg, source, args.out, ha_gateways):
        print(f"wrote {path}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    return doctor.run(args)


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, epilog: str
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name, help=help, description=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, epilog=clihelp.MAIN, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--no-color", action="store_true", help="no colour in any output (as NO_COLOR=1 does)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    new = _command(commands, "init", "write a stack file for your sites, then validate it", clihelp.INIT)
    cliinit.add_arguments(new)
    new.set_defaults(run=cmd_init)
    validate = _command(
        commands, "validate", "check a stack's wg-mesh:mesh config; exit 1 on problems", clihelp.VALIDATE
    )
    _add_source(validate)
    validate.add_argument(
        "--json",
        action="store_true",
        help='print {"ok", "stack", "file", "summary", "errors": [{"path", "message"}], "warnings"} on stdout, '
        "also when the config is invalid (exit 1); usage errors stay text on stderr (exit 2)",
    )
    validate.set_defaults(run=cmd_validate)
    show = _command(commands, "render", "print a site's wg0.conf and user data, secrets masked", clihelp.RENDER)
    _add_source(show)
    clirender.add_arguments(show)
    show.set_defaults(run=cmd_render)
    plan = _command(
        commands, "plan", "list per site what pulumi up creates and what a config change replaces", clihelp.PLAN
    )
    _add_source(plan)
    cliplan.add_arguments(plan)
    plan.set_defaults(run=cmd_plan)
    rules = _command(
        commands, "monitoring", "write a stack's Prometheus rules and scrape job to --out", clihelp.MONITORING
    )
    _add_source(rules)
    rules.add_argument("--out", type=Path, required=True, help="directory for the rules and the scrape job")
    rules.add_argument(
        "--ha-gateways",
        type=Path,
        help="`pulumi stack output ha_gateways --json` saved to a file: scrape HA gateways by their VPC addresses",
    )
    rules.set_defaults(run=cmd_monitoring)
    check = _command(
        commands, "doctor", "check this gateway's WireGuard, forwarding, routes; exit 1 on failure", clihelp.DOCTOR
    )
    doctor.add_arguments(check)
    check.set_defaults(run=cmd_doctor)
    prices = _command(
        commands, "cost", "monthly cost of joining us-east-1 and us-east4, four ways, with sources", clihelp.COST
    )
    cost.add_arguments(prices)
    prices.set_defaults(run=cost.run)
    lab = _command(commands, "lab", "bring the mesh up in network namespaces and check it (root)", clihelp.LAB)
    add_lab_arguments(lab)
    lab.set_defaults(run=cmd_lab)
    return parser


def exit_code(problems: Sequence[str]) -> int:
    """A problem with a flag's value (every problem names its flag: `--tb: ...`, `--set X: ...`) is a usage error;
    anything else is the config's, or a file's it reads."""
    return EXIT_USAGE if problems and all(p.startswith("--") for p in problems) else EXIT_CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.no_color:
        os.environ["NO_COLOR"] = "1"  # rich reads it for every Console, the lab's included
    try:
        _check_source(args)
        return int(args.run(args))
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return exit_code(exc.problems)
