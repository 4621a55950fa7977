"""The relay step of the lab's dynamic check (dynamiccheck.py; `python -m bench relay` takes the same measurements in
rounds): a relayed pair's throughput against a direct path's, back to back from the same host, and issue 24's target
(relayed >= RELAY_TARGET x direct, in the same run).

* relayed  iperf3 TCP from the first relayed site's host to its partner's host: two tunnels, the relay's gateway
           decrypts every packet and encrypts it again
* direct   from the same host to the relay site's host: one tunnel, the same office's line

On consumer lines (`line_mbit`, wg_mesh.lab.fabric.line): both offices' uplinks are shaped, up and down, to the line's
rate for the two runs. The direct run crosses the source office's line once (up); the relayed run crosses it too, and
its partner's (down): the line, not the lab's CPU, should then be each path's limit. Each path's share of the line's
TCP ceiling says whether it was (`LINE_FULL`); a path faster than the line, or a line whose shaper did not count the
run's bytes, means the shaping was not in place: that fails the step. Unshaped (`line_mbit` None) both paths are
limited by the lab's CPU (every gateway is wireguard-go on the machine's shared cores): the ratio is what a relayed
packet's second pair of tunnels costs in CPU. Either ratio is a figure, never a pass/fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wg_mesh.lab.checks.iperf import iperf
from wg_mesh.lab.fabric import line
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.fabric.plan import SitePlan
from wg_mesh.lab.machines.build import BuiltLab

RELAY_TARGET = 0.8  # issue 24: relayed throughput >= 0.8x the direct path's, in the same run
LINE_FULL = 0.9  # a path filled its line when it carried this share of the line's TCP ceiling (line.ceiling_mbps)
# A line's shaper counted the run when its bytes are at least this share of the TCP payload iperf3 reported through it
# (the frames on the line carry more than the payload: headers, retransmissions; the share allows for iperf3's
# interval being a little longer than the run's `seconds`)
COUNTED_SHARE = 0.9
PATHS = ("direct", "relayed")


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


def line_verdict(line_mbit: float, tunnel_mtu: int, mbps: Mapping[str, float | None]) -> dict[str, Any]:
    """Per path (`mbps`: path -> Mbit/s of TCP payload): its share of the line's TCP ceiling and whether it filled
    the line (>= LINE_FULL); `line_limited` when every path did (the ratio is then the line's, not the CPU's);
    `over_line`: the paths faster than the line's own rate (the shaping was not in place)."""
    ceiling = line.ceiling_mbps(line_mbit, tunnel_mtu)
    share = {path: None if v is None else round(v / ceiling, 2) for path, v in mbps.items()}
    full = {path: s is not None and s >= LINE_FULL for path, s in share.items()}
    over = [path for path, v in mbps.items() if v and v > line_mbit]
    return {"line_mbit": line_mbit, "ceiling_mbps": ceiling, "line_share": share, "line_full": full,
            "line_limited": all(full.values()), "over_line": over}  # fmt: skip


def payload_bytes(mbps: float | None, seconds: float) -> float:
    return (mbps or 0.0) * 1e6 / 8 * seconds


def lines_counted(counted: Mapping[str, Mapping[str, Any]], carried: Mapping[str, float]) -> list[str]:
    """What is wrong with the lines' shapers over the runs (empty: nothing): each of `carried` (a line end -> the TCP
    payload, bytes, that went through it) must still be a tbf and have counted at least COUNTED_SHARE of it."""
    problems = []
    for end, payload in carried.items():
        seen = counted[end]
        if seen["kind"] != "tbf":
            problems.append(f"line {end}: root qdisc {seen['kind']}, not the line's tbf")
        elif seen["bytes"] < COUNTED_SHARE * payload:
            problems.append(f"line {end}: counted {seen['bytes']} bytes, the runs put {payload:.0f} through it")
    return problems


def relay_throughput(lab: BuiltLab, source: SitePlan, partner: SitePlan, relay: SitePlan, seconds: float,
                     line_mbit: float | None = None) -> dict[str, Any]:  # fmt: skip
    """iperf3 TCP from `source`'s host to the relay site's host (direct), then at once to `partner`'s host (relayed),
    the same method and duration; on `line_mbit` lines (both offices', up and down) when given: both Mbit/s, the
    verdict, and the lines' (their shapers' counters over the two runs)."""
    client, errors = lab.hosts[source.name], []
    offices = [] if line_mbit is None else [source, partner]
    ends = [end for site in offices for end in line.line_ends(site)]
    mbps: dict[str, float | None] = {}
    with line.shaped_lines(lab.internet, offices, line_mbit or 0.0):
        before = {end: line.counters(lab.internet, end) for end in ends}
        for path, dst in (("direct", relay), ("relayed", partner)):
            try:
                mbps[path] = iperf(lab.hosts[dst.name], dst.host_ns, client, str(dst.host_ip.ip), seconds, lab)
            except LabError as exc:
                mbps[path] = None
                errors.append(str(exc))
        counted = {end.name: line.delta(before[end], line.counters(lab.internet, end)) for end in ends}
    direct, relayed = mbps["direct"], mbps["relayed"]
    out = {"from": source.name, "direct_to": relay.name, "relayed_to": partner.name, "relay": relay.name,
           "seconds": seconds, "direct_mbps": direct, "relayed_mbps": relayed, **relay_verdict(direct, relayed),
           "line_mbit": line_mbit}  # fmt: skip
    if line_mbit is not None:
        verdict = line_verdict(line_mbit, lab.plan.peer_mtu(source.name, relay.name), mbps)
        carried = {f"{source.name} up": payload_bytes(direct, seconds) + payload_bytes(relayed, seconds),
                   f"{partner.name} down": payload_bytes(relayed, seconds)}  # fmt: skip
        errors += [f"{p} {mbps[p]} Mbit/s is over the {line_mbit:g} Mbit/s line" for p in verdict["over_line"]]
        errors += lines_counted(counted, carried) if not errors else []
        out.update(verdict, lines=counted)
    return {**out, "errors": errors, "ok": not errors and bool(direct) and bool(relayed)}


def relay_row(relay: Mapping[str, Any]) -> tuple[list[str], str]:
    """The step's row in the check's table and its part of the summary."""
    verdict = "met" if relay["met"] else "not met"
    lines = ""
    if relay["line_mbit"] is not None:
        share = relay["line_share"]
        lines = (f" on {relay['line_mbit']:g} Mbit/s lines (both offices, up and down; TCP ceiling "
                 f"{relay['ceiling_mbps']:g}: direct {share['direct']}, relayed {share['relayed']} of it, "
                 f"{'both filled the line' if relay['line_limited'] else 'not both line-limited'})")  # fmt: skip
    row = [f"iperf3 host {relay['from']} -> host {relay['relayed_to']} (relayed by {relay['relay']}) and -> host "
           f"{relay['direct_to']} (direct), {relay['seconds']:g} s each{lines}",
           f"{relay['relayed_mbps']} / {relay['direct_mbps']} Mbit/s",
           f"relayed/direct {relay['ratio']} (target >= {RELAY_TARGET}: {verdict}; reported, not checked)"
           + "".join(f"; {e}" for e in relay["errors"]), "ok" if relay["ok"] else "FAIL"]  # fmt: skip
    on = "" if relay["line_mbit"] is None else f" on {relay['line_mbit']:g} Mbit/s lines"
    summary = (f"relayed {relay['relayed_mbps']} / direct {relay['direct_mbps']} Mbit/s{on} = {relay['ratio']} "
               f"(target >= {RELAY_TARGET}: {verdict})")  # fmt: skip
    return row, summary
