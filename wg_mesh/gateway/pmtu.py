"""Path-MTU black holes across the tunnel: see them per peer, heal them, export them (issue #14).

The gateway agent owns one `PathMonitor` and calls `tick(now)` every 15-30 s:

    monitor = PathMonitor(plan, runner)          # plan: the site's wgconf.InterfacePlan
    commands, text = monitor.tick(time.time())   # probes, heals; text = Prometheus textfile lines
    monitor.update_plan(new_plan)                # after the agent applied a new peer document

Each tick, per peer, in parallel (at most `Settings.parallel` pings in flight): a small DF ping (84 bytes) and
one of the tunnel's full size (`ping -M do -s MTU-28`) to the peer's overlay address (its first /32 in
AllowedIPs, whose own route the heal never lowers), plus one at the shrunk size while one is known.
Verdicts (pmtu_probe.Status):
- full passes: ok. Small and full fail: `unanswered` (peer down or no ICMP), never a black hole.
- small passes, full fails `fail_after` (3) ticks in a row: shrunk. A binary search on an 8-byte grid from 1280
  up finds the largest size that passes (4 probes for a 1400 tunnel), and the heal lowers the MTU of the routes
  to that peer's AllowedIPs to it (pmtu_heal). The full size is still probed every tick; `pass_after` (3)
  passes in a row restore the original routes.

Cost, 64-site mesh (63 peers), healthy: 126 ping processes a tick, 84 + 1400 bytes each way per peer: ~100
kbit/s of probes in total at a 15 s interval, and ~0.3 CPU-seconds a tick (2 % of one core; 1.3x the cost of
spawning 126 `true`: `python -m bench.pmtu_tick`, 2-core VM). A tick takes 0.2 s plus a round trip; every
failing probe waits its 1 s timeout, so the worst case (every peer unanswered) is ceil(126 / 32) = 4 s, plus
up to 4 s of sequential search probes for a peer whose path has just shrunk.

Why healing is on by default (`Settings.heal`): it acts only on the black-hole signature (small passes, full size
fails, 3 times in a row), so a dead or ICMP-silent peer never triggers it; it only ever lowers route MTUs, never
below 1280 and never the interface's; it touches only that peer's routes; a false positive costs a smaller MSS
for that peer until 3 full-size passes restore it; and it is derived from the kernel every tick (a restart adopts
it, a wg-quick restart re-applies it). tests/test_pmtu_netns.py shows it on real kernels: without the heal a
bulk TCP transfer across a path whose ICMP is filtered stalls; with it, it completes.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from . import fallback, pmtu_heal
from .pmtu_heal import overlay_address
from .pmtu_probe import SMALL_SIZE, PeerPath, Round, Runner, Settings, Status, found, probe, search, step
from .wgconf import INTERFACE, InterfacePlan

# name -> (type, help), in output order; the monitoring rules read only these names
METRICS: dict[str, tuple[str, str]] = {
    "wgmesh_path_last_probe_timestamp_seconds": ("gauge", "When the path-MTU probes last ran (unix time)."),
    "wgmesh_path_probe_ok": ("gauge", 'Last DF ping to the peer\'s overlay address passed (size="small": 84 bytes, '
                             '"full": the tunnel MTU).'),
    "wgmesh_path_icmp_unanswered": ("gauge", "1 if the peer answered neither the small nor the full ping."),
    "wgmesh_path_black_hole": ("gauge", "1 if small pings pass, the full size failed 3 (fail_after) ticks in a row."),
    "wgmesh_path_mtu_bytes": ("gauge", "Largest packet that passes to the peer (the tunnel MTU when healthy)."),
    "wgmesh_path_mtu_healed": ("gauge", "1 while the routes to the peer carry the lowered MTU."),
    "wgmesh_path_heal_failures_total": ("counter", "ip route commands of the heal that failed."),
}  # fmt: skip
METRIC_NAMES: tuple[str, ...] = tuple(METRICS)


def run_command(argv: Sequence[str]) -> tuple[int, str]:
    """The default runner: exit status and stdout (127 when missing, 124 when it hangs)."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})  # fmt: skip
    except OSError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""
    return done.returncode, done.stdout


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class PathMonitor:
    def __init__(self, plan: InterfacePlan, runner: Runner = run_command, settings: Settings | None = None):
        self.runner = runner
        self.settings = settings or Settings()
        self.paths: dict[str, PeerPath] = {}
        self.healed: dict[str, int] = {}  # peer -> MTU its routes carry now
        self.heal_failures = 0
        self.last_probe: float | None = None
        self._adopt = self.settings.heal
        self.plan = plan
        self.update_plan(plan)

    def update_plan(self, plan: InterfacePlan) -> None:
        """A new peer set: known peers keep their state (unless the tunnel MTU changed), new ones start unknown."""
        old_mtus = {p.name: self.plan.peer_mtu(p) for p in self.plan.peers}
        old = self.paths
        self.paths = {}
        for peer in plan.peers:
            address = overlay_address(plan, peer.name)
            kept = old.get(peer.name)
            fresh = kept is None or kept.address != address or old_mtus.get(peer.name) != plan.peer_mtu(peer)
            self.paths[peer.name] = PeerPath(peer.name, address) if fresh or kept is None else kept
        self.plan = plan

    # --- one tick ------------------------------------------------------------------------------------

    def tick(self, now: float) -> tuple[list[list[str]], str]:
        """Probe every peer, search where a path has just shrunk, bring the routes in line; returns the route
        commands that ran and the metrics text."""
        s = self.settings
        routes = self._routes() if s.heal else None
        if routes is not None and self._adopt:
            for peer, mtu in pmtu_heal.adopted(self.plan, routes).items():
                if peer in self.paths:
                    self.paths[peer] = replace(self.paths[peer], status=Status.SHRUNK, pmtu=mtu, fails=s.fail_after)
            self._adopt = False
        jobs = {(peer, size): path.address for peer, path in self.paths.items() for size in self._sizes(path)}
        with ThreadPoolExecutor(max_workers=max(1, min(s.parallel, len(jobs)))) as pool:
            futures = {key: pool.submit(probe, self.runner, addr, key[1], s.timeout) for key, addr in jobs.items()}
            passed = {key: future.result() for key, future in futures.items()}
        searches = []
        for peer, path in self.paths.items():
            at_pmtu = passed.get((peer, path.pmtu)) if path.pmtu is not None else None
            result = Round(small=passed[(peer, SMALL_SIZE)], full=passed[(peer, self.full(peer))], at_pmtu=at_pmtu)
            self.paths[peer], needed = step(path, result, s)
            if needed:
                searches.append(peer)
        if searches:
            with ThreadPoolExecutor(max_workers=max(1, min(s.parallel, len(searches)))) as pool:
                results = dict(zip(searches, pool.map(self._search, searches), strict=True))
            for peer, pmtu in results.items():
                self.paths[peer] = found(self.paths[peer], pmtu)
        self.last_probe = now
        done = self._heal(routes) if routes is not None else []
        return done, self.metrics()

    def full(self, peer: str) -> int:
        """The full size probed towards `peer`: its tunnel MTU (an internet peer of a gateway with a jumbo
        private-path peer: its own, below wg0's; docs/underlay.md section 5)."""
        return self.plan.peer_mtu(next(p for p in self.plan.peers if p.name == peer))

    def _sizes(self, path: PeerPath) -> list[int]:
        sizes = [SMALL_SIZE, self.full(path.peer)]
        return sizes if path.pmtu is None else [*sizes, path.pmtu]

    def _search(self, peer: str) -> int | None:
        address, s = self.paths[peer].address, self.settings
        return search(lambda size: probe(self.runner, address, size, s.timeout), s.floor, self.full(peer), s.step)

    def _routes(self) -> pmtu_heal.Routes | None:
        status, out = self.runner(pmtu_heal.show_routes_argv(INTERFACE))
        return pmtu_heal.parse_routes(out) if status == 0 else None  # no wg0 (yet): nothing to heal

    def _heal(self, routes: pmtu_heal.Routes) -> list[list[str]]:
        wanted = {peer: path.pmtu for peer, path in self.paths.items()}
        done = []
        for argv in pmtu_heal.commands(self.plan, wanted, routes):
            status, _ = self.runner(argv)
            done.append(argv)
            if status != 0:
                self.heal_failures += 1
            else:
                prefix = argv[4]
                routes[prefix] = int(argv[-1]) if "mtu" in argv else None
                if argv[3] == "del":
                    del routes[prefix]
        self.healed = {}
        for peer, path in self.paths.items():
            mtus = {routes.get(prefix, -1) for prefix, _ in pmtu_heal.prefixes(self.plan, peer)}
            if path.pmtu is not None and mtus == {path.pmtu}:
                self.healed[peer] = path.pmtu
        return done

    # --- metrics -------------------------------------------------------------------------------------

    def metrics(self) -> str:
        site = {"site": self.plan.site}
        samples: dict[str, list[str]] = {name: [] for name in METRICS}

        def add(name: str, labels: dict[str, str], value: float) -> None:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            samples[name].append(f"{name}{{{text}}} {int(value) if float(value).is_integer() else value}")

        if self.last_probe is not None:
            add("wgmesh_path_last_probe_timestamp_seconds", site, round(self.last_probe, 3))
        add("wgmesh_path_heal_failures_total", site, self.heal_failures)
        for peer, path in sorted(self.paths.items()):
            labels = {**site, "peer_site": peer}
            if path.small_ok is None or path.full_ok is None:
                continue
            add("wgmesh_path_probe_ok", {**labels, "size": "small"}, path.small_ok)
            add("wgmesh_path_probe_ok", {**labels, "size": "full"}, path.full_ok)
            add("wgmesh_path_icmp_unanswered", labels, path.status is Status.UNANSWERED)
            add("wgmesh_path_black_hole", labels, path.status in (Status.SHRUNK, Status.BELOW_FLOOR))
            if path.status is Status.BELOW_FLOOR:
                add("wgmesh_path_mtu_bytes", labels, 0)
            elif path.pmtu is not None or path.status is not Status.UNANSWERED:
                add("wgmesh_path_mtu_bytes", labels, path.pmtu or self.full(peer))
            add("wgmesh_path_mtu_healed", labels, peer in self.healed)
        lines = []
        for name, (kind, help_text) in METRICS.items():
            if samples[name]:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples[name]]
        return "\n".join(lines) + "\n"


