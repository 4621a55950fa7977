"""What every section of docs/benchmarks.md shares: the targets, the path labels, how a figure is written
and the figures derived from the JSON results (pure)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

PATH_LABELS = {
    "underlay": "underlay (gateway → gateway, no tunnel, through the 1:1 NAT)",
    "wireguard": "WireGuard tunnel (gateway → gateway, wg0)",
    "end_to_end": "end to end (workload host → host, through both gateways)",
    "ipsec": "IPsec tunnel (gateway → gateway, strongSwan)",
}
SHORT_LABELS = {"underlay": "underlay", "wireguard": "WireGuard", "end_to_end": "end to end", "ipsec": "IPsec"}
E2E_TARGET = 0.9
RECOVERY_TARGET_MS = 100.0
SCALE_TARGET = 1.5


def mbit(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} Gbit/s" if value >= 1000 else f"{value:.0f} Mbit/s"


def num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def g(value: Any) -> str:
    """A parameter recorded in the results, as written (or '?' when an older result lacks it)."""
    return f"{value:g}" if isinstance(value, int | float) else "?"


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


def crossing(value: int | None, curve_max: int) -> str:
    return f"N={value}" if value is not None else f"none up to N={curve_max}"


def span(low: float, high: float, fmt: Callable[[float], str]) -> str:
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}–{fmt(high)}"


def met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- derived figures (pure) ---------------------------------------------------------------------------------


def cell(lab: dict[str, Any], path: str, streams: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = lab.get("throughput", {}).get("paths", {}).get(path, {}).get(streams)
    return found


def scale_marginal(points: list[dict[str, Any]]) -> list[float | None]:
    """ms per added resource between consecutive sizes (the fixed start-up cost cancels out)."""
    out: list[float | None] = [None]
    for prev, cur in itertools.pairwise(points):
        added = cur["resources"] - prev["resources"]
        out.append(round((cur["program_s"] - prev["program_s"]) * 1000 / added, 3) if added else None)
    return out


def handshake_samples(data: dict[str, Any]) -> list[dict[str, float]]:
    samples = []
    if "lab" in data and "handshake" in data["lab"]:
        samples.append(data["lab"]["handshake"])
    for p in data.get("mtu", {}).get("points", []):
        if p.get("handshake_after_build_s") is not None:
            samples.append(
                {"after_build_s": p["handshake_after_build_s"], "after_start_s": p["handshake_after_start_s"]}
            )
    return samples


def median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def cpu_saving(wg: dict[str, Any], ipsec: dict[str, Any]) -> str:
    """How much less (or more) machine CPU per Gbit WireGuard needed than IPsec, as a phrase."""
    a, b = wg.get("busy_core_s_per_gbit"), ipsec.get("busy_core_s_per_gbit")
    if not a or not b:
        return ""
    change = 1 - a / b
    return f" (WireGuard {abs(change):.0%} {'less' if change >= 0 else 'more'} CPU per Gbit)"
