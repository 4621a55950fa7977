"""docs/benchmarks.md and the plots, rendered from the JSON results only.

Every number in the generated document comes from docs/bench/*.json (or from the quoted, sourced anchors in
bench/report/anchors.py, which sit in their own table). Sentences that state a result are built from the data, so
re-running the bench rewrites them; nothing here is a figure typed by hand.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.report.anchors import (
    ANCHORS,
    ARTICLE,
    ARTICLE_INSTANCE_VCPUS,
    ARTICLE_MTU,
    ARTICLE_WG_GBPS,
    AWS_EGRESS_CAP_GBPS,
    AWS_EGRESS_VCPUS,
)

Log = Callable[[str], None]
SECTIONS = (
    "environment",
    "scale",
    "lab",
    "mtu",
    "boot",
    "meshchange",
    "meshchange-boot",
    "rotation",
    "pathmtu",
    "hafailover",
    "hafailover-gcp",
    "underlay",
    "underlay-fallback",
    "ha_routes",
)
PATH_LABELS = {
    "underlay": "underlay (gateway → gateway, no tunnel, through the 1:1 NAT)",
    "wireguard": "WireGuard tunnel (gateway → gateway, wg0)",
    "end_to_end": "end to end (workload host → host, through both gateways)",
    "ipsec": "IPsec tunnel (gateway → gateway, strongSwan)",
}
SHORT_LABELS = {"underlay": "underlay", "wireguard": "WireGuard", "end_to_end": "end to end", "ipsec": "IPsec"}
E2E_TARGET = 0.9
RECOVERY_TARGET_MS = 100.0
SCALE_TARGET = 1.5


def load(out: Path) -> dict[str, Any]:
    data = {}
    for name in SECTIONS:
        path = out / f"{name}.json"
        if path.exists():
            data[name] = json.loads(path.read_text())
    return data


# --- formatting -------------------------------------------------------------------------------------------


def mbit(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} Gbit/s" if value >= 1000 else f"{value:.0f} Mbit/s"


def num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def g(value: Any) -> str:
    """A parameter recorded in the results, as written (or '?' when an older result lacks it)."""
    return f"{value:g}" if isinstance(value, int | float) else "?"


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


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


def crossing(value: int | None, curve_max: int) -> str:
    return f"N={value}" if value is not None else f"none up to N={curve_max}"


def span(low: float, high: float, fmt: Callable[[float], str]) -> str:
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}–{fmt(high)}"


def met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- derived figures (pure) ---------------------------------------------------------------------------------


def cell(lab: dict[str, Any], path: str, streams: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = lab.get("throughput", {}).get("paths", {}).get(path, {}).get(streams)
    return found


def scale_marginal(points: list[dict[str, Any]]) -> list[float | None]:
    """ms per added resource between consecutive sizes (the fixed start-up cost cancels out)."""
    out: list[float | None] = [None]
    for prev, cur in itertools.pairwise(points):
        added = cur["resources"] - prev["resources"]
        out.append(round((cur["program_s"] - prev["program_s"]) * 1000 / added, 3) if added else None)
    return out


def handshake_samples(data: dict[str, Any]) -> list[dict[str, float]]:
    samples = []
    if "lab" in data and "handshake" in data["lab"]:
        samples.append(data["lab"]["handshake"])
    for p in data.get("mtu", {}).get("points", []):
        if p.get("handshake_after_build_s") is not None:
            samples.append(
                {"after_build_s": p["handshake_after_build_s"], "after_start_s": p["handshake_after_start_s"]}
            )
    return samples


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def cpu_saving(wg: dict[str, Any], ipsec: dict[str, Any]) -> str:
    """How much less (or more) machine CPU per Gbit WireGuard needed than IPsec, as a phrase."""
    a, b = wg.get("busy_core_s_per_gbit"), ipsec.get("busy_core_s_per_gbit")
    if not a or not b:
        return ""
    change = 1 - a / b
    return f" (WireGuard {abs(change):.0%} {'less' if change >= 0 else 'more'} CPU per Gbit)"


# --- sections ------------------------------------------------------------------------------------------------


def headline(data: dict[str, Any]) -> list[str]:
    lines = []
    lab = data.get("lab")
    if lab:
        ratios = lab["throughput"]["ratios"]
        for s in sorted(ratios, key=int):
            wg, under, e2e = cell(lab, "wireguard", s), cell(lab, "underlay", s), cell(lab, "end_to_end", s)
            if wg and under:
                lines.append(
                    f"- WireGuard tunnel, gateway to gateway, `-P {s}`: **{mbit(wg['mbps'])}** "
                    f"({num(ratios[s]['tunnel_over_underlay'], 3)} × the bare underlay's {mbit(under['mbps'])})."
                )
            if wg and e2e:
                r = ratios[s]["end_to_end_over_tunnel"]
                lines.append(
                    f"- End to end through both gateways, `-P {s}`: {mbit(e2e['mbps'])} = **{num(r)} × the tunnel** "
                    f"(target ≥ {E2E_TARGET}: {met(r is not None and r >= E2E_TARGET)})."
                )
        ipsec8, wg8 = cell(lab, "ipsec", "8"), cell(lab, "wireguard", "8")
        if ipsec8 and wg8:
            lines.append(
                f"- IPsec vs WireGuard, `-P 8`, both in userspace here (IPsec: {lab['ipsec']['mode']}; WireGuard: "
                f"wireguard-go): {mbit(ipsec8['mbps'])} vs {mbit(wg8['mbps'])} (IPsec/WireGuard = "
                f"{num(ratios['8']['ipsec_over_wireguard'])}); machine CPU per Gbit: "
                f"{num(ipsec8['busy_core_s_per_gbit'])} vs {num(wg8['busy_core_s_per_gbit'])} core-seconds"
                + cpu_saving(wg8, ipsec8)
                + "."
            )
        rec = lab["recovery"]["wireguard_host_to_host"]["outage_ms"]
        if rec:
            trials = lab["recovery"]["wireguard_host_to_host"]["trials"]
            first = [t["first_reply_after_restart_ms"] for t in trials if t["ok"]]
            restart = lab["recovery"]["wireguard_host_to_host"]["restart_ms"]["median"]
            lines.append(
                f"- Recovery after `wg-quick down/up` on a gateway, ping every "
                f"{g(lab['recovery'].get('ping_interval_ms'))} ms, {rec['n']} trials: outage median "
                f"**{ms(rec['median'])}**, p95 {ms(rec['p95'])}, max {ms(rec['max'])} "
                f"(target median ≤ {RECOVERY_TARGET_MS:.0f} ms: {met(rec['median'] <= RECOVERY_TARGET_MS)}); the "
                f"tunnel is gone while `wg-quick down` + `up` run (median {ms(restart)} for both), and traffic "
                f"flowed again "
                f"{ms(_median(first))} (median; max {ms(max(first))}) after `wg-quick up` "
                "returned."
            )
        ipsec_rec = lab["recovery"].get("ipsec_gateway_to_gateway", {}).get("outage_ms")
        wg_rec = lab["recovery"].get("wireguard_gateway_to_gateway", {}).get("outage_ms")
        if ipsec_rec and wg_rec:
            lines.append(
                f"- Gateway to gateway, daemon restart: WireGuard median {ms(wg_rec['median'])}, IPsec (charon "
                f"restart) median {ms(ipsec_rec['median'])} (trials: {ipsec_rec['n']} each)."
            )
    scale = data.get("scale")
    if scale:
        pts = {p["n"]: p for p in scale["points"]}
        lo, hi = min(pts), max(pts)
        ratio = pts[hi]["ms_per_resource"] / pts[lo]["ms_per_resource"]
        marginal = [m for m in scale_marginal(scale["points"]) if m is not None]
        lines.append(
            f"- Program scale under mocks: {num(pts[lo]['ms_per_resource'])} ms per resource at N={lo} "
            f"({pts[lo]['resources']} resources, {num(pts[lo]['program_s'])} s), {num(pts[hi]['ms_per_resource'])} "
            f"ms at N={hi} ({pts[hi]['resources']} resources, {num(pts[hi]['program_s'])} s, peak RSS "
            f"{pts[hi]['peak_rss_mb']:.0f} MiB): N={hi} is {num(ratio)} × N={lo} "
            f"(target ≤ {SCALE_TARGET}×: {met(ratio <= SCALE_TARGET)})"
            + (
                f"; each added resource costs {span(min(marginal), max(marginal), num)} ms at every size"
                if marginal
                else ""
            )
            + "."
        )
        c, q, top = scale["crossings"], scale["quotas"], scale["quota_curve"][-1]["n"]
        lines.append(
            f"- Route quotas: an AWS route table passes the default {q['aws_routes_per_table']} routes at "
            f"**{crossing(c['aws_routes_per_table'], top)}** sites; a GCP network passes "
            f"{q['gcp_routes_per_network']} routes at **{crossing(c['gcp_routes_per_network'], top)}**; an AWS "
            f"security group passes {q['aws_sg_inbound_entries']} inbound rules at "
            f"**{crossing(c['aws_sg_inbound_entries'], top)}**."
        )
        if "aws_user_data_bytes" in q:
            lines.append(
                f"- User data: an AWS gateway's (gzip'd) passes EC2's {q['aws_user_data_bytes']} bytes at "
                f"**{crossing(c['aws_user_data_bytes'], top)}** sites; a GCP gateway's passes the "
                f"{q['gcp_user_data_bytes']}-byte metadata value limit at "
                f"**{crossing(c['gcp_user_data_bytes'], top)}**."
            )
    return lines


def section_environment(env: dict[str, Any]) -> str:
    m, v = env["machine"], env["versions"]
    kc = m.get("kernel_config", {})
    rows = [
        ["CPU", f"{m['nproc']} × {m['cpu_model']} (AES-NI: {'yes' if m['cpu_aes_ni'] else 'no'})"],
        ["memory", f"{m['memory_gib']} GiB"],
        ["OS / kernel", f"{m['os']} / {m['kernel']}"],
        [
            "kernel WireGuard",
            f"module loaded: {'yes' if m['wireguard_kernel_module'] else 'no'}; "
            f"CONFIG_WIREGUARD {kc.get('CONFIG_WIREGUARD', '?')}",
        ],
        [
            "kernel IPsec",
            ", ".join(f"{k} {kc.get(k, '?')}" for k in ("CONFIG_XFRM_USER", "CONFIG_INET_ESP", "CONFIG_CRYPTO_GCM")),
        ],
    ]
    rows += [[name, str(value)] for name, value in v.items()]
    return "## Machine and versions\n\n" + f"Run of {env['date']}.\n\n" + table(["", ""], rows) + "\n"


def section_dataplane(lab: dict[str, Any], images: dict[str, str]) -> str:
    opts = lab["options"]
    topo = lab["topology"]
    out = ["## 1. Data plane\n"]
    sites = "; ".join(
        f"{s['name']} ({s['cloud']}): NIC MTU {s['nic_mtu']}, internet path MTU {s['uplink_mtu']}"
        for s in topo["sites"]
    )
    out.append(
        f"The lab builds the dev stack's topology ({sites}; tunnel MTU {topo['tunnel_mtu']}, clamped MSS "
        f"{topo['mss']}) and measures from {topo['pair'][0]} to {topo['pair'][1]}. iperf3 TCP, "
        f"{opts['seconds']:g} s per run (first {opts['omit']:g} s omitted), rounds: {opts['rounds']}; the paths "
        "and stream counts are interleaved round by round and each figure is the median of its rounds.\n"
    )
    rows = []
    for path, by_streams in lab["throughput"]["paths"].items():
        for s, c in by_streams.items():
            cpu = c["cpu_cores"]
            daemon = cpu.get("wireguard-go", 0) + cpu.get("charon", 0)
            rows.append(
                [
                    PATH_LABELS.get(path, path),
                    s,
                    f"**{mbit(c['mbps'])}**",
                    ", ".join(f"{x:.0f}" for x in c["mbps_runs"]),
                    str(sum(x or 0 for x in c["retransmits"])),
                    f"{cpu['busy']:.2f} ({cpu['user']:.2f} / {cpu['system']:.2f} / {cpu['softirq']:.2f})",
                    f"{daemon:.2f}",
                    f"{c['iperf3_cores']:.2f}",
                    num(c["busy_core_s_per_gbit"]),
                    str(c["fragments"]["IpFragCreates"]),
                ]
            )
    out.append(
        table(
            [
                "path",
                "streams",
                "median",
                "runs (Mbit/s)",
                "TCP retransmits",
                "machine busy cores (user / system / softirq)",
                "tunnel daemon cores",
                "iperf3 cores",
                "core-s per Gbit",
                "fragments created",
            ],
            rows,
        )
    )
    out.append(
        "\nCPU is read from `/proc/stat` (machine-wide: both gateways, both hosts, the routers and iperf3 share "
        "these cores) and from `/proc/<pid>/stat` of the tunnel daemons (`wireguard-go`, `charon`) living in the "
        "gateways' namespaces; iperf3's own share comes from its report. Softirq time cannot be split by "
        "namespace on one machine.\n"
    )
    ratio_rows = [
        [
            f"-P {s}",
            num(r["tunnel_over_underlay"], 3),
            num(r["end_to_end_over_tunnel"], 3),
            met(r["end_to_end_over_tunnel"] is not None and r["end_to_end_over_tunnel"] >= E2E_TARGET),
            num(r["ipsec_over_wireguard"], 3),
        ]
        for s, r in sorted(lab["throughput"]["ratios"].items(), key=lambda kv: int(kv[0]))
    ]
    out.append(
        table(
            [
                "streams",
                "tunnel / underlay",
                "end to end / tunnel",
                f"target e2e ≥ {E2E_TARGET} × tunnel",
                "IPsec / WireGuard",
            ],
            ratio_rows,
        )
    )
    for s_ in sorted(lab["throughput"]["ratios"], key=int):
        wg, e2e = cell(lab, "wireguard", s_), cell(lab, "end_to_end", s_)
        if wg and e2e and wg["busy_core_s_per_gbit"] and e2e["busy_core_s_per_gbit"]:
            extra = e2e["busy_core_s_per_gbit"] / wg["busy_core_s_per_gbit"] - 1
            out.append(
                f"\nEnd to end, `-P {s_}`: {num(e2e['busy_core_s_per_gbit'])} core-seconds per Gbit against "
                f"{num(wg['busy_core_s_per_gbit'])} for the tunnel alone ({extra:+.0%}), with the machine "
                f"{e2e['cpu_cores']['busy']:.2f} vs {wg['cpu_cores']['busy']:.2f} cores busy (softirq "
                f"{e2e['cpu_cores']['softirq']:.2f} vs {wg['cpu_cores']['softirq']:.2f}). The extra forwarding hops, "
                "the MSS clamp and the hosts' own stacks run on the same saturated cores as the tunnel, so here "
                "they take throughput from it; on separate machines the gateways' forwarding would not be paid "
                "by the tunnel endpoints' CPU."
            )
    if lab.get("rtt_ms"):
        rtt_rows = [
            [SHORT_LABELS.get(p, p), num(v["avg"], 3) if v else "–", num(v["max"], 3) if v else "–"]
            for p, v in lab["rtt_ms"].items()
        ]
        out.append(
            f"\nRound-trip times in the lab ({lab.get('rtt_pings', '?')} pings):\n\n"
            + table(["path", "avg ms", "max ms"], rtt_rows)
        )
    if "dataplane" in images:
        out.append(f"\n![data plane]({images['dataplane']})")
    return "\n".join(out) + "\n"


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
        fit_e2e = _median([p["end_to_end"]["mbps"] for p in fits])
        over_e2e = _median([p["end_to_end"]["mbps"] for p in over])
        spread = (
            max(
                (max(r) - min(r)) / _median(r)
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


def section_recovery(data: dict[str, Any], images: dict[str, str]) -> str:
    lab = data["lab"]
    out = ["## 3. Recovery\n"]
    out.append(
        f"A ping every {g(lab['recovery'].get('ping_interval_ms'))} ms runs while gateway B's tunnel restarts; "
        "the outage is the longest silence between "
        "two replies around the restart (the time from the last reply before it to the first reply after it). "
        "WireGuard: `wg-quick down wg0` + `wg-quick up wg0` (wireguard-go exits and starts again, PostDown/PostUp "
        "rules removed and added). IPsec: charon stopped (SIGTERM) and started, its configuration loaded with "
        "`swanctl --load-all`; gateway B initiates (`start_action = start`), DPD off.\n"
    )
    rows = []
    labels = {
        "wireguard_host_to_host": "WireGuard, host → host (through both gateways)",
        "wireguard_gateway_to_gateway": "WireGuard, gateway → gateway",
        "ipsec_gateway_to_gateway": f"IPsec ({lab.get('ipsec', {}).get('mode', '')}), gateway → gateway",
    }
    for key, label in labels.items():
        r = lab["recovery"].get(key)
        if not r:
            continue
        o = r["outage_ms"] or {}
        first = [t["first_reply_after_restart_ms"] for t in r["trials"] if t["ok"]]
        rows.append(
            [
                label,
                str(len(r["trials"])),
                str(r["failed"]),
                f"**{ms(o.get('median'))}**",
                ms(o.get("p95")),
                ms(o.get("max")),
                ms(r["restart_ms"]["median"]),
                f"{ms(_median(first))} / {ms(max(first))}" if first else "–",
            ]
        )
    out.append(
        table(
            [
                "restart",
                "trials",
                "failed",
                "outage median",
                "p95",
                "max",
                "restart command (median)",
                "first reply after the command returned (median / max)",
            ],
            rows,
        )
    )
    out.append(
        "\nThe outage includes the restart itself (the interface or daemon is gone while the command runs); the "
        "last column is the part the protocol adds once the tunnel is back: the handshake or IKE exchange "
        "before traffic flows.\n"
    )
    hosts = lab.get("hosts")
    if hosts:
        cache = hosts.get("redirect_cache_s")
        out.append(
            "**Finding (ICMP redirects).** In the lab a workload host's next hop is the gateway itself, on the same "
            "segment as the VPC router. While a gateway's wg0 is down, the gateway routes the host's packets back "
            "out of the same interface to its default router and sends the host an ICMP redirect; Linux caches "
            f"it{f' for {cache} s' if cache else ''} and host-to-host traffic stays black-holed after the tunnel is "
            "back (this is how the recovery bench found it). A cloud host is not affected (its next hop is the "
            "VPC router, and Linux ignores a redirect that does not come from the current next hop), but a LAN "
            "behind a static gateway can be. The bench therefore sets "
            + ", ".join(f"`{x}`" for x in hosts["sysctl"])
            + " on the lab's workload hosts, as a VPC host behaves. The product fix followed: every gateway now "
            "stops sending redirects (`net.ipv4.conf.{all,default}.send_redirects=0` in its sysctl file, and 0 on "
            "every existing interface in wg0.conf's PostUp, since the kernel ORs `all` with each interface), so a "
            "LAN behind a static gateway is safe too; checked in a kept lab with `wg0` down: the gateway's "
            "IcmpOutRedirects stayed 0.\n"
        )
    samples = handshake_samples(data)
    if samples:
        after_build = [s["after_build_s"] * 1000 for s in samples]
        after_start = [s["after_start_s"] * 1000 for s in samples]
        out.append(
            f"\nTime to the first handshake after a lab start ({len(samples)} lab builds: the data-plane lab and each "
            f"MTU point): every gateway pair had a handshake {ms(_median(after_build))} (median; max "
            f"{ms(max(after_build))}) after the build returned, {ms(_median(after_start))} (median; max "
            f"{ms(max(after_start))}) after the build started (namespaces, links, NAT, cloud-init files, `wg-quick "
            "up` on every gateway). `wg show` is polled, so the figure includes one poll's latency.\n"
        )
    if "ipsec" in lab and "established_s" in lab["ipsec"]:
        established = ms(lab["ipsec"]["established_s"] * 1000)
        out.append(f"The IPsec tunnel was passing traffic {established} after both charon daemons were started.\n")
    if "recovery" in images:
        out.append(f"\n![recovery]({images['recovery']})")
    return "\n".join(out) + "\n"


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


def section_ipsec(data: dict[str, Any]) -> str:
    lab, env = data["lab"], data.get("environment", {})
    ipsec = lab.get("ipsec", {})
    out = ["## 5. IPsec vs WireGuard on the same lab and machine\n"]
    if "skipped" in ipsec:
        out.append(f"Not measured: {ipsec['skipped']}.\n")
        return "\n".join(out)
    kc = env.get("machine", {}).get("kernel_config", {})
    out.append(
        f"strongSwan charon (IKEv2, IKE `{ipsec['ike']}`, ESP `{ipsec['esp']}`, {ipsec['encapsulation']}) runs on the "
        f"same two gateways as WireGuard, between two extra addresses ({', '.join(ipsec['inner_addresses'])}). ESP "
        f"data path: **{ipsec['mode']}**. Kernel probe: `{ipsec['kernel_esp_probe']}`"
        + (
            f" (CONFIG_INET_ESP {kc.get('CONFIG_INET_ESP')}, CONFIG_CRYPTO_GCM {kc.get('CONFIG_CRYPTO_GCM')})"
            if kc
            else ""
        )
        + (
            f"; the userspace TUN's MTU is set to {ipsec['inner_mtu']} so that ESP-in-UDP fits the path."
            if ipsec.get("inner_mtu")
            else "."
        )
        + "\n"
    )
    rows = []
    for path in ("wireguard", "ipsec"):
        for s in sorted(lab["throughput"]["paths"].get(path, {}), key=int):
            c = lab["throughput"]["paths"][path][s]
            cpu = c["cpu_cores"]
            daemon = cpu.get("wireguard-go" if path == "wireguard" else "charon", 0.0)
            rows.append(
                [
                    SHORT_LABELS[path],
                    s,
                    mbit(c["mbps"]),
                    f"{daemon:.2f}",
                    f"{cpu['busy']:.2f}",
                    num(c["busy_core_s_per_gbit"]),
                ]
            )
    rec = lab["recovery"]
    for key, label in (("wireguard_gateway_to_gateway", "WireGuard"), ("ipsec_gateway_to_gateway", "IPsec")):
        if rec.get(key) and rec[key]["outage_ms"]:
            rows.append([label, "restart", f"outage median {ms(rec[key]['outage_ms']['median'])}", "", "", ""])
    out.append(
        table(["tunnel", "streams", "throughput", "daemon cores", "machine busy cores", "core-s per Gbit"], rows)
    )
    wg8, ipsec8 = cell(lab, "wireguard", "8"), cell(lab, "ipsec", "8")
    if wg8 and ipsec8:
        ratio = lab["throughput"]["ratios"]["8"]["ipsec_over_wireguard"]
        out.append(
            f"\nWith 8 streams IPsec moved {num(ratio)} × WireGuard's throughput here{cpu_saving(wg8, ipsec8)}. "
            "Both daemons saturate the machine, so the throughput ratio and the CPU-per-Gbit ratio say the "
            "same thing: which userspace data path does less work per byte on this CPU."
        )
    wg_rec, ipsec_rec = rec.get("wireguard_gateway_to_gateway"), rec.get("ipsec_gateway_to_gateway")
    if wg_rec and ipsec_rec and wg_rec["outage_ms"] and ipsec_rec["outage_ms"]:
        out.append(
            "Restarting the daemon on the initiating gateway interrupted IPsec for "
            f"{ms(ipsec_rec['outage_ms']['median'])} and WireGuard for {ms(wg_rec['outage_ms']['median'])} (medians): "
            "charon restarts faster than `wg-quick down` + `up` (which also removes and re-adds the interface, its "
            "routes and its iptables rules), and an IKE exchange between two idle peers on one machine is quick. "
            "Not measured: recovery that depends on the surviving side noticing a dead peer (IPsec DPD, "
            "WireGuard's keepalive and handshake timers), whose timers count in seconds."
        )
    out.append(
        "\n**What differs from the reference article's table** "
        f"({ARTICLE['setup']}; WireGuard {ARTICLE['wireguard']}; IPsec {ARTICLE['ipsec']}):\n"
    )
    v = env.get("versions", {})
    m = env.get("machine", {})
    diffs = [
        f"WireGuard here is the userspace `wireguard-go` ({v.get('wireguard-go', '?')}), not the kernel module: this "
        f"kernel has none (CONFIG_WIREGUARD {kc.get('CONFIG_WIREGUARD', '?')}). The article measured kernel WireGuard; "
        "the cloud gateways wg-mesh deploys (Ubuntu 24.04) also use the kernel module.",
        f"IPsec here is {ipsec['mode']}, because this kernel has no ESP. The article does not say which ESP data "
        "path its strongSwan used (its log blames charon's 'user-space AES-GCM pipeline', which would be libipsec "
        "as here; strongSwan's default is the kernel's ESP). Both tunnels here cross a TUN device and encrypt in "
        "userspace: this compares the two protocols' userspace implementations, not kernel WireGuard against "
        "kernel IPsec.",
        f"One machine ({m.get('nproc', '?')} vCPUs, {m.get('cpu_model', '?')}) runs both gateways, both workload "
        "hosts, the VPC routers, the internet namespace with its NAT, and iperf3's clients and servers: the "
        "tunnel competes with the traffic generator for the same cores. The article had two "
        f"{ARTICLE_INSTANCE_VCPUS}-vCPU instances.",
        "No cloud NICs, no internet: veth pairs, no ENA/gVNIC offloads, no loss, and the lab's round-trip times "
        "(section 1) instead of a path across the Atlantic, so TCP is never window- or loss-limited here.",
        *article_mtu_note(data),
        "The numbers are reported as measured, medians of interleaved runs; nothing is scaled to another machine.",
    ]
    out.append("\n".join(f"- {d}" for d in diffs) + "\n")
    return "\n".join(out) + "\n"


def article_mtu_note(data: dict[str, Any]) -> list[str]:
    """The article's MTU against the lab's GCP path, from the MTU sweep's data."""
    mtu = data.get("mtu")
    if not mtu:
        return []
    point = next((p for p in mtu["points"] if p["mtu"] == ARTICLE_MTU), None)
    outer = ARTICLE_MTU + (mtu["underlay_min"] - mtu["auto_mtu"])
    text = (
        f"The article's MTU {ARTICLE_MTU} makes {outer}-byte outer packets, more than GCP's {mtu['underlay_min']}-byte "
        "path carries"
    )
    if point is not None:
        frags = point["wireguard"]["fragments"]["IpFragCreates"] + point["end_to_end"]["fragments"]["IpFragCreates"]
        text += f": at that point of the MTU sweep the lab created {frags} fragments"
    return [text + ". wg-mesh uses `mtu: auto`."]


