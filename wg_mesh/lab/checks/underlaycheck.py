"""Check 7 of a lab whose stack has `private_paths` (docs/underlay.md section 3): the private path carries only
gateway-to-gateway WireGuard, the workloads keep going through the mesh.

* endpoints   every gateway's `wg show wg0 endpoints`: a private-path peer at its private address (the handshake and
              the data came over the private link: WireGuard's roaming would show the public address otherwise),
              every other peer at its public address (the internet)
* link        what each VPC router forwarded onto the private link (iptables counters): WireGuard to the listen port
              (> 0), ICMP between the two gateways (errors about WireGuard's UDP, e.g. port unreachable while the
              recovery check has a wg0 down: counted, allowed), nothing else (0)
* host routes every workload host's route to every remote host goes to its own gateway, never the private link
* VPC routes  the only routes over a private link are the far gateway's /32, never a workload range
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from ipaddress import IPv4Network
from typing import Any

from wg_mesh.lab.checks.result import CheckResult
from wg_mesh.lab.fabric.netns import Node, run
from wg_mesh.lab.fabric.networks import PRIVATE_ALL_COMMENT, PRIVATE_ICMP_COMMENT, PRIVATE_WG_COMMENT
from wg_mesh.lab.fabric.plan import LabKeys, SitePlan
from wg_mesh.lab.fabric.privatepath import LinkEnd, PrivateLink
from wg_mesh.lab.machines.build import BuiltLab
from wg_mesh.plan.render import INTERFACE

KEY = "private_paths"
TITLE = "7. Private paths (WireGuard over the private link only, workloads through the mesh)"
_VIA = re.compile(r"\bvia (\S+)")
_DEV = re.compile(r"\bdev (\S+)")


def ok_text(ok: bool) -> str:
    return "ok" if ok else "FAIL"


def wg_endpoints(node: Node, names: Mapping[str, str]) -> dict[str, str | None]:
    """peer site -> the address of its endpoint as WireGuard has it now (None: no endpoint)."""
    out = node.run(["wg", "show", INTERFACE, "endpoints"], timeout=10).stdout
    found: dict[str, str | None] = {}
    for line in out.splitlines():
        key, _, endpoint = line.strip().partition("\t")
        host = endpoint.strip().rpartition(":")[0] if ":" in endpoint else None
        found[names.get(key.strip(), f"unknown key {key.strip()[:8]}...")] = host
    return found


def expected_endpoint(lab: BuiltLab, peer: SitePlan, link: PrivateLink | None) -> str:
    return str(peer.gateway_ip.ip) if link is not None else str(peer.public_ip)


def link_counters(end: LinkEnd) -> dict[str, int]:
    """Packets the VPC router of `end` forwarded onto the link: WireGuard, ICMP between the gateways, and all."""
    argv = ["ip", "netns", "exec", end.vpc_ns, "iptables", "-w", "-n", "-v", "-x", "-L", "FORWARD"]
    out = run(argv, timeout=10).stdout
    counts = {"wireguard": 0, "icmp": 0, "all": 0}
    for line in out.splitlines():
        fields = line.split()
        if not fields or not fields[0].isdigit() or end.interface not in fields:
            continue
        if f"/* {PRIVATE_WG_COMMENT} */" in line:
            counts["wireguard"] += int(fields[0])
        elif f"/* {PRIVATE_ICMP_COMMENT} */" in line:
            counts["icmp"] += int(fields[0])
        elif f"/* {PRIVATE_ALL_COMMENT} */" in line:
            counts["all"] += int(fields[0])
    return counts


def route_get(node: Node, target: str) -> tuple[str | None, str | None]:
    """(next hop, device) of the node's route to `target`."""
    out = node.run(["ip", "-o", "route", "get", target], check=False, timeout=10).stdout
    via, dev = _VIA.search(out), _DEV.search(out)
    return (via.group(1) if via else None), (dev.group(1) if dev else None)


