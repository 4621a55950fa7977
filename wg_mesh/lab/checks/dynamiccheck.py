"""The lab check of a stack with a dynamic-address site (issue 24, `endpoint: dynamic`): its peers were never given an
endpoint for it and learnt it from its packets; a relayed pair's throughput against a direct path's; a gateway restart
survived.

* learnt  every other gateway's rendered config has no Endpoint for the dynamic site, and its `wg show wg0 endpoints`
          shows the site's lab public address (WireGuard's roaming: the address its authenticated packets came from)
* relay   (a stack with a relayed pair; LabOptions.relay_throughput) iperf3 TCP from the first relayed site's host to
          its partner's host (through the relay: two tunnels, the relay's gateway decrypts and encrypts again) and,
          back to back with the same method, from the same host to the relay site's host (one tunnel, direct): both
          Mbit/s, the ratio relayed/direct and issue 24's target (>= RELAY_TARGET). Reported, met or not; the check
          fails only when a measurement does not run (a timed figure is no pass/fail in the test suite; `python -m
          bench relay` measures it in rounds, with the machine's CPU)
* restart the fixed site's gateway restarts its WireGuard (wg-quick down, up: it lost its session with the dynamic
          site and has no endpoint for it) while the dynamic site is idle (nothing but keepalives for
          persistent_keepalive + 6 s, so no handshake of WireGuard's own is pending); then its host pings the dynamic
          site's host every 10 ms: the time from the restart to the first reply is measured. The dynamic site's
          re-arm watchdog (wg_mesh.gateway.rearm: a probe, no answer, a new handshake) brings it back; without it the
          site's next handshake waits for its rekey timer (up to 2 minutes). The bound is generous
          (RESTART_BOUND x persistent_keepalive + RESTART_SLACK_S), the measured time is reported.

A dynamic site's address changing behind its NAT (idle, mid-transfer, a symmetric NAT) is the roam drill's
(`wg-mesh lab --drill roam`, wg_mesh/lab/drills/roamdrill.py; tests/test_lab_roam_drill.py runs it, with the agents
polling), no longer a step here. The first dynamic site and the first fixed site are the pair for the restart, which
runs last (it changes the lab).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Any

from wg_mesh.lab.checks.iperf import iperf
from wg_mesh.lab.checks.result import CheckResult, LabOptions
from wg_mesh.lab.checks.underlaycheck import ok_text, wg_endpoints
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.fabric.plan import LabKeys, SitePlan
from wg_mesh.lab.fabric.procs import stop
from wg_mesh.lab.machines.build import BuiltLab, wg_quick
from wg_mesh.plan.render import INTERFACE

KEY = "dynamic_sites"
# After a gateway restart: x persistent_keepalive + slack. The watchdog needs at most persistent_keepalive + 3 s of
# quiet, a probe, 13 s without an answer and a handshake (about 27 s at keepalive 10); generous, not a target.
RESTART_BOUND, RESTART_SLACK_S = 2, 20
IDLE_S = 6  # beyond persistent_keepalive: the site's own keepalives only, no handshake of WireGuard's pending
RELAY_TARGET = 0.8  # issue 24: relayed throughput >= 0.8x the direct path's, in the same run
_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from")


def title(number: int) -> str:
    return f"{number}. Dynamic-address sites (endpoints learnt from packets, relayed throughput, a restart survived)"


def keepalive_of(lab: BuiltLab, site: SitePlan) -> int:
    return max(p.persistent_keepalive for p in lab.machines[site.name].artifacts.interface.peers)


def learnt(lab: BuiltLab, names: Mapping[str, str], site: SitePlan, address: str) -> list[dict[str, Any]]:
    """Each other gateway that peers with `site` (a relayed partner does not): whether its rendered config gave `site`
    an endpoint, and what WireGuard has now."""
    want = f"{address}:{lab.plan.listen_port}"
    out = []
    for peer in lab.plan.sites:
        configured = [p.endpoint for p in lab.machines[peer.name].artifacts.interface.peers if p.name == site.name]
        if peer.name == site.name or not configured:
            continue
        seen = wg_endpoints(lab.gateways[peer.name], names).get(site.name)
        seen_full = _full_endpoint(lab, peer, names, site.name)
        out.append({"gateway": peer.name, "peer": site.name, "configured": configured[0] if configured else None,
                    "endpoint": seen_full, "expected": want,
                    "ok": configured == [None] and seen == address and seen_full == want})  # fmt: skip
    return out


def _full_endpoint(lab: BuiltLab, gateway: SitePlan, names: Mapping[str, str], peer: str) -> str | None:
    """HOST:PORT of `peer` in `gateway`'s `wg show wg0 endpoints` (underlaycheck.wg_endpoints keeps the host only)."""
    out = lab.gateways[gateway.name].run(["wg", "show", "wg0", "endpoints"], timeout=10).stdout
    for line in out.splitlines():
        key, _, endpoint = line.strip().partition("\t")
        if names.get(key) == peer and endpoint.strip() != "(none)":
            return endpoint.strip()
    return None


