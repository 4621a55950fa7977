"""`wg-mesh lab --before BEFORE --file AFTER`: a change rehearsed as `pulumi up` runs it.

1. plan: the program under Pulumi's mocks on both configs (wg_mesh.cli.plancmd), their diff (aliases followed) and
   the engine's steps in order (wg_mesh.plan.engine); each step's resource's role (roles.py);
2. lab: one fabric for both configs (layout.py), BEFORE brought up as its `pulumi up` left it (world.py: the stores
   written, each gateway started, its address and routes on it), every pair pinging;
3. traffic: between every pair of sites both configs have, a ping every 10 ms and a verified TCP stream (fleet.py);
4. the steps, one by one, each carried out in the lab (effects.py) and followed by SETTLE_S of traffic when it did
   something; between two steps the clouds' state judged (judge.py); at the end of up, the operator's part for static
   sites (operator.py), then every pair must be flowing again within END_TIMEOUT_S and every document applied;
5. the report (report.py): per step the pings lost and the longest stall per pair, the holders, the routes, the
   violations; the lab torn down, whatever happened.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from wg_mesh.cli.plancmd import Planned, plan_file
from wg_mesh.config import StaticSite
from wg_mesh.lab.checks.report import Steps
from wg_mesh.lab.fabric.netns import LabError, Node, missing_requirements, new_state
from wg_mesh.lab.fabric.session import LabEnvironmentError, _Cleanup, new_prefix, signals_end_the_run
from wg_mesh.lab.rehearse import effects, operator
from wg_mesh.lab.rehearse.fleet import Fleet
from wg_mesh.lab.rehearse.judge import Judge
from wg_mesh.lab.rehearse.keys import KeyRing
from wg_mesh.lab.rehearse.layout import LayoutError, layout
from wg_mesh.lab.rehearse.report import RehearsalReport
from wg_mesh.lab.rehearse.roles import role_of
from wg_mesh.lab.rehearse.world import World
from wg_mesh.plan import engine, preview, topology

SETTLE_S = 1.0
CONVERGE_TIMEOUT_S = 90.0
END_TIMEOUT_S = 30.0
ROTATION_WATCH_S = 4.0  # traffic watched this long after key_at, as the switch's own step


def _ha_sites(planned: Planned) -> list[str]:
    return [s.name for s in planned.cfg.sites if getattr(s, "gateways", 1) > 1]


def plan_steps(before: Planned, after: Planned) -> list[tuple[engine.Step, Any]]:
    """The engine's steps and each one's role in the lab."""
    names = {s.name for p in (before, after) for s in p.cfg.sites}
    names |= {old for s in after.cfg.sites for old in s.previous_names}
    found = preview.diff(before.resources, after.resources)
    return [(step, role_of(step.resource, names)) for step in engine.steps(before.resources, after.resources, found)]


def bring_up(world: World) -> None:
    """BEFORE as its `pulumi up` left it: the stores written, each cloud site's address and routes on gateway a (they
    are set before the machines start: no traffic runs yet), every gateway started."""
    before = world.cfgs["before"]
    for site in before.sites:
        if site.name in world.configs["before"]:
            if not isinstance(site, StaticSite):
                world.publish_agent("before", site.name)
            world.publish_key("before", site.name)
            world.publish_document("before", site.name)
        if site.name in world.ha:
            world.holder[site.name] = "a"
            world.association[site.name] = "before" if site.cloud == "aws" else None
            world.apply_routes(site.name, {str(r): "a" for r in topology.remote_ranges(before, site.name)})
    for site in before.sites:
        world.start(site.name, "before", "a", place="a")


def rehearse(before: Planned, after: Planned, label: str, before_label: str,
             console: Console | None = None) -> RehearsalReport:  # fmt: skip
    """Rehearse `pulumi up` from `before` to `after` in the lab; never raises for a violation. LayoutError before
    anything is created when one fabric cannot hold both configs; LabEnvironmentError when the machine cannot run
    the lab."""
    console = console or Console()
    started = time.monotonic()
    if ha := sorted(set(_ha_sites(before)) | set(_ha_sites(after))):
        raise LayoutError(f"{', '.join(ha)}: `gateways: 2` is not rehearsed yet (the HA drill covers its failovers)")
    prefix = new_prefix()
    lay = layout(before.cfg, after.cfg, prefix)
    steps = plan_steps(before, after)
    if problems := missing_requirements():
        raise LabEnvironmentError("; ".join(problems))
    report = RehearsalReport(label=label, before=before_label, prefix=prefix)
    state = new_state(prefix, f"rehearsal {before_label} -> {label}")
    state.save()
    cleanup = _Cleanup(state, console)
    world = World(lay, KeyRing(), state)
    fleet: Fleet | None = None
    total = 1 + len(lay.fabric.sites) + 3 + len(steps) + 2
    with Steps(total, Console(stderr=True)) as step, signals_end_the_run():
        try:
            world.build(step)
            step("BEFORE: stores written, gateways started")
            bring_up(world)
            fleet = Fleet(lay.fabric, state, lay.kept)
            report.pairs = [p.name for p in fleet.pairs]
            step("every pair pinging")
            _converge(world, fleet)
            fleet.start()
            time.sleep(SETTLE_S)
            judge = Judge(world)
            _run_steps(world, judge, steps, report, step)
            _after_up(world, judge, fleet, before, after, report, step)
            report.streams = fleet.stop()
            _windows(fleet, report)
        except LabError as exc:
            report.error = str(exc)
        finally:
            step("teardown")
            if fleet is not None:
                fleet.stop_quietly()
            cleanup()
    return report.finish(cleanup.problems, started)


def rehearse_raw(
    before: dict[str, Any],
    after: dict[str, Any],
    label: str,
    before_label: str,
    *,
    project: str = "wg-mesh",
    stack: str = "rehearsal",
    console: Console | None = None,
) -> RehearsalReport:
    """`rehearse` on two raw configs (a stack file's `wg-mesh:mesh` values), as stack `stack` of project `project`:
    what `python -m bench changes` and the tests run (ConfigError for an invalid one)."""
    with tempfile.TemporaryDirectory(prefix="wg-mesh-rehearsal-") as tmp:
        planned: Planned | None = None
        for name, raw in (("before", before), ("after", after)):
            path = Path(tmp) / f"Pulumi.{stack}-{name}.yaml"
            path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
            previous = planned
            planned = plan_file(path, project=project, stack=stack, label=f"{name}: ", before=previous)
    assert previous is not None and planned is not None
    return rehearse(previous, planned, label, before_label, console)


def _converge(world: World, fleet: Fleet) -> None:
    """Every pair answers pings before the traffic starts (BEFORE's mesh is up)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    for pair in fleet.pairs:
        if not _pings(world, pair.a, pair.b, max(1.0, deadline - time.monotonic())):
            raise LabError(f"BEFORE's mesh did not come up: {pair.name} does not ping")


def _record(report: RehearsalReport, world: World, resource: str, action: str, lab: str | None,
            violations: list[str], start: float) -> dict[str, Any]:  # fmt: skip
    entry: dict[str, Any] = {
        "resource": resource,
        "action": action,
        "lab": lab,
        "start": start,
        "end": time.time(),
        "violations": violations,
        "holders": {site: world.holder[site] for site in world.ha},
        "routes": {site: dict(sorted(world.routes[site].items())) for site in world.ha},
        "machines": {
            site: {p: f"{o.which}:{o.letter}" for p, o in sorted(places.items())}
            for site, places in world.places.items()
        },
    }
    report.steps.append(entry)
    return entry


def _run_steps(world: World, judge: Judge, steps: list[tuple[engine.Step, Any]], report: RehearsalReport,
               step: Any) -> None:  # fmt: skip
    for s, role in steps:
        start = time.time()
        step(f"{s.op} {s.resource.name}")
        effect = effects.apply(world, s, role)
        if effect.done is not None:
            time.sleep(SETTLE_S)
        entry = _record(report, world, f"{s.resource.type}::{s.resource.name}", s.op, effect.done,
                        [*effect.violations, *judge.boundary()], start)  # fmt: skip
        entry["role"] = str(role)
        for written in effect.written:
            judge.expect(written, len(report.steps) - 1)
        for index, violation in judge.documents():
            report.steps[index]["violations"].append(violation)


def _after_up(world: World, judge: Judge, fleet: Fleet, before: Planned, after: Planned, report: RehearsalReport,
              step: Any) -> None:  # fmt: skip
    step("after up: the operator's static sites, traffic, documents")
    for site, what in operator.changed_static(world, (before.outputs, after.outputs)).items():
        start = time.time()
        done, failed = operator.operate(world, site, what)
        time.sleep(SETTLE_S)
        _record(report, world, f"static site {site}", f"operator: {what}", done, [*failed, *judge.boundary()], start)
    if world.rotated() and world.configs["after"]:  # the agents switch to the announced keys at key_at
        at = max(world.key_at("after").values())
        time.sleep(max(0.0, at - 1 - time.time()))
        start = time.time()
        time.sleep(max(0.0, at + ROTATION_WATCH_S - time.time()))
        what = f"rotated keys valid: {', '.join(world.rotated())}"
        _record(report, world, f"key_at {at}", "agents: key switch", what, judge.boundary(), start)
    end = time.time()
    left = fleet.flowing(end, END_TIMEOUT_S)
    back = time.time() - end
    violations = [f"traffic not back: {pair} silent {END_TIMEOUT_S:.0f} s after up" for pair in left]
    violations += [f"traffic not back: {a}<->{b} (a site the change adds) does not ping"
                   for a, b in _new_pairs(world, fleet) if not _pings(world, a, b, END_TIMEOUT_S)]  # fmt: skip
    for index, violation in judge.documents(final=True):
        report.steps[index]["violations"].append(violation)
    report.end = {"back_s": None if left else round(back, 1), "violations": violations}


def _new_pairs(world: World, fleet: Fleet) -> list[tuple[str, str]]:
    """The pairs of AFTER's sites the fleet does not run (those with a site the change adds), by fabric name."""
    running = {(p.a, p.b) for p in fleet.pairs}
    names = [world.layout.fabric_name(s.name) for s in world.cfgs["after"].sites]
    return [
        (a, b) for i, a in enumerate(names) for b in names[i + 1 :] if (a, b) not in running and (b, a) not in running
    ]


def _pings(world: World, a: str, b: str, timeout: float) -> bool:
    src, dst = world.layout.fabric.site(a), world.layout.fabric.site(b)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = Node(src.host_ns).run(["ping", "-n", "-q", "-c", "1", "-W", "1", str(dst.host_ip.ip)], check=False)
        if out.returncode == 0:
            return True
        time.sleep(0.2)
    return False


def _windows(fleet: Fleet, report: RehearsalReport) -> None:
    """Each step's traffic: from its start to the next step's (the last: to its own end)."""
    for i, s in enumerate(report.steps):
        end = report.steps[i + 1]["start"] if i + 1 < len(report.steps) else s["end"]
        per_pair = fleet.window(s["start"], end)
        s["pairs"] = per_pair
        lost = [v["pings_lost"] for v in per_pair.values() if v["pings_lost"] is not None]
        s["pings_lost"] = sum(lost) if lost else None
        s["stall_ms"] = max((v["stall_ms"] for v in per_pair.values()), default=0.0)
