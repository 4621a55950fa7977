"""A consumer line in front of a static site (issue 24: offices on lines of tens to a few hundred Mbit/s, where the
line, not the gateway's CPU, is the bottleneck): a token bucket (tc-tbf(8)) on both ends of the site's uplink veth.

* up    the gateway's NIC (in the gateway's namespace or container): what the site sends to the internet, queued
        where a line's modem queues it
* down  the uplink's end in the internet namespace (`SitePlan.internet_if`): what the internet sends to the site

tbf counts each frame's bytes as the veth carries them (Ethernet header, outer IPv4 and UDP, WireGuard's 32 bytes and
the tunnelled packet), so a line of RATE Mbit/s carries at most `payload_share` of RATE as TCP payload through the
tunnel (`ceiling_mbps`). The queue holds LATENCY_MS of the rate (a line's buffer), the bucket BURST_MS of it (at least
MIN_BURST bytes: tbf needs a frame's worth and more). Pure argument lists (`shape_args`, `clear_args`) and the calls
that apply them (`shaped_lines`: applied for a block, removed after, on any exit); the qdiscs' counters (`counters`)
show that a measurement went through the line. tbf, not netem (which the lab's kernel may lack).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from wg_mesh.lab.fabric.netns import Node
from wg_mesh.lab.fabric.plan import SitePlan

LATENCY_MS = 50  # the line's buffer: how long a frame may wait in the queue before tbf drops it
BURST_MS = 2  # the bucket: what the line passes at once after an idle moment
MIN_BURST = 16 * 1024  # bytes (over ten 1500-byte frames: tbf refuses a bucket smaller than one)
ETHERNET_HEADER = 14  # what tbf counts on a veth besides the IP packet
WIREGUARD_UDP_OVERHEAD = 20 + 8 + 32  # outer IPv4, UDP, WireGuard's header and tag (a full packet needs no padding)
TCP_TIMESTAMPS = 12  # the TCP option Linux sends in every segment
COUNTERS = ("bytes", "packets", "drops", "overlimits")


def burst_bytes(mbit: float) -> int:
    return max(MIN_BURST, int(mbit * 1e6 / 8 * BURST_MS / 1000))


def shape_args(device: str, mbit: float) -> list[str]:
    """tc(8) arguments: `device`'s root qdisc becomes a token bucket of `mbit` Mbit/s (replacing what is there)."""
    if not mbit > 0:
        raise ValueError(f"a line's rate must be above 0 Mbit/s, not {mbit!r}")
    return ["qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{mbit:g}mbit", "burst",
            str(burst_bytes(mbit)), "latency", f"{LATENCY_MS}ms"]  # fmt: skip


def clear_args(device: str) -> list[str]:
    """tc(8) arguments: `device` gets its default root qdisc back."""
    return ["qdisc", "del", "dev", device, "root"]


def payload_share(tunnel_mtu: int) -> float:
    """The share of a line's bytes that is TCP payload when full-size segments go through a tunnel of `tunnel_mtu`:
    a segment's payload (MTU - IPv4 and TCP headers - timestamps) over its frame on the line."""
    payload = tunnel_mtu - 40 - TCP_TIMESTAMPS
    return payload / (tunnel_mtu + WIREGUARD_UDP_OVERHEAD + ETHERNET_HEADER)


def ceiling_mbps(mbit: float, tunnel_mtu: int) -> float:
    """The most TCP payload (what iperf3 reports) a line of `mbit` carries through the tunnel."""
    return round(mbit * payload_share(tunnel_mtu), 1)


@dataclass(frozen=True)
class LineEnd:
    site: str
    direction: str  # "up" (the site's gateway sends) or "down" (the internet sends to the site)
    node: Node
    device: str


def line_ends(site: SitePlan, gateway: Node, internet: Node) -> tuple[LineEnd, LineEnd]:
    """Both ends of a static site's uplink: (up, down)."""
    if site.is_cloud:
        raise ValueError(f"{site.name} is a cloud site: a consumer line is a static site's")
    return (LineEnd(site.name, "up", gateway, site.gateway_nic), LineEnd(site.name, "down", internet, site.internet_if))


def counters(end: LineEnd) -> dict[str, Any]:
    """The root qdisc on `end`'s device: its kind (tbf while shaped) and counters: bytes and packets sent, drops,
    overlimits (times the bucket was empty)."""
    out = end.node.run(["tc", "-s", "-j", "qdisc", "show", "dev", end.device, "root"], timeout=10).stdout
    qdisc: dict[str, Any] = next(iter(json.loads(out or "[]")), {})
    return {"kind": qdisc.get("kind"), **{key: int(qdisc.get(key, 0)) for key in COUNTERS}}


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What a qdisc counted between two readings, and its kind at the second."""
    return {"kind": after["kind"], **{key: after[key] - before[key] for key in COUNTERS}}


@contextlib.contextmanager
def shaped_lines(ends: Sequence[LineEnd], mbit: float) -> Iterator[None]:
    """Each of `ends` shaped to `mbit` Mbit/s for the block; the default qdiscs back after it, on any exit."""
    applied: list[LineEnd] = []
    try:
        for end in ends:
            end.node.run(["tc", *shape_args(end.device, mbit)], timeout=10)
            applied.append(end)
        yield
    finally:
        for end in applied:
            end.node.run(["tc", *clear_args(end.device)], timeout=10, check=False)
