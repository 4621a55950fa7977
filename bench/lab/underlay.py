"""`sudo .venv/bin/python -m bench underlay`: a private path with a jumbo MTU next to an internet path, measured in one
lab run (issue 13 item 3, docs/underlay.md section 5). Writes docs/bench/underlay.json; `bench doc` renders its section.

The underlay stack (examples/underlay/Pulumi.underlay.yaml, `delivery: live`: the lab's clouds and agents as in
`mesh lab`): AWS and GCP joined by a private path (the lab's link between their VPC routers at the path's MTU,
wg_mesh/lab/fabric/privatepath.py), a VPS over the internet. From the AWS workload host (9001-byte NIC):

* bulk TCP (wg_mesh/lab/checks/bulk.py: SHA-256-verified, the MSS each side saw) to the GCP host over the private path
  and to the VPS's host over the internet, alternating, `rounds` times each: Mbit/s per path, the ratio private/internet
  of the medians;
* IP fragmentation counters (`nstat -az`: IpFragCreates, IpReasmReqds, IpFragFails) on the gateways and hosts of
  the three sites, before and after each path's transfers (0 expected on both paths);
* what the VPC routers forwarded onto the private link during each path's transfers (WireGuard packets, other);
* DF pings from the AWS host: the largest payload that fits each path's tunnel MTU passes, one byte more must be
  refused with an ICMP error ("message too long" / "Frag needed"), not vanish.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.lab.labkit import HOST_SYSCTL, wait_for_handshakes
from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks.bulk import bulk_transfer
from wg_mesh.lab.checks.pathmtu import ICMP_IPV4_HEADERS, df_ping, refused_cleanly
from wg_mesh.lab.checks.underlaycheck import link_counters, wg_endpoints
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.fabric.netns import LabError, Node, missing_requirements, new_state, run
from wg_mesh.lab.fabric.plan import GatewayArtifacts, LabKeys, SitePlan, plan_lab, render_artifacts
from wg_mesh.lab.fabric.session import _Cleanup, new_prefix, signals_end_the_run
from wg_mesh.lab.machines.build import BuiltLab, build

REPO = Path(__file__).resolve().parent.parent.parent
STACK = REPO / "examples" / "underlay" / "Pulumi.underlay.yaml"
COUNTERS = ("IpFragCreates", "IpReasmReqds", "IpFragFails")
KEEPALIVE_ALLOWANCE = 10  # packets per internet transfer on the private link: the private pair's keepalives, rekeys
Log = Callable[[str], None]


@contextlib.contextmanager
def live_lab(
    cfg: MeshConfig,
    log: Log,
    handshake_timeout: float = 30.0,
    adjust: Callable[[dict[str, GatewayArtifacts]], dict[str, GatewayArtifacts]] | None = None,
) -> Iterator[tuple[BuiltLab, LabKeys]]:
    """The stack in the lab with its clouds' stores and agents (as `mesh lab` builds it); always torn down.
    `adjust`: changes the rendered gateways' artifacts for one run (bench/lab/fallback.py: the agents' pmtu_seconds)."""
    problems = missing_requirements()
    if problems:
        raise LabError("; ".join(problems))
    plan = plan_lab(cfg, new_prefix())
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    if adjust is not None:
        artifacts = adjust(artifacts)
    configs = live_configs(artifacts)
    state = new_state(plan.prefix, "bench underlay")
    state.save()
    cleanup = _Cleanup(state, Console(stderr=True))
    with signals_end_the_run():
        try:
            hook = control_plane_hook(cfg, keys, configs) if configs else None
            lab = build(plan, artifacts, state, lambda step: log(f"build: {step}"), before_gateways=hook)
            for site in plan.sites:
                run(["ip", "netns", "exec", site.host_ns, "sysctl", "-q", "-w", *HOST_SYSCTL])
            if not wait_for_handshakes(lab, keys, handshake_timeout, poll=0.2):
                raise LabError(f"not every gateway pair completed a handshake within {handshake_timeout:.0f} s")
            yield lab, keys
        finally:
            cleanup()
    for problem in cleanup.problems:
        log(f"teardown: {problem}")


def frag_counters(lab: BuiltLab, sites: list[SitePlan]) -> dict[str, dict[str, int]]:
    """`nstat -az` fragmentation counters of each site's gateway and host ("gateway aws-use1": {...})."""
    nodes = {f"gateway {s.name}": lab.gateways[s.name] for s in sites}
    nodes |= {f"host {s.name}": lab.hosts[s.name] for s in sites}

    def read(node: Node) -> dict[str, int]:
        out = node.run(["nstat", "-a", "-s", "-z", *COUNTERS], timeout=10).stdout
        values = {name: int(value) for name, value, *_ in (line.split() for line in out.splitlines()[1:] if line)}
        return {name: values.get(name, 0) for name in COUNTERS}

    return {name: read(node) for name, node in nodes.items()}


def delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {node: {c: after[node][c] - before[node][c] for c in COUNTERS} for node in before}