def section_meaning(data: dict[str, Any]) -> str:
    out = ["## 6. What this means for a real deployment\n"]
    lab = data.get("lab")
    wg8 = cell(lab, "wireguard", "8") if lab else None
    nproc = data.get("environment", {}).get("machine", {}).get("nproc", "?")
    if wg8:
        busy = wg8["busy_core_s_per_gbit"]
        out.append(
            f"- On this machine a wireguard-go tunnel moves {mbit(wg8['mbps'])} with 8 streams and costs "
            f"{num(busy)} core-seconds of the machine per Gbit transferred (all of it: daemons, forwarding, iperf3). "
            f"That is a statement about this {nproc}-vCPU VM and this wireguard-go release, not about a c6i.2xlarge "
            "running kernel WireGuard; the published figures below are the better guide to what a cloud gateway "
            "can do, and the lab's job is to prove the configuration, not the ceiling."
        )
    out.append(
        f"- Whatever the tunnel can do, an AWS gateway with fewer than {AWS_EGRESS_VCPUS} vCPUs is limited to "
        f"{AWS_EGRESS_CAP_GBPS} Gbps through an internet gateway (table below): the reference article's "
        f"{ARTICLE_WG_GBPS} Gbps between a c6i.2xlarge and GCP over the internet is above what AWS documents for "
        "that instance, so it cannot be reproduced on that path as described. A gateway that must carry more "
        f"needs {AWS_EGRESS_VCPUS} or more vCPUs (half its bandwidth may then leave through the internet gateway) "
        "or several gateways sharing the routes."
    )
    out.append(
        "- Against the managed services, one tunnel's ceiling is the comparison that matters: AWS Site-to-Site "
        "VPN and GCP HA VPN cap each tunnel (table below) and scale by adding tunnels with ECMP; a wg-mesh "
        "gateway is capped by its instance's CPU and network allowance."
    )
    out.append(
        "- Route and security-group quotas (section 4) cap the mesh's size whatever the gateways can carry: plan "
        "summarised CIDRs before the mesh grows past the crossing points."
    )
    out.append("\n### Published anchors\n")
    out.append(
        table(["what", "published figure", "source"], [[a.what, a.figure, f"[{a.source}]({a.url})"] for a in ANCHORS])
    )
    return "\n".join(out) + "\n"


