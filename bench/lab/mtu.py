"""MTU sweep: the dev mesh rebuilt in the lab at each tunnel MTU, from 1280 up to the MTU `mtu: auto` picks
(smallest underlay - 60) and beyond it.

Up to the auto MTU the config simply sets `mtu:`. Above it the config must declare a larger underlay than
the real path (validation refuses a tunnel MTU the declared underlay cannot carry); the real path keeps its
MTU through the lab's `link_mtu` fault, which is what a wrong `underlay_mtu` (or a hand-picked `mtu:`, such
as the reference article's 1420 on a 1460-byte GCP path) does in production. Each point records iperf3
throughput over the tunnel and end to end, the lab's IP fragmentation counters during the transfers, and
whether a full-size unfragmentable ping crosses.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.lab.labkit import Endpoint, iperf, lab_session
from bench.stats import median
from wg_mesh.config import WIREGUARD_IPV4_OVERHEAD, MeshConfig
from wg_mesh.lab.checks.pathmtu import ICMP_IPV4_HEADERS
from wg_mesh.lab.fabric.netns import Node
from wg_mesh.lab.fabric.plan import LabFaults
from wg_mesh.plan import topology
from wg_mesh.plan.validate import load_mesh

Log = Callable[[str], None]
DECLARED_MAX = {"aws": 9001, "gcp": 8896, "static": 9216}
DF_PINGS = 3


def df_replies(node: Node, target: str, payload: int, count: int = DF_PINGS) -> int:
    """How many of `count` unfragmentable pings of `payload` bytes come back (the first may teach the path MTU)."""
    argv = ["ping", "-n", "-q", "-M", "do", "-c", str(count), "-i", "0.2", "-W", "1", "-s", str(payload), target]
    out = node.run(argv, check=False, timeout=15).stdout
    for line in out.splitlines():
        if "received" in line:
            return int(line.split(",")[1].split()[0])
    return 0


@dataclass(frozen=True)
class MtuOptions:
    runs: int = 2
    seconds: float = 3.0
    omit: float = 0.5
    steps_below: int = 40  # 1280, 1320, ... up to the auto MTU
    above: tuple[int, ...] = (20, 40, 60, 100)  # auto + these


def sweep_points(cfg: MeshConfig, options: MtuOptions) -> list[int]:
    auto = min(site.underlay_mtu for site in cfg.sites) - WIREGUARD_IPV4_OVERHEAD
    points = set(range(1280, auto + 1, options.steps_below)) | {auto} | {auto + d for d in options.above}
    return sorted(p for p in points if p >= 1280)


def config_at(raw: dict[str, Any], mtu: int) -> tuple[MeshConfig, LabFaults, dict[str, int]]:
    """The mesh at tunnel MTU `mtu`; sites whose real underlay is too small for it declare more, and the lab
    keeps their real path MTU (returned as the lab faults and as {site: real underlay})."""
    real = {site.name: site.underlay_mtu for site in load_mesh(raw).sites}
    changed = copy.deepcopy(raw)
    changed.pop("mtu", None)
    lying: dict[str, int] = {}
    for site in changed["sites"]:
        if real[site["name"]] < mtu + WIREGUARD_IPV4_OVERHEAD:
            site["underlay_mtu"] = min(mtu + WIREGUARD_IPV4_OVERHEAD, DECLARED_MAX[site["cloud"]])
            lying[site["name"]] = real[site["name"]]
    # Past the internet's 1440 on purpose (the lab's links carry it): `validate` refuses such an `mtu`, so it is set
    # on the validated mesh rather than validated.
    return load_mesh(changed).model_copy(update={"mtu": mtu}), LabFaults(link_mtu=lying), lying


def run_mtu_sweep(
    raw: dict[str, Any], options: MtuOptions, log: Log, points: Sequence[int] | None = None
) -> dict[str, Any]:
    base = load_mesh(raw)
    auto = topology.tunnel_mtu(base)
    results = []
    for mtu in points or sweep_points(base, options):
        cfg, faults, lying = config_at(raw, mtu)
        with lab_session(cfg, log, faults) as session:
            a, b = session.pair()
            host_a = Endpoint(session.host(a), a.host_ns)
            host_b = Endpoint(session.host(b), b.host_ns)
            gw_a = Endpoint(session.gateway(a), a.gateway_ns)
            gw_b = Endpoint(session.gateway(b), b.gateway_ns)
            replies = df_replies(host_a.node, str(b.host_ip.ip), mtu - ICMP_IPV4_HEADERS)
            runs: dict[str, list[dict[str, Any]]] = {"wireguard": [], "end_to_end": []}
            for _ in range(options.runs):
                runs["wireguard"].append(
                    iperf(session, gw_a, gw_b, str(b.overlay_ip), streams=1, seconds=options.seconds, omit=options.omit)
                )
                runs["end_to_end"].append(
                    iperf(
                        session,
                        host_a,
                        host_b,
                        str(b.host_ip.ip),
                        streams=1,
                        seconds=options.seconds,
                        omit=options.omit,
                    )
                )
            point: dict[str, Any] = {
                "mtu": mtu,
                "auto": mtu == auto,
                "outer_packet": mtu + WIREGUARD_IPV4_OVERHEAD,
                "path_mtu": min(s.uplink_mtu for s in session.plan.sites),
                "declared_underlay_raised": lying,
                "df_ping_full_size": {"sent": DF_PINGS, "received": replies},
                "handshake_after_build_s": session.handshake_after_build_s,
                "handshake_after_start_s": session.handshake_after_start_s,
            }
            for path, path_runs in runs.items():
                point[path] = {
                    "mbps": round(median([r["mbps"] for r in path_runs]), 1),
                    "mbps_runs": [r["mbps"] for r in path_runs],
                    "retransmits": [r["retransmits"] for r in path_runs],
                    "fragments": {
                        k: sum(r["fragments"]["totals"][k] for r in path_runs)
                        for k in path_runs[0]["fragments"]["totals"]
                    },
                    "fragmenting_namespaces": sorted({ns for r in path_runs for ns in r["fragments"]["by_namespace"]}),
                }
        log(
            f"MTU {mtu}: tunnel {point['wireguard']['mbps']:.0f} Mbit/s, end-to-end {point['end_to_end']['mbps']:.0f} "
            f"Mbit/s, fragments created {point['wireguard']['fragments']['IpFragCreates']}"
        )
        results.append(point)
    smallest = min(base.sites, key=lambda s: s.underlay_mtu)
    return {
        "auto_mtu": auto,
        "underlay_min": auto + WIREGUARD_IPV4_OVERHEAD,
        "underlay_min_site": {"name": smallest.name, "cloud": smallest.cloud},
        "wireguard_overhead": WIREGUARD_IPV4_OVERHEAD,
        "streams": 1,
        "runs": options.runs,
        "seconds": options.seconds,
        "points": results,
    }
