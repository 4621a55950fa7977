"""`python -m mesh lab --stack NAME | --file PATH [--keep] [--json PATH]` and `python -m mesh lab down`.

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

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=("up", "down"),
        default="up",
        help="up (default): build, check, tear down; down: remove kept or crashed labs",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", help="read Pulumi.STACK.yaml in the current directory")
    source.add_argument("--file", type=Path, help="read this stack file")
    parser.add_argument("--keep", action="store_true", help="leave the lab running (remove it with `lab down`)")
    parser.add_argument("--json", type=Path, dest="json_path", metavar="PATH", help="write the report as JSON")


def _error(message: str) -> None:
    print(f"lab: {message}", file=sys.stderr)


def cmd_lab(args: argparse.Namespace) -> int:
    # Imported here so that `validate` does not pay for the lab's imports.
    from rich.console import Console

    from mesh.lab.cloudinit import UserDataError
    from mesh.lab.netns import lab_down
    from mesh.lab.plan import LabPlanError
    from mesh.lab.report import print_report
    from mesh.lab.run import LabEnvironmentError, run_lab
    from mesh.stackfile import load, stack_file

    if args.action == "down":
        if os.geteuid() != 0:
            _error("needs root to remove namespaces and processes: run it with sudo")
            return EXIT_CANNOT_RUN
        removed, problems = lab_down(print)
        for problem in problems:
            _error(problem)
        print(f"removed {len(removed)} lab(s)" + (f": {', '.join(removed)}" if removed else ""))
        return EXIT_FAILED if problems else EXIT_OK

    if args.stack is None and args.file is None:
        _error("--stack NAME or --file PATH is required")
        return EXIT_CANNOT_RUN
    path = args.file if args.file is not None else stack_file(args.stack)
    cfg = load(path)  # ConfigError: `python -m mesh` prints every problem and exits 2
    label = args.stack or str(path)
    console = Console()
    try:
        report = run_lab(cfg, label, keep=args.keep, console=console)
    except (LabPlanError, UserDataError, LabEnvironmentError) as exc:
        _error(str(exc))
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        _error("interrupted; the lab was removed")
        return EXIT_INTERRUPTED
    print_report(report, console)
    if args.json_path is not None:
        try:
            args.json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        except OSError as exc:
            _error(f"cannot write {args.json_path}: {exc.strerror}")
            return EXIT_FAILED
    return EXIT_OK if report.ok else EXIT_FAILED
