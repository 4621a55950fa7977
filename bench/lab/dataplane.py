"""Data plane, IPsec vs WireGuard, and recovery, all in one lab of the dev topology (AWS + GCP).

Throughput paths (iperf3 TCP, 1 and 8 streams), interleaved round by round so that a noisy machine
affects every path alike:
  underlay        gateway A -> gateway B's public address (1:1 NAT), no tunnel
  wireguard       gateway A -> gateway B's overlay address, over wg0 (wireguard-go)
  end_to_end      workload host A -> workload host B, through both gateways (forwarding, MSS clamping)
  ipsec           gateway A -> gateway B's IPsec inner address, over strongSwan (IKEv2, AES-256-GCM)
Recovery: ping every 10 ms through a restart of gateway B's WireGuard (`wg-quick down` + `up`, as the lab's
recovery check does) or of its IPsec daemon (charon stopped and started, configuration loaded again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.lab.ipsec import IpsecTunnel
from bench.lab.labkit import Endpoint, Session, iperf, measure_outage
from bench.stats import median, summary
from wg_mesh.lab.machines.build import wg_quick
from wg_mesh.plan.render import INTERFACE

Log = Callable[[str], None]
PATHS = ("underlay", "wireguard", "end_to_end", "ipsec")


@dataclass(frozen=True)
class DataPlaneOptions:
    rounds: int = 3
    seconds: float = 5.0
    omit: float = 1.0
    streams: tuple[int, ...] = (1, 8)
    paths: tuple[str, ...] = PATHS
    wg_recovery_trials: int = 20
    compare_recovery_trials: int = 10  # gateway-to-gateway, WireGuard and IPsec alternating


def path_endpoints(
    session: Session, ipsec: IpsecTunnel | None, path: str
) -> tuple[Endpoint, Endpoint, str, str | None]:
    a, b = session.pair()
    gw_a, gw_b = Endpoint(session.gateway(a), a.gateway_ns), Endpoint(session.gateway(b), b.gateway_ns)
    if path == "underlay":
        return gw_a, gw_b, str(b.public_ip), None
    if path == "wireguard":
        return gw_a, gw_b, str(b.overlay_ip), None
    if path == "end_to_end":
        return Endpoint(session.host(a), a.host_ns), Endpoint(session.host(b), b.host_ns), str(b.host_ip.ip), None
    if path == "ipsec":
        if ipsec is None:
            raise ValueError("the ipsec path needs the IPsec tunnel")
        return gw_a, gw_b, ipsec.b.inner, ipsec.a.inner
    raise ValueError(f"unknown path {path}")


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of one (path, streams) cell."""
    mbps = [r["mbps"] for r in runs]
    cpu_keys = runs[0]["cpu"].keys()
    cpu = {k: round(median([r["cpu"][k] for r in runs]), 3) for k in cpu_keys}
    gbit = [r["mbps"] * r["wall_s"] / 1000 for r in runs]
    core_s = [r["cpu"]["busy"] * r["wall_s"] for r in runs]
    frag_totals = {k: sum(r["fragments"]["totals"][k] for r in runs) for k in runs[0]["fragments"]["totals"]}
    return {
        "mbps": round(median(mbps), 1),
        "mbps_runs": mbps,
        "retransmits": [r["retransmits"] for r in runs],
        "cpu_cores": cpu,
        "iperf3_cores": round(median([r["iperf3_cores"] for r in runs]), 3),
        "busy_core_s_per_gbit": round(sum(core_s) / sum(gbit), 3) if sum(gbit) else None,
        "fragments": frag_totals,
    }


