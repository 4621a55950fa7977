"""What one path-MTU tick costs on a 64-site mesh (63 peers): `python -m bench.pmtu_tick [--ticks N]`.

The peers' overlay addresses are loopback addresses (127.0.1.x, answered by this host's kernel), so the figure is
the monitor's own cost (126 ping processes through the thread pool, the route read, the metrics text), not the
network's. Baseline in the same run: the same 126 processes as `true`, through the same pool, i.e. the price of
spawning processes at all. Prints JSON: wall and CPU seconds per tick (CPU = this process + its children), and
how many of the probes got no answer even on loopback (concurrent ping processes occasionally lose one: the
verdicts' hysteresis is there for that).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from wg_mesh.gateway.pmtu import PathMonitor, run_command
from wg_mesh.gateway.wgconf import InterfacePlan, Peer

PEERS = 63


def plan() -> InterfacePlan:
    peers = tuple(
        Peer(f"site-{i}", "K" * 43 + "=", (f"127.0.1.{i}/32", f"10.{i}.0.0/16"), f"198.51.100.{i}:51820", 25)
        for i in range(1, PEERS + 1)
    )
    return InterfacePlan("site-0", "127.0.1.254/24", 51820, 1400, 1360, False, peers)


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(ticks: int, body: Callable[[int], object]) -> dict[str, float]:
    wall0, cpu0 = time.monotonic(), cpu()
    for i in range(ticks):
        body(i)
    return {"wall_s": (time.monotonic() - wall0) / ticks, "cpu_s": (cpu() - cpu0) / ticks}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ticks", type=int, default=5)
    args = parser.parse_args(argv)
    monitor = PathMonitor(plan(), run_command)
    lost = []

    def probe_tick(i: int) -> None:
        monitor.tick(float(i))
        lost.append(sum(2 - bool(p.small_ok) - bool(p.full_ok) for p in monitor.paths.values()))

    tick = measure(args.ticks, probe_tick)

    def spawn(_: int) -> None:
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda _: run_command(["true"]), range(2 * PEERS)))

    baseline = measure(args.ticks, spawn)
    print(json.dumps({"peers": PEERS, "ticks": args.ticks, "tick": tick, "baseline_126_true": baseline,
                      "ratio_cpu": round(tick["cpu_s"] / baseline["cpu_s"], 2),
                      "probes_lost": sum(lost)}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
