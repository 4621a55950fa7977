"""The lab's report: rich tables per check, a progress line while it runs, and the JSON summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from wg_mesh.lab.checks.result import CheckResult
from wg_mesh.lab.fabric.plan import LabPlan


@dataclass
class LabReport:
    label: str
    plan: LabPlan
    checks: Sequence[CheckResult] = ()
    error: str | None = None  # the lab could not be built or run
    build_s: float | None = None
    duration_s: float = 0.0
    kept: bool = False
    notes: list[str] = field(default_factory=list)
    kept_hints: list[str] = field(default_factory=list)  # how to reach a kept lab's gateways
    mode: str = "namespace"  # or "boot": gateways are booted containers
    image: dict[str, Any] | None = None  # --boot: the image and package source used

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def check(self, key: str) -> CheckResult | None:
        return next((c for c in self.checks if c.key == key), None)

    def _data(self, key: str) -> dict[str, Any]:
        found = self.check(key)
        return found.data if found else {}

    def to_json(self) -> dict[str, Any]:
        mtu = self._data("path_mtu")
        return {
            "ok": self.ok,
            "stack": self.label,
            "prefix": self.plan.prefix,
            "error": self.error,
            "duration_s": round(self.duration_s, 2),
            "build_s": None if self.build_s is None else round(self.build_s, 2),
            "kept": self.kept,
            "sites": [site_json(self.plan, s.name) for s in self.plan.sites],
            "pairs": [
                {key: p[key] for key in ("from", "to", "ok", "rtt_ms")} for p in self._data("ping").get("pairs", [])
            ],
            "mtu": {
                "computed": self.plan.tunnel_mtu,
                "max_unfragmented": mtu.get("max_unfragmented"),
                "expected_max_unfragmented": self.plan.tunnel_mtu - 28,
                "clamped_mss": self.plan.mss,
                "fragmentation": mtu.get("fragmentation"),
            },
            "private_links": [link.to_json() for link in self.plan.private_links],
            "throughput_mbps": self._data("throughput").get("throughput_mbps"),
            "recovery_ms": self._data("recovery").get("recovery_ms"),
            "checks": {c.key: {"ok": c.ok, "summary": c.summary, "seconds": c.seconds, **c.data} for c in self.checks},
            "notes": self.notes,
            "mode": self.mode,
            **({"boot": self.boot_json()} if self.mode == "boot" else {}),
        }

    def boot_json(self) -> dict[str, Any]:
        """--boot's own numbers: image, boot-to-cloud-init-done and boot-to-handshake per gateway, the reboot."""
        gateways = self._data("cloud_init").get("gateways", {})
        reboot = self._data("reboot")
        return {
            "image": self.image,
            "gateways": {
                name: {k: g.get(k) for k in ("boot_to_cloud_init_done_s", "boot_to_handshake_s")}
                for name, g in gateways.items()
            },
            "reboot": {k: v for k, v in reboot.items() if k != "error"} if reboot else None,
        }


def site_json(plan: LabPlan, name: str) -> dict[str, Any]:
    s = plan.site(name)
    return {
        "name": s.name,
        "cloud": s.cloud,
        "overlay_ip": str(s.overlay_ip),
        "public_ip": str(s.public_ip),
        "replaces": s.real_public,
        "gateway_ip": str(s.gateway_ip.ip),
        "host_ip": str(s.host_ip.ip),
        "host_mtu": s.nic_mtu,
        "internet_path_mtu": s.uplink_mtu,
        "declared_underlay_mtu": s.declared_underlay_mtu,
        "host_routes": [str(r) for r in s.host_routes],
        "namespaces": list(s.namespaces),
    }


def topology_table(plan: LabPlan) -> Table:
    table = Table(title=f"Lab topology ({plan.prefix}-*, tunnel MTU {plan.tunnel_mtu}, MSS {plan.mss})")
    for column in ("site", "lab public IP", "replaces", "gateway", "host", "MTU host/path"):
        table.add_column(column)
    for s in plan.sites:
        gateway = f"{s.gateway_ip.ip} (1:1 NAT)" if s.is_cloud else f"{s.public_ip} + LAN {s.gateway_ip.ip}"
        table.add_row(
            f"{s.name} ({s.cloud})",
            str(s.public_ip),
            s.real_public,
            gateway,
            str(s.host_ip),
            f"{s.nic_mtu} / {s.uplink_mtu}",
        )
    table.caption = (
        "Public addresses: the lab's own replace the clouds' (1:1 NAT to the gateway's private address) and the "
        "static endpoints (held by the gateway) in every rendered Endpoint; nothing else in the rendered files changes."
    )
    for link in plan.private_links:
        table.caption += (
            f"\nPrivate path {link.path} ({link.kind}): {link.a.site} <-> {link.b.site}, a link between their VPC "
            f"routers at MTU {link.mtu} (tunnel MTU {link.tunnel_mtu}) routing only the gateways' private addresses."
        )
    table.caption_justify = "left"
    return table


def check_table(check: CheckResult) -> Table:
    status = "[green]PASS[/green]" if check.ok else "[bold red]FAIL[/bold red]"
    title = f"{check.title}: {status} ({check.seconds:.1f} s)"
    table = Table(title=title, caption=check.summary, title_justify="left", caption_justify="left")
    for column in check.columns:
        table.add_column(column)
    for row in check.rows:
        table.add_row(*(f"[red]{cell}[/red]" if cell == "FAIL" else cell for cell in row))
    return table


def print_report(report: LabReport, console: Console) -> None:
    console.print(topology_table(report.plan))
    for check in report.checks:
        console.print(check_table(check))
    for note in report.notes:
        console.print(f"note: {note}")
    timing = f"{report.duration_s:.1f} s" + (f" (build {report.build_s:.1f} s)" if report.build_s is not None else "")
    if report.error is not None:
        console.print(f"[bold red]lab {report.label}: ERROR[/bold red] {report.error} ({timing})")
    elif report.ok:
        passed = f"all {len(report.checks)} checks passed"
        console.print(f"[bold green]lab {report.label}: {passed}[/bold green] in {timing}")
    else:
        failed = ", ".join(c.title for c in report.checks if not c.ok)
        console.print(f"[bold red]lab {report.label}: FAILED[/bold red] {failed} ({timing})")
    if report.kept:
        a, b = report.plan.sites[0], report.plan.sites[1]
        console.print(
            f"kept: lab {report.plan.prefix}; remove it with `sudo python -m wg_mesh lab down {report.plan.prefix}`",
            highlight=False,
        )
        console.print(f"  sudo ip netns exec {a.host_ns} ping {b.host_ip.ip}", highlight=False)
        for hint in report.kept_hints:
            console.print(f"  {hint}", highlight=False)


class Steps:
    """A progress bar over the lab's steps (on stderr, so the report on stdout stays clean)."""

    def __init__(self, total: int, console: Console | None) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("lab", total=total)
        self.started = False

    def __call__(self, description: str) -> None:
        if self.started:
            self.progress.advance(self.task)
        self.started = True
        self.progress.update(self.task, description=description)

    def __enter__(self) -> Steps:
        self.progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.stop()
