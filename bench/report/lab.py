"""docs/benchmarks.md sections 1 (data plane) and 3 (recovery), from docs/bench/lab.json (and mtu.json's
handshake times)."""

from __future__ import annotations

from typing import Any

from bench.report.format import (
    E2E_TARGET,
    PATH_LABELS,
    SHORT_LABELS,
    cell,
    g,
    handshake_samples,
    mbit,
    median,
    met,
    ms,
    num,
    table,
)


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
                f"{ms(median(first))} / {ms(max(first))}" if first else "–",
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
            f"MTU point): every gateway pair had a handshake {ms(median(after_build))} (median; max "
            f"{ms(max(after_build))}) after the build returned, {ms(median(after_start))} (median; max "
            f"{ms(max(after_start))}) after the build started (namespaces, links, NAT, cloud-init files, `wg-quick "
            "up` on every gateway). `wg show` is polled, so the figure includes one poll's latency.\n"
        )
    if "ipsec" in lab and "established_s" in lab["ipsec"]:
        established = ms(lab["ipsec"]["established_s"] * 1000)
        out.append(f"The IPsec tunnel was passing traffic {established} after both charon daemons were started.\n")
    if "recovery" in images:
        out.append(f"\n![recovery]({images['recovery']})")
    return "\n".join(out) + "\n"
