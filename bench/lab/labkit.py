"""The benchmarks' use of the lab (wg_mesh/lab): a lab session built by the lab's own planner and builder, and
measurements taken inside it (iperf3 with CPU accounting, fragmentation counters, handshake timing, outages).

Everything runs in the lab's namespaces; every process started here is recorded in the lab's state (by pid)
so that the lab's teardown ends it, and the teardown runs on any exit (finally, atexit, SIGTERM/SIGINT).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import CpuSample, cpu_sample, cpu_usage
from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks import outage as lab_outage
from wg_mesh.lab.checks.iperf import IPERF_PORT
from wg_mesh.lab.fabric.netns import LabError, LabState, Node, missing_requirements, new_state, pids_in_netns, run
from wg_mesh.lab.fabric.plan import NIC, LabFaults, LabKeys, LabPlan, SitePlan, plan_lab, render_artifacts
from wg_mesh.lab.fabric.procs import stop, wait_for_line
from wg_mesh.lab.fabric.session import new_prefix, signals_end_the_run, signals_ignored
from wg_mesh.lab.fabric.teardown import teardown
from wg_mesh.lab.machines.build import BuiltLab, build
from wg_mesh.plan.render import INTERFACE

Log = Callable[[str], None]
FRAG_COUNTERS = ("IpFragCreates", "IpFragOKs", "IpFragFails", "IpReasmReqds", "IpReasmOKs", "IpReasmFails")
TUNNEL_DAEMONS = ("wireguard-go", "charon")
# In the lab a workload host's next hop is the gateway itself; in a VPC it is the VPC router, and Linux only
# accepts a redirect from the current next hop, so a cloud host never acts on one from the gateway. Without
# this, a gateway whose wg0 is down redirects the host to the VPC router (same segment), the host caches that
# for net.ipv4.route.gc_timeout seconds, and host-to-host traffic stays black-holed after the tunnel is back
# (found by the recovery bench).
HOST_SYSCTL = ("net.ipv4.conf.all.accept_redirects=0", f"net.ipv4.conf.{NIC}.accept_redirects=0")


@dataclass
class Session:
    cfg: MeshConfig
    plan: LabPlan
    keys: LabKeys
    lab: BuiltLab
    build_s: float = 0.0
    handshake_after_build_s: float | None = None  # from the end of the build (last wg-quick up) to every handshake
    handshake_after_start_s: float | None = None  # from the start of the build
    notes: list[str] = field(default_factory=list)

    @property
    def state(self) -> LabState:
        return self.lab.state

    def pair(self) -> tuple[SitePlan, SitePlan]:
        """The measured pair: the AWS site (9001-byte hosts) and the first other site, as the lab checks pick."""
        sites = self.plan.sites
        a = next((s for s in sites if s.cloud == "aws"), sites[0])
        return a, next(s for s in sites if s is not a)

    def gateway(self, site: SitePlan) -> Node:
        return self.lab.gateways[site.name]

    def host(self, site: SitePlan) -> Node:
        return self.lab.hosts[site.name]

    def daemon_pids(
        self, names: Sequence[str] = TUNNEL_DAEMONS, sites: Sequence[SitePlan] | None = None
    ) -> dict[str, list[int]]:
        """Pids of the tunnel daemons living in the gateways' namespaces (every site's, or `sites`'; for CPU
        accounting only)."""
        found: dict[str, list[int]] = {name: [] for name in names}
        for site in self.plan.sites if sites is None else sites:
            for pid in pids_in_netns(site.gateway_ns):
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    continue
                if comm in found:
                    found[comm].append(pid)
        return found


def wait_for_handshakes(lab: BuiltLab, keys: LabKeys, timeout: float, poll: float = 0.01) -> bool:
    """Poll `wg show wg0 latest-handshakes` on every gateway until every pair that peers has completed one (a relayed
    pair meets through its relay, never directly)."""
    names = {public: site for site, public in keys.public.items()}
    sites = [s.name for s in lab.plan.sites]
    peers = {s: {p.name for p in lab.machines[s].artifacts.interface.peers} for s in sites}
    deadline = time.monotonic() + timeout
    while True:
        seen: dict[str, set[str]] = {}
        for site in sites:
            out = lab.gateways[site].run(["wg", "show", INTERFACE, "latest-handshakes"], timeout=10).stdout
            seen[site] = {
                names.get(key.strip(), "?")
                for key, _, epoch in (line.partition("\t") for line in out.splitlines())
                if epoch.strip() not in ("", "0")
            }
        if all(b in seen[a] and a in seen[b] for a, b in itertools.combinations(sites, 2) if b in peers[a]):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


@contextlib.contextmanager
def lab_session(
    cfg: MeshConfig, log: Log, faults: LabFaults | None = None, handshake_timeout: float = 15.0
) -> Iterator[Session]:
    """Build the mesh in namespaces with the lab's planner and builder; always tear it down."""
    problems = missing_requirements()
    if problems:
        raise LabError("; ".join(problems))
    if cfg.delivery == "live":  # its gateways would wait for stores only `mesh lab` (controlplane.py) stands up
        raise LabError("the benchmarks' lab session builds delivery: user-data meshes (use `mesh lab` for live)")
    plan = plan_lab(cfg, new_prefix(), faults or LabFaults())
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    state = new_state(plan.prefix, "bench")
    state.save()
    done = False

    def cleanup() -> None:
        nonlocal done
        if done:
            return
        done = True
        atexit.unregister(cleanup)
        with signals_ignored():
            for problem in teardown(state, lambda line: None):
                log(f"teardown: {problem}")

    atexit.register(cleanup)
    with signals_end_the_run():
        try:
            started = time.monotonic()
            lab = build(plan, artifacts, state, lambda step: None)
            built = time.monotonic()
            session = Session(cfg, plan, keys, lab, build_s=built - started)
            for site in plan.sites:
                # As behind a VPC router: a workload host ignores ICMP redirects from the gateway (see HOST_SYSCTL).
                run(["ip", "netns", "exec", site.host_ns, "sysctl", "-q", "-w", *HOST_SYSCTL])
            if wait_for_handshakes(lab, keys, handshake_timeout):
                now = time.monotonic()
                session.handshake_after_build_s = now - built
                session.handshake_after_start_s = now - started
            else:
                raise LabError(f"no WireGuard handshake within {handshake_timeout:.0f} s")
            yield session
        finally:
            cleanup()


