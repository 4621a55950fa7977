"""docs/benchmarks.md section 2, the MTU sweep, from docs/bench/mtu.json."""

from __future__ import annotations

from typing import Any

from bench.report.format import mbit, median, span, table


def section_mtu(mtu: dict[str, Any], images: dict[str, str]) -> str:
    auto, underlay = mtu["auto_mtu"], mtu["underlay_min"]
    site = mtu.get("underlay_min_site")
    where_min = f", {site['name']} ({site['cloud']})" if site else ""
    out = ["## 2. MTU sweep\n"]
    out.append(
        f"`mtu: auto` takes the smallest underlay of the mesh ({underlay}{where_min}) minus WireGuard's "
        f"{underlay - auto} bytes: "
        f"**{auto}**. Each point below rebuilds the lab at that tunnel MTU; above {auto} the config has to declare "
        "a larger underlay than the real path (the lab keeps the real path MTU), which is what a wrong "
        "`underlay_mtu` or a hand-picked MTU does in production. "
        f"iperf3 `-P {mtu.get('streams', '?')}`, {mtu.get('seconds', '?')} s per run, runs per point: "
        f"{mtu.get('runs', '?')}, median; fragment "
        "counters are summed over every namespace of the lab during the transfers.\n"
    )
    rows = []
    for p in mtu["points"]:
        df = p["df_ping_full_size"]
        rows.append(
            [
                f"**{p['mtu']}**" + (" (auto)" if p["auto"] else ""),
                str(p["outer_packet"]),
                str(p["path_mtu"]),
                f"{df['received']}/{df['sent']}",
                mbit(p["wireguard"]["mbps"]),
                mbit(p["end_to_end"]["mbps"]),
                str(p["wireguard"]["fragments"]["IpFragCreates"] + p["end_to_end"]["fragments"]["IpFragCreates"]),
                str(p["wireguard"]["fragments"]["IpReasmReqds"] + p["end_to_end"]["fragments"]["IpReasmReqds"]),
                ", ".join(
                    sorted(
                        set(p["wireguard"]["fragmenting_namespaces"]) | set(p["end_to_end"]["fragmenting_namespaces"])
                    )
                )
                or "none",
            ]
        )
    out.append(
        table(
            [
                "tunnel MTU",
                "outer packet",
                "path MTU",
                "full-size DF pings answered",
                "tunnel",
                "end to end",
                "fragments created",
                "fragments received (IpReasmReqds)",
                "where",
            ],
            rows,
        )
    )
    fits = [p for p in mtu["points"] if p["outer_packet"] <= p["path_mtu"]]
    over = [p for p in mtu["points"] if p["outer_packet"] > p["path_mtu"]]
    clean = all(
        p["wireguard"]["fragments"]["IpFragCreates"] == 0 and p["end_to_end"]["fragments"]["IpFragCreates"] == 0
        for p in fits
    )
    if fits and over:
        frag = [
            p["wireguard"]["fragments"]["IpFragCreates"] + p["end_to_end"]["fragments"]["IpFragCreates"] for p in over
        ]
        lost = [p for p in over if p["df_ping_full_size"]["received"] < p["df_ping_full_size"]["sent"]]
        where = sorted(
            {ns for p in over for path in ("wireguard", "end_to_end") for ns in p[path]["fragmenting_namespaces"]}
        )
        fit_e2e = median([p["end_to_end"]["mbps"] for p in fits])
        over_e2e = median([p["end_to_end"]["mbps"] for p in over])
        spread = (
            max(
                (max(r) - min(r)) / median(r)
                for p in mtu["points"]
                for path in ("wireguard", "end_to_end")
                if len(r := p[path]["mbps_runs"]) > 1
            )
            if any(len(p["wireguard"]["mbps_runs"]) > 1 for p in mtu["points"])
            else None
        )
        out.append(
            f"\nUp to {max(p['mtu'] for p in fits)} every outer packet fits the path: "
            f"{'no fragment was created' if clean else 'fragments were still created'}. "
            f"From {min(p['mtu'] for p in over)} on, full-size packets are fragmented "
            f"({span(min(frag), max(frag), str)} fragments created per point; counters moved in: "
            f"{', '.join(where)}), and "
            f"{len(lost)} of {len(over)} points lost full-size unfragmentable pings. Median end-to-end throughput: "
            f"{mbit(fit_e2e)} over the fitting MTUs, {mbit(over_e2e)} over the fragmenting ones"
            + (f" (run-to-run spread within a point up to {spread:.0%})" if spread is not None else "")
            + ".\n"
        )
    if "mtu" in images:
        out.append(f"\n![MTU sweep]({images['mtu']})")
    return "\n".join(out) + "\n"
