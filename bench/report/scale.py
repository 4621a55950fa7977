"""docs/benchmarks.md section 4, program scale and the cloud quotas, from docs/bench/scale.json."""

from __future__ import annotations

from typing import Any

from bench.report.format import SCALE_TARGET, crossing, met, num, scale_marginal, span, table


def section_scale(scale: dict[str, Any], images: dict[str, str]) -> str:
    pts = scale["points"]
    marginal = scale_marginal(pts)
    out = ["## 4. Program scale (Pulumi program under mocks)\n"]
    out.append(
        f"Generated full meshes (sites cycle AWS, GCP, static; one CIDR each; AWS and GCP sites create their own "
        f"VPC/network) run through the real `__main__.py` with the test suite's mocks (`tests/conftest.py`), "
        f"`pulumi up` semantics, runs per size: {scale['repeats']}, each in a fresh process, sizes interleaved; "
        "medians. "
        "Peak RSS is the worker process's (wait4), including the interpreter and the Pulumi SDKs.\n"
    )
    rows = []
    for p, m in zip(pts, marginal, strict=True):
        rows.append(
            [
                str(p["n"]),
                str(p["resources"]),
                str(p["routes_declared"]),
                str(p["aws_routes_per_table"]),
                str(p["gcp_routes_per_network"]),
                str(p["aws_sg_inbound_entries"]),
                num(p["program_s"]),
                num(p["ms_per_resource"]),
                num(m) if m is not None else "–",
                f"{p['peak_rss_mb']:.0f}",
            ]
        )
    out.append(
        table(
            [
                "sites N",
                "resources",
                "routes",
                "max routes / AWS table",
                "max routes / GCP network",
                "max SG inbound entries",
                "program s",
                "ms / resource",
                "ms / added resource",
                "peak RSS MiB",
            ],
            rows,
        )
    )
    lo, hi = pts[0], pts[-1]
    ratio = hi["ms_per_resource"] / lo["ms_per_resource"]
    tail = [m for m in marginal if m is not None]
    out.append(
        f"\nTime per resource: N={hi['n']} is {num(ratio)} × N={lo['n']} (target ≤ {SCALE_TARGET}×: "
        f"{met(ratio <= SCALE_TARGET)}). The per-resource figure at small N carries the run's fixed cost (event "
        "loop, providers, invokes); the cost of each added resource"
        + (f" is {span(min(tail), max(tail), num)} ms across the measured sizes" if tail else "")
        + ".\n"
    )
    c, q = scale["crossings"], scale["quotas"]
    agree = all(ch["agrees"] for ch in scale["curve_matches_program"])
    curve_max = scale["quota_curve"][-1]["n"]
    out.append(
        "### Route growth and cloud quotas\n\n"
        f"Each site routes the overlay and every other site's CIDRs, so the mesh declares O(N²) routes "
        f"({hi['routes_declared']} at N={hi['n']}) and each route table holds O(N). The curve below is computed "
        f"from the same topology functions the program uses, for N up to {curve_max}, and "
        f"{'matches' if agree else 'DOES NOT match'} what the program declared under mocks at every measured N.\n"
    )
    out.append(
        table(
            ["quota (default)", "limit", "first N over it"],
            [
                [
                    "AWS routes per route table",
                    str(q["aws_routes_per_table"]),
                    f"**{crossing(c['aws_routes_per_table'], curve_max)}**",
                ],
                [
                    "GCP routes per network (as given in the issue)",
                    str(q["gcp_routes_per_network"]),
                    f"**{crossing(c['gcp_routes_per_network'], curve_max)}**",
                ],
                [
                    "AWS security group inbound rules (each peer /32 is one)",
                    str(q["aws_sg_inbound_entries"]),
                    f"**{crossing(c['aws_sg_inbound_entries'], curve_max)}**",
                ],
                *_user_data_rows(scale, curve_max),
            ],
        )
    )
    out.extend(_user_data_curve(scale))
    out.append(
        "\nThe fix, in order of preference:\n\n"
        "1. **Summarised routes**: allocate site CIDRs from one supernet per environment (or per cloud) and route "
        "the supernet, not each site: one route per table whatever N is (a VPC's own, more specific local route "
        "still wins inside it). This needs an address plan, so wg-mesh should offer a `route_summary` list in the "
        "config and validate that every remote CIDR falls inside it.\n"
        "2. **AWS managed prefix lists** keep the route *resources* to one per table and let a site join without "
        "touching every table, but AWS counts a referenced prefix list as its maximum number of entries against "
        "the table's quota, so on their own they do not move the crossing point; with summarised CIDRs they are "
        "the tidy way to hold the few summaries. The same applies to security groups, where the peer /32s cross "
        "the inbound-rule quota: a prefix list of peer addresses, or a quota increase.\n"
        "3. **Quota increases**: AWS routes per table and rules per security group are adjustable; GCP routes "
        "are a project/network quota. A stop-gap, not a design.\n"
    )
    if "scale" in images:
        out.append(f"\n![program scale]({images['scale']})")
    return "\n".join(out) + "\n"


def _user_data_rows(scale: dict[str, Any], curve_max: int) -> list[list[str]]:
    c, q = scale["crossings"], scale["quotas"]
    if "aws_user_data_bytes" not in q:
        return []
    return [
        [
            "AWS user data, bytes before base64 (wg-mesh sends it gzip'd; not adjustable)",
            str(q["aws_user_data_bytes"]),
            f"**{crossing(c['aws_user_data_bytes'], curve_max)}**",
        ],
        [
            "GCP metadata value `user-data`, bytes (plain text; not adjustable)",
            str(q["gcp_user_data_bytes"]),
            f"**{crossing(c['gcp_user_data_bytes'], curve_max)}**",
        ],
    ]


def _user_data_curve(scale: dict[str, Any]) -> list[str]:
    rows = scale.get("user_data_curve")
    if not rows:
        return []
    shown = [r for r in rows if r["n"] in (2, 16, 32, 64, 96, 128, 200, 296) or r is rows[-1]]
    return [
        "\nUser data size per gateway (the largest of each cloud; sites with one CIDR each, longest addresses). "
        "Every gateway's user data holds the whole mesh, so its text grows by about 420 bytes a site; gzip "
        "(zopfli, deterministic) adds about 60 bytes a site to AWS's until the text outgrows DEFLATE's "
        "32 KB window (about 100 sites: a peer's key in the metrics mapping no longer matches its copy in wg0.conf), "
        "then about 90. Plain text (with the readiness mark) would pass EC2's limit at 7 sites. "
        "`validate` refuses a mesh over either limit; the largest mesh is one less than the first N over it.\n",
        table(
            ["N", "AWS (gzip'd) bytes", "GCP (text) bytes"],
            [[str(r["n"]), str(r["aws_user_data_bytes"]), str(r["gcp_user_data_bytes"])] for r in shown],
        ),
    ]