def commands(quick: bool) -> str:
    note = (
        "\n> This document was rendered from a `--quick` smoke run: its numbers are not for publishing.\n"
        if quick
        else ""
    )
    return (
        "## Reproduce\n\n"
        "```sh\n"
        "sudo .venv/bin/python -m bench all     # setup (apt + pip), every benchmark, this document\n"
        "python -m bench scale                  # program scale only (no root)\n"
        "sudo .venv/bin/python -m bench lab     # data plane, IPsec vs WireGuard, recovery\n"
        "sudo .venv/bin/python -m bench mtu     # MTU sweep\n"
        "sudo .venv/bin/python -m bench boot    # booted gateways (lab --boot), every stack file\n"
        "sudo .venv/bin/python -m bench underlay  # a jumbo private path next to an internet path\n"
        "sudo .venv/bin/python -m bench underlay --fallback  # the private path cut and restored\n"
        "sudo .venv/bin/python -m bench rotation --runs 5  # the announced key rotation, live drill x5\n"
        "python -m bench doc                    # re-render this file and the plots from docs/bench/*.json\n"
        "```\n\n"
        "`bench all` installs what it needs when missing: Debian `strongswan-charon strongswan-swanctl "
        "libstrongswan-standard-plugins libcharon-extra-plugins` (plus the lab's own packages) and "
        "`bench/requirements.txt` (matplotlib, pinned). Results: `docs/bench/{environment,scale,lab,mtu}.json`; "
        "plots: `docs/bench/*.png`. The lab runs only inside network namespaces it creates and removes them, "
        "with every process it started, on exit.\n" + note
    )


