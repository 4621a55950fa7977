"""`python -m wg_mesh lab --stack NAME | --file PATH [--boot] [--keep] [--json PATH]`,
`python -m wg_mesh lab --drill live|pmtu|ha|roam --stack NAME [--boot] [--ha-site SITE] [--json PATH]` (a `delivery:
live` mesh changed while traffic flows: wg_mesh/lab/drills/drill.py, with --boot on booted gateways; a path-MTU black
hole between two sites: wg_mesh/lab/drills/pmtudrill.py; an HA pair's failures: wg_mesh/lab/drills/hadrill.py; a
dynamic site's address changing behind a NAT: wg_mesh/lab/drills/roamdrill.py),
`python -m wg_mesh lab down LAB... | --all` and `python -m wg_mesh lab image [--rebuild]`.

Exit codes: 0 every check passed; 1 a check failed (or the lab could not be built); 2 invalid config
(the same errors as `validate`, nothing built) or a machine that cannot run the lab (not root, tools
missing); 130 interrupted (the lab is removed first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=("up", "down", "image"),
        default="up",
        help="up (default): build, check, tear down; down: remove kept or crashed labs; image: build the --boot image",
    )
    parser.add_argument("labs", nargs="*", metavar="LAB", help="down: the labs to remove (their prefixes, wglXXXX)")
    parser.add_argument("--all", action="store_true", help="down: every kept or crashed lab recorded on this machine")
    parser.add_argument(
        "--boot",
        action="store_true",
        help="boot each gateway as a systemd-nspawn container (Debian trixie, cloud-init, user data as NoCloud seed);"
        " with --drill live too",
    )
    parser.add_argument(
        "--drill",
        choices=("live", "pmtu", "ha", "roam"),
        help="live: add a site, rotate keys, remove it, corrupt a document, while traffic flows; pmtu: a path-MTU "
        "black hole between two sites mid-transfer, with and without ICMP filtered (delivery: live); ha: kill, break, "
        "hang and partition an HA site's gateway pair and replace its active while traffic flows (gateways: 2); "
        "roam: the first `endpoint: dynamic` site's address changes behind the lab's NAT, idle, mid-transfer and "
        "behind a symmetric NAT, and a DNS-named site's name re-pointed by the lab's resolver, with the outage per "
        "change (either delivery)",
    )
    parser.add_argument(
        "--ha-site",
        metavar="SITE",
        help="--drill ha: the site with `gateways: 2` to drill (AWS or GCP; default the stack's first such site)",
    )
    parser.add_argument("--rebuild", action="store_true", help="image: build it again even if it is cached")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="BEFORE_FILE",
        help="rehearse the change from this earlier stack file to --file/--stack as `pulumi up` runs it: BEFORE "
        "brought up, traffic between every pair, the engine's steps one by one, what each costs and any violation "
        "(an address or route on nothing, a document refused, traffic not back)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", help="read Pulumi.STACK.yaml in the current directory")
    source.add_argument("--file", type=Path, help="read this stack file")
    parser.add_argument("--keep", action="store_true", help="leave the lab running (remove it with `lab down`)")
    parser.add_argument("--json", type=Path, dest="json_path", metavar="PATH", help="write the report as JSON")


def _error(message: str) -> None:
    print(f"lab: {message}", file=sys.stderr)


def _outcome(report: Any, json_path: Path | None) -> int:
    """A run's or a drill's exit status, once its report is written as JSON to `json_path` when asked."""
    if json_path is not None:
        try:
            json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        except OSError as exc:
            _error(f"cannot write {json_path}: {exc.strerror}")
            return EXIT_FAILED
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_lab(args: argparse.Namespace) -> int:
    # Imported here so that `validate` does not pay for the lab's imports (nor need the lab's extra).
    try:
        from rich.console import Console
    except ModuleNotFoundError:
        _error("needs the lab's extra: pip install 'pulumi-wg-mesh[lab]' (or pip install -r requirements-dev.txt)")
        return 2

    from wg_mesh.lab.checks.report import print_report
    from wg_mesh.lab.fabric.plan import LabPlanError
    from wg_mesh.lab.fabric.session import LabEnvironmentError
    from wg_mesh.lab.machines.cloudinit import UserDataError
    from wg_mesh.lab.run import run_lab
    from wg_mesh.tools.stackfile import load, stack_file

    if args.action in ("down", "image") and os.geteuid() != 0:
        _error(
            f"needs root to {'remove namespaces and processes' if args.action == 'down' else 'build the image'}:"
            " run it with sudo"
        )
        return EXIT_CANNOT_RUN
    if args.action == "down":
        return cmd_down(args.labs, args.all)
    if args.action == "image":
        return cmd_image(args.rebuild)
    if args.labs:
        _error(f"unexpected arguments: {' '.join(args.labs)}")
        return EXIT_CANNOT_RUN

    if args.before is not None:
        return cmd_rehearse(args)
    if args.ha_site is not None and args.drill != "ha":
        _error("--ha-site is an option of --drill ha")
        return EXIT_CANNOT_RUN
    if args.stack is None and args.file is None:
        _error("--stack NAME or --file PATH is required")
        return EXIT_CANNOT_RUN
    path = args.file if args.file is not None else stack_file(args.stack)
    cfg = load(path)  # ConfigError: `wg-mesh` prints every problem and exits 1
    label = args.stack or str(path)
    console = Console()
    if args.drill is not None:
        return cmd_drill(cfg, label, args, console)
    try:
        report = run_lab(cfg, label, keep=args.keep, boot=args.boot, console=console)
    except (LabPlanError, UserDataError, LabEnvironmentError) as exc:
        _error(str(exc))
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        _error("interrupted; the lab was removed")
        return EXIT_INTERRUPTED
    print_report(report, console)
    return _outcome(report, args.json_path)


def cmd_rehearse(args: argparse.Namespace) -> int:
    """`lab --before BEFORE --file AFTER` (or `--stack`): wg_mesh.lab.rehearse.run."""
    from rich.console import Console

    from wg_mesh.cli.plancmd import plan_file
    from wg_mesh.cli.rendercmd import project_name, stack_name
    from wg_mesh.config import ConfigError
    from wg_mesh.lab.fabric.plan import LabPlanError
    from wg_mesh.lab.fabric.session import LabEnvironmentError
    from wg_mesh.lab.rehearse.report import print_report
    from wg_mesh.lab.rehearse.run import rehearse
    from wg_mesh.tools.stackfile import stack_file

    if args.drill is not None or args.keep or args.boot or args.ha_site is not None:
        _error("--before rehearses a change: without --drill, --keep, --boot or --ha-site")
        return EXIT_CANNOT_RUN
    if args.stack is None and args.file is None:
        _error("--before needs the changed config: --stack NAME or --file PATH")
        return EXIT_CANNOT_RUN
    path = args.file if args.file is not None else stack_file(args.stack)
    if not args.before.is_file():
        raise ConfigError([f"--before {args.before}: no such stack file"])
    project, stack = project_name(path), args.stack or stack_name(path)
    before = plan_file(args.before, project=project, stack=stack, label=f"{args.before} (--before): ")
    after = plan_file(path, project=project, stack=stack, before=before)  # aliases find BEFORE's resources
    label = args.stack or str(path)
    try:
        report = rehearse(before, after, label, str(args.before), Console())
    except (LabPlanError, LabEnvironmentError) as exc:
        _error(str(exc))
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        _error("interrupted; the lab was removed")
        return EXIT_INTERRUPTED
    print_report(report, Console())
    return _outcome(report, args.json_path)


def cmd_drill(cfg: Any, label: str, args: argparse.Namespace, console: Any) -> int:
    from wg_mesh.lab.drills.drillrun import print_drill, run_drill
    from wg_mesh.lab.fabric.netns import LabError
    from wg_mesh.lab.fabric.plan import LabPlanError
    from wg_mesh.lab.fabric.session import LabEnvironmentError
    from wg_mesh.lab.machines.cloudinit import UserDataError

    if args.keep or (args.boot and args.drill != "live"):
        _error(f"--drill {args.drill} always removes its lab (no --keep) and boots only for the live drill (--boot)")
        return EXIT_CANNOT_RUN
    try:
        report = run_drill(cfg, label, kind=args.drill, boot=args.boot, ha_site=args.ha_site)
    except (LabPlanError, UserDataError, LabError, LabEnvironmentError) as exc:
        _error(str(exc))
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        _error("interrupted; the lab was removed")
        return EXIT_INTERRUPTED
    print_drill(report, console)
    return _outcome(report, args.json_path)


def cmd_down(labs: list[str], every: bool) -> int:
    from wg_mesh.lab.fabric.teardown import find_labs, lab_down

    if not labs and not every:
        kept = [p for p, state in find_labs().items() if not state.owner_alive()]
        _error(
            "name the labs to remove (`lab down wglXXXX`) or pass --all; kept or crashed labs here: "
            + (", ".join(kept) or "none")
        )
        return EXIT_CANNOT_RUN
    removed, problems = lab_down(print, labs)
    for problem in problems:
        _error(problem)
    print(f"removed {len(removed)} lab(s)" + (f": {', '.join(removed)}" if removed else ""))
    return EXIT_FAILED if problems else EXIT_OK


def cmd_image(rebuild: bool) -> int:
    from wg_mesh.lab.fabric.netns import LabError
    from wg_mesh.lab.machines.image import ensure_image, image_summary, missing_boot_tools

    problems = missing_boot_tools()
    if problems:
        _error("; ".join(problems))
        return EXIT_CANNOT_RUN
    try:
        image = ensure_image(rebuild=rebuild)
    except LabError as exc:
        _error(str(exc))
        return EXIT_FAILED
    print(json.dumps(image_summary(image)))
    return EXIT_OK
