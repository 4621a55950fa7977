"""One run of a drill on a `delivery: live` lab: build it, start the traffic A -> B, run the steps, tear down
(always), and the report: a table per step and the JSON (`--json`) that docs/benchmarks.md's tables are rendered
from. `live` (drill.py: A's and B's gateways, then C added, rotated, removed; bench/meshchange.py) and `pmtu`
(pmtudrill.py: all three gateways, a path-MTU black hole between A and B; bench/pathmtu.py); `ha` (harun.py,
hadrill.py: an HA site's failure modes; bench/hafailover.py); `roam` (roamdrill.py: a dynamic site's address
changes behind the lab's NAT, either delivery)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks.report import Steps
from wg_mesh.lab.checks.result import LabOptions
from wg_mesh.lab.clouds.controlplane import ControlPlane
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.drills.drill import Drill, daemon_pids, judge, pick_sites
from wg_mesh.lab.drills.drillreport import DrillReport
from wg_mesh.lab.drills.harun import print_ha, run_ha_drill
from wg_mesh.lab.drills.pmtudrill import PathDrill
from wg_mesh.lab.drills.pmtudrill import judge as judge_pmtu
from wg_mesh.lab.drills.roamdrill import print_roam, run_roam_drill
from wg_mesh.lab.drills.traffic import Pinger, Stream, stop_traffic
from wg_mesh.lab.fabric.netns import LabError, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.fabric.session import LabEnvironmentError, _Cleanup, new_prefix, signals_end_the_run
from wg_mesh.lab.machines.boot import boot_machines, boot_requirements
from wg_mesh.lab.machines.build import BuiltLab, MachineFactory, build
from wg_mesh.lab.machines.machine import NamespaceGateway

KINDS = ("live", "pmtu", "ha", "roam")


def run_drill(
    cfg: MeshConfig,
    label: str,
    *,
    kind: str = "live",
    options: LabOptions | None = None,
    boot: bool = False,
    ha_site: str | None = None,
) -> DrillReport:
    """Raises LabPlanError / UserDataError / LabError before anything is created when the stack cannot be drilled
    (not `delivery: live`, fewer than three sites), LabEnvironmentError when the machine cannot run the lab.
    `boot` (the live drill): every gateway a booted container (boot.boot_machines) whose cloud-init runs the user
    data's `--once` and starts wg-mesh-agent.service itself; the drill changes the stores as in namespaces.
    `ha_site` (the ha drill): the site with `gateways: 2` to drill, default the first."""
    if kind not in KINDS:
        raise LabError(f"no drill {kind!r}: {', '.join(KINDS)}")
    if boot and kind != "live":
        raise LabError(f"--drill {kind} runs in namespaces only (--boot: the live drill)")
    if kind == "ha":
        return run_ha_drill(cfg, label, site=ha_site)
    if kind == "roam":
        return run_roam_drill(cfg, label)
    options = options or LabOptions()
    started = time.monotonic()
    plan = plan_lab(cfg, new_prefix())
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    configs = live_configs(artifacts)
    if not configs:
        raise LabError(f"{label}: the user data does not deliver peers live (set `delivery: live`)")
    a, b, c = pick_sites(plan.sites)
    problems = boot_requirements() if boot else missing_requirements()
    if problems:
        raise LabEnvironmentError("; ".join(problems))
    report = DrillReport(label, kind, prefix=plan.prefix, mode="boot" if boot else "namespace")
    machine: MachineFactory = NamespaceGateway
    if boot:
        machine, _, _ = boot_machines(artifacts)
    running = [a, b] if kind == "live" else [a, b, c]
    report.sites = {
        role: {"name": s.name, "cloud": s.cloud, "store": str(configs[s.name]["source"]["kind"])}  # type: ignore[index]
        for role, s in (("A", a), ("B", b), ("C", c))
    }
    state = new_state(plan.prefix, f"{label} ({kind} drill)")
    state.save()
    cleanup = _Cleanup(state, Console(stderr=True))
    planes: list[ControlPlane] = []
    pinger = stream = None
    path_drill: PathDrill | None = None
    names = [s.name for s in running]
    # build, handshakes, traffic; live: 5 steps; pmtu: the probes' first pass and 4 steps; teardown
    with Steps(10, Console(stderr=True)) as step, signals_end_the_run():
        try:
            step(f"build: fabric for every site, gateways {', '.join(names)}, the clouds' stores")
            hook = control_plane_hook(cfg, keys, configs, names, started=planes.append)
            lab = build(plan, artifacts, state, lambda _: None, machine, before_gateways=hook, start=names)
            drill = Drill(cfg, keys, planes[0], options, step)
            report.poll_seconds = drill.poll_s
            step(f"{', '.join(names)}: agents applied, handshakes")
            for x, y in [(x, y) for i, x in enumerate(running) for y in running[i + 1 :]]:
                if not drill.handshake(x.name, y.name, keys):
                    raise LabError(f"no handshake between {x.name} and {y.name} after their agents' first apply")
            before = {s.name: daemon_pids(s.gateway_ns) for s in running}
            step(f"traffic: ping every 10 ms and a TCP stream, host {a.name} -> host {b.name}")
            pinger = Pinger(lab.hosts[a.name], state, a.host_ns, str(b.host_ip.ip))
            pinger.start()
            stream = Stream(lab.hosts[a.name], a.host_ns, lab.hosts[b.name], b.host_ns, str(b.host_ip.ip), state)
            stream.start()
            drill.traffic = (pinger, stream)
            time.sleep(1)
            if kind == "live":
                for run_step in (drill.add_c, drill.rotate_c, drill.remove_c, drill.rotate_a, drill.corrupt_b):
                    run_step()
            else:
                machines = {n: m.node for n, m in lab.machines.items() if n in names}
                path_drill = PathDrill(plan, machines, lab.hosts, (a, b, c), (pinger, stream), options.pmtu_observe_s)
                step("path-MTU probes: every pair passes at full size")
                path_drill.wait_probed()
                faults = (("filtered", True), ("allowed", False))[: 2 if options.pmtu_icmp_allowed else 1]
                for i, (title, drop_icmp) in enumerate(faults):
                    step(f"{2 * i + 1}/{2 * len(faults)} shrink {a.name}<->{b.name}, ICMP {title}")
                    path_drill.shrink(drop_icmp)
                    step(f"{2 * i + 2}/{2 * len(faults)} grow back")
                    path_drill.grow_back()
            report.steps = drill.steps if path_drill is None else path_drill.steps
            report.boot = boot_times(lab) if boot else {}
            after = {s.name: daemon_pids(s.gateway_ns) for s in running}
            report.wireguard_go_pids = {n: {"before": before[n], "after": after[n]} for n in before}
            pids_kept = all(before[n] == after[n] and before[n] for n in before)
            pinger.stop()
            report.stream = stream.stop()
            if path_drill is None:
                report.ok = judge(report.steps, pinger, stream, pids_kept, drill.poll_s)
            else:
                report.ok = judge_pmtu(report.steps, pinger, stream) and pids_kept
        except LabError as exc:
            report.error = str(exc)
        finally:
            step("teardown")
            if path_drill is not None:
                path_drill.cleanup()
            stop_traffic(pinger, stream)
            cleanup()
    return report.finish(cleanup.problems, started)


def boot_times(lab: BuiltLab) -> dict[str, dict[str, Any]]:
    """Each booted gateway: seconds from its launch until `cloud-init status --wait` returned, and its exit."""
    from wg_mesh.lab.machines.container import ContainerGateway  # (--boot's modules only when booting)

    times = {}
    for name, m in lab.machines.items():
        if isinstance(m, ContainerGateway) and m.launched_at is not None:
            times[name] = {"cloud_init_done_s": m.cloud_init_s, "cloud_init_exit": m.cloud_init_exit}
    return times


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _path_cells(s: dict[str, Any]) -> str:
    if "restored_s" in s:
        return f"routes restored after {_s(s['restored_s'])} s"
    return (f"first failing probe {_s(s['first_failing_probe_s'])} s, black hole {_s(s['black_hole_declared_s'])} s, "
            f"healed {_s(s['healed_s'])} s (route MTU {s['healed_route_mtu'] or '-'}), "
            f"alert {_s(s['alert_fires_s'])} s")  # fmt: skip


def print_drill(report: DrillReport, console: Console) -> None:
    if report.kind == "ha":
        print_ha(report, console)
        return
    if report.kind == "roam":
        print_roam(report, console)
        return
    table = Table(title=f"{report.kind} drill: {report.label}", title_justify="left")
    last = "converged s" if report.kind == "live" else "path MTU (A's agent)"
    for column in ("step", "pings lost A->B", "longest ping gap ms", "longest stall ms", last, ""):
        table.add_column(column)
    for s in report.steps:
        if report.kind == "live":
            cell = ", ".join(f"{site} {_s(v)}" for site, v in s["convergence_s"].items())
        else:
            cell = _path_cells(s)
        lost = "-" if s.get("pings_lost") is None else str(s["pings_lost"])
        stall = _ms(s.get("longest_stall_ms"))
        verdict = "ok" if s["ok"] else "FAIL"
        table.add_row(s["step"], lost, _ms(s.get("longest_ping_gap_ms")), stall, cell, verdict)
    console.print(table)
    if report.stream:
        console.print(f"stream: {report.stream.get('bytes', 0) / 2**20:.0f} MiB, sha256 "
                      f"{'match' if report.stream.get('verified') else 'MISMATCH'}")  # fmt: skip
    for site, pids in report.wireguard_go_pids.items():
        console.print(f"{site}: wireguard-go pids {pids['before']} -> {pids['after']}")
    for site, b in report.boot.items():
        console.print(f"{site}: booted, cloud-init done {_s(b['cloud_init_done_s'])} s after launch "
                      f"(exit {b['cloud_init_exit']})")  # fmt: skip
    if report.error:
        console.print(f"[red]error: {report.error}[/red]")
    console.print("[green]drill passed[/green]" if report.ok else "[red]drill FAILED[/red]")