def restart_idle(lab: BuiltLab, gateway: SitePlan, target: SitePlan, keepalive: int, bound_s: float) -> dict[str, Any]:
    """Restart `gateway`'s WireGuard while `target` (the dynamic site) is idle, then ping `target`'s host from
    `gateway`'s every 10 ms: seconds from the restart to the first reply (None: none within `bound_s`)."""
    time.sleep(keepalive + IDLE_S)
    began = time.time()
    wg_quick(lab, gateway.name, "down", INTERFACE)
    wg_quick(lab, gateway.name, "up", INTERFACE)
    up_s = round(time.time() - began, 1)
    node = lab.hosts[gateway.name]
    pinger = node.popen(["ping", "-n", "-D", "-i", "0.01", "-W", "1", str(target.host_ip.ip)], stdout=subprocess.PIPE)
    lab.state.track(pinger.pid, gateway.host_ns, f"ping {target.host_ip.ip} (restart)")
    first: list[float] = []

    def collect() -> None:
        assert pinger.stdout is not None
        for line in pinger.stdout:
            if m := _REPLY.match(line):
                first.append(float(m.group(1)))
                return

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    reader.join(max(0.0, began + bound_s - time.time()))
    stop(pinger)
    reader.join(2)
    outage_s = round(first[0] - began, 1) if first else None
    return {"gateway": gateway.name, "to": target.name, "wg_quick_down_up_s": up_s, "outage_s": outage_s,
            "persistent_keepalive_s": keepalive, "bound_s": bound_s,
            "ok": outage_s is not None and outage_s <= bound_s}  # fmt: skip


def relay_paths(lab: BuiltLab) -> tuple[SitePlan, SitePlan, SitePlan] | None:
    """(source, partner, relay) of the stack's first relayed pair, or None without one. The relay is the site whose
    gateway forwards relayed flows (its interface plan's relay_ranges); the pair, the first dynamic site and the first
    other dynamic site it does not peer with (its relay's entry carries that partner's ranges)."""
    relay = next((s for s in lab.plan.sites if lab.machines[s.name].artifacts.interface.relay_ranges), None)
    peers = {s.name: {p.name for p in lab.machines[s.name].artifacts.interface.peers} for s in lab.plan.sites}
    dynamic = [s for s in lab.plan.sites if s.dynamic]
    pair = next(((a, b) for a in dynamic for b in dynamic if a is not b and b.name not in peers[a.name]), None)
    return None if relay is None or pair is None else (pair[0], pair[1], relay)


def relay_verdict(direct_mbps: float | None, relayed_mbps: float | None) -> dict[str, Any]:
    """The ratio relayed/direct (None unless both ran) and whether it meets the target."""
    ratio = round(relayed_mbps / direct_mbps, 2) if direct_mbps and relayed_mbps is not None else None
    return {"ratio": ratio, "target": RELAY_TARGET, "met": ratio is not None and ratio >= RELAY_TARGET}