def run_throughput(session: Session, ipsec: IpsecTunnel | None, options: DataPlaneOptions, log: Log) -> dict[str, Any]:
    cells: dict[str, dict[int, list[dict[str, Any]]]] = {p: {s: [] for s in options.streams} for p in options.paths}
    for r in range(options.rounds):
        for path in options.paths:
            client, server, target, bind = path_endpoints(session, ipsec, path)
            for streams in options.streams:
                result = iperf(
                    session,
                    client,
                    server,
                    target,
                    streams=streams,
                    seconds=options.seconds,
                    omit=options.omit,
                    bind=bind,
                )
                cells[path][streams].append(result)
                log(
                    f"data plane round {r + 1}/{options.rounds}: {path} -P {streams}: {result['mbps']:.0f} Mbit/s, "
                    f"machine busy {result['cpu']['busy']:.2f} cores"
                )
    table = {path: {str(s): _aggregate(runs) for s, runs in by_streams.items()} for path, by_streams in cells.items()}
    ratios: dict[str, dict[str, float | None]] = {}
    for s in map(str, options.streams):

        def ratio(num: str, den: str, s: str = s) -> float | None:
            if num not in table or den not in table or not table[den][s]["mbps"]:
                return None
            return round(float(table[num][s]["mbps"]) / float(table[den][s]["mbps"]), 3)

        ratios[s] = {
            "tunnel_over_underlay": ratio("wireguard", "underlay"),
            "end_to_end_over_tunnel": ratio("end_to_end", "wireguard"),
            "ipsec_over_wireguard": ratio("ipsec", "wireguard"),
        }
    return {"paths": table, "ratios": ratios, "runs": {p: {str(s): v for s, v in d.items()} for p, d in cells.items()}}


def wg_restart(session: Session) -> Callable[[], None]:
    _, b = session.pair()

    def restart() -> None:
        wg_quick(session.lab, b.name, "down", INTERFACE)
        wg_quick(session.lab, b.name, "up", INTERFACE)

    return restart


def _trials(fn: Callable[[], dict[str, Any]], n: int, label: str, log: Log) -> dict[str, Any]:
    trials = []
    for i in range(n):
        trials.append(fn())
        log(f"recovery {label} {i + 1}/{n}: {trials[-1].get('outage_ms')} ms")
        time.sleep(0.2)
    outages = [t["outage_ms"] for t in trials if t["ok"]]
    return {
        "trials": trials,
        "failed": sum(not t["ok"] for t in trials),
        "outage_ms": summary(outages) if outages else None,
        "restart_ms": summary([t["restart_ms"] for t in trials]),
    }


def run_recovery(session: Session, ipsec: IpsecTunnel | None, options: DataPlaneOptions, log: Log) -> dict[str, Any]:
    a, b = session.pair()
    host_a = Endpoint(session.host(a), a.host_ns)
    gw_a = Endpoint(session.gateway(a), a.gateway_ns)
    restart_wg = wg_restart(session)
    result: dict[str, Any] = {
        "wireguard_host_to_host": _trials(
            lambda: measure_outage(session, host_a, str(b.host_ip.ip), restart_wg),
            options.wg_recovery_trials,
            "WireGuard host->host",
            log,
        )
    }
    if ipsec is not None and options.compare_recovery_trials:
        wg_gw: list[dict[str, Any]] = []
        ipsec_gw: list[dict[str, Any]] = []
        for i in range(options.compare_recovery_trials):
            wg_gw.append(measure_outage(session, gw_a, str(b.overlay_ip), restart_wg))
            ipsec_gw.append(
                measure_outage(session, gw_a, ipsec.b.inner, lambda: ipsec.restart(ipsec.b), source=ipsec.a.inner)
            )
            log(
                f"recovery gateway->gateway {i + 1}/{options.compare_recovery_trials}: "
                f"WireGuard {wg_gw[-1]['outage_ms']} ms, IPsec {ipsec_gw[-1]['outage_ms']} ms"
            )
            time.sleep(0.2)
        for key, trials in (("wireguard_gateway_to_gateway", wg_gw), ("ipsec_gateway_to_gateway", ipsec_gw)):
            outages = [t["outage_ms"] for t in trials if t["ok"]]
            result[key] = {
                "trials": trials,
                "failed": sum(not t["ok"] for t in trials),
                "outage_ms": summary(outages) if outages else None,
                "restart_ms": summary([t["restart_ms"] for t in trials]),
            }
    return result


def streams_label(streams: Sequence[int]) -> str:
    return ", ".join(f"-P {s}" for s in streams)
