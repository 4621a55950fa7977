"""docs/benchmarks.md section 15, every change rehearsed as `pulumi up` runs it, from docs/bench/changes.json
(bench/lab/changes.py)."""

from __future__ import annotations

import re
from typing import Any

_VIOLATION = re.compile(r"(?P<kind>[^:]+): (?P<site>[a-z0-9-]+)'s (?P<what>.*)")

GOAL = (
    "0 violations for every change; 0 pings lost for every `delivery: live` document change and every change on an "
    "HA site; a single gateway's replacement: its gap measured (the readiness gate's design, "
    "docs/concepts/replacements.md)"
)


def _v(value: Any, unit: str = "") -> str:
    return "–" if value is None else f"{value}{unit}"


def summary(violations: list[str]) -> str:
    """A step-by-step list of violations in a line: per kind and site, how many times it was seen and what (a route
    on nothing: its ranges). Pure."""
    groups: dict[tuple[str, str], tuple[int, list[str]]] = {}
    for text in violations:
        found = _VIOLATION.fullmatch(text)
        kind, site, what = (found["kind"], found["site"], found["what"]) if found else (text, "", "")
        count, whats = groups.get((kind, site), (0, []))
        if what and what not in whats:
            whats.append(what)
        groups[(kind, site)] = (count + 1, whats)
    parts = []
    for (kind, site), (count, whats) in groups.items():
        detail = "; ".join(w.removeprefix("route to ").removesuffix(" goes nowhere") for w in whats)
        said = f"{kind}: {site}" + (f" ({detail})" if kind.startswith("route") and detail else "") if site else kind
        parts.append(said + (f", seen {count} times" if count > 1 else ""))
    return "; ".join(parts)


def section(data: dict[str, Any]) -> str:
    rows = [
        "| stack (delivery) | change | site | pings lost (worst pair) | longest stall | violations | every pair "
        "back after up |",
        "|---|---|---|---|---|---|---|",
    ]
    clean = rehearsed = 0
    for r in data["rows"]:
        where = f"{r['stack']} ({r['delivery']})"
        if not r["rehearsed"]:
            rows.append(f"| {where} | {r['change']} | {_v(r['site'])} | not rehearsed: {r['reason']} | | | |")
            continue
        rehearsed += 1
        violations = r["violations"]
        clean += not violations and not r.get("error")
        said = summary(violations) if violations else ("none" if not r.get("error") else f"error: {r['error']}")
        rows.append(
            f"| {where} | {r['change']} | {_v(r['site'])} | {r['pings_lost_total']} ({r['worst_pair_pings_lost']}) "
            f"| {r['longest_stall_ms']:.0f} ms | {said} | {_v(r['back_s'], ' s')} |"
        )
    intro = (
        "## 15. Every change rehearsed as `pulumi up` runs it (`lab --before`)\n\n"
        'Each row of "What a change does" (docs/concepts/replacements.md) made on a stack, rehearsed by '
        "`wg-mesh lab --before BEFORE --file AFTER` (wg_mesh/lab/rehearse): BEFORE brought up in the lab, a ping every "
        "10 ms and a verified TCP stream between every pair of sites both configs have, the steps of `pulumi up` "
        "(the program under mocks on both configs, the engine's order: wg_mesh/plan/engine.py) carried out one by one "
        "with a second of traffic after each, the clouds' state judged between steps. Pings lost: over all pairs "
        "(the worst pair's in brackets), 100 a second per pair. The cloud APIs' own times are not in these figures "
        "(the lab's calls take milliseconds).\n"
    )
    verdict = (
        f"Goal (issue 32): {GOAL}. Now: {clean} of {rehearsed} rehearsed changes without a violation; "
        f"{len(data['rows']) - rehearsed} not rehearsed; the whole run took {data['duration_s']:.0f} s.\n"
    )
    return "\n".join([intro, *rows, "", verdict])
