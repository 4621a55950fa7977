"""`python -m bench COMMAND`: run the benchmarks and render docs/benchmarks.md from their JSON.

    sudo .venv/bin/python -m bench all      setup, program scale, lab (data plane, IPsec, recovery), MTU sweep,
                                            booted gateways, private underlay, doc
    python -m bench scale                   program scale under Pulumi mocks (no root needed)
    sudo python -m bench lab                data plane + IPsec vs WireGuard + recovery, in the lab
    sudo python -m bench mtu                MTU sweep, in the lab
    sudo python -m bench boot               booted gateways (lab --boot): boot-to-handshake, reboot, per stack
    sudo python -m bench underlay           a jumbo private path next to an internet path (examples/underlay)
    sudo python -m bench underlay --fallback  the private path cut and restored: the switch to the public
                                            endpoints and back (agents' pmtu_seconds 5 for the run)
    python -m bench ha_routes               an AWS failover's 256 route moves against moto (no root)
    sudo python -m bench roam               a dynamic site's address changes behind the lab's NAT (the roam drill),
                                            once per delivery
    sudo python -m bench relay              a relayed pair's throughput against a direct path's (examples/edge),
                                            unshaped and with both offices on --line-mbit lines
    sudo python -m bench changes            every row of "What a change does" rehearsed as pulumi up runs it
                                            (lab --before), per stack (--stacks dev,prod,edge)
    python -m bench doc                     render the doc and plots from the JSON already in --out
    sudo python -m bench setup              install the Debian packages and Python deps the bench needs

`--quick` runs a tiny version (seconds, not minutes) for smoke tests; its results are not for publishing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "bench"
DEFAULT_DOC = REPO / "docs" / "benchmarks.md"
DEV_STACK = REPO / "Pulumi.dev.yaml"


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def write_json(out: Path, name: str, data: Any) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)
    log(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return path


def cmd_setup(args: argparse.Namespace) -> None:
    from bench import deps

    deps.setup(log)


def cmd_scale(args: argparse.Namespace) -> None:
    from bench.scale import FULL_SIZES, run_scale

    sizes = tuple(int(n) for n in args.sizes.split(",")) if args.sizes else ((2, 4) if args.quick else FULL_SIZES)
    repeats = args.repeats or (1 if args.quick else 3)
    write_json(args.out, "scale", run_scale(sizes, repeats, log, curve_max_n=64 if args.quick else 300))


def cmd_lab(args: argparse.Namespace) -> None:
    from bench.lab.dataplane import DataPlaneOptions
    from bench.lab.labbench import run_lab_bench
    from wg_mesh.tools.stackfile import read_raw

    if args.quick:
        options = DataPlaneOptions(
            rounds=1,
            seconds=1,
            omit=0,
            streams=(1,),
            paths=("wireguard", "end_to_end", "ipsec"),
            wg_recovery_trials=2,
            compare_recovery_trials=1,
        )
    else:
        options = DataPlaneOptions()
    write_json(args.out, "lab", run_lab_bench(read_raw(DEV_STACK), options, log, with_ipsec=not args.no_ipsec))


def cmd_mtu(args: argparse.Namespace) -> None:
    from bench.lab.mtu import MtuOptions, run_mtu_sweep
    from wg_mesh.tools.stackfile import read_raw

    raw = read_raw(DEV_STACK)
    if args.quick:
        result = run_mtu_sweep(raw, MtuOptions(runs=1, seconds=1, omit=0), log, points=(1280, 1420))
    else:
        result = run_mtu_sweep(raw, MtuOptions(), log)
    write_json(args.out, "mtu", result)


def cmd_boot(args: argparse.Namespace) -> None:
    from bench.lab.boot import run_boot_bench
    from wg_mesh.lab.checks.result import LabOptions

    stacks = [DEV_STACK] if args.quick else sorted(REPO.glob("Pulumi.*.yaml"))
    options = LabOptions(iperf_seconds=1, bulk_bytes=4 * 1024 * 1024) if args.quick else LabOptions()
    write_json(args.out, "boot", run_boot_bench(stacks, log, rebuild_image=args.rebuild_image, options=options))


def cmd_underlay(args: argparse.Namespace) -> None:
    from bench.lab.underlay import STACK, run_underlay_bench
    from wg_mesh.tools.stackfile import load

    if args.fallback:
        cmd_underlay_fallback(args)
        return
    rounds, size = (1, 4 * 1024 * 1024) if args.quick else (5, 64 * 1024 * 1024)
    write_json(args.out, "underlay", run_underlay_bench(load(STACK), log, rounds=rounds, size=size))


def cmd_underlay_fallback(args: argparse.Namespace) -> None:
    from bench.lab.fallback import run_fallback_bench
    from bench.lab.underlay import STACK
    from wg_mesh.tools.stackfile import load

    write_json(args.out, "underlay-fallback", run_fallback_bench(load(STACK), log))


def cmd_rotation(args: argparse.Namespace) -> None:
    from bench.lab.rotation import from_files, run_rotation_bench

    data = from_files(args.runs_from) if args.runs_from else run_rotation_bench(args.runs, log)
    write_json(args.out, "rotation", data)


def cmd_roam(args: argparse.Namespace) -> None:
    from bench.lab.roam import run_roam_bench

    deliveries, keepalive, reresolve = (("user-data",), 5, 2) if args.quick else (("user-data", "live"), 25, 10)
    write_json(args.out, "roam", run_roam_bench(log, deliveries, keepalive, reresolve))


def cmd_relay(args: argparse.Namespace) -> None:
    from bench.lab.relay import run_relay_bench

    rounds, seconds, omit = (1, 1, 0) if args.quick else (5, 5, 1)
    write_json(args.out, "relay", run_relay_bench(log, rounds, seconds, omit, args.line_mbit))


def cmd_changes(args: argparse.Namespace) -> None:
    from bench.lab.changes import STACKS, run_changes_bench

    stacks = args.stacks.split(",") if args.stacks else (["dev"] if args.quick else list(STACKS))
    unknown = sorted(set(stacks) - set(STACKS))
    if unknown:
        raise SystemExit(f"changes: unknown stack(s) {', '.join(unknown)} (known: {', '.join(STACKS)})")
    write_json(args.out, "changes", run_changes_bench(stacks, log))


def cmd_ha_routes(args: argparse.Namespace) -> None:
    from bench.ha_routes import run_ha_routes

    write_json(args.out, "ha_routes", run_ha_routes(1 if args.quick else 3, log))


def cmd_environment(args: argparse.Namespace) -> None:
    from bench import environment

    data = environment.collect()
    data["quick"] = bool(args.quick)
    write_json(args.out, "environment", data)


def cmd_doc(args: argparse.Namespace) -> None:
    from bench.report import document

    doc = args.doc or (DEFAULT_DOC if args.out == DEFAULT_OUT else args.out / "benchmarks.md")
    document.render(args.out, doc, plots=not args.no_plots, log=log)


def cmd_all(args: argparse.Namespace) -> None:
    started = time.monotonic()
    if not args.quick:
        cmd_setup(args)
    cmd_environment(args)
    cmd_scale(args)
    if os.geteuid() == 0:
        cmd_lab(args)
        cmd_mtu(args)
        cmd_boot(args)
        cmd_underlay(args)
        cmd_underlay_fallback(args)
    else:
        log("not root: the lab benchmarks (data plane, IPsec, recovery, MTU) need root; skipped")
    cmd_doc(args)
    log(f"bench all: {time.monotonic() - started:.0f} s")


COMMANDS = {
    "all": cmd_all,
    "setup": cmd_setup,
    "environment": cmd_environment,
    "scale": cmd_scale,
    "lab": cmd_lab,
    "mtu": cmd_mtu,
    "boot": cmd_boot,
    "underlay": cmd_underlay,
    "underlay-fallback": cmd_underlay_fallback,
    "rotation": cmd_rotation,
    "ha_routes": cmd_ha_routes,
    "roam": cmd_roam,
    "relay": cmd_relay,
    "changes": cmd_changes,
    "doc": cmd_doc,
}


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_doc_examples.py parses the docs' `python -m bench` commands with it)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON and PNG directory (default docs/bench)")
    parser.add_argument("--doc", type=Path, help="the Markdown to render (default docs/benchmarks.md)")
    parser.add_argument("--quick", action="store_true", help="a tiny run for smoke tests (not for publishing)")
    parser.add_argument("--sizes", help="program scale: comma-separated site counts")
    parser.add_argument("--repeats", type=int, help="program scale: runs per size")
    parser.add_argument("--no-ipsec", action="store_true", help="lab: skip the strongSwan comparison")
    parser.add_argument("--no-plots", action="store_true", help="doc: tables only")
    parser.add_argument("--fallback", action="store_true", help="underlay: the private path's fallback drill")
    parser.add_argument("--rebuild-image", action="store_true", help="boot: rebuild the cached image (to time it)")
    parser.add_argument(
        "--line-mbit",
        type=float,
        default=50.0,
        help="relay: the offices' consumer lines, Mbit/s up and down (default 50)",
    )
    parser.add_argument("--runs", type=int, default=10, help="rotation: live drills (default 10; the worst counts)")
    parser.add_argument("--stacks", help="changes: comma-separated stacks (default dev,prod,edge,underlay)")
    parser.add_argument("--from", dest="runs_from", type=Path, nargs="+", help="rotation: combine these drill JSONs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out = args.out.resolve()
    try:
        COMMANDS[args.command](args)
    except KeyboardInterrupt:
        log("interrupted (labs were torn down)")
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
