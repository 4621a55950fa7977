"""`python -m wg_mesh lab --drill pmtu --stack prod`: a path-MTU black hole between two sites of a running
`delivery: live` mesh, mid-transfer, and what the gateway agents make of it (issue #14).

Sites A (the first AWS site), B (the first site of another cloud) and C (the first remaining one), all three gateways
running their agents as shipped (path-MTU probes every 15 s, healing on). A ping every 10 ms and a SHA-256-verified
TCP stream run from A's workload host to B's for the whole drill. The fault is the internet's path between A's and
B's gateways only (policy routes in the internet namespace with `mtu lock`: the router there forwards at most that
size, both directions; every other pair keeps its path):

1. shrink, ICMP filtered  the path drops to the tunnel's MTU (B's underlay - 60: WireGuard's packets no longer fit)
                          and the router's ICMP "fragmentation needed" is dropped: the issue's black hole
2. grow back              the path's MTU and ICMP return: the routes to the peer get the tunnel's MTU again
3. shrink, ICMP allowed   the same path, ICMP passes: the gateways learn the path MTU themselves
4. grow back
Per shrink: seconds until A's agent sees the first failing full-size probe (small passing), declares the black hole,
and has healed (routes lowered); when WgMeshPathMtuBlackHole would fire (its condition, small passing and full
failing, held for the rule's whole `for:` in the exported metrics; a 15 s scrape and evaluation may add up to 30 s:
not a Prometheus run); pings lost and the stream's
longest stall; that A's and B's paths to C stay untouched. Per grow back: seconds until the original routes return.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from wg_mesh.lab.drills.drill import metric, parse_metrics
from wg_mesh.lab.drills.traffic import Pinger, Stream
from wg_mesh.lab.fabric.netns import LabError, Node
from wg_mesh.lab.fabric.networks import ip, iptables
from wg_mesh.lab.fabric.plan import LabPlan, SitePlan
from wg_mesh.tools.monitoring import PATH_MTU_FOR

PATH_METRICS = "/var/lib/prometheus/node-exporter/wg_mesh_path.prom"
WIREGUARD_OVERHEAD = 60
TABLE, PRIORITY = "4242", 4242  # the fault's routing table and rules in the internet namespace
DETECT_TIMEOUT_S = 150.0  # 3 failing ticks of 15 s, the search, and slack on a loaded 2-core machine
OBSERVE_S = 90.0  # ICMP allowed: long enough for 3 failing ticks and the alert's `for:` if the failures held
# (the bench's figures; the verdict of that step, the stream resuming and the other paths untouched, is read after the
# window; the test suite's CI run leaves that step to the benchmark: LabOptions.pmtu_icmp_allowed)
RESTORE_TIMEOUT_S = 120.0  # 3 passing ticks
RESUME_TIMEOUT_S = 60.0
ICMP_DROP = ("OUTPUT", "-p", "icmp", "--icmp-type", "fragmentation-needed", "-j", "DROP")
ALERT_FOR_S = int(PATH_MTU_FOR.removesuffix("m")) * 60


def path_metrics(node: Node) -> dict[str, float]:
    try:
        return parse_metrics(node.path(PATH_METRICS).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def route_target(site: SitePlan) -> tuple[str, list[str]]:
    """The gateway's address as the internet namespace routes it (after the 1:1 NAT), and the route's next hop."""
    if site.transit_site is not None:
        return str(site.gateway_ip.ip), ["via", str(site.transit_site.ip), "dev", site.internet_if]
    return str(site.public_ip), ["dev", site.internet_if]


class PathFault:
    """A smaller path MTU between two gateways, in the lab's internet namespace only."""

    def __init__(self, plan: LabPlan, a: SitePlan, b: SitePlan, mtu: int) -> None:
        self.netns, self.mtu, self.pair = plan.internet_ns, mtu, (a, b)
        self.icmp_dropped = False

    def shrink(self, drop_icmp: bool) -> None:
        """ICMP is dropped before the path shrinks and passes again only after it grew back: a single "fragmentation
        needed" that slips through teaches the gateway the path MTU for 10 minutes (its kernel then fragments the
        tunnel's packets and there is no black hole left to see)."""
        a, b = self.pair
        if drop_icmp:
            iptables(self.netns, "-I", *ICMP_DROP)
            self.icmp_dropped = True
        for i, (src, dst) in enumerate(((a, b), (b, a))):
            (source, _), (target, hop) = route_target(src), route_target(dst)
            ip(self.netns, "route", "replace", f"{target}/32", *hop, "mtu", "lock", self.mtu, "table", TABLE)
            ip(self.netns, "rule", "add", "from", source, "to", target, "lookup", TABLE, "priority", PRIORITY + i)

    def restore(self) -> None:
        for i in range(2):
            ip(self.netns, "rule", "del", "priority", PRIORITY + i)
        ip(self.netns, "route", "flush", "table", TABLE)
        if self.icmp_dropped:
            iptables(self.netns, "-D", *ICMP_DROP)
            self.icmp_dropped = False


