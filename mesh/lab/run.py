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

from rich.console import Console

from mesh.config import MeshConfig
from mesh.lab import cloudinit
from mesh.lab.build import build
from mesh.lab.checks import LabOptions, run_checks
from mesh.lab.netns import LabError, LabState, lab_exists, missing_requirements, new_state, teardown
from mesh.lab.plan import LabFaults, LabKeys, plan_lab, render_artifacts
from mesh.lab.report import LabReport, Steps

CHECK_STEPS = 6


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


def run_lab(
    cfg: MeshConfig,
    label: str,
    *,
    options: LabOptions | None = None,
    faults: LabFaults | None = None,
    keep: bool = False,
    console: Console | None = None,
) -> LabReport:
    """Build the mesh in namespaces, run every check, tear down unless `keep`; never raises for a failed check.

    Raises LabPlanError / UserDataError before anything is created, LabEnvironmentError if the machine
    cannot run the lab."""
    console = console or Console()
    options = options or LabOptions()
    faults = faults or LabFaults()
    started = time.monotonic()
    plan = plan_lab(cfg, new_prefix(), faults)
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    for a in artifacts.values():
        cloudinit.interpret(a.user_data)  # refuse what the lab cannot reproduce before building anything
    problems = missing_requirements()
    if problems:
        raise LabEnvironmentError("; ".join(problems))

    report = LabReport(label=label, plan=plan, notes=faults.describe())
    state = new_state(plan.prefix, label)
    state.save()
    cleanup = _Cleanup(state, console)
    steps_total = 1 + 2 * len(plan.sites) + CHECK_STEPS + 1
    with Steps(steps_total, Console(stderr=True)) as step, signals_end_the_run():
        try:
            lab = build(plan, artifacts, state, step)
            report.build_s = time.monotonic() - started
            report.notes += lab.notes
            report.checks = run_checks(lab, keys, options, step)
        except LabError as exc:
            report.error = str(exc)
        finally:
            step("teardown" if not keep else "keeping the lab")
            if keep:
                report.kept_hints = [
                    f"sudo nsenter --target={state.holders[s.gateway_ns]} --mount --net -- wg show   # {s.name}"
                    for s in plan.sites
                    if s.gateway_ns in state.holders
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