def markdown(data: dict[str, Any], images: dict[str, str]) -> str:
    quick = bool(data.get("environment", {}).get("quick"))
    parts = [
        "# Benchmarks\n",
        "<!-- Generated by `python -m bench doc` from docs/bench/*.json: do not edit by hand. -->\n",
        "Measured on one machine with the lab (`wg_mesh/lab`: the dev stack's topology in network namespaces, the "
        "rendered `wg0.conf` and cloud-init, real `wg-quick`) and with the Pulumi program under mocks. Every "
        "figure below is produced by `python -m bench` and rendered from its JSON; published figures from "
        "elsewhere are quoted only in the *Published anchors* table, with their sources.\n",
    ]
    lines = headline(data)
    if lines:
        parts.append("## Headline\n\n" + "\n".join(lines) + "\n")
    parts.append(commands(quick))
    if "environment" in data:
        parts.append(section_environment(data["environment"]))
    if "lab" in data:
        parts.append(section_dataplane(data["lab"], images))
    if "mtu" in data:
        parts.append(section_mtu(data["mtu"], images))
    if "lab" in data:
        parts.append(section_recovery(data, images))
    if "scale" in data:
        parts.append(section_scale(data["scale"], images))
    if "lab" in data:
        parts.append(section_ipsec(data))
    parts.append(section_meaning(data))
    if "boot" in data:
        from bench.boot import section as section_boot

        parts.append(section_boot(data["boot"]))
    if "meshchange" in data:
        from bench.report.meshchange import section as section_meshchange

        parts.append(section_meshchange(data["meshchange"], data.get("meshchange-boot")))
    if "rotation" in data:
        from bench.rotation import section as section_rotation

        parts.append(section_rotation(data["rotation"]))
    if "pathmtu" in data:
        from bench.report.pathmtu import section as section_pathmtu

        parts.append(section_pathmtu(data["pathmtu"]))
    if "hafailover" in data:
        from bench.report.hafailover import section as section_hafailover

        parts.append(section_hafailover(data["hafailover"], data.get("hafailover-gcp")))
    if "underlay" in data:
        from bench.underlay import section as section_underlay

        parts.append(section_underlay(data["underlay"]))
    if "underlay-fallback" in data:
        from bench.fallback import section as section_fallback

        parts.append(section_fallback(data["underlay-fallback"]))
    if "ha_routes" in data:
        from bench.ha_routes import section as section_ha_routes

        parts.append(section_ha_routes(data["ha_routes"]))
    return "\n".join(parts)


def render(out: Path, doc: Path, *, plots: bool, log: Log) -> str:
    data = load(out)
    if not data:
        raise FileNotFoundError(f"no results in {out}: run `python -m bench all` first")
    images: dict[str, str] = {}
    if plots:
        from bench.report import plots as plotting

        for name, path in plotting.make_all(data, out).items():
            images[name] = os.path.relpath(path, doc.parent)
            log(f"plot {path.name}")
    text = markdown(data, images)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    log(f"wrote {doc}")
    return text