# --- fragmentation counters ------------------------------------------------------------------------------


def frag_counters(session: Session) -> dict[str, dict[str, int]]:
    """IP fragmentation counters of every namespace of the lab (gateways, VPC routers, internet)."""

    def read(netns: str) -> dict[str, int]:
        out = run(["ip", "netns", "exec", netns, "nstat", "-a", "-s", "-z", *FRAG_COUNTERS], timeout=10).stdout
        values = {name: int(value) for name, value, *_ in (line.split() for line in out.splitlines()[1:] if line)}
        return {name: values.get(name, 0) for name in FRAG_COUNTERS}

    return {netns: read(netns) for netns in session.plan.namespaces}


def frag_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], prefix: str) -> dict[str, Any]:
    """Per-counter totals over the lab, and which namespaces (without the lab prefix) moved."""
    totals = {c: sum(after[ns][c] - before[ns][c] for ns in before) for c in FRAG_COUNTERS}
    where = {
        ns.removeprefix(prefix + "-"): {
            c: after[ns][c] - before[ns][c] for c in FRAG_COUNTERS if after[ns][c] != before[ns][c]
        }
        for ns in before
    }
    return {"totals": totals, "by_namespace": {ns: d for ns, d in where.items() if d}}


# --- iperf3 with CPU accounting ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    node: Node
    netns: str


