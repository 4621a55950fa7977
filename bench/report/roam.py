"""docs/benchmarks.md section 13, a dynamic-address site roaming behind a NAT, from docs/bench/roam.json
(bench/lab/roam.py: the JSON reports of `python -m wg_mesh lab --drill roam`, one per delivery)."""

from __future__ import annotations

from typing import Any


def _v(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "–" if value is None else f"{value:.{digits}f}{unit}"


def _row(delivery: str, s: dict[str, Any]) -> str:
    if s["met"]:
        verdict = "met"
    elif s["outage_ms"] is None:
        verdict = f"**not met** (not back within {s['bound_s']:g} s)"
    else:
        verdict = "**not met**"
    why = {"idle": " (persistent_keepalive)", "dns": " (reresolve_seconds)"}.get(s["kind"], "")
    target = f"≤ {s['target_s']:g} s{why}"
    stall = "– (no stream yet)" if s["own_pinger"] else _v(s.get("longest_stall_ms"), " ms")
    endpoints = ", ".join(f"{g} `{e or 'none'}`" for g, e in s["endpoints"].items())
    return (f"| {delivery} | {s['step']} | {s['nat']} | {_v(s['outage_ms'], ' ms')} | {stall} | "
            f"{_v(s.get('pings_lost'))} | {target} | {verdict} | {endpoints} |")  # fmt: skip


def section(data: dict[str, Any]) -> str:
    keepalive, reresolve = data["keepalive_s"], data.get("reresolve_s")
    branch = (
        f" and a branch known by a DNS name (`reresolve_seconds: {reresolve}`, below the keepalive so that the "
        "re-resolver, not the branch's next keepalive, is what the dns change measures)"
        if reresolve is not None
        else ""
    )
    intro = (
        "## 13. A dynamic-address site roams behind a NAT (`endpoint: dynamic`)\n\n"
        "`python -m wg_mesh lab --drill roam` (wg_mesh/lab/drills/roamdrill.py) on the dev topology with an office on "
        f"a dynamic address (`persistent_keepalive: {keepalive}`, the default){branch}, once per delivery "
        "(`sudo .venv/bin/python -m bench roam`). The lab's internet router becomes the office's NAT and changes its "
        "public address three times; the old address is gone at once (a new conntrack zone per change, the office's "
        "own address unreachable). *idle*: no traffic, only keepalives, a ping every 10 ms from the AWS site's host "
        "to the office's host started right after the change (the first change comes soon after the office's "
        "handshakes; the wait is the rest of the office's keepalive cycle, a whole keepalive at worst). *flowing*: "
        "mid-transfer, a ping every 10 ms AWS host → office host and a SHA-256-verified TCP stream office host → "
        "AWS host (1 MiB/s). *symmetric*: mid-transfer, and the NAT gives each destination its own public port (a "
        "port range per peer, `--random-fully` within it). *dns*: the branch moves while idle (a static NAT at a "
        "new address, the old one gone) and the lab's resolver answers its name with the new address; a ping every "
        "10 ms from the AWS site's host to the branch's host. Outage: from the change to the first reply of a second "
        "without a lost ping. Targets (issue 24): an idle site reachable again within persistent_keepalive; with "
        "traffic flowing, traffic back within 1 s; a DNS change followed within one re-resolve interval. The last "
        "column: each gateway's endpoint for the moving site after "
        "the change (the GCP gateway learns a mid-transfer change at the office's next keepalive to it: the traffic "
        "flows to AWS only).\n"
    )
    rows = [
        "| delivery | change | NAT | outage | stream stall | pings lost | target | | the gateways' endpoint |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for run in data["runs"]:
        report = run["report"]
        rows += [_row(run["delivery"], s) for s in report["steps"]]
        symmetric = [s for s in report["steps"] if s["nat"] == "symmetric"]
        stream = report.get("stream") or {}
        parts = [
            f"{run['delivery']}: drill {'passed' if report['ok'] else '**failed**'} in {report['duration_s']:.0f} s"
            + (f" ({report['error']})" if report.get("error") else ""),
            f"stream {stream.get('bytes', 0) / 2**20:.0f} MiB, SHA-256 "
            + ("match" if stream.get("verified") else "**mismatch**"),
        ]
        for s in symmetric:
            reached = ", ".join(f"{g} {'yes' if r else '**no**'}" for g, r in s["hosts_reach_site"].items())
            parts.append(f"symmetric NAT: every gateway at its own port {'yes' if s['ports_distinct'] else '**no**'}"
                         f" (all learnt within {_v(s['all_learnt_s'], ' s', 1)}), other hosts reach the office's: "
                         f"{reached}")  # fmt: skip
        before, after = run["load_before"], run["load_after"]
        parts.append(f"load average (1 min) {before[0]:.2f} before, {after[0]:.2f} after, on {data['nproc']} cores")
        notes.append("- " + "; ".join(parts) + ".")
    tail = (
        "The machine was shared with other engineers' lab runs (the load averages above): the figures are "
        "contended. Not measured separately: a flow only towards the site (a download, no data from the site) is "
        "the idle change's case: the site answers only what reaches it, so nothing teaches its peers the new address "
        "before its next keepalive, and such a flow is back only after up to persistent_keepalive, not within 1 s.\n"
    )
    return "\n".join([intro, *rows, "", *notes, "", tail])
