"""`mesh doctor`: is this gateway healthy? One verdict per check, and a hint for every failure.

Run it on a gateway as root: `python -m wg_mesh doctor` from a checkout, or, where only python3 exists, copy
wg_mesh/__init__.py, wg_mesh/gateway/__init__.py, wg_mesh/gateway/wgmetrics.py, wg_mesh/gateway/files.py,
wg_mesh/gateway/pmtu_probe.py and wg_mesh/gateway/doctor/ and run `sudo python3 -m wg_mesh.gateway.doctor`
(stdlib only).
Every command and file read goes through a `Host`, so tests feed captured outputs and the lab can run the same
checks inside a gateway's namespaces. Exit status: 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from wg_mesh.gateway.doctor.agent import agent_checks
from wg_mesh.gateway.doctor.base import (
    EXIT_FAILED,
    EXIT_OK,
    FAIL,
    OK,
    SKIP,
    WARN,
    Check,
    CommandResult,
    ConfPeer,
    Host,
    LocalHost,
    WgConf,
    error_line,
    parse_conf,
)
from wg_mesh.gateway.doctor.ha import api_path_checks, ha_checks, standby_peer_checks
from wg_mesh.gateway.doctor.interface import (
    check_config,
    check_forward_accept,
    check_forwarding,
    check_handshake,
    check_interface,
    check_mss_clamp,
    check_mtu,
    check_peers,
    check_routes,
)
from wg_mesh.gateway.doctor.path import path_checks
from wg_mesh.gateway.doctor.roam import check_endpoint, default_silence, read_mapping, read_roams, relayed_checks
from wg_mesh.gateway.wgmetrics import is_ipv6, parse_dump, parse_routes

# Re-exported for callers and tests (they live in wg_mesh.gateway.doctor.base since the agent checks need them too).
__all__ = [
    "FAIL", "OK", "SKIP", "WARN", "Check", "CommandResult", "ConfPeer", "Diagnosis", "Host", "LocalHost", "WgConf",
    "diagnose", "main", "parse_conf", "report_json", "report_text", "run",
]  # fmt: skip


@dataclass(frozen=True)
class Diagnosis:
    interface: str
    site: str | None
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self.checks)


def diagnose(
    host: Host, interface: str = "wg0", config_path: str | None = None, dynamic_silence: int | None = None
) -> Diagnosis:
    """Every check, in the order an operator would look. `dynamic_silence`: a dynamic site's threshold (the stack's
    dynamic_silence_alert_seconds); None: its default for the peer's keepalive."""
    path = config_path or f"/etc/wireguard/{interface}.conf"
    iface_check, link_mtu = check_interface(host, interface)
    config_check, conf = check_config(host, path)
    checks = [iface_check, config_check, check_mtu(interface, link_mtu, conf)]
    if conf is not None and conf.single_host:  # a static site without cidrs: it forwards nothing, by design
        host_only = "a single host (no cidrs): it forwards nothing, and its config turns on no forwarding"
        checks += [Check(name, SKIP, host_only) for name in ("forwarding", "forward-accept", "mss-clamp")]
    elif link_mtu is None:
        checks.append(check_forwarding(host))
        skipped = f"{interface} does not exist (its PostUp adds these rules)"
        checks += [Check("forward-accept", SKIP, skipped), Check("mss-clamp", SKIP, skipped)]
    else:
        checks.append(check_forwarding(host))
        checks.append(check_forward_accept(host, interface))
        checks.append(check_mss_clamp(host, interface, conf.mtu if conf and conf.mtu else link_mtu))
    checks += standby_peer_checks(
        _peer_checks(host, interface, conf, link_mtu, dynamic_silence), host
    )  # HA standby: no handshakes
    checks += agent_checks(host)  # delivery: live only (none when the gateway has no agent)
    checks += ha_checks(host) + api_path_checks(host)  # gateways: 2 only
    return Diagnosis(interface, conf.site if conf else None, tuple(checks))