def link_routes(end: LinkEnd) -> list[str]:
    """The destinations routed over the link in this end's VPC router (without the link's own connected /30)."""
    out = run(["ip", "-n", end.vpc_ns, "-o", "route", "show", "dev", end.interface], timeout=10).stdout
    lines = [line.split()[0] for line in out.splitlines() if line.strip() and "proto kernel" not in line]
    return [str(IPv4Network(dst)) for dst in lines]  # `ip route` prints a /32 without its length


def check_private_paths(lab: BuiltLab, keys: LabKeys) -> CheckResult:
    plan = lab.plan
    names = {public: site for site, public in keys.public.items()}
    rows: list[list[str]] = []
    endpoints: list[dict[str, Any]] = []
    for a, b in itertools.permutations(plan.sites, 2):
        link = plan.private_link(a.name, b.name)
        seen = wg_endpoints(lab.gateways[a.name], names).get(b.name)
        want = expected_endpoint(lab, b, link)
        path = f"private path {link.path}" if link else "internet"
        endpoints.append({"gateway": a.name, "peer": b.name, "path": path, "endpoint": seen, "expected": want,
                          "ok": seen == want})  # fmt: skip
        rows.append([f"gateway {a.name}: peer {b.name}", path, f"endpoint {seen or 'none'} (expected {want})",
                     ok_text(seen == want)])  # fmt: skip
    links: list[dict[str, Any]] = []
    for link in plan.private_links:
        for near, far in link.ends():
            counts = link_counters(near)
            other = counts["all"] - counts["wireguard"] - counts["icmp"]
            routes = link_routes(near)
            good = counts["wireguard"] > 0 and other == 0 and routes == [f"{far.gateway_ip}/32"]
            links.append({"path": link.path, "from": near.site, "to": far.site, "mtu": link.mtu,
                          "wireguard_packets": counts["wireguard"], "gateway_icmp_packets": counts["icmp"],
                          "other_packets": other, "routes": routes,
                          "ok": good})  # fmt: skip
            rows.append([f"VPC router {near.site} -> {far.site} ({near.interface}, MTU {link.mtu})",
                         f"routes {', '.join(routes) or 'none'}",
                         f"WireGuard packets {counts['wireguard']}, gateway ICMP {counts['icmp']}, other {other}",
                         ok_text(good)])  # fmt: skip
    host_routes: list[dict[str, Any]] = []
    for a, b in itertools.permutations(plan.sites, 2):
        via, dev = route_get(lab.hosts[a.name], str(b.host_ip.ip))
        good = via == str(a.gateway_ip.ip)
        host_routes.append({"host": a.name, "to": b.name, "via": via, "dev": dev, "ok": good})
        if plan.private_link(a.name, b.name) is not None or not good:
            rows.append([f"host {a.name} -> host {b.name}", "route", f"via {via} dev {dev} (its gateway: "
                         f"{a.gateway_ip.ip})", ok_text(good)])  # fmt: skip
    ok = all(e["ok"] for e in endpoints) and all(x["ok"] for x in links) and all(h["ok"] for h in host_routes)
    private = [e for e in endpoints if e["path"] != "internet"]
    internet = [e for e in endpoints if e["path"] == "internet"]
    traffic = ", ".join(f"{x['from']}->{x['to']} {x['wireguard_packets']} WireGuard / {x['other_packets']} other"
                        for x in links)  # fmt: skip
    summary = (
        f"{sum(e['ok'] for e in private)}/{len(private)} private-path and {sum(e['ok'] for e in internet)}/"
        f"{len(internet)} internet peers at the expected endpoint; private links: {traffic}; "
        f"{sum(h['ok'] for h in host_routes)}/{len(host_routes)} host routes via their own gateway"
    )
    data: dict[str, Any] = {
        "links": [link.to_json() for link in plan.private_links],
        "endpoints": endpoints,
        "link_traffic": links,
        "host_routes": host_routes,
    }
    return CheckResult(KEY, TITLE, ok, summary, ["where", "path", "seen", ""], rows, data)
