"""A consumer line in front of a static site (issue 24: offices on lines of tens to a few hundred Mbit/s, where the
line, not the gateway's CPU, is the bottleneck): a token bucket (tc-tbf(8)) each way on the site's uplink, at the
internet's end of it (the lab's internet namespace stands in for the provider and its access network):

* down  what the internet sends to the site: the root qdisc of the uplink's end (`SitePlan.internet_if`)
* up    what the site sends: redirected on arrival at that end to an ifb device (`ifb_name`) whose root qdisc is the
        bucket, then on into the internet; the gateway is untouched, so its packets queue and drop at the line, as a
        modem's do, never pushing back on the gateway's own socket

tbf counts each frame's bytes as the veth carries them (Ethernet header, outer IPv4 and UDP, WireGuard's 32 bytes and
the tunnelled packet), so a line of RATE Mbit/s carries at most `payload_share` of RATE as TCP payload through the
tunnel (`ceiling_mbps`). The queue holds LATENCY_MS of the rate (a line's buffer), the bucket BURST_MS of it (at least
MIN_BURST bytes: tbf needs a frame's worth and more). Pure command lists (`shape_commands`, `clear_commands`) and the
call that applies them (`shaped_lines`: for a block, removed after, on any exit); the buckets' counters (`counters`)
show that a measurement went through the line. tbf, ifb and u32 with mirred, not netem (which the lab's kernel may
lack).
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


def ifb_name(site: SitePlan) -> str:
    """The device that carries the site's upstream bucket, in the internet namespace (within IFNAMSIZ)."""
    return f"ifb-{site.internet_if}"


def tbf(device: str, mbit: float) -> list[str]:
    """tc(8) arguments: `device`'s root qdisc becomes a token bucket of `mbit` Mbit/s (replacing what is there)."""
    if not mbit > 0:
        raise ValueError(f"a line's rate must be above 0 Mbit/s, not {mbit!r}")
    return ["tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{mbit:g}mbit", "burst",
            str(burst_bytes(mbit)), "latency", f"{LATENCY_MS}ms"]  # fmt: skip


def shape_commands(site: SitePlan, mbit: float) -> list[list[str]]:
    """The commands (in the internet namespace, in order) that put `site` on a line of `mbit` Mbit/s each way."""
    if site.is_cloud:
        raise ValueError(f"{site.name} is a cloud site: a consumer line is a static site's")
    uplink, ifb = site.internet_if, ifb_name(site)
    redirect = ["protocol", "all", "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev",
                ifb]  # fmt: skip
    return [["ip", "link", "add", ifb, "type", "ifb"], ["ip", "link", "set", ifb, "up"], tbf(ifb, mbit),
            ["tc", "qdisc", "add", "dev", uplink, "handle", "ffff:", "ingress"],
            ["tc", "filter", "add", "dev", uplink, "parent", "ffff:", *redirect], tbf(uplink, mbit)]  # fmt: skip


def clear_commands(site: SitePlan) -> list[list[str]]:
    """The commands that take `site` off its line (each may fail harmlessly: what was never added)."""
    uplink = site.internet_if
    return [["tc", "qdisc", "del", "dev", uplink, "root"], ["tc", "qdisc", "del", "dev", uplink, "ingress"],
            ["ip", "link", "del", ifb_name(site)]]  # fmt: skip


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
    direction: str  # "up" (the site sends) or "down" (the internet sends to the site)
    device: str  # in the internet namespace: the one whose root qdisc is this direction's bucket

    @property
    def name(self) -> str:
        return f"{self.site} {self.direction}"


def line_ends(site: SitePlan) -> tuple[LineEnd, LineEnd]:
    """The two buckets of a static site's line: (up, down)."""
    return LineEnd(site.name, "up", ifb_name(site)), LineEnd(site.name, "down", site.internet_if)


def counters(internet: Node, end: LineEnd) -> dict[str, Any]:
    """The root qdisc on `end`'s device: its kind (tbf while shaped) and counters: bytes and packets sent, drops,
    overlimits (times the bucket was empty). A device that is gone reads as kind None."""
    out = internet.run(["tc", "-s", "-j", "qdisc", "show", "dev", end.device, "root"], timeout=10, check=False).stdout
    qdisc: dict[str, Any] = next(iter(json.loads(out or "[]")), {})
    return {"kind": qdisc.get("kind"), **{key: int(qdisc.get(key, 0)) for key in COUNTERS}}


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What a qdisc counted between two readings, and its kind at the second."""
    return {"kind": after["kind"], **{key: after[key] - before[key] for key in COUNTERS}}


@contextlib.contextmanager
def shaped_lines(internet: Node, sites: Sequence[SitePlan], mbit: float) -> Iterator[None]:
    """Each of `sites` on a line of `mbit` Mbit/s each way for the block; taken off after it, on any exit."""
    touched: list[SitePlan] = []
    try:
        for site in sites:
            commands = shape_commands(site, mbit)
            touched.append(site)
            for argv in commands:
                internet.run(argv, timeout=10)
        yield
    finally:
        for site in touched:
            for argv in clear_commands(site):
                internet.run(argv, timeout=10, check=False)
