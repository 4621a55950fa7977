"""`wg-mesh plan`: the repository's program (wg_mesh.program.main) run on a stack's config under Pulumi's mocks
(wg_mesh.testing: no cloud, no Pulumi CLI), its recorded resources handed to the pure report (wg_mesh.plan.preview,
wg_mesh.plan.planreport).

The runs are not previews: the mocks answer with deterministic stand-ins for what the clouds assign (an address, an
id, a key, each from the resource's name), so a resource that exists in both configs keeps its outputs, as a
deployed one keeps its own in the state; what derives from a resource that is created or replaced is treated as
unknown by the diff (Pulumi's preview shows it so). A run in preview mode would know none of the outputs, and
every gateway's user data would be unknown in both configs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi.output import Unknown

from wg_mesh import program
from wg_mesh.cli.rendercmd import project_name, stack_name
from wg_mesh.config import ConfigError, MeshConfig, StaticSite
from wg_mesh.plan import planreport, preview
from wg_mesh.testing import ProgramRun, Recorded, execute, new_run
from wg_mesh.tools.stackfile import load, read_raw


@dataclass(frozen=True)
class Planned:
    cfg: MeshConfig
    resources: list[preview.Resource]
    outputs: dict[str, dict[str, str]]  # static site -> {"wg0.conf": digest, "document": digest}
    run: ProgramRun  # the run itself (the tests read its secrets, to show that none is printed)


def digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _unknown(value: Any) -> bool:
    if isinstance(value, Unknown):
        return True
    if isinstance(value, dict):
        return any(_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_unknown(v) for v in value)
    return False


def _hidden(value: Any) -> Any:
    """A secret input as digests: a map's values each (a replace_on_changes path names one: `metadata["user-data"]`),
    anything else whole."""
    return {k: digest(v) for k, v in value.items()} if isinstance(value, dict) else digest(value)


def resource(recorded: Recorded, run: ProgramRun) -> preview.Resource:
    """One recorded registration as the report's Resource: secret inputs as digests, unknown inputs named."""
    options = run.options(recorded.type, recorded.name)
    inputs = {k: _hidden(v) if k in recorded.secret_inputs else v for k, v in recorded.inputs.items()}
    urn = run.monitor.urn_of.get((recorded.type, recorded.name), "")
    return preview.Resource(
        type=recorded.type,
        name=recorded.name,
        urn=urn,
        inputs=inputs,
        secret=recorded.secret_inputs,
        unknown=frozenset(k for k, v in recorded.inputs.items() if _unknown(v)),
        replace_on_changes=options.replace_on_changes,
        delete_before_replace=options.delete_before_replace,
        protect=options.protect,
        ignore_changes=options.ignore_changes,
        depends_on=dict(options.property_dependencies),
        dependencies=options.dependencies,
        was=run.monitor.aliased.get(urn, ""),
        replacement_trigger=options.replacement_trigger,
    )


def _static_outputs(cfg: MeshConfig, run: ProgramRun) -> dict[str, dict[str, str]]:
    exports = {name: value.value if value.known else None for name, value in run.exports.items()}
    configs, documents = exports.get("wireguard_configs") or {}, exports.get("static_site_documents") or {}
    return {
        s.name: {"wg0.conf": digest(configs.get(s.name)), "document": digest(documents.get(s.name))}
        for s in cfg.sites
        if isinstance(s, StaticSite)
    }


def plan_file(path: Path, *, project: str, stack: str, label: str = "", before: Planned | None = None) -> Planned:
    """Validate the stack file (ConfigError, its problems prefixed by `label`), then run the program on it; `before`:
    the run of the stack's earlier config, whose resources are the state aliases find (and keep their ids and
    outputs, as deployed resources do)."""
    try:
        cfg, raw = load(path), read_raw(path)
    except ConfigError as exc:
        raise ConfigError([f"{label}{p}" for p in exc.problems]) from None
    olds = {r.urn: r.name for r in before.resources} if before is not None else None
    run = new_run(preview=False, olds=olds, prior=before.run.resources if before is not None else ())
    execute(run, program.main, {f"{program.CONFIG_NAMESPACE}:{program.CONFIG_KEY}": json.dumps(raw)},
            project=project, stack=stack)  # fmt: skip
    # Pulumi's runtime gives each of the run's executor threads an event loop of its own and never closes them
    # (pulumi.runtime.sync_await._ensure_event_loop); left to the interpreter's shutdown, their __del__ can fail there
    # with a traceback on stderr. Collected now, while everything is alive, they close quietly.
    gc.collect()
    if run.error is not None:
        raise ConfigError([f"{label}{line}" for line in str(run.error).splitlines() if line.strip()])
    return Planned(cfg, [resource(r, run) for r in run.resources], _static_outputs(cfg, run), run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", metavar="NAME", help="only this site (its resources, its changes)")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="OLD_STACK_FILE",
        help="compare with this earlier stack file (e.g. `git show HEAD:Pulumi.dev.yaml > /tmp/old.yaml`): what "
        "the change creates, deletes, replaces, updates, and what traffic sees",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (the same content)")


def run(args: argparse.Namespace, path: Path) -> int:
    project, stack = project_name(path), args.stack or stack_name(path)
    label = f"stack {args.stack} ({path.name})" if args.stack else str(path)
    if args.before is not None and not args.before.is_file():
        raise ConfigError([f"--before {args.before}: no such stack file"])
    before = None
    if args.before is not None:
        before = plan_file(args.before, project=project, stack=stack, label=f"{args.before} (--before): ")
    after = plan_file(path, project=project, stack=stack, before=before)
    names = {s.name for s in after.cfg.sites} | ({s.name for s in before.cfg.sites} if before else set())
    if args.site is not None and args.site not in names:
        raise ConfigError([f"--site {args.site}: no such site in {label}; its sites: {', '.join(sorted(names))}"])
    data: Mapping[str, Any]
    if before is None:
        data = planreport.listing(after.cfg, after.resources, args.site)
        text = planreport.listing_text(data, label)
    else:
        found = preview.diff(before.resources, after.resources)
        data = planreport.change_report(before.cfg, after.cfg, found, (before.outputs, after.outputs), args.site)
        text = planreport.change_text(data, f"{args.before} -> {label}")
    sys.stdout.write(json.dumps(data, indent=2) + "\n" if args.json else text)
    return 0
