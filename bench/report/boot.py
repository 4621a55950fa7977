"""docs/benchmarks.md section 7, booted gateways (`lab --boot`), from docs/bench/boot.json (bench/lab/boot.py)."""

from __future__ import annotations

from typing import Any


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def section(boot: dict[str, Any]) -> str:
    image = boot["image"]
    built = f"built in {image['built_s']:.0f} s" if image.get("built_s") else "taken from the cache in this run"
    out = [
        "## 7. Booted gateways (`lab --boot`)\n",
        "Each gateway a systemd-nspawn container booted from the lab's Debian trixie image (cloud-init with the "
        "rendered user data as NoCloud seed, packages from a local source on the host); the namespace lab of the same "
        "stack, in the same run, is the baseline. Times from the container's start (wg's handshake times have "
        f"1 s resolution). Image: {image['size_mb']} MB, {built}.\n",
        "| stack | gateway | boot → cloud-init done | boot → handshakes with every peer |",
        "|---|---|---|---|",
    ]
    for name, stack in boot["stacks"].items():
        for gateway, g in stack["gateways"].items():
            out.append(
                f"| {name} | {gateway} | {_s(g['boot_to_cloud_init_done_s'])} | {_s(g['boot_to_handshake_s'])} |"
            )
    out += [
        "",
        "| stack | rebooted gateway | nspawn exit | PID 1 | wg0 active | traffic outage | vs `wg-quick` restart |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, stack in boot["stacks"].items():
        r = stack["reboot"]
        out.append(
            f"| {name} | {r['gateway']} | {r['shutdown_ms']:.0f} ms | {r['pid1_ms']:.0f} ms "
            f"| {r['wg_active_ms']:.0f} ms | {r['traffic_outage_ms']:.0f} ms "
            f"| {stack['wg_quick_restart_outage_ms']:.0f} ms ({stack['reboot_to_restart_outage']}×) |"
        )
    out += [
        "",
        "| stack | namespace lab | `--boot` lab (of which build and boot) | ratio |",
        "|---|---|---|---|",
    ]
    for name, stack in boot["stacks"].items():
        out.append(
            f"| {name} | {stack['namespace_lab_s']:.1f} s | {stack['boot_lab_s']:.1f} s "
            f"({stack['boot_lab_build_s']:.1f} s) | {stack['boot_to_namespace']}× |"
        )
    out.append(
        "\nReboot: from `systemctl reboot` inside the gateway to systemd-nspawn's exit, to the new PID 1, to "
        "`wg-quick@wg0` active again (cloud-init does not run again), and the longest silence of a 10 ms ping from the "
        "peer site's host through the rebooted gateway. Debian trixie and wireguard-go, not Ubuntu 24.04 and the "
        "kernel module: a cloud VM's boot (firmware, kernel, EC2/GCE datasource) adds its own time.\n"
    )
    return "\n".join(out)
