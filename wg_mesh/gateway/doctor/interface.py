"""doctor's checks of the interface itself: the interface, its config and MTU, forwarding, the FORWARD accept rules,
the MSS clamp, the loaded peers, every peer's handshake and the route for its AllowedIPs. Pure given a `Host`;
standard library only (it runs on a bare gateway)."""

from __future__ import annotations

import shlex

from wg_mesh.gateway.doctor.base import (
    FAIL,
    IPV4_TCP_HEADERS,
    OK,
    SKIP,
    WARN,
    Check,
    Host,
    WgConf,
    ago,
    error_line,
    parse_conf,
    size,
)
from wg_mesh.gateway.wgmetrics import (
    HANDSHAKE_STALE_SECONDS,
    PeerStat,
    Route,
    parse_link,
    route_for,
)


def check_interface(host: Host, interface: str) -> tuple[Check, int | None]:
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


def check_config(host: Host, path: str) -> tuple[Check, WgConf | None]:
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


def check_mtu(interface: str, link_mtu: int | None, conf: WgConf | None) -> Check:
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


def check_forwarding(host: Host) -> Check:
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


def iptables_rules(host: Host, table: str) -> tuple[list[list[str]], str | None, str | None]:
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


def check_forward_accept(host: Host, interface: str) -> Check:
    rules, policy, error = iptables_rules(host, "filter")
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


def check_mss_clamp(host: Host, interface: str, mtu: int | None) -> Check:
    rules, _, error = iptables_rules(host, "mangle")
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


def check_peers(interface: str, conf: WgConf | None, peers: list[PeerStat]) -> Check:
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


def check_handshake(
    peer: PeerStat, name: str, site: str | None, now: float, dynamic: bool = False, silence: int | None = None
) -> Check:
    """`dynamic`: the config has no Endpoint for the peer (`endpoint: dynamic`, issue 24): it dials this gateway, and
    is failed once silent for longer than `silence` (its threshold, dynamic_silence_alert_seconds: doctor.roam)."""
    where = f" (endpoint {peer.endpoint})" if peer.endpoint else " (no endpoint known)"
    if peer.latest_handshake == 0:
        if peer.rx_bytes == 0 and dynamic:
            return Check(
                "handshake",
                FAIL,
                f"nothing received yet from {name}, a dynamic site{where}: it dials this gateway, which learns its "
                "address from its first packet",
                f"Is {name}'s wg-quick@wg0 up, with this gateway's public address as an Endpoint? Does this gateway's "
                f"firewall admit UDP from {name}'s address (its endpoint_ranges)? Does {name}'s NAT let UDP out?",
                site,
            )
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
    if dynamic and silence is not None and HANDSHAKE_STALE_SECONDS < age <= silence:
        return Check(
            "handshake",
            WARN,
            f"no session with {name}, a dynamic site, for {ago(age)} (> {HANDSHAKE_STALE_SECONDS} s){where}; silent "
            f"for longer than {ago(silence)} fails",
            f"{name} dials this gateway again by itself (its keepalives): a NAT rebinding, a line resync. If not, "
            f"its gateway or its internet line is down.",
            site,
        )
    if dynamic and silence is not None and age > silence:
        return Check(
            "handshake",
            FAIL,
            f"{name}, a dynamic site, silent for {ago(age)}: longer than its threshold {ago(silence)}{where}",
            f"This gateway cannot dial {name} (no fixed address). On {name}: `systemctl status wg-quick@wg0`, its "
            f"internet line, its NAT (UDP out); here: does the firewall admit {name}'s address (endpoint_ranges)?",
            site,
        )
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


def check_routes(interface: str, peer: PeerStat, name: str, site: str | None, routes: list[Route]) -> Check:
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