def df_probe(lab: BuiltLab, src: SitePlan, dst: SitePlan) -> dict[str, Any]:
    """The largest payload that fits the pair's tunnel MTU must pass with DF set; one byte more must be refused."""
    mtu = lab.plan.peer_mtu(src.name, dst.name)
    payload = mtu - ICMP_IPV4_HEADERS
    node, target = lab.hosts[src.name], str(dst.host_ip.ip)
    passed = df_ping(node, target, payload)[0] or df_ping(node, target, payload)[0]  # one retry: the first may ARP
    over_passed, output = df_ping(node, target, payload + 1)
    refused = not over_passed and refused_cleanly(output)
    message = next((line.strip() for line in output.splitlines() if "too long" in line or "Frag" in line), None)
    return {"from": src.name, "to": dst.name, "tunnel_mtu": mtu, "payload": payload, "passed": passed,
            "over_refused_cleanly": refused, "over_message": message}  # fmt: skip


def run_underlay_bench(
    cfg: MeshConfig, log: Log, *, rounds: int = 5, size: int = 64 * 1024 * 1024, label: str = "underlay"
) -> dict[str, Any]:
    started = time.monotonic()
    with live_lab(cfg, log) as (lab, keys):
        plan = lab.plan
        if not plan.private_links:
            raise LabError(f"{label}: no private path in the stack")
        link = plan.private_links[0]
        a, b = plan.site(link.a.site), plan.site(link.b.site)
        c = next((s for s in plan.sites if s not in (a, b) and plan.private_link(a.name, s.name) is None), None)
        if c is None:
            raise LabError(f"{label}: no site that {a.name} reaches over the internet")
        sites = [a, b, c]
        names = {public: site for site, public in keys.public.items()}
        endpoints = {s.name: wg_endpoints(lab.gateways[a.name], names).get(s.name) for s in (b, c)}
        paths: dict[str, dict[str, Any]] = {
            "private": {"to": b.name, "transfers": []},
            "internet": {"to": c.name, "transfers": []},
        }
        for name, dst in (("private", b), ("internet", c)):
            bulk_transfer(lab, a, dst, 4 * 1024 * 1024)  # warm-up: ARP, routes, the first rekey out of the way
            paths[name].update(tunnel_mtu=plan.peer_mtu(a.name, dst.name), endpoint=endpoints[dst.name])
        for i in range(rounds):
            for name, dst in (("private", b), ("internet", c)):
                frags, link_before = frag_counters(lab, sites), [link_counters(e) for e in (link.a, link.b)]
                result = bulk_transfer(lab, a, dst, size)
                frags_after, link_after = frag_counters(lab, sites), [link_counters(e) for e in (link.a, link.b)]
                result["fragments"] = delta(frags, frags_after)
                result["link_packets"] = {
                    key: sum(x[key] - y[key] for x, y in zip(link_after, link_before, strict=True))
                    for key in ("wireguard", "icmp", "all")
                }
                paths[name]["transfers"].append(result)
                log(f"round {i + 1}/{rounds} {name} {a.name} -> {dst.name}: {result.get('mbps')} Mbit/s")
        df = [df_probe(lab, a, b), df_probe(lab, a, c)]
    for path in paths.values():
        transfers = path["transfers"]
        mbps = [t["mbps"] for t in transfers if t.get("ok")]
        path["mbps"] = mbps
        path["mbps_median"] = round(statistics.median(mbps), 1) if mbps else None
        path["mss"] = sorted({t.get("mss_sender") for t in transfers if t.get("ok")} - {None})
        path["fragments"] = {
            node: {c: sum(t["fragments"][node][c] for t in transfers if "fragments" in t) for c in COUNTERS}
            for node in (transfers[0].get("fragments") or {})
        }
        path["link"] = {key: sum(t["link_packets"][key] for t in transfers) for key in ("wireguard", "icmp", "all")}
        path["all_verified"] = all(t.get("ok") for t in transfers)
    private, internet = paths["private"]["mbps_median"], paths["internet"]["mbps_median"]
    ratio = round(private / internet, 2) if private and internet else None
    no_fragments = all(v == 0 for p in paths.values() for node in p["fragments"].values() for v in node.values())
    carried = {name: p["link"] for name, p in paths.items()}
    # The internet transfers may see the private pair's keepalives on the link (every 25 s), never their own packets.
    link_ok = all(x["all"] == x["wireguard"] for x in carried.values()) and carried["private"]["wireguard"] > 0
    link_ok = link_ok and carried["internet"]["all"] <= KEEPALIVE_ALLOWANCE * rounds
    df_ok = all(p["passed"] and p["over_refused_cleanly"] for p in df)
    ok = all(p["all_verified"] for p in paths.values()) and no_fragments and link_ok and df_ok and ratio is not None
    return {
        "ok": ok,
        "stack": label,
        "duration_s": round(time.monotonic() - started, 1),
        "rounds": rounds,
        "bytes": size,
        "sites": {"A": a.name, "B": b.name, "C": c.name},
        "private_path": link.to_json(),
        "paths": paths,
        "ratio_private_to_internet": ratio,
        "no_fragments": no_fragments,
        "private_link_carried_only_wireguard": link_ok,
        "df_pings": df,
    }
