"""Booted gateways (`lab --boot`): boot-to-handshake per gateway and reboot recovery, for every stack file, with
the namespace lab of the same stack in the same run as the baseline (its wall time, and its `wg-quick` restart
outage against the reboot's), plus the image's build time and size. JSON: docs/bench/boot.json.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from wg_mesh.lab.checks.report import LabReport
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.machines.image import ensure_image, image_summary
from wg_mesh.lab.run import run_lab
from wg_mesh.tools.stackfile import load

Log = Callable[[str], None]


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=160)


def _run(stack: Path, boot: bool, options: LabOptions) -> LabReport:
    report = run_lab(load(stack), stack.name, options=options, boot=boot, console=_quiet())
    if not report.ok:
        failed = ", ".join(c.key for c in report.checks if not c.ok)
        raise RuntimeError(f"lab {'--boot ' if boot else ''}{stack.name} failed: {report.error or failed}")
    return report


def run_boot_bench(stacks: Sequence[Path], log: Log, *, rebuild_image: bool, options: LabOptions) -> dict[str, Any]:
    started = time.monotonic()
    image = ensure_image(rebuild=rebuild_image)
    log(f"image: {image_summary(image)}")
    result: dict[str, Any] = {"image": image_summary(image), "options": {**options.__dict__}, "stacks": {}}
    for stack in stacks:
        if load(stack).delivery == "live":  # the --boot lab does not model the clouds' stores yet (README, lab)
            log(f"{stack.name}: delivery: live, not booted (lab --boot models user-data delivery only)")
            continue
        fast = _run(stack, False, options)
        log(f"{stack.name}: namespace lab {fast.duration_s:.1f} s")
        boot = _run(stack, True, options)
        data = boot.to_json()
        log(f"{stack.name}: boot lab {boot.duration_s:.1f} s")
        reboot = data["boot"]["reboot"]
        restart = fast.to_json()["recovery_ms"]
        result["stacks"][stack.stem.split(".", 1)[1]] = {
            "namespace_lab_s": round(fast.duration_s, 1),
            "boot_lab_s": round(boot.duration_s, 1),
            "boot_lab_build_s": round(boot.build_s or 0, 1),
            "boot_to_namespace": round(boot.duration_s / fast.duration_s, 1),
            "gateways": data["boot"]["gateways"],
            "package_source_filled_s": data["boot"]["image"]["package_source_filled_s"],
            "reboot": reboot,
            "wg_quick_restart_outage_ms": restart,
            "reboot_to_restart_outage": round(reboot["traffic_outage_ms"] / restart, 1) if restart else None,
        }
    result["seconds"] = round(time.monotonic() - started, 1)
    return result
