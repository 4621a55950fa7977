"""docs/benchmarks.md section 12, HA route moves in a large mesh, from docs/bench/ha_routes.json
(bench/ha_routes.py)."""

from __future__ import annotations

from typing import Any


def section(data: dict[str, Any]) -> str:
    rows = []
    for setting in ("open", "throttled"):
        row = data[setting]
        for mover in ("baseline", "current"):
            m = row[mover]
            rows.append(
                f"| {setting} | {mover} | {m['seconds']:.2f} | {m['sent']} | {m['throttled']} | {m['reconciles']} |"
            )
        rows.append(f"| {setting} | **current / baseline** | **{row['time_ratio']}** | **{row['sent_ratio']}** | | |")
    bucket = data["bucket"]
    return "\n".join(
        [
            "## 12. HA route moves in a large mesh (AWS, moto)",
            "",
            f"`python -m bench ha_routes`: one takeover of {data['ranges']} remote ranges in {data['tables']} route "
            f"tables ({data['routes']} ReplaceRoutes) against moto in server mode, the current mover "
            "(`ha_aws.move_routes`: 8 in flight, full-jitter backoff on RequestLimitExceeded, a deadline) against the "
            "one it replaced (8 in flight, no backoff: a throttled call fails the reconcile, the controller retries "
            f"{data['reconcile_every_s']:g} s later), alternating in the same run, median of {data['runs']} each. "
            f"`throttled`: ReplaceRoute behind a token bucket ({bucket['size']} tokens, {bucket['refill_per_s']:g}/s; "
            "made-up figures, EC2's own differ per action and account: docs/ha.md 5.6). Seconds until every route "
            "points at the new gateway; ReplaceRoutes sent, throttled ones included.",
            "",
            "| setting | mover | seconds | sent | throttled | reconciles |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "Reading: throttled, both movers finish when the bucket lets them (the calls past the first "
            f"{bucket['size']} at {bucket['refill_per_s']:g}/s), so the time ratio is about 1; what the backoff "
            f"changes is the load on the account's bucket: the current mover sent {data['throttled']['sent_ratio']}× "
            "the baseline's calls, and EC2's bucket is shared with Pulumi and every other tool of the account and "
            "Region. A move longer than the 10 s deadline ends its reconcile and the next one finishes it "
            "(`reconciles`). Open (no throttling), both run 8 in flight and the ratio is the moto run's noise on this "
            "shared 2-core machine. moto answers in milliseconds; the real cloud adds its own latency per call.",
            "",
        ]
    )