def _peer_checks(
    host: Host, interface: str, conf: WgConf | None, link_mtu: int | None, dynamic_silence: int | None = None
) -> list[Check]:
    if link_mtu is None:
        return [Check("peers", SKIP, f"{interface} does not exist: no peers, handshakes or routes to check")]
    dump = host.run(["wg", "show", interface, "dump"])
    if dump.returncode != 0:
        return [Check("peers", FAIL, f"`wg show {interface} dump` failed: {error_line(dump)}", "Run as root.")]
    peers = parse_dump(dump.stdout, interface=interface)
    checks = [check_peers(interface, conf, peers)]
    now = host.now()
    route_result = host.run(["ip", "-j", "-4", "route", "show", "table", "main"])
    routes = parse_routes(route_result.stdout) if route_result.returncode == 0 else None
    if routes is not None and any(is_ipv6(prefix) for peer in peers for prefix in peer.allowed_ips):
        routes6 = host.run(["ip", "-j", "-6", "route", "show", "table", "main"])  # hand-added IPv6 peers
        routes += parse_routes(routes6.stdout, family=6) if routes6.returncode == 0 else []
    tunnels = []  # the config's peers with a working tunnel: their path MTU is worth probing
    mapping, roams = read_mapping(host), read_roams(host)
    for peer in peers:
        site = conf.name_of(peer.public_key) if conf is not None else None
        name = site or f"peer {peer.public_key[:8]}…"
        mine = [p for p in (conf.peers if conf is not None else ()) if p.public_key == peer.public_key]
        dynamic = any(p.endpoint is None for p in mine)
        silence = dynamic_silence or default_silence(max((p.keepalive for p in mine), default=0))
        checks.append(check_endpoint(peer, name, site, conf, mapping, roams, now))
        checks.append(check_handshake(peer, name, site, now, dynamic, silence))
        if checks[-1].status == OK and conf is not None:
            tunnels += [p for p in conf.peers if p.public_key == peer.public_key]
        if routes is None:
            error = f"cannot read the routing table: {error_line(route_result)}"
            checks.append(Check("route", FAIL, error, "Is iproute2 installed?", site))
        else:
            checks.append(check_routes(interface, peer, name, site, routes))
    checks += relayed_checks(mapping)
    mtu = conf.mtu if conf is not None and conf.mtu else link_mtu
    return checks + path_checks(host, tunnels, mtu, conf.peer_mtu if conf is not None else None)


# --- reports ---------------------------------------------------------------------------------------


def report_text(diagnosis: Diagnosis) -> str:
    checks = diagnosis.checks
    where = f"{diagnosis.interface} on {diagnosis.site}" if diagnosis.site else diagnosis.interface
    lines = [f"wg-mesh doctor: {where}"]
    for c in checks:
        label = c.check + (f" {c.peer_site}" if c.peer_site else "")
        lines.append(f"{c.status.upper() if c.status == FAIL else c.status:<5} {label:<24} {c.detail}")
        if c.hint and c.status in (FAIL, WARN):
            lines.append(f"{'':<5} {'':<24} hint: {c.hint}")
    bad = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    verdict = f"{bad} of {len(checks)} checks failed" if bad else f"all {len(checks)} checks passed"
    lines.append(verdict + (f", {warned} warning{'s' if warned > 1 else ''}" if warned else ""))
    return "\n".join(lines) + "\n"


def report_json(diagnosis: Diagnosis) -> str:
    doc = {
        "ok": diagnosis.ok,
        "interface": diagnosis.interface,
        "site": diagnosis.site,
        "checks": [asdict(c) for c in diagnosis.checks],
    }
    return json.dumps(doc, indent=2) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interface", default="wg0", help="WireGuard interface (default wg0)")
    parser.add_argument("--config", help="its wg-quick config (default /etc/wireguard/INTERFACE.conf)")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    parser.add_argument(
        "--dynamic-silence",
        type=int,
        metavar="SECONDS",
        help="fail a dynamic site silent for longer than this (the stack's dynamic_silence_alert_seconds; default "
        "2 x 180 + 4 x its persistent keepalive)",
    )


def run(args: argparse.Namespace, host: Host | None = None) -> int:
    diagnosis = diagnose(host or LocalHost(), args.interface, args.config, args.dynamic_silence)
    sys.stdout.write(report_json(diagnosis) if args.json else report_text(diagnosis))
    return EXIT_OK if diagnosis.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m wg_mesh.gateway.doctor", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
