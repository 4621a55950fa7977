"""iperf3 TCP throughput between two lab nodes (the lab's check 5, the relay step of the dynamic check): one server
for one test, the client's JSON report, Mbit/s received; the measurement's port opened on a booted gateway's INPUT
policy for the run."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator

from wg_mesh.lab.fabric.netns import LabError, Node
from wg_mesh.lab.fabric.procs import stop, wait_for_line
from wg_mesh.lab.machines.build import BuiltLab
from wg_mesh.plan import inputpolicy

IPERF_PORT = 5201


@contextlib.contextmanager
def measurement_port(server: Node, port: int) -> Iterator[None]:
    """The gateway's INPUT policy (wg_mesh.plan.inputpolicy: booted gateways load it) admits no iperf3: the
    measurement's own port is opened at the top of its chain for the run and closed after; without the chain (the
    namespace lab does not load the policy) nothing is done."""
    chain = inputpolicy.CHAIN
    if server.run(["iptables", "-w", "-n", "-L", chain], check=False).returncode != 0:
        yield
        return
    rule = ["-p", "tcp", "--dport", str(port), "-j", "ACCEPT"]
    server.run(["iptables", "-w", "-I", chain, "1", *rule])
    try:
        yield
    finally:
        server.run(["iptables", "-w", "-D", chain, *rule], check=False)


def iperf(server: Node, server_netns: str, client: Node, target: str, seconds: float, lab: BuiltLab) -> float:
    with measurement_port(server, IPERF_PORT):
        return _iperf(server, server_netns, client, target, seconds, lab)


def _iperf(server: Node, server_netns: str, client: Node, target: str, seconds: float, lab: BuiltLab) -> float:
    proc = server.popen(["iperf3", "-s", "-1", "--forceflush", "-p", str(IPERF_PORT)], stdout=subprocess.PIPE)
    lab.state.track(proc.pid, server_netns, "iperf3 server")
    try:
        if not wait_for_line(proc, "listening", 10):
            raise LabError(f"iperf3 server in {server_netns} did not start: {stop(proc)}")
        argv = ["iperf3", "-c", target, "-p", str(IPERF_PORT), "-t", str(seconds), "-J", "--connect-timeout", "5000"]
        result = client.run(argv, check=False, timeout=seconds + 20)
    finally:
        stop(proc)
    report = json.loads(result.stdout or "{}")
    if "error" in report or result.returncode != 0:
        raise LabError(f"iperf3 to {target}: {report.get('error', result.stderr.strip())}")
    return round(float(report["end"]["sum_received"]["bits_per_second"]) / 1e6, 1)
