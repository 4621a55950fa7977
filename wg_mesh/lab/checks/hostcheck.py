"""Check 8 of a lab whose stack has a single host (a static site without `cidrs`): the host is a host, not a router.

Its reachability is check 2's: a single host's workload is the host itself (SitePlan.host_ip is its overlay address),
so every site's workload pings it and it pings every site's workload. Here, per single host:

* ip_forward   `net.ipv4.ip_forward` is 0 in the host (the lab starts it at 0, as on a fresh server: the host's
               wg0.conf and user data must not turn it on)
* forwarding   packets for another site's workload, sent to the host's public address from the internet, are not
               forwarded into the tunnel: its IpForwDatagrams counter does not move, and IpInAddrErrors counts them
               (they reached the host and were refused: the probe cannot pass by getting lost on the way)
"""

from __future__ import annotations

from typing import Any

from wg_mesh.lab.checks.result import CheckResult, ok_text
from wg_mesh.lab.fabric.netns import Node
from wg_mesh.lab.fabric.plan import SitePlan
from wg_mesh.lab.machines.build import BuiltLab

KEY = "single_hosts"
TITLE = "8. Single hosts (reached at their overlay address, forward nothing)"
PROBES = 3
COUNTERS = ("IpForwDatagrams", "IpInAddrErrors")


def counters(node: Node) -> dict[str, int]:
    out = node.run(["nstat", "-a", "-s", "-z", *COUNTERS], timeout=10).stdout
    values = {name: int(value) for name, value, *_ in (line.split() for line in out.splitlines()[1:] if line)}
    return {name: values.get(name, 0) for name in COUNTERS}


def probe(lab: BuiltLab, host: SitePlan, target: SitePlan) -> dict[str, Any]:
    """`PROBES` pings from the internet namespace to `target`'s workload, routed to `host`'s public address."""
    node, inet = lab.hosts[host.name], lab.internet
    forward = node.run(["sysctl", "-n", "net.ipv4.ip_forward"], timeout=10).stdout.strip()
    destination = f"{target.host_ip.ip}/32"
    route = [destination, "via", str(host.public_ip), "dev", host.internet_if, "onlink"]
    before = counters(node)
    inet.run(["ip", "route", "add", *route])
    try:
        inet.run(["ping", "-n", "-q", "-c", str(PROBES), "-i", "0.2", "-W", "1", str(target.host_ip.ip)], check=False)
    finally:
        inet.run(["ip", "route", "del", destination], check=False)
    after = counters(node)
    delta = {name: after[name] - before[name] for name in COUNTERS}
    ok = forward == "0" and delta["IpForwDatagrams"] == 0 and delta["IpInAddrErrors"] >= PROBES
    return {"host": host.name, "target": target.name, "ip_forward": forward, **delta, "ok": ok}


def check_single_hosts(lab: BuiltLab) -> CheckResult:
    results = []
    for host in (s for s in lab.plan.sites if s.single_host):
        target = next(s for s in lab.plan.sites if s is not host)
        results.append(probe(lab, host, target))
    rows = [
        [
            r["host"],
            r["ip_forward"],
            f"{PROBES} for {r['target']}",
            str(r["IpForwDatagrams"]),
            str(r["IpInAddrErrors"]),
            ok_text(r["ok"]),
        ]
        for r in results
    ]
    ok = all(r["ok"] for r in results)
    summary = f"{sum(r['ok'] for r in results)}/{len(results)} single hosts: ip_forward 0, nothing forwarded"
    summary += "".join(
        f"; {r['host']}: ip_forward {r['ip_forward']}, {r['IpForwDatagrams']} forwarded, {r['IpInAddrErrors']} refused"
        for r in results
        if not r["ok"]
    )
    return CheckResult(
        KEY,
        TITLE,
        ok,
        summary,
        ["host", "ip_forward", "probes sent via it", "forwarded", "refused", ""],
        rows,
        {"hosts": results},
    )
