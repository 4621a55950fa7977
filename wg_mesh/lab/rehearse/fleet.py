"""Traffic between every pair of sites for a whole rehearsal: per pair a ping every 10 ms and a SHA-256-verified TCP
stream (drills/traffic.py), from the first site's workload host to the second's, judged per step's time window.

The pairs are the sites both configs have (a site the change adds has no traffic before it exists, one it removes
none after): their traffic must survive the change. Streams are paced at STREAM_RATE each (many pairs share the
machine's two cores with every wireguard-go).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from wg_mesh.lab.drills.traffic import STREAM_PORT, Pinger, Stream
from wg_mesh.lab.fabric.netns import LabError, LabState, Node
from wg_mesh.lab.fabric.plan import LabPlan

STREAM_RATE = 256 * 1024  # bytes a second per pair


@dataclass
class Pair:
    a: str
    b: str
    pinger: Pinger
    stream: Stream

    @property
    def name(self) -> str:
        return f"{self.a}<->{self.b}"


class Fleet:
    def __init__(self, plan: LabPlan, state: LabState, sites: Iterable[str]) -> None:
        self.plan, self.state = plan, state
        self.pairs: list[Pair] = []
        for k, (a, b) in enumerate(itertools.combinations(sites, 2)):
            x, y = plan.site(a), plan.site(b)
            src, dst = Node(x.host_ns), Node(y.host_ns)
            target = str(y.host_ip.ip)
            pinger = Pinger(src, state, x.host_ns, target)
            stream = Stream(src, x.host_ns, dst, y.host_ns, target, state, port=STREAM_PORT + k, rate=STREAM_RATE)
            self.pairs.append(Pair(a, b, pinger, stream))

    def start(self) -> None:
        for pair in self.pairs:
            pair.pinger.start()
            pair.stream.start()

    def flowing(self, since: float, timeout: float) -> list[str]:
        """Wait until every pair's ping is answered after `since` (epoch); the pairs that were not within `timeout`."""
        deadline = time.monotonic() + timeout
        left = list(self.pairs)
        while left and time.monotonic() < deadline:
            for pair in list(left):
                if (exited := pair.pinger.exited()) is not None:
                    raise LabError(f"{pair.name}: {exited}")
                if pair.pinger.replied_since(since):
                    left.remove(pair)
            time.sleep(0.1)
        return [pair.name for pair in left]

    def window(self, start: float, end: float) -> dict[str, dict[str, Any]]:
        """Per pair: pings lost, the longest silence between replies and the longest stream stall in [start, end]."""
        out = {}
        for pair in self.pairs:
            seen = pair.pinger.window(start, end)
            out[pair.name] = {"pings_lost": seen["lost"], "longest_gap_ms": seen["longest_gap_ms"],
                              "stall_ms": pair.stream.longest_stall_ms(start, end)}  # fmt: skip
        return out

    def stop(self) -> dict[str, dict[str, Any]]:
        """Stop every pinger and stream; each stream's result (verified, bytes)."""
        results = {}
        for pair in self.pairs:
            pair.pinger.stop()
            results[pair.name] = pair.stream.stop() if not pair.stream.result else pair.stream.result
        return results

    def stop_quietly(self) -> None:
        for pair in self.pairs:
            pair.pinger.stop()
            if not pair.stream.result:
                pair.stream.stop()
