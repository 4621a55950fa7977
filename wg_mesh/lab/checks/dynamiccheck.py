"""The lab check of a stack with a dynamic-address site (issue 24, `endpoint: dynamic`): its peers were never given an
endpoint for it and learnt it from its packets, and they follow it when its address changes, with no action of ours.

* learnt  every other gateway's rendered config has no Endpoint for the dynamic site, and its `wg show wg0 endpoints`
          shows the site's lab public address (WireGuard's roaming: the address its authenticated packets came from)
* roam    a ping every 10 ms from a fixed site's workload host to the dynamic site's host, while the NAT in front of
          the dynamic site rebinds it to a new public address (the old mapping gone: `move`). Pings go to the old
          address until the site's next packet (its persistent keepalive at the latest) teaches the peers the new one:
          the outage is measured; the check passes when traffic comes back within 3x persistent_keepalive and every
          peer's endpoint is the new address.
* restart the fixed site's gateway restarts its WireGuard (wg-quick down, up: it lost its session with the dynamic
          site and has no endpoint for it) while the dynamic site is idle (nothing but keepalives for
          persistent_keepalive + 6 s, so no handshake of WireGuard's own is pending); then its host pings the dynamic
          site's host every 10 ms: the time from the restart to the first reply is measured. The dynamic site's
          re-arm watchdog (wg_mesh.gateway.rearm: a probe, no answer, a new handshake) brings it back; without it the
          site's next handshake waits for its rekey timer (up to 2 minutes). The bound is generous
          (RESTART_BOUND x persistent_keepalive + RESTART_SLACK_S), the measured time is reported.

The first dynamic site and the first fixed site are the pair for the roam and the restart; both run last (they change
the lab), the restart after the roam.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from wg_mesh.lab.checks.outage import measure_outage
from wg_mesh.lab.checks.result import CheckResult, LabOptions
from wg_mesh.lab.checks.underlaycheck import ok_text, wg_endpoints
from wg_mesh.lab.fabric.netns import run
from wg_mesh.lab.fabric.networks import iptables
from wg_mesh.lab.fabric.plan import PUBLIC_POOL, LabKeys, SitePlan
from wg_mesh.lab.fabric.procs import stop
from wg_mesh.lab.machines.build import BuiltLab, wg_quick
from wg_mesh.plan.render import INTERFACE

KEY = "dynamic_sites"
ROAM_BOUND = 3  # x persistent_keepalive: the check's generous bound, not a target
# After a gateway restart: x persistent_keepalive + slack. The watchdog needs at most persistent_keepalive + 3 s of
# quiet, a probe, 13 s without an answer and a handshake (about 27 s at keepalive 10); generous, not a target.
RESTART_BOUND, RESTART_SLACK_S = 2, 20
IDLE_S = 6  # beyond persistent_keepalive: the gateway's keepalive clears a handshake timer the roam's pings armed
_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from")


def title(number: int) -> str:
    return f"{number}. Dynamic-address sites (endpoints learnt from packets, a roam followed, a restart survived)"


def roamed_address(site: SitePlan) -> str:
    """The site's public address after the roam: the top of the lab's public pool, never a site's address (those are
    at its bottom: PUBLIC_POOL[i + 1])."""
    return str(PUBLIC_POOL[-2 - site.index])


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


# Flush the namespace's conntrack table (ctnetlink IPCTNL_MSG_CT_DELETE without attributes, acknowledged): the
# NAT's old mappings go, as when a provider's NAT rebinds. No `conntrack` tool needed. Run in the internet namespace.
_FLUSH_CONNTRACK = """
import socket, struct, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
body = struct.pack("=BBH", socket.AF_INET, 0, 0)
s.send(struct.pack("=IHHII", 16 + len(body), (1 << 8) | 2, 0x1 | 0x4, 1, 0) + body)
sys.exit(0 if struct.unpack("=i", s.recv(4096)[16:20])[0] == 0 else 1)
"""


def move(lab: BuiltLab, site: SitePlan, new: str) -> None:
    """The NAT in front of the site maps it to a new public address, and the old mapping is gone (a provider's NAT
    rebinding, a new address on a dynamic line): the internet namespace rewrites the site's packets to `new`, drops
    what still comes for the old address, and forgets its connections. The site itself changes nothing."""
    inet, old = lab.plan.internet_ns, str(site.public_ip)
    iptables(inet, "-t", "nat", "-I", "POSTROUTING", "-s", old, "-j", "SNAT", "--to-source", new)
    iptables(inet, "-t", "raw", "-I", "PREROUTING", "-d", old, "-j", "DROP")
    run(["ip", "netns", "exec", inet, sys.executable, "-c", _FLUSH_CONNTRACK])


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


def check_dynamic_sites(lab: BuiltLab, keys: LabKeys, number: int, options: LabOptions) -> CheckResult:
    names = {public: site for site, public in keys.public.items()}
    dynamic = [s for s in lab.plan.sites if s.dynamic]
    before = [row for site in dynamic for row in learnt(lab, names, site, str(site.public_ip))]
    rows = [[f"gateway {r['gateway']}: peer {r['peer']}", f"configured {r['configured'] or 'none'}",
             f"learnt {r['endpoint'] or 'none'} (expected {r['expected']})", ok_text(r["ok"])]
            for r in before]  # fmt: skip
    site = dynamic[0]
    fixed = next(s for s in lab.plan.sites if not s.dynamic)
    keepalive, new = keepalive_of(lab, site), roamed_address(site)
    bound_s = ROAM_BOUND * keepalive
    moved: list[float] = []

    def roam() -> None:
        move(lab, site, new)
        moved.append(time.monotonic())

    outage = measure_outage(lab.hosts[fixed.name], lab.state, fixed.host_ns, str(site.host_ip.ip), roam,
                            timeout=bound_s)  # fmt: skip
    # Each peer learns the new address from the site's own next packet to it (its own keepalive timer): wait for all
    # of them, within the same bound from the move.
    after = learnt(lab, names, site, new)
    while moved and not all(r["ok"] for r in after) and time.monotonic() < moved[0] + bound_s:
        time.sleep(0.2)
        after = learnt(lab, names, site, new)
    all_learnt_s = round(time.monotonic() - moved[0], 1) if moved and all(r["ok"] for r in after) else None
    recovered = outage.ok and outage.outage_ms is not None and outage.outage_ms <= bound_s * 1000
    roam_ok = recovered and all_learnt_s is not None
    rows.append([f"roam {site.name} {site.public_ip} -> {new}", f"host {fixed.name} -> host {site.name}, "
                 f"ping every 10 ms", f"no replies for {outage.outage_ms} ms (persistent_keepalive {keepalive} s, "
                 f"bound {bound_s} s); peers learnt {new}: {sum(r['ok'] for r in after)}/{len(after)} "
                 f"(all within {all_learnt_s} s)"
                 + (f"; {outage.error}" if outage.error else ""), ok_text(roam_ok)])  # fmt: skip
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
    ok = all(r["ok"] for r in before) and roam_ok and restart["ok"]
    summary = (
        f"{sum(r['ok'] for r in before)}/{len(before)} peers learnt the dynamic sites' addresses (none configured); "
        f"{site.name} roamed to {new}: traffic back after {outage.outage_ms} ms (keepalive {keepalive} s)"
        + ("" if restart.get("skipped") else
           f"; gateway {fixed.name} restarted: {site.name} reached again after {restart['outage_s']} s")
    )  # fmt: skip
    data: dict[str, Any] = {
        "learnt": before,
        "roam": {"site": site.name, "from": str(site.public_ip), "to": new, "pinger": fixed.name,
                 "outage_ms": outage.outage_ms, "persistent_keepalive_s": keepalive, "bound_s": bound_s,
                 "replies": outage.replies, "error": outage.error, "learnt_after": after,
                 "all_learnt_s": all_learnt_s, "ok": roam_ok},
        "restart": restart,
    }  # fmt: skip
    return CheckResult(KEY, title(number), ok, summary, ["where", "config", "seen", ""], rows, data)
