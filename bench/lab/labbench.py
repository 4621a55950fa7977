"""The lab part of the bench in one lab of the dev topology: handshake timing, strongSwan next to WireGuard,
the throughput matrix, then the recovery trials."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.lab.dataplane import DataPlaneOptions, path_endpoints, run_recovery, run_throughput
from bench.lab.ipsec import CHARON, IpsecTunnel
from bench.lab.labkit import HOST_SYSCTL, PING_INTERVAL_S, RTT_PINGS, lab_session, rtt
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.plan.validate import load_mesh

Log = Callable[[str], None]


def ipsec_unavailable() -> str | None:
    if not Path(CHARON).exists():
        return f"{CHARON} not installed (Debian strongswan-charon)"
    if shutil.which("swanctl") is None:
        return "swanctl not installed (Debian strongswan-swanctl)"
    return None


def run_lab_bench(raw: dict[str, Any], options: DataPlaneOptions, log: Log, with_ipsec: bool = True) -> dict[str, Any]:
    cfg = load_mesh(raw)
    result: dict[str, Any] = {"options": {**options.__dict__}}
    with lab_session(cfg, log) as session:
        a, b = session.pair()
        result["topology"] = {
            "sites": [
                {
                    "name": s.name,
                    "cloud": s.cloud,
                    "nic_mtu": s.nic_mtu,
                    "uplink_mtu": s.uplink_mtu,
                    "public_ip": str(s.public_ip),
                    "overlay_ip": str(s.overlay_ip),
                    "host_ip": str(s.host_ip.ip),
                }
                for s in session.plan.sites
            ],
            "tunnel_mtu": session.plan.tunnel_mtu,
            "mss": session.plan.mss,
            "pair": [a.name, b.name],
        }
        gc_timeout = Path("/proc/sys/net/ipv4/route/gc_timeout")  # global: how long a learned redirect lasts
        result["hosts"] = {
            "sysctl": list(HOST_SYSCTL),
            "redirect_cache_s": int(gc_timeout.read_text()) if gc_timeout.exists() else None,
        }
        result["handshake"] = {
            "build_s": round(session.build_s, 3),
            "after_build_s": round(session.handshake_after_build_s or 0, 3),
            "after_start_s": round(session.handshake_after_start_s or 0, 3),
        }
        ipsec: IpsecTunnel | None = None
        reason = ipsec_unavailable() if with_ipsec else "not requested"
        if reason is None:
            ipsec = IpsecTunnel(session)
            try:
                established = ipsec.setup()
            except LabError as exc:
                log(f"IPsec: {exc}")
                reason, ipsec = str(exc), None
            else:
                result["ipsec"] = {**ipsec.describe(), "established_s": round(established, 3)}
                log(f"IPsec up ({ipsec.mode}) in {established:.2f} s")
        if ipsec is None:
            result["ipsec"] = {"skipped": reason}
        result["rtt_pings"] = RTT_PINGS
        result["rtt_ms"] = {}
        for path in ("underlay", "wireguard", "end_to_end", "ipsec"):
            if path == "ipsec" and ipsec is None:
                continue
            client, _, target, bind = path_endpoints(session, ipsec, path)
            result["rtt_ms"][path] = rtt(client, target, source=bind)
        paths = options.paths if ipsec is not None else tuple(p for p in options.paths if p != "ipsec")
        opts = DataPlaneOptions(**{**options.__dict__, "paths": paths})
        result["throughput"] = run_throughput(session, ipsec, opts, log)
        result["recovery"] = {"ping_interval_ms": PING_INTERVAL_S * 1000, **run_recovery(session, ipsec, opts, log)}
        if ipsec is not None:
            ipsec.teardown()
    return result
