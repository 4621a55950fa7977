"""The PNG plots of docs/benchmarks.md, drawn from the JSON results (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: set before pyplot is imported
import matplotlib.pyplot as plt

from bench.report.format import RECOVERY_TARGET_MS, SHORT_LABELS, g, scale_marginal

DPI = 110


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_dataplane(lab: dict[str, Any], out: Path) -> Path:
    paths = lab["throughput"]["paths"]
    names = list(paths)
    streams = sorted({s for p in paths.values() for s in p}, key=int)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(streams)
    for k, s in enumerate(streams):
        xs = [i + (k - (len(streams) - 1) / 2) * width for i in range(len(names))]
        mbps = [paths[n].get(s, {}).get("mbps", 0) for n in names]
        eff = [paths[n].get(s, {}).get("busy_core_s_per_gbit") or 0 for n in names]
        bars = left.bar(xs, mbps, width, label=f"-P {s}")
        left.bar_label(bars, labels=[f"{v:.0f}" for v in mbps], fontsize=7)
        right.bar(xs, eff, width, label=f"-P {s}")
    for ax in (left, right):
        ax.set_xticks(range(len(names)), [SHORT_LABELS.get(n, n) for n in names])
        ax.legend()
    left.set_yscale("log")
    left.set_ylim(bottom=10)
    left.set_ylabel("Mbit/s (median, log scale)")
    left.set_title("iperf3 TCP throughput")
    right.set_ylabel("machine core-seconds per Gbit")
    right.set_title("CPU cost per Gbit (whole machine)")
    return _save(fig, out / "dataplane.png")


def plot_mtu(mtu: dict[str, Any], out: Path) -> Path:
    points = mtu["points"]
    xs = [p["mtu"] for p in points]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(xs, [p["wireguard"]["mbps"] for p in points], "o-", label="tunnel (gateway → gateway)")
    ax.plot(xs, [p["end_to_end"]["mbps"] for p in points], "s-", label="end to end (host → host)")
    ax.set_xlabel("tunnel MTU")
    ax.set_ylabel("Mbit/s (iperf3 -P 1, median)")
    ax.set_ylim(bottom=0)
    ax.axvline(mtu["auto_mtu"], color="green", linestyle="--", label=f"mtu: auto = {mtu['auto_mtu']}")
    frag_ax = ax.twinx()
    frags = [
        p["wireguard"]["fragments"]["IpFragCreates"] + p["end_to_end"]["fragments"]["IpFragCreates"] for p in points
    ]
    frag_ax.bar(xs, frags, width=8, color="red", alpha=0.35, label="IP fragments created")
    frag_ax.set_ylabel("IP fragments created during the runs", color="red")
    lines, labels = ax.get_legend_handles_labels()
    more, more_labels = frag_ax.get_legend_handles_labels()
    ax.legend(lines + more, labels + more_labels, loc="lower left", fontsize=8)
    ax.set_title(f"MTU sweep: smallest underlay {mtu['underlay_min']} → auto MTU {mtu['auto_mtu']}")
    return _save(fig, out / "mtu.png")


def plot_recovery(lab: dict[str, Any], out: Path) -> Path:
    labels = {
        "wireguard_host_to_host": "WireGuard\nhost → host",
        "wireguard_gateway_to_gateway": "WireGuard\ngateway → gateway",
        "ipsec_gateway_to_gateway": "IPsec\ngateway → gateway",
    }
    keys = [k for k in labels if lab["recovery"].get(k)]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for i, key in enumerate(keys):
        trials = [t["outage_ms"] for t in lab["recovery"][key]["trials"] if t["ok"]]
        ax.scatter([i] * len(trials), trials, alpha=0.6)
        summary = lab["recovery"][key]["outage_ms"]
        if summary:
            ax.hlines(summary["median"], i - 0.25, i + 0.25, color="black")
    ax.axhline(RECOVERY_TARGET_MS, color="green", linestyle="--", label=f"target: median ≤ {RECOVERY_TARGET_MS:.0f} ms")
    ax.set_xticks(range(len(keys)), [labels[k] for k in keys])
    ax.set_ylabel(f"outage, ms (ping every {g(lab['recovery'].get('ping_interval_ms'))} ms)")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title("Recovery after a tunnel restart on one gateway (bar: median)")
    return _save(fig, out / "recovery.png")


def plot_scale(scale: dict[str, Any], out: Path) -> Path:
    pts = scale["points"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    ns = [p["n"] for p in pts]
    left.plot(ns, [p["ms_per_resource"] for p in pts], "o-", label="ms per resource (whole run)")
    marginal = scale_marginal(pts)
    left.plot(
        [n for n, m in zip(ns, marginal, strict=True) if m is not None],
        [m for m in marginal if m is not None],
        "s--",
        label="ms per added resource",
    )
    left.set_xlabel("sites N")
    left.set_ylabel("ms")
    left.set_ylim(bottom=0)
    left.set_title("Pulumi program under mocks")
    left.legend()
    curve = scale["quota_curve"]
    cn = [row["n"] for row in curve]
    quotas = scale["quotas"]
    styles = {
        "aws_routes_per_table": ("AWS routes / table", "tab:orange"),
        "gcp_routes_per_network": ("GCP routes / network", "tab:blue"),
        "aws_sg_inbound_entries": ("AWS SG inbound rules", "tab:purple"),
    }
    for key, (label, color) in styles.items():
        right.plot(cn, [row[key] for row in curve], color=color, label=label)
        right.axhline(quotas[key], color=color, linestyle=":", linewidth=1)
        crossing = scale["crossings"].get(key)
        if crossing:
            right.annotate(f"N={crossing}", (crossing, quotas[key]), fontsize=8, color=color)
        right.plot(ns, [p[key] for p in pts], "o", color=color, markersize=4)
    right.set_xlabel("sites N")
    right.set_ylabel("count (dotted: default quota)")
    right.set_title("Routes per table / network vs quotas (dots: measured)")
    right.legend(fontsize=8)
    return _save(fig, out / "scale.png")


def make_all(data: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    if "lab" in data:
        made["dataplane"] = plot_dataplane(data["lab"], out)
        made["recovery"] = plot_recovery(data["lab"], out)
    if "mtu" in data:
        made["mtu"] = plot_mtu(data["mtu"], out)
    if "scale" in data:
        made["scale"] = plot_scale(data["scale"], out)
    return made
