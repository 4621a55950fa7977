"""The lab's checks, each returning a `CheckResult` (table rows for the report, data for the JSON).

1. handshakes  every gateway pair that peers completed a WireGuard handshake (`wg show ... latest-handshakes`; a
               relayed pair meets through its relay and is checked by the ping)
2. ping        every workload host pings every other site's host, with RTTs
3. path_mtu    (pathmtu.py) the largest unfragmented ICMP payload (`ping -M do`) is the tunnel MTU - 28 and one
               byte more is refused with an ICMP error (no black hole); the gateways' IP fragmentation counters
               (`nstat` IpFragCreates / IpReasmReqds) stay at zero during the transfers of checks 4 and 5
4. bulk_tcp    TCP from the 9001-MTU AWS host to every other site, bytes verified by SHA-256, MSS clamped
5. throughput  iperf3 host -> host through two gateways, gateway -> gateway over the tunnel and over the
               bare underlay
6. recovery    `wg-quick down` / `up` on one gateway while pinging through it every 10 ms
7. private_paths  (stacks with `private_paths` only, underlaycheck.py) the private-path peers' endpoints are their
               private addresses, the private links carry WireGuard only, the hosts route through their gateway
7/8. dynamic_sites  (stacks with a dynamic-address site only, dynamiccheck.py) its peers learnt its address from its
               packets (none configured); a relayed pair's throughput against a direct path's; a gateway restart
               survived (the site's re-arm watchdog)
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from wg_mesh.lab.checks import dynamiccheck, hostcheck
from wg_mesh.lab.checks.bulk import bulk_transfer
from wg_mesh.lab.checks.iperf import iperf
from wg_mesh.lab.checks.outage import measure_outage
from wg_mesh.lab.checks.pathmtu import check_path_mtu, frag_counters, probe_path_mtu
from wg_mesh.lab.checks.result import (
    TITLES,
    CheckResult,
    LabOptions,
    main_pair,
    ok_text,
    ordered_pairs,
    parallel,
    timed,
)
from wg_mesh.lab.checks.underlaycheck import KEY, TITLE, check_private_paths
from wg_mesh.lab.fabric.netns import LabError, Node
from wg_mesh.lab.fabric.plan import LabKeys, SitePlan
from wg_mesh.lab.machines.build import BuiltLab, wg_quick
from wg_mesh.plan.render import INTERFACE

# --- 1. handshakes -----------------------------------------------------------------------------------------


def latest_handshakes(node: Node, names: dict[str, str]) -> dict[str, int]:
    out = node.run(["wg", "show", INTERFACE, "latest-handshakes"], timeout=10).stdout
    seen = {}
    for line in out.splitlines():
        key, _, epoch = line.partition("\t")
        seen[names.get(key.strip(), f"unknown key {key.strip()[:8]}...")] = int(epoch or 0)
    return seen


def check_handshakes(lab: BuiltLab, keys: LabKeys, options: LabOptions) -> CheckResult:
    names = {public: site for site, public in keys.public.items()}
    sites = [s.name for s in lab.plan.sites]
    peers = {s: {p.name for p in lab.machines[s].artifacts.interface.peers} for s in sites}
    # every pair that peers: a relayed pair (two dynamic sites) meets through the relay, never directly (check 2)
    pairs = [(a, b) for a, b in itertools.combinations(sites, 2) if b in peers[a]]
    start = time.monotonic()
    while True:
        seen = {site: latest_handshakes(lab.gateways[site], names) for site in sites}
        done = {(a, b): seen[a].get(b, 0) > 0 and seen[b].get(a, 0) > 0 for a, b in pairs}
        if all(done.values()) or time.monotonic() - start > options.handshake_timeout:
            break
        time.sleep(0.1)
    waited = time.monotonic() - start
    now = time.time()

    def age(epoch: int) -> str:
        return f"{max(0.0, now - epoch):.1f} s ago" if epoch else "never"

    rows = [[a, b, age(seen[a].get(b, 0)), age(seen[b].get(a, 0)), ok_text(done[(a, b)])] for a, b in pairs]
    ok = all(done.values())
    summary = f"{sum(done.values())}/{len(pairs)} gateway pairs" + ("" if ok else f" after waiting {waited:.0f} s")
    return CheckResult(
        "handshakes",
        TITLES["handshakes"],
        ok,
        summary,
        ["gateway", "peer", "gateway saw peer", "peer saw gateway", ""],
        rows,
        {"pairs": [{"a": a, "b": b, "ok": done[(a, b)]} for a, b in pairs]},
    )


# --- 2. ping ----------------------------------------------------------------------------------------------------

_RTT = re.compile(r"= [\d.]+/([\d.]+)/[\d.]+/[\d.]+ ms")
_RECEIVED = re.compile(r"(\d+) received")


def check_ping(lab: BuiltLab) -> CheckResult:
    count = 3

    def ping(pair: tuple[SitePlan, SitePlan]) -> dict[str, Any]:
        src, dst = pair
        argv = ["ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "2", str(dst.host_ip.ip)]
        out = lab.hosts[src.name].run(argv, check=False, timeout=15).stdout
        received = int(m.group(1)) if (m := _RECEIVED.search(out)) else 0
        rtt = float(m.group(1)) if (m := _RTT.search(out)) else None
        return {"from": src.name, "to": dst.name, "ok": received == count, "rtt_ms": rtt, "received": received}

    pairs = parallel(ping, ordered_pairs(lab))
    rows = [
        [
            p["from"],
            p["to"],
            f"{p['received']}/{count}",
            "-" if p["rtt_ms"] is None else f"{p['rtt_ms']:.2f}",
            ok_text(p["ok"]),
        ]
        for p in pairs
    ]
    ok = all(p["ok"] for p in pairs)
    return CheckResult(
        "ping",
        TITLES["ping"],
        ok,
        f"{sum(p['ok'] for p in pairs)}/{len(pairs)} ordered pairs",
        ["from host", "to host", "replies", "avg RTT ms", ""],
        rows,
        {"pairs": pairs},
    )


# --- 4. bulk TCP with checksum ----------------------------------------------------------------------------


def check_bulk_tcp(lab: BuiltLab, options: LabOptions) -> CheckResult:
    src, _ = main_pair(lab)
    results = [bulk_transfer(lab, src, dst, options.bulk_bytes) for dst in lab.plan.sites if dst is not src]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([f"{r['from']} -> {r['to']}", "-", "-", r["error"].strip().splitlines()[-1], "FAIL"])
            continue
        mss = f"{r['mss_sender']} / {r['mss_receiver']} (<= {lab.plan.peer_mss(r['from'], r['to'])})"
        check = "sha256 match" if r["verified"] else "sha256 MISMATCH"
        rows.append([f"{r['from']} -> {r['to']}", f"{r['bytes'] / 2**20:.0f} MiB", mss, check, ok_text(r["ok"])])
    ok = all(r["ok"] for r in results)
    summary = f"from {src.name} (host NIC MTU {src.nic_mtu}): {sum(r['ok'] for r in results)}/{len(results)}"
    return CheckResult(
        "bulk_tcp",
        TITLES["bulk_tcp"],
        ok,
        summary,
        ["path", "size", "TCP_MAXSEG sender / receiver", "bytes", ""],
        rows,
        {"transfers": results, "clamped_mss": lab.plan.mss},
    )


# --- 5. throughput ---------------------------------------------------------------------------------------------


def check_throughput(lab: BuiltLab, options: LabOptions) -> CheckResult:
    a, b = main_pair(lab)
    runs = [
        ("host_to_host", f"host {a.name} -> host {b.name} (through both gateways)", "host", str(b.host_ip.ip)),
        ("gateway_tunnel", f"gateway {a.name} -> gateway {b.name} (wg0)", "gateway", str(b.overlay_ip)),
        ("underlay", f"gateway {a.name} -> gateway {b.name} (bare underlay)", "gateway", str(b.public_ip)),
    ]
    mbps: dict[str, float | None] = {}
    rows, errors = [], []
    for key, label, kind, target in runs:
        if kind == "host":
            server, server_ns, client = lab.hosts[b.name], b.host_ns, lab.hosts[a.name]
        else:
            server, server_ns, client = lab.gateways[b.name], b.gateway_ns, lab.gateways[a.name]
        try:
            mbps[key] = iperf(server, server_ns, client, target, options.iperf_seconds, lab)
            rows.append([label, f"{mbps[key]:.0f}", "ok"])
        except LabError as exc:
            mbps[key] = None
            errors.append(str(exc))
            rows.append([label, "-", "FAIL"])
    tunnel, underlay = mbps.get("gateway_tunnel"), mbps.get("underlay")
    ratio = round(tunnel / underlay, 2) if tunnel and underlay else None
    summary = f"iperf3 {options.iperf_seconds:g} s each" + (f"; tunnel/underlay = {ratio}" if ratio else "")
    summary += "".join(f"; {error}" for error in errors)
    return CheckResult(
        "throughput",
        TITLES["throughput"],
        not errors,
        summary,
        ["path", "Mbit/s", ""],
        rows,
        {"throughput_mbps": mbps, "tunnel_to_underlay": ratio, "errors": errors},
    )


# --- 6. recovery --------------------------------------------------------------------------------------------


def check_recovery(lab: BuiltLab, options: LabOptions) -> CheckResult:
    a, b = main_pair(lab)
    marks: dict[str, float] = {}

    def restart_gateway() -> None:
        marks["down_start"] = time.time()
        wg_quick(lab, b.name, "down", INTERFACE)
        marks["down_done"] = time.time()
        wg_quick(lab, b.name, "up", INTERFACE)
        marks["up_done"] = time.time()

    outage = measure_outage(
        lab.hosts[a.name], lab.state, a.host_ns, str(b.host_ip.ip), restart_gateway, timeout=options.recovery_timeout
    )
    error, recovered, recovery_ms = outage.error, outage.ok, outage.outage_ms
    replies = outage.replies

    def ms(start: str, end: str) -> float | None:
        return round((marks[end] - marks[start]) * 1000, 1) if end in marks else None

    restart_ms, down_ms = ms("down_start", "up_done"), ms("down_start", "down_done")
    rows = [
        [
            f"host {a.name} -> host {b.name}",
            f"wg-quick down/up on gateway {b.name}",
            "-" if restart_ms is None else f"{restart_ms:.0f}",
            "-" if recovery_ms is None else f"{recovery_ms:.0f}",
            str(replies),
            ok_text(recovered),
        ]
    ]
    summary = (
        f"traffic stopped for {recovery_ms:.0f} ms (wg-quick down + up took {restart_ms:.0f} ms)"
        if recovery_ms is not None and restart_ms is not None
        else (error or f"no reply within {options.recovery_timeout:.0f} s after wg-quick up")
    )
    return CheckResult(
        "recovery",
        TITLES["recovery"],
        recovered,
        summary,
        ["traffic", "event", "down+up ms", "no replies for ms", "replies", ""],
        rows,
        {
            "recovery_ms": recovery_ms,
            "restart_ms": restart_ms,
            "down_ms": down_ms,
            "replies": replies,
            "gateway": b.name,
        },
    )


def run_checks(lab: BuiltLab, keys: LabKeys, options: LabOptions, step: Callable[[str], None]) -> Sequence[CheckResult]:
    """All checks, in an order that keeps them independent: the MTU probes run after the TCP transfers,
    so the path MTU they teach the hosts cannot stand in for MSS clamping."""
    step("1/6 handshakes")
    handshakes = timed("handshakes", lambda: check_handshakes(lab, keys, options))
    step("2/6 ping every pair")
    ping = timed("ping", lambda: check_ping(lab))
    before = frag_counters(lab)
    step("4/6 bulk TCP transfer")
    bulk = timed("bulk_tcp", lambda: check_bulk_tcp(lab, options))
    step("5/6 iperf3 throughput")
    throughput = timed("throughput", lambda: check_throughput(lab, options))
    after = frag_counters(lab)
    step("3/6 path MTU probes")
    path_mtu = timed("path_mtu", lambda: check_path_mtu(lab, probe_path_mtu(lab), before, after))
    dynamic = None
    if any(site.dynamic for site in lab.plan.sites):
        # Before the recovery check: the dynamic check measures a restarted gateway's way back to the dynamic site
        # alone (the site's re-arm watchdog: docs/how-to/static-sites.md); its restart changes nothing the recovery
        # check uses (a pair of fixed sites).
        n = 7 + bool(lab.plan.private_links)
        step(f"{n}/{n} dynamic sites")
        dynamic = timed(dynamiccheck.KEY, lambda: dynamiccheck.check_dynamic_sites(lab, keys, n, options),
                        {dynamiccheck.KEY: dynamiccheck.title(n)})  # fmt: skip
    step("6/6 recovery")
    recovery = timed("recovery", lambda: check_recovery(lab, options))
    results = [handshakes, ping, path_mtu, bulk, throughput, recovery]
    if lab.plan.private_links:
        step("7/7 private paths")
        results.append(timed(KEY, lambda: check_private_paths(lab, keys), {KEY: TITLE}))
    if any(site.single_host for site in lab.plan.sites):
        step("8/8 single hosts")
        results.append(
            timed(hostcheck.KEY, lambda: hostcheck.check_single_hosts(lab), {hostcheck.KEY: hostcheck.TITLE})
        )
    return results + ([dynamic] if dynamic is not None else [])
