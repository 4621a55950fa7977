"""`mesh doctor`: is this gateway healthy? One verdict per check, and a hint for every failure.

Run it on a gateway as root: `python -m wg_mesh doctor` from a checkout, or, where only python3 exists, copy
wg_mesh/__init__.py, wg_mesh/gateway/__init__.py, wg_mesh/gateway/wgmetrics.py, wg_mesh/gateway/pmtu_probe.py and
wg_mesh/gateway/doctor/ and run `sudo python3 -m wg_mesh.gateway.doctor` (stdlib only).
Every command and file read goes through a `Host`, so tests feed captured outputs and the lab can run the same
checks inside a gateway's namespaces. Exit status: 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from wg_mesh.gateway.doctor.agent import agent_checks
from wg_mesh.gateway.doctor.base import (
    EXIT_FAILED,
    EXIT_OK,
    FAIL,
    IPV4_TCP_HEADERS,
    OK,
    SKIP,
    WARN,
    Check,
    CommandResult,
    ConfPeer,
    Host,
    LocalHost,
    WgConf,
    ago,
    error_line,
    parse_conf,
    size,
)
from wg_mesh.gateway.doctor.ha import api_path_checks, ha_checks, standby_peer_checks
from wg_mesh.gateway.doctor.path import path_checks
from wg_mesh.gateway.wgmetrics import (
    HANDSHAKE_STALE_SECONDS,
    PeerStat,
    Route,
    is_ipv6,
    parse_dump,
    parse_link,
    parse_routes,
    route_for,
)

# Re-exported for callers and tests (they live in wg_mesh.gateway.doctor.base since the agent checks need them too).
__all__ = [
    "FAIL", "OK", "SKIP", "WARN", "Check", "CommandResult", "ConfPeer", "Diagnosis", "Host", "LocalHost", "WgConf",
    "diagnose", "main", "parse_conf", "report_json", "report_text", "run",
]  # fmt: skip

# --- the checks (pure, given a Host) -----------------------------------------------------------


def _interface(host: Host, interface: str) -> tuple[Check, int | None]:
    result = host.run(["ip", "-j", "link", "show", "dev", interface])
    link = parse_link(result.stdout) if result.returncode == 0 else None
    if link is None:
        return (
            Check(
                "interface",
                FAIL,
                f"{interface} does not exist on this host: WireGuard is not running here",
                f"On a gateway: `sudo systemctl start wg-quick@{interface}`, then `journalctl -u wg-quick@{interface}` "
                f"if it fails. Elsewhere: run doctor on a gateway (or in a lab gateway's namespace; --interface "
                "if yours is not wg0).",
            ),
            None,
        )
    if not link.up:
        return (
            Check(
                "interface",
                FAIL,
                f"{interface} exists but is down",
                f"`sudo ip link set {interface} up`, or `sudo systemctl restart wg-quick@{interface}`.",
            ),
            link.mtu,
        )
    return Check("interface", OK, f"{interface} is up, MTU {link.mtu}"), link.mtu


def _config(host: Host, path: str) -> tuple[Check, WgConf | None]:
    try:
        conf = parse_conf(host.read(path))
    except OSError as exc:
        return (
            Check(
                "config",
                FAIL,
                f"cannot read {path}: {exc.strerror or exc}",
                "Run as root (the file is 0600); pass --config PATH if it lives elsewhere. Peers are named by key.",
            ),
            None,
        )
    except ValueError as exc:
        return Check(
            "config", FAIL, f"{path} is not a wg-quick config: {exc}", "Compare it with the stack's output."
        ), None
    site = f"site {conf.site}, " if conf.site else ""
    return Check("config", OK, f"{path}: {site}{len(conf.peers)} peers, MTU {conf.mtu or 'unset'}"), conf


def _mtu(interface: str, link_mtu: int | None, conf: WgConf | None) -> Check:
    if link_mtu is None or conf is None:
        return Check("mtu", SKIP, "needs the interface and its config")
    if conf.mtu is None:
        return Check(
            "mtu",
            WARN,
            f"the config sets no MTU; {interface} has {link_mtu}",
            "wg-mesh always writes MTU =: this config was not rendered by wg-mesh or was edited.",
        )
    if link_mtu != conf.mtu:
        return Check(
            "mtu",
            FAIL,
            f"{interface} has MTU {link_mtu}, the config says {conf.mtu}",
            f"`sudo ip link set dev {interface} mtu {conf.mtu}` (or restart wg-quick@{interface}). A larger MTU than "
            "the path carries fragments or black-holes big packets.",
        )
    return Check("mtu", OK, f"{interface} MTU {link_mtu} matches the config")


def _forwarding(host: Host) -> Check:
    result = host.run(["sysctl", "-n", "net.ipv4.ip_forward"])
    if result.returncode != 0:
        return Check(
            "forwarding", FAIL, f"cannot read net.ipv4.ip_forward: {error_line(result)}", "Is procps installed?"
        )
    if result.stdout.strip() != "1":
        return Check(
            "forwarding",
            FAIL,
            "net.ipv4.ip_forward is 0: this gateway drops everything it should forward (handshakes still look fine)",
            "`sudo sysctl -w net.ipv4.ip_forward=1`; wg-mesh sets it in /etc/sysctl.d/99-wg-mesh.conf and in wg0's "
            "PostUp, so look for what turned it off (a later sysctl file, a firewall tool).",
        )
    return Check("forwarding", OK, "net.ipv4.ip_forward = 1")


def _iptables(host: Host, table: str) -> tuple[list[list[str]], str | None, str | None]:
    """FORWARD rules of a table as token lists, its policy, and an error."""
    result = host.run(["iptables", "-t", table, "-S", "FORWARD"])
    if result.returncode != 0:
        return [], None, error_line(result)
    rules, policy = [], None
    for line in result.stdout.splitlines():
        try:
            tokens = shlex.split(line)  # comments are quoted: -m comment --comment "a b"
        except ValueError:
            tokens = line.split()
        if tokens[:2] == ["-P", "FORWARD"] and len(tokens) > 2:
            policy = tokens[2]
        elif tokens[:2] == ["-A", "FORWARD"]:
            rules.append(tokens[2:])
    return rules, policy, None


def _option(tokens: list[str], name: str) -> str | None:
    return tokens[tokens.index(name) + 1] if name in tokens[:-1] else None


def _drops_everything(rule: list[str], flag: str, interface: str) -> bool:
    """A DROP/REJECT that catches all forwarded traffic of `interface` in the direction of `flag`.

    Rules that match something narrower (`-m conntrack --ctstate INVALID`, a source address, another interface)
    do not: dropping INVALID packets is good practice, not a broken gateway."""
    if _option(rule, "-j") not in ("DROP", "REJECT"):
        return False
    before, i, matches = rule[: rule.index("-j")], 0, []
    while i < len(before):
        if before[i : i + 3] == ["-m", "comment", "--comment"]:
            i += 4  # a comment matches everything
            continue
        matches.append(before[i])
        i += 1
    return matches in ([], [flag, interface])


def _forward_accept(host: Host, interface: str) -> Check:
    rules, policy, error = _iptables(host, "filter")
    if error is not None:
        return Check("forward-accept", FAIL, f"cannot read the FORWARD chain: {error}", "Run as root.")
    missing = []
    for flag in ("-i", "-o"):
        wanted = [flag, interface, "-j", "ACCEPT"]
        index = next((i for i, r in enumerate(rules) if r == wanted), None)
        blocker = next((i for i, r in enumerate(rules) if _drops_everything(r, flag, interface)), None)
        if index is None or (blocker is not None and blocker < index):
            missing.append(" ".join(wanted))
    if not missing:
        return Check("forward-accept", OK, f"FORWARD accepts traffic in and out of {interface}")
    blocking = any(_drops_everything(r, flag, interface) for r in rules for flag in ("-i", "-o"))
    if policy == "ACCEPT" and not blocking:
        return Check(
            "forward-accept",
            WARN,
            f"no `{'`, `'.join(missing)}` rule, but the FORWARD policy is ACCEPT (forwarding works for now)",
            f"wg0's PostUp inserts these rules; restart wg-quick@{interface} to restore them before anything sets "
            "the policy to DROP (Docker does).",
        )
    return Check(
        "forward-accept",
        FAIL,
        f"forwarded traffic of {interface} is dropped: `-A FORWARD {'` / `'.join(missing)}` is missing or comes "
        f"after a DROP/REJECT rule (policy {policy})",
        f"`sudo systemctl restart wg-quick@{interface}` (PostUp inserts them first), or "
        f"`sudo iptables -I FORWARD -i {interface} -j ACCEPT; sudo iptables -I FORWARD -o {interface} -j ACCEPT`. "
        "Something rewrote the chain: a firewall reload, ufw, Docker?",
    )


def _mss_clamp(host: Host, interface: str, mtu: int | None) -> Check:
    rules, _, error = _iptables(host, "mangle")
    if error is not None:
        return Check("mss-clamp", FAIL, f"cannot read the mangle FORWARD chain: {error}", "Run as root.")
    expected = None if mtu is None else mtu - IPV4_TCP_HEADERS
    problems, values = [], []
    for flag, direction in (("-o", "into"), ("-i", "out of")):
        clamp = next((r for r in rules if _option(r, flag) == interface and _option(r, "-j") == "TCPMSS"), None)
        if clamp is None:
            problems.append(f"no MSS clamp for TCP {direction} {interface}")
            continue
        value = _option(clamp, "--set-mss")
        if value is None:
            values.append("path MTU")
        elif expected is not None and int(value) > expected:
            problems.append(f"TCP {direction} {interface} is clamped to {value}, above {expected} (MTU {mtu} - 40)")
        else:
            values.append(value)
    if problems:
        return Check(
            "mss-clamp",
            FAIL,
            "; ".join(problems),
            f"Without it, TCP between hosts with a larger MTU (AWS: 9001) stalls on big transfers. wg0's PostUp adds "
            f"both rules: `sudo systemctl restart wg-quick@{interface}`.",
        )
    return Check("mss-clamp", OK, f"TCP MSS clamped to {' / '.join(sorted(set(values)))} in both directions")


def _peers(interface: str, conf: WgConf | None, peers: list[PeerStat]) -> Check:
    if conf is None:
        return Check("peers", SKIP, f"{len(peers)} peers on {interface}; the config is needed to compare")
    running = {p.public_key for p in peers}
    missing = [p.name or p.public_key[:8] for p in conf.peers if p.public_key not in running]
    extra = [p.public_key[:8] + "…" for p in peers if conf.name_of(p.public_key) is None]
    if missing:
        return Check(
            "peers",
            FAIL,
            f"in the config but not on {interface}: {', '.join(missing)}",
            f"`sudo wg syncconf {interface} <(sudo wg-quick strip {interface})` loads the config's peers.",
        )
    if extra:
        return Check(
            "peers",
            WARN,
            f"on {interface} but not in the config: {', '.join(extra)}",
            "Someone added a peer by hand; the next restart drops it.",
        )
    return Check("peers", OK, f"{interface} has the config's {len(conf.peers)} peers")


def _handshake(peer: PeerStat, name: str, site: str | None, now: float) -> Check:
    where = f" (endpoint {peer.endpoint})" if peer.endpoint else " (no endpoint known)"
    if peer.latest_handshake == 0:
        if peer.rx_bytes == 0:
            return Check(
                "handshake",
                FAIL,
                f"endpoint unreachable: never completed a handshake with {name}{where}, nothing received",
                f"Is {name}'s gateway running (`sudo wg show` there)? Does its firewall admit UDP from this gateway's "
                f"public address? Does {name}'s wg0.conf hold this site's current public key?",
                site,
            )
        return Check(
            "handshake",
            FAIL,
            f"no handshake with {name}{where} although {size(peer.rx_bytes)} came in",
            "The keys do not match: compare the public keys in both wg0.conf files with the stack's outputs.",
            site,
        )
    age = now - peer.latest_handshake
    if age > HANDSHAKE_STALE_SECONDS:
        return Check(
            "handshake",
            FAIL,
            f"stale handshake with {name}: last one {ago(age)} ago (> {HANDSHAKE_STALE_SECONDS} s){where}",
            f"WireGuard rekeys every 2 minutes on a live tunnel: {name}'s gateway, its WireGuard or the path to it "
            f"is down. Run doctor on {name}'s gateway too.",
            site,
        )
    traffic = f"{size(peer.rx_bytes)} received, {size(peer.tx_bytes)} sent"
    return Check("handshake", OK, f"{name}: last handshake {ago(age)} ago, {traffic}", peer_site=site)


def _describe(route: Route | None) -> str:
    if route is None:
        return "has no route at all"
    if route.kind != "unicast":
        return f"hits a {route.kind} route ({route.dst})"
    return f"goes via {route.dev} ({route.dst})"


def _routes(interface: str, peer: PeerStat, name: str, site: str | None, routes: list[Route]) -> Check:
    wrong = []
    for prefix in peer.allowed_ips:
        route = route_for(routes, prefix)
        if route is None or route.kind != "unicast" or route.dev != interface:
            wrong.append(f"{prefix} {_describe(route)}")
    if wrong:
        first = wrong[0].split()[0]
        return Check(
            "route",
            FAIL,
            f"{name}: not routed into {interface}: {'; '.join(wrong)}",
            f"wg-quick adds a route per AllowedIPs prefix (unless Table = off): `sudo ip route replace {first} dev "
            f"{interface}`, or restart wg-quick@{interface}.",
            site,
        )
    allowed = ", ".join(peer.allowed_ips) or "no AllowedIPs"
    return Check("route", OK, f"{name}: {allowed} routed into {interface}", peer_site=site)


@dataclass(frozen=True)
class Diagnosis:
    interface: str
    site: str | None
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self.checks)


def diagnose(host: Host, interface: str = "wg0", config_path: str | None = None) -> Diagnosis:
    """Every check, in the order an operator would look."""
    path = config_path or f"/etc/wireguard/{interface}.conf"
    iface_check, link_mtu = _interface(host, interface)
    config_check, conf = _config(host, path)
    checks = [iface_check, config_check, _mtu(interface, link_mtu, conf), _forwarding(host)]
    if link_mtu is None:
        skipped = f"{interface} does not exist (its PostUp adds these rules)"
        checks += [Check("forward-accept", SKIP, skipped), Check("mss-clamp", SKIP, skipped)]
    else:
        checks.append(_forward_accept(host, interface))
        checks.append(_mss_clamp(host, interface, conf.mtu if conf and conf.mtu else link_mtu))
    checks += standby_peer_checks(_peer_checks(host, interface, conf, link_mtu), host)  # HA standby: no handshakes
    checks += agent_checks(host)  # delivery: live only (none when the gateway has no agent)
    checks += ha_checks(host) + api_path_checks(host)  # gateways: 2 only
    return Diagnosis(interface, conf.site if conf else None, tuple(checks))


def _peer_checks(host: Host, interface: str, conf: WgConf | None, link_mtu: int | None) -> list[Check]:
    if link_mtu is None:
        return [Check("peers", SKIP, f"{interface} does not exist: no peers, handshakes or routes to check")]
    dump = host.run(["wg", "show", interface, "dump"])
    if dump.returncode != 0:
        return [Check("peers", FAIL, f"`wg show {interface} dump` failed: {error_line(dump)}", "Run as root.")]
    peers = parse_dump(dump.stdout, interface=interface)
    checks = [_peers(interface, conf, peers)]
    now = host.now()
    route_result = host.run(["ip", "-j", "-4", "route", "show", "table", "main"])
    routes = parse_routes(route_result.stdout) if route_result.returncode == 0 else None
    if routes is not None and any(is_ipv6(prefix) for peer in peers for prefix in peer.allowed_ips):
        routes6 = host.run(["ip", "-j", "-6", "route", "show", "table", "main"])  # hand-added IPv6 peers
        routes += parse_routes(routes6.stdout, family=6) if routes6.returncode == 0 else []
    tunnels = []  # the config's peers with a working tunnel: their path MTU is worth probing
    for peer in peers:
        site = conf.name_of(peer.public_key) if conf is not None else None
        name = site or f"peer {peer.public_key[:8]}…"
        checks.append(_handshake(peer, name, site, now))
        if checks[-1].status == OK and conf is not None:
            tunnels += [p for p in conf.peers if p.public_key == peer.public_key]
        if routes is None:
            error = f"cannot read the routing table: {error_line(route_result)}"
            checks.append(Check("route", FAIL, error, "Is iproute2 installed?", site))
        else:
            checks.append(_routes(interface, peer, name, site, routes))
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


def run(args: argparse.Namespace, host: Host | None = None) -> int:
    diagnosis = diagnose(host or LocalHost(), args.interface, args.config)
    sys.stdout.write(report_json(diagnosis) if args.json else report_text(diagnosis))
    return EXIT_OK if diagnosis.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m wg_mesh.gateway.doctor", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
