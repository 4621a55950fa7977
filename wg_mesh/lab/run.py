"""One lab run: plan, render, build, check, tear down (always: finally, atexit, SIGINT, SIGTERM)."""

from __future__ import annotations

import atexit
import contextlib
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from rich.console import Console

from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks.mesh import run_checks
from wg_mesh.lab.checks.report import LabReport, Steps
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.fabric.netns import LabError, LabState, Node, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import GatewayArtifacts, LabFaults, LabKeys, LabPlan, SitePlan, plan_lab, render_artifacts
from wg_mesh.lab.fabric.teardown import lab_exists, teardown
from wg_mesh.lab.machines import cloudinit
from wg_mesh.lab.machines.build import BuiltLab, MachineFactory, build
from wg_mesh.lab.machines.machine import NamespaceGateway

CHECK_STEPS = 6
BOOT_CHECK_STEPS = 7  # bootchecks.TITLES (imported only with --boot)


class LabEnvironmentError(LabError):
    """This machine cannot run the lab (not root, tools missing)."""


def new_prefix() -> str:
    for _ in range(100):
        prefix = f"wgl{secrets.token_hex(2)}"
        if not lab_exists(prefix):
            return prefix
    raise LabError("no free lab prefix")


@contextlib.contextmanager
def signals_end_the_run() -> Iterator[None]:
    """SIGTERM (and SIGINT) interrupt the run so that `finally` tears the lab down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """While tearing down, a second Ctrl-C must not leave half a lab behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Cleanup:
    """Tears a lab down exactly once: from `finally`, or from atexit if the interpreter exits first."""

    def __init__(self, state: LabState, console: Console) -> None:
        self.state = state
        self.console = console
        self.done = False
        self.problems: list[str] = []
        atexit.register(self)

    def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        atexit.unregister(self)
        with signals_ignored():
            self.problems = teardown(self.state, lambda line: None)
        for problem in self.problems:
            self.console.print(f"[red]teardown: {problem}[/red]")


def boot_machines(artifacts: dict[str, GatewayArtifacts]) -> tuple[MachineFactory, str, dict[str, Any]]:
    """--boot: the cached image and the package source for these user data (built first when missing).
    Returns the machine factory, a note for the report and the image's summary (the reports' `image`)."""

    from wg_mesh.lab.machines import image as images
    from wg_mesh.lab.machines.container import ContainerGateway
    from wg_mesh.lab.machines.seed import user_data_facts

    image = images.ensure_image()
    repos, filled = {}, []
    for name, a in artifacts.items():
        facts = user_data_facts(a.user_data)
        repos[name], seconds = images.ensure_repo(image, facts.packages, facts.apt_files)
        if seconds is not None:
            filled.append(seconds)
    built = f"built in {image.built_s:.0f} s" if image.built_s is not None else "cached"
    note = f"--boot: Debian {images.SUITE} image {image.root} ({image.size_bytes / 1e6:.0f} MB, {built})"
    summary = {
        **images.image_summary(image),
        "package_source": sorted({str(r) for r in repos.values()}),
        "package_source_filled_s": round(sum(filled), 1) if filled else None,
    }

    def machine(plan: LabPlan, site: SitePlan, a: GatewayArtifacts, state: LabState) -> ContainerGateway:
        return ContainerGateway(plan, site, a, state, image=image, repo=repos[site.name])

    return machine, note, summary


def boot_requirements() -> list[str]:
    """What this machine lacks to boot gateways (the lab's tools, then --boot's own)."""
    from wg_mesh.lab.machines.image import missing_boot_tools

    return missing_requirements() + missing_boot_tools()


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