class PathDrill:
    """The steps, against a built lab whose three gateways run their agents; `traffic` flows A -> B throughout."""

    def __init__(self, plan: LabPlan, nodes: Mapping[str, Node], hosts: Mapping[str, Node],
                 sites: tuple[SitePlan, SitePlan, SitePlan], traffic: tuple[Pinger, Stream],
                 observe_s: float = OBSERVE_S) -> None:  # fmt: skip
        self.plan, self.nodes, self.hosts, self.traffic = plan, nodes, hosts, traffic
        self.observe_s = observe_s
        self.a, self.b, self.c = sites
        self.tunnel_mtu = plan.tunnel_mtu
        self.fault = PathFault(plan, self.a, self.b, self.tunnel_mtu)
        self.steps: list[dict[str, Any]] = []

    def view(self, site: SitePlan, peer: SitePlan) -> dict[str, float | None]:
        """What `site`'s agent last exported about its path to `peer`."""
        samples = path_metrics(self.nodes[site.name])
        names = ("probe_ok", "black_hole", "mtu_healed", "mtu_bytes", "icmp_unanswered")
        found = {n: metric(samples, f"wgmesh_path_{n}", peer_site=peer.name) for n in names[1:]}
        found["small"] = metric(samples, "wgmesh_path_probe_ok", peer_site=peer.name, size="small")
        found["full"] = metric(samples, "wgmesh_path_probe_ok", peer_site=peer.name, size="full")
        found["probed_at"] = metric(samples, "wgmesh_path_last_probe_timestamp_seconds")
        return found

    def wait_probed(self, timeout: float = 40.0) -> None:
        """Until every running agent has probed every peer once with the full size passing (the healthy start)."""
        deadline = time.monotonic() + timeout
        pairs = [(x, y) for x in (self.a, self.b, self.c) for y in (self.a, self.b, self.c) if x is not y]
        while time.monotonic() < deadline:
            if all(self.view(x, y)["full"] == 1 for x, y in pairs):
                return
            time.sleep(0.5)
        raise LabError(f"the agents' path-MTU probes did not all pass within {timeout:.0f} s: "
                       f"{ {f'{x.name}->{y.name}': self.view(x, y)['full'] for x, y in pairs} }")  # fmt: skip

    def others_untouched(self) -> dict[str, bool]:
        """Every path that does not cross the fault: full size passing, nothing healed."""
        pairs = [(self.a, self.c), (self.b, self.c), (self.c, self.a), (self.c, self.b)]
        return {f"{x.name}->{y.name}": self.view(x, y)["full"] == 1 and not self.view(x, y)["mtu_healed"]
                for x, y in pairs}  # fmt: skip

    def shrink(self, drop_icmp: bool) -> None:
        name = f"shrink to {self.tunnel_mtu}, ICMP {'filtered' if drop_icmp else 'allowed'}"
        start, t0 = time.time(), time.monotonic()
        self.fault.shrink(drop_icmp)
        seen: dict[str, float | None] = {"first_fail": None, "black_hole": None, "healed": None, "alert": None}
        healed_mtu, failing_since = None, None
        deadline = t0 + (DETECT_TIMEOUT_S if drop_icmp else self.observe_s)
        while time.monotonic() < deadline:
            view, now = self.view(self.a, self.b), round(time.monotonic() - t0, 1)
            failing = view["small"] == 1 and view["full"] == 0  # WgMeshPathMtuBlackHole's condition
            if failing and seen["first_fail"] is None:
                seen["first_fail"] = now
            failing_since = (now if failing_since is None else failing_since) if failing else None
            if failing_since is not None and now - failing_since >= ALERT_FOR_S and seen["alert"] is None:
                seen["alert"] = round(failing_since + ALERT_FOR_S, 1)  # held for the rule's whole `for:`
            if seen["black_hole"] is None and view["black_hole"] == 1:
                seen["black_hole"] = now
            if seen["healed"] is None and view["mtu_healed"] == 1:
                seen["healed"], healed_mtu = now, view["mtu_bytes"]
            if drop_icmp and seen["healed"] is not None and seen["alert"] is not None:
                break
            time.sleep(0.2)
        resumed = self._resumed(start + (seen["healed"] or 0.0))
        alert = seen["alert"]
        b_side = self.view(self.b, self.a)
        self.steps.append({
            "step": name, "start": start, "end": time.time(), "icmp_filtered": drop_icmp,
            "first_failing_probe_s": seen["first_fail"], "black_hole_declared_s": seen["black_hole"],
            "healed_s": seen["healed"], "healed_route_mtu": healed_mtu, "alert_fires_s": alert,
            "alert_within_2m": alert is not None and alert + 30 <= 120,
            "peer_side_healed": b_side["mtu_healed"] == 1, "stream_resumed": resumed,
            "other_paths_untouched": self.others_untouched(),
        })  # fmt: skip

    def grow_back(self) -> None:
        start, t0 = time.time(), time.monotonic()
        self.fault.restore()
        restored = None
        while time.monotonic() < t0 + RESTORE_TIMEOUT_S and restored is None:
            views = (self.view(self.a, self.b), self.view(self.b, self.a))
            if all(v["full"] == 1 and not v["mtu_healed"] for v in views):
                restored = round(time.monotonic() - t0, 1)
            time.sleep(0.2)
        self.steps.append({"step": "grow back", "start": start, "end": time.time(), "restored_s": restored,
                           "other_paths_untouched": self.others_untouched()})  # fmt: skip

    def _resumed(self, since: float) -> bool:
        pinger, stream = self.traffic
        deadline = time.monotonic() + RESUME_TIMEOUT_S
        while time.monotonic() < deadline:
            if stream.last_rx > since + 1 and pinger.replied_since(since):
                return True
            time.sleep(0.2)
        return False

    def cleanup(self) -> None:
        with contextlib.suppress(LabError):  # nothing to undo; the namespace goes with the lab anyway
            self.fault.restore()


def judge(steps: list[dict[str, Any]], pinger: Pinger, stream: Stream) -> bool:
    """Traffic numbers per step; whether the drill passed: with ICMP filtered the black hole is declared, healed
    on both sides and alerted within two minutes, the stream resumes; every grow back restores the routes; no other
    path is touched; the stream's bytes verify."""
    ok = bool(steps) and bool(stream.result.get("verified"))
    for s in steps:
        window = pinger.window(s["start"], s["end"])
        s["pings_lost"], s["longest_ping_gap_ms"] = window["lost"], window["longest_gap_ms"]
        s["longest_stall_ms"] = stream.longest_stall_ms(s["start"], s["end"])
        s["ok"] = all(s["other_paths_untouched"].values())
        if s["step"] == "grow back":
            s["ok"] = s["ok"] and s["restored_s"] is not None
        elif s["icmp_filtered"]:
            s["ok"] = s["ok"] and s["healed_s"] is not None and s["peer_side_healed"] and s["stream_resumed"]
            s["ok"] = s["ok"] and s["alert_within_2m"]
        else:
            s["ok"] = s["ok"] and s["stream_resumed"]
        ok = ok and s["ok"]
    return ok
