"""docs/benchmarks.md section 5, IPsec vs WireGuard on the same lab, from docs/bench/lab.json and
environment.json, read against the reference article (bench/report/anchors.py)."""

from __future__ import annotations

from typing import Any

from bench.report.anchors import ARTICLE, ARTICLE_INSTANCE_VCPUS, ARTICLE_MTU
from bench.report.format import SHORT_LABELS, cell, cpu_saving, mbit, ms, num, table


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
