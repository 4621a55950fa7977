"""One lab run: plan, render, build, check, tear down (always: finally, atexit, SIGINT, SIGTERM)."""

from __future__ import annotations

import atexit
import time

from rich.console import Console

from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks.mesh import run_checks
from wg_mesh.lab.checks.report import LabReport, Steps
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.fabric.netns import LabError, Node, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import LabFaults, LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.fabric.session import LabEnvironmentError, _Cleanup, new_prefix, signals_end_the_run
from wg_mesh.lab.machines import cloudinit
from wg_mesh.lab.machines.boot import boot_machines, boot_requirements
from wg_mesh.lab.machines.build import BuiltLab, MachineFactory, build
from wg_mesh.lab.machines.machine import NamespaceGateway

CHECK_STEPS = 6
BOOT_CHECK_STEPS = 7  # bootchecks.TITLES (imported only with --boot)


def _running_gateways(lab: BuiltLab | None) -> dict[str, Node]:
    if lab is None:
        return {}
    nodes = {}
    for name, machine in lab.machines.items():
        try:
            nodes[name] = machine.node
        except LabError:
            continue
    return nodes


def run_lab(
    cfg: MeshConfig,
    label: str,
    *,
    options: LabOptions | None = None,
    faults: LabFaults | None = None,
    keep: bool = False,
    boot: bool = False,
    console: Console | None = None,
) -> LabReport:
    """Build the mesh in namespaces, run every check, tear down unless `keep`; never raises for a failed check.
    With `boot`, every gateway is a booted container (`ContainerGateway`) and the boot checks run too.

    Raises LabPlanError / UserDataError before anything is created, LabEnvironmentError if the machine
    cannot run the lab."""
    console = console or Console()
    options = options or LabOptions()
    faults = faults or LabFaults()
    started = time.monotonic()
    plan = plan_lab(cfg, new_prefix(), faults)
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    if not boot:
        for a in artifacts.values():
            cloudinit.interpret(a.user_data)  # refuse what the lab cannot reproduce before building anything
    configs = live_configs(artifacts)
    problems = boot_requirements() if boot else missing_requirements()
    if problems:
        raise LabEnvironmentError("; ".join(problems))

    report = LabReport(label=label, plan=plan, notes=faults.describe(), mode="boot" if boot else "namespace")
    machine: MachineFactory = NamespaceGateway
    if boot:
        machine, note, report.image = boot_machines(artifacts)
        report.notes.append(note)
    state = new_state(plan.prefix, label)
    state.save()
    cleanup = _Cleanup(state, console)
    steps_total = 1 + 2 * len(plan.sites) + CHECK_STEPS + (BOOT_CHECK_STEPS if boot else 0) + 1
    steps_total += len(plan.private_links) + (1 if plan.private_links else 0)  # their build steps and check 7
    steps_total += any(site.dynamic for site in plan.sites)  # the dynamic sites' check
    lab: BuiltLab | None = None
    with Steps(steps_total, Console(stderr=True)) as step, signals_end_the_run():
        try:
            hook = control_plane_hook(cfg, keys, configs) if configs else None
            lab = build(plan, artifacts, state, step, machine, before_gateways=hook)
            report.build_s = time.monotonic() - started
            report.notes += lab.notes
            if boot:
                from wg_mesh.lab.checks.bootchecks import boot_checks, boot_handshakes

                handshakes = boot_handshakes(lab, keys)
            report.checks = list(run_checks(lab, keys, options, step))
            if boot:
                report.checks += boot_checks(lab, handshakes, options, cfg.exporter_port, step)
        except LabError as exc:
            report.error = str(exc)
        finally:
            step("teardown" if not keep else "keeping the lab")
            if keep:
                report.kept_hints = [
                    f"sudo {' '.join(node.wrap(['wg', 'show']))}   # {name}"
                    for name, node in _running_gateways(lab).items()
                ]
                state.owner_pid = 0  # nobody runs it any more: `lab down` may remove it
                state.save()
                atexit.unregister(cleanup)
            else:
                cleanup()
    report.kept = keep
    if cleanup.problems:
        report.error = (report.error + "; " if report.error else "") + "teardown: " + "; ".join(cleanup.problems)
    report.duration_s = time.monotonic() - started
    return report