def iperf(
    session: Session,
    client: Endpoint,
    server: Endpoint,
    target: str,
    *,
    streams: int,
    seconds: float,
    omit: float = 0.0,
    bind: str | None = None,
    port: int = IPERF_PORT,
    groups: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    """One iperf3 TCP run; throughput, retransmits, machine CPU (by /proc/stat field), tunnel-daemon CPU (and that
    of `groups`: a name -> pids, e.g. one gateway's daemon), iperf3's own CPU, and the lab's fragmentation counters
    over the run."""
    proc = server.node.popen(["iperf3", "-s", "-1", "--forceflush", "-p", str(port)], stdout=subprocess.PIPE)
    session.state.track(proc.pid, server.netns, "iperf3 server (bench)")
    try:
        if not wait_for_line(proc, "listening", 10):
            raise LabError(f"iperf3 server in {server.netns} did not start: {stop(proc)}")
        argv = ["iperf3", "-c", target, "-p", str(port), "-t", f"{seconds:g}", "-P", str(streams), "-J"]
        if omit:
            argv += ["-O", f"{omit:g}"]
        if bind:
            argv += ["-B", bind]
        daemons = {**session.daemon_pids(), **(groups or {})}
        frags_before = frag_counters(session)
        before: CpuSample = cpu_sample([pid for pids in daemons.values() for pid in pids])
        t0 = time.monotonic()
        result = client.node.run(argv, check=False, timeout=seconds + omit + 30)
        wall = time.monotonic() - t0
        after = cpu_sample(list(before.processes))
        frags_after = frag_counters(session)
    finally:
        stop(proc)
    report = json.loads(result.stdout or "{}")
    if "error" in report or result.returncode != 0:
        raise LabError(f"iperf3 to {target}: {report.get('error', result.stderr.strip())}")
    end = report["end"]
    cpu = cpu_usage(before, after, wall, daemons)
    iperf_cpu = end.get("cpu_utilization_percent", {})
    mbps = float(end["sum_received"]["bits_per_second"]) / 1e6
    return {
        "mbps": round(mbps, 1),
        "retransmits": end.get("sum_sent", {}).get("retransmits"),
        "wall_s": round(wall, 3),
        "cpu": cpu,
        # iperf3's own CPU (client and server processes), in cores, from its report
        "iperf3_cores": round((iperf_cpu.get("host_total", 0.0) + iperf_cpu.get("remote_total", 0.0)) / 100, 3),
        "fragments": frag_delta(frags_before, frags_after, session.plan.prefix),
    }


# --- latency --------------------------------------------------------------------------------------------------

_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")


RTT_PINGS = 20
PING_INTERVAL_S = 0.01


def rtt(endpoint: Endpoint, target: str, source: str | None = None, count: int = RTT_PINGS) -> dict[str, float] | None:
    """Round-trip time (ms) of `count` pings 50 ms apart: min / avg / max."""
    argv = ["ping", "-n", "-q", "-c", str(count), "-i", "0.05", "-W", "1", *(["-I", source] if source else []), target]
    out = endpoint.node.run(argv, check=False, timeout=count + 10).stdout
    m = _RTT.search(out)
    if m is None:
        return None
    return {"min": float(m.group(1)), "avg": float(m.group(2)), "max": float(m.group(3))}


# --- outages: ping every 10 ms through a restart --------------------------------------------------------------


def measure_outage(
    session: Session,
    pinger: Endpoint,
    target: str,
    restart: Callable[[], None],
    *,
    source: str | None = None,
    timeout: float = 20.0,
) -> dict[str, Any]:
    """The lab's outage measurement (ping every 10 ms through `restart()`), as a JSON-ready trial."""
    outage = lab_outage.measure_outage(
        pinger.node,
        session.state,
        pinger.netns,
        target,
        restart,
        source=source,
        interval=PING_INTERVAL_S,
        warmup_timeout=5.0,
        timeout=timeout,
    )
    if outage.error is not None:
        raise LabError(outage.error)
    return {
        "ok": outage.ok,
        "outage_ms": outage.outage_ms,
        "restart_ms": outage.restart_ms,
        "first_reply_after_restart_ms": outage.first_reply_after_restart_ms,
    }
