"""Check 3 of every lab: the largest unfragmented ICMP payload (`ping -M do`) is the tunnel MTU - 28 and one byte
more is refused with an ICMP error (no black hole); the gateways' IP fragmentation counters (`nstat` IpFragCreates /
IpReasmReqds) stay at zero during the transfers of checks 4 and 5. Per pair, the tunnel MTU is the private path's
MTU - 60 where one joins the two sites, else the internet tunnel MTU."""

from __future__ import annotations

from typing import Any

from wg_mesh.lab.checks.result import TITLES, CheckResult, ok_text, ordered_pairs, parallel
from wg_mesh.lab.fabric.netns import Node
from wg_mesh.lab.fabric.plan import SitePlan
from wg_mesh.lab.machines.build import BuiltLab

ICMP_IPV4_HEADERS = 28  # IPv4 (20) + ICMP echo (8)
SMALL_PAYLOAD = 56  # ping's default
FRAG_COUNTERS = ("IpFragCreates", "IpReasmReqds")


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