class PathWatch:
    """The agent's side of the monitor: a thread of its own that ticks every `seconds` on the running plan (a GCP
    agent waits minutes inside one metadata fetch; the probes must not), writes the metrics text with `write`, and
    logs when a peer's routes are lowered or restored, when heal commands fail, and when a tick fails (once)."""

    def __init__(
        self,
        plan: Callable[[], InterfacePlan | None],
        write: Callable[[str], None],
        log: Callable[[str], None],
        seconds: float,
        settings: Settings | None = None,
        runner: Runner = run_command,
    ) -> None:
        self.plan, self.write, self.log, self.seconds = plan, write, log, seconds
        self.settings, self.runner = settings or Settings(), runner
        self.monitor: PathMonitor | None = None
        self.underlay: dict[str, fallback.Route] = {}  # private-path peers: which endpoint they are on
        self.last_error = ""

    def tick(self, now: float) -> None:
        plan = self.plan()
        if plan is None:  # no document applied yet: no peers to probe
            return
        if self.monitor is None:
            self.monitor = PathMonitor(plan, self.runner, self.settings)
        elif plan is not self.monitor.plan:
            self.monitor.update_plan(plan)
        monitor = self.monitor
        before, failures = dict(monitor.healed), monitor.heal_failures
        done, text = monitor.tick(now)
        for peer in sorted(set(before) | set(monitor.healed)):
            mtu = monitor.healed.get(peer)
            if mtu is not None and before.get(peer) != mtu:
                full = monitor.full(peer)
                self.log(f"path to {peer}: {full}-byte packets vanish, small ones pass: the routes to its AllowedIPs "
                         f"now carry MTU {mtu} (TCP's MSS follows, too big gets ICMP frag-needed)")  # fmt: skip
            elif mtu is None and peer in monitor.paths and monitor.paths[peer].pmtu is None:
                self.log(f"path to {peer}: full-size packets pass again; its routes carry the tunnel's MTU")
        if monitor.heal_failures > failures:
            self.log(f"path-MTU heal: {monitor.heal_failures - failures} of {len(done)} ip route commands failed")
        self.write(text + self._underlay(monitor))

    def _underlay(self, monitor: PathMonitor) -> str:
        """The private paths' fallback to the internet (wg_mesh.gateway.fallback): a direct ping of each path peer's
        private address, the verdicts with this tick's tunnel probes, the switches; its metrics text."""
        s, plan = self.settings, monitor.plan
        self.underlay = fallback.routes(plan, self.underlay)
        if not self.underlay:
            return ""
        peers = list(self.underlay.values())
        with ThreadPoolExecutor(max_workers=max(1, min(s.parallel, len(peers)))) as pool:
            direct = list(
                pool.map(lambda r: probe(self.runner, fallback.host(r.private), SMALL_SIZE, s.timeout), peers)
            )
        status, out = self.runner(["wg", "show", INTERFACE, "endpoints"])
        running = fallback.parse_endpoints(out) if status == 0 else {}
        for before, private_ok in zip(peers, direct, strict=True):
            path = monitor.paths.get(before.peer)
            after = fallback.step(before, path.small_ok if path else None, private_ok, s.fail_after, s.pass_after)
            failed = [argv for argv in fallback.commands(before, after, running) if self.runner(argv)[0] != 0]
            if failed:  # kept as it was: the next tick decides again
                self.log(f"underlay: `wg set` towards {before.peer} failed; trying again at the next probe")
                continue
            if after.on != before.on and after.on == fallback.PUBLIC:
                self.log(f"underlay: {before.peer} unreachable over the private path ({fallback.host(before.private)})"
                         f" for {s.fail_after} probes: public endpoint {after.public}")  # fmt: skip
            elif after.on != before.on:
                self.log(f"underlay: private path to {before.peer} back: endpoint {after.private}")
            self.underlay[before.peer] = after
        return "\n".join(fallback.metric_lines({"site": plan.site}, self.underlay)) + "\n"

    def run(self, stop: threading.Event, clock: Callable[[], float] = time.time) -> None:
        while True:
            started = time.monotonic()
            try:
                self.tick(clock())
                self.last_error = ""
            except Exception as exc:  # a failed tick must not end the probes
                message = f"path-MTU probe failed: {exc.__class__.__name__}: {exc}"
                if message != self.last_error:
                    self.log(message)
                self.last_error = message
            if stop.wait(max(1.0, self.seconds - (time.monotonic() - started))):
                return

    def start(self) -> threading.Event:
        """The thread (a daemon: it ends with the agent); set the returned event to stop it."""
        stop = threading.Event()
        threading.Thread(target=self.run, args=(stop,), name="wg-mesh-pmtu", daemon=True).start()
        return stop


__all__ = ["METRICS", "METRIC_NAMES", "PathMonitor", "PathWatch", "Settings", "overlay_address", "run_command"]
