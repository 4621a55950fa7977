"""The lab's checks, each returning a `CheckResult` (table rows for the report, data for the JSON).

1. handshakes  every gateway pair completed a WireGuard handshake (`wg show ... latest-handshakes`)
2. ping        every workload host pings every other site's host, with RTTs
3. path_mtu    the largest unfragmented ICMP payload (`ping -M do`) is the tunnel MTU - 28 and one byte more
               is refused with an ICMP error (no black hole); the gateways' IP fragmentation counters
               (`nstat` IpFragCreates / IpReasmReqds) stay at zero during the transfers of checks 4 and 5
4. bulk_tcp    TCP from the 9001-MTU AWS host to every other site, bytes verified by SHA-256, MSS clamped
5. throughput  iperf3 host -> host through two gateways, gateway -> gateway over the tunnel and over the
               bare underlay
6. recovery    `wg-quick down` / `up` on one gateway while pinging through it every 10 ms
7. private_paths  (stacks with `private_paths` only, underlaycheck.py) the private-path peers' endpoints are their
               private addresses, the private links carry WireGuard only, the hosts route through their gateway
Per pair, the tunnel MTU is the private path's MTU - 60 where one joins the two sites, else the internet tunnel MTU.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from wg_mesh import inputpolicy
from wg_mesh.lab.checks.bulk import bulk_transfer
from wg_mesh.lab.checks.outage import measure_outage
from wg_mesh.lab.fabric.netns import LabError, Node
from wg_mesh.lab.fabric.plan import LabKeys, SitePlan
from wg_mesh.lab.fabric.procs import stop, wait_for_line
from wg_mesh.lab.machines.build import BuiltLab, wg_quick
from wg_mesh.render import INTERFACE

ICMP_IPV4_HEADERS = 28  # IPv4 (20) + ICMP echo (8)
SMALL_PAYLOAD = 56  # ping's default
FRAG_COUNTERS = ("IpFragCreates", "IpReasmReqds")
IPERF_PORT = 5201

TITLES = {
    "handshakes": "1. WireGuard handshakes",
    "ping": "2. Workload host to workload host (ICMP)",
    "path_mtu": "3. Path MTU and fragmentation",
    "bulk_tcp": "4. Bulk TCP across the tunnel (MSS clamping, bytes verified)",
    "throughput": "5. Throughput (iperf3, TCP)",
    "recovery": "6. Recovery after a gateway restart (ping every 10 ms)",
}

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class CheckResult:
    key: str
    title: str
    ok: bool
    summary: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class LabOptions:
    handshake_timeout: float = 10.0
    iperf_seconds: float = 3.0
    bulk_bytes: int = 16 * 1024 * 1024
    recovery_timeout: float = 15.0
    reboot_timeout: float = 90.0  # --boot: a rebooted gateway's wg0 must be active again within this
    # --drill pmtu: how long the ICMP-allowed shrink is watched (pmtudrill.OBSERVE_S; the test suite's CI run: less)
    pmtu_observe_s: float = 90.0


def parallel(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    items = list(items)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(items)))) as pool:
        return list(pool.map(fn, items))


def ordered_pairs(lab: BuiltLab) -> list[tuple[SitePlan, SitePlan]]:
    return list(itertools.permutations(lab.plan.sites, 2))


def main_pair(lab: BuiltLab) -> tuple[SitePlan, SitePlan]:
    """The sender for the TCP and throughput checks (the AWS site, whose hosts have 9001-byte frames; else
    the site with the largest host MTU) and its first peer."""
    sites = lab.plan.sites
    source = next((s for s in sites if s.cloud == "aws"), max(sites, key=lambda s: s.nic_mtu))
    return source, next(s for s in sites if s is not source)


def ok_text(ok: bool) -> str:
    return "ok" if ok else "FAIL"


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
    pairs = list(itertools.combinations(sites, 2))
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


# --- 3. path MTU and fragmentation --------------------------------------------------------------------------


def df_ping(node: Node, target: str, payload: int) -> tuple[bool, str]:
    """One ping that must not be fragmented; (answered, output)."""
    argv = ["ping", "-n", "-M", "do", "-c", "1", "-W", "1", "-s", str(payload), target]
    result = node.run(argv, check=False, timeout=10)
    return result.returncode == 0, result.stdout + result.stderr


def refused_cleanly(output: str) -> bool:
    """An ICMP 'fragmentation needed' came back (or the kernel already knew the path MTU)."""
    return "Frag needed" in output or "message too long" in output


def largest_payload(node: Node, target: str, low: int, high: int) -> int:
    """Binary search for the largest payload in [low, high] that gets through; low - 1 if none does."""
    best = low - 1
    while low <= high:
        mid = (low + high) // 2
        if df_ping(node, target, mid)[0]:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def probe_path_mtu(lab: BuiltLab) -> list[dict[str, Any]]:
    def probe(pair: tuple[SitePlan, SitePlan]) -> dict[str, Any]:
        src, dst = pair
        expected = lab.plan.peer_mtu(src.name, dst.name) - ICMP_IPV4_HEADERS
        node, target = lab.hosts[src.name], str(dst.host_ip.ip)
        fits, _ = df_ping(node, target, expected)
        over_ok, over_output = df_ping(node, target, expected + 1)
        clean = not over_ok and refused_cleanly(over_output)
        biggest: int | None
        if not fits and not df_ping(node, target, SMALL_PAYLOAD)[0]:
            biggest = None  # no path at all: check 2 reports it, searching would only wait for timeouts
        elif not fits:
            biggest = largest_payload(node, target, SMALL_PAYLOAD, expected - 1)
        elif over_ok:
            biggest = largest_payload(node, target, expected + 1, src.nic_mtu - ICMP_IPV4_HEADERS)
        else:
            biggest = expected
        return {"from": src.name, "to": dst.name, "max_payload": biggest, "expected_max_payload": expected,
                "over_refused_cleanly": clean}  # fmt: skip

    return parallel(probe, ordered_pairs(lab))


def frag_counters(lab: BuiltLab) -> dict[str, dict[str, int]]:
    def read(site: str) -> dict[str, int]:
        out = lab.gateways[site].run(["nstat", "-a", "-s", "-z", *FRAG_COUNTERS], timeout=10).stdout
        values = {name: int(value) for name, value, *_ in (line.split() for line in out.splitlines()[1:] if line)}
        return {name: values.get(name, 0) for name in FRAG_COUNTERS}

    return {site.name: read(site.name) for site in lab.plan.sites}


def check_path_mtu(
    lab: BuiltLab, probes: list[dict[str, Any]], before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> CheckResult:
    computed = lab.plan.tunnel_mtu
    expected = computed - ICMP_IPV4_HEADERS
    rows = []
    for p in probes:
        good = p["max_payload"] == p["expected_max_payload"] and p["over_refused_cleanly"]
        refused = "ICMP frag needed" if p["over_refused_cleanly"] else "black hole / passed"
        largest = "no path" if p["max_payload"] is None else str(p["max_payload"])
        want = "" if p["expected_max_payload"] == expected else f" (private path: {p['expected_max_payload']})"
        rows.append([f"{p['from']} -> {p['to']}{want}", largest, f"+1: {refused}", ok_text(good)])
    deltas = {site: {c: after[site][c] - before[site][c] for c in FRAG_COUNTERS} for site in before}
    for site, delta in deltas.items():
        clean = not any(delta.values())
        counters = ", ".join(f"{name} +{value}" for name, value in delta.items())
        rows.append([f"gateway {site}: fragments during checks 4-5", "", counters, ok_text(clean)])
    internet = [p for p in probes if p["expected_max_payload"] == expected] or probes
    measured = [p["max_payload"] for p in internet]
    maximum = None if None in measured or not measured else min(measured)
    probes_ok = all(p["max_payload"] == p["expected_max_payload"] and p["over_refused_cleanly"] for p in probes)
    no_fragments = not any(v for delta in deltas.values() for v in delta.values())
    largest = "no path for some pairs" if maximum is None else str(maximum)
    summary = f"tunnel MTU {computed}: largest unfragmented ICMP payload {largest} (expected {expected})"
    for link in lab.plan.private_links:
        over = [p for p in probes if {p["from"], p["to"]} == link.sites]
        found = "/".join(sorted({str(p["max_payload"]) for p in over}))
        summary += f"; private path {link.path} (tunnel MTU {link.tunnel_mtu}): {found}"
    if not no_fragments:
        summary += "; the gateways fragmented packets (the underlay carries less than the tunnel needs)"
    return CheckResult(
        "path_mtu",
        TITLES["path_mtu"],
        probes_ok and no_fragments,
        summary,
        ["path", "largest payload", "detail", ""],
        rows,
        {
            "computed": computed,
            "max_unfragmented": maximum,
            "expected_max_unfragmented": expected,
            "probes": probes,
            "fragmentation": deltas,
        },
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


@contextlib.contextmanager
def measurement_port(server: Node, port: int) -> Iterator[None]:
    """The gateway's INPUT policy (wg_mesh.inputpolicy: booted gateways load it) admits no iperf3: the measurement's
    own port is opened at the top of its chain for the run and closed after; without the chain (the namespace lab
    does not load the policy) nothing is done."""
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


def timed(key: str, fn: Callable[[], CheckResult], titles: Mapping[str, str] = TITLES) -> CheckResult:
    """Run one check; a check that cannot even run is reported as failed, and the others still run."""
    start = time.monotonic()
    try:
        result = fn()
    except Exception as exc:  # reported, with its type: exit 1 either way
        result = CheckResult(key, titles[key], False, f"could not run: {type(exc).__name__}: {exc}", ["error"])
    result.seconds = round(time.monotonic() - start, 2)
    return result


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
    step("6/6 recovery")
    recovery = timed("recovery", lambda: check_recovery(lab, options))
    results = [handshakes, ping, path_mtu, bulk, throughput, recovery]
    if lab.plan.private_links:
        from wg_mesh.lab.checks.underlaycheck import KEY, TITLE, check_private_paths

        step("7/7 private paths")
        results.append(timed(KEY, lambda: check_private_paths(lab, keys), {KEY: TITLE}))
    return results
