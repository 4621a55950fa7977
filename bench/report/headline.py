"""The headline of docs/benchmarks.md: one line per result that matters, from the lab and scale results."""

from __future__ import annotations

from typing import Any

from bench.report.format import (
    E2E_TARGET,
    RECOVERY_TARGET_MS,
    SCALE_TARGET,
    cell,
    cpu_saving,
    crossing,
    g,
    mbit,
    median,
    met,
    ms,
    num,
    scale_marginal,
    span,
)


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
                f"{ms(median(first))} (median; max {ms(max(first))}) after `wg-quick up` "
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