def relay_throughput(lab: BuiltLab, source: SitePlan, partner: SitePlan, relay: SitePlan, seconds: float
                     ) -> dict[str, Any]:  # fmt: skip
    """iperf3 TCP from `source`'s host to the relay site's host (direct: one tunnel), then at once to `partner`'s host
    (relayed: two tunnels through the relay's gateway), the same method and duration: both Mbit/s and the verdict."""
    client, errors = lab.hosts[source.name], []
    mbps: dict[str, float | None] = {}
    for key, dst in (("direct_mbps", relay), ("relayed_mbps", partner)):
        try:
            mbps[key] = iperf(lab.hosts[dst.name], dst.host_ns, client, str(dst.host_ip.ip), seconds, lab)
        except LabError as exc:
            mbps[key] = None
            errors.append(str(exc))
    direct, relayed = mbps["direct_mbps"], mbps["relayed_mbps"]
    return {"from": source.name, "direct_to": relay.name, "relayed_to": partner.name, "relay": relay.name,
            "seconds": seconds, "direct_mbps": direct, "relayed_mbps": relayed, **relay_verdict(direct, relayed),
            "errors": errors, "ok": not errors and bool(direct) and bool(relayed)}  # fmt: skip


def check_dynamic_sites(lab: BuiltLab, keys: LabKeys, number: int, options: LabOptions) -> CheckResult:
    names = {public: site for site, public in keys.public.items()}
    dynamic = [s for s in lab.plan.sites if s.dynamic]
    before = [row for site in dynamic for row in learnt(lab, names, site, str(site.public_ip))]
    rows = [[f"gateway {r['gateway']}: peer {r['peer']}", f"configured {r['configured'] or 'none'}",
             f"learnt {r['endpoint'] or 'none'} (expected {r['expected']})", ok_text(r["ok"])]
            for r in before]  # fmt: skip
    paths = relay_paths(lab)
    relay: dict[str, Any] = {"skipped": True, "ok": True}
    if paths is not None and options.relay_throughput:
        relay = relay_throughput(lab, *paths, options.iperf_seconds)
        verdict = "met" if relay["met"] else "not met"
        rows.append([f"iperf3 host {relay['from']} -> host {relay['relayed_to']} (relayed by {relay['relay']}) and "
                     f"-> host {relay['direct_to']} (direct), {relay['seconds']:g} s each",
                     f"{relay['relayed_mbps']} / {relay['direct_mbps']} Mbit/s",
                     f"relayed/direct {relay['ratio']} (target >= {RELAY_TARGET}: {verdict}; reported, not checked)"
                     + "".join(f"; {e}" for e in relay["errors"]), ok_text(relay["ok"])])  # fmt: skip
    site = dynamic[0]
    fixed = next(s for s in lab.plan.sites if not s.dynamic)
    keepalive = keepalive_of(lab, site)
    restart_bound = RESTART_BOUND * keepalive + RESTART_SLACK_S
    if not options.dynamic_restart:
        restart: dict[str, Any] = {"skipped": True, "ok": True, "outage_s": None, "gateway": fixed.name}
    else:
        restart = restart_idle(lab, fixed, site, keepalive, restart_bound)
    if not restart.get("skipped"):
        rows.append([f"restart gateway {fixed.name} (wg-quick down, up: {restart['wg_quick_down_up_s']} s), "
                     f"{site.name} idle", f"then host {fixed.name} -> host {site.name}, ping every 10 ms",
                     f"first reply {restart['outage_s']} s after the restart (bound {restart_bound} s)",
                     ok_text(restart["ok"])])  # fmt: skip
    ok = all(r["ok"] for r in before) and relay["ok"] and restart["ok"]
    summary = (
        f"{sum(r['ok'] for r in before)}/{len(before)} peers learnt the dynamic sites' addresses (none configured)"
        + ("" if relay.get("skipped") else
           f"; relayed {relay['relayed_mbps']} / direct {relay['direct_mbps']} Mbit/s = {relay['ratio']} (target "
           f">= {RELAY_TARGET}: {'met' if relay['met'] else 'not met'})")
        + ("" if restart.get("skipped") else
           f"; gateway {fixed.name} restarted: {site.name} reached again after {restart['outage_s']} s")
    )  # fmt: skip
    data: dict[str, Any] = {"learnt": before, "relay": relay, "restart": restart}
    return CheckResult(KEY, title(number), ok, summary, ["where", "config", "seen", ""], rows, data)
