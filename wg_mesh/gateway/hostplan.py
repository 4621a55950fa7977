"""What the agent puts on a host beyond wg0's own configuration, as typed values (pure; standard library only).

`Managed` is derived from the interface plan the agent applies and from the default route it read itself: the
iptables rules (wgconf.host_rules, the masquerade on the default route's device), the host routes to endpoints that
lie inside some peer's AllowedIPs (through the default route's `via`/`dev`), and the lower route MTUs of internet
peers. The agent persists it (JSON of these values, parsed back strictly) and derives what to remove from the one it
applied last: it never runs the PostUp/PostDown text of a wg0.conf (those hooks are for wg-quick at boot only).

`KernelRoute` is one line of `ip -4 -o route show table main`, parsed into the fields the agent sets and restores.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

from .wgconf import InterfacePlan, Rule, endpoint_routes, host_rules, route_mtus

_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")  # IFNAMSIZ 16 with the NUL; no '/', space or ':'


def ifname(value: object) -> str:
    if not isinstance(value, str) or not _IFNAME.fullmatch(value):
        raise ValueError(f"not an interface name: {value!r}")
    return value


def ipv4(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not an IPv4 address: {value!r}")
    return str(ipaddress.IPv4Address(value))


def prefix(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not an IPv4 prefix: {value!r}")
    return str(ipaddress.IPv4Network(value))


def number(value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"not an integer in {low}..{high}: {value!r}")
    return value


@dataclass(frozen=True)
class KernelRoute:
    dst: str  # a prefix, "/32" for a host
    dev: str
    via: str | None = None
    mtu: int | None = None
    lock: bool = False
    metric: int | None = None
    kernel: bool = False  # `proto kernel`: an interface's connected route (never touched)

    def replace_argv(self) -> list[str]:
        argv = ["ip", "-4", "route", "replace", self.dst]
        argv += ["via", self.via] if self.via else []
        argv += ["dev", self.dev]
        argv += ["metric", str(self.metric)] if self.metric is not None else []
        argv += ["mtu", *(["lock"] if self.lock else []), str(self.mtu)] if self.mtu is not None else []
        return argv

    def del_argv(self) -> list[str]:
        metric = ["metric", str(self.metric)] if self.metric is not None else []
        return ["ip", "-4", "route", "del", self.dst, "dev", self.dev, *metric]


def parse_route(line: str) -> KernelRoute | None:
    """One `ip -4 -o route show` line; None for what the agent never manages (default, multipath, other types)."""
    words = line.split()
    if not words or words[0] in ("default", "broadcast", "local", "unreachable", "blackhole", "prohibit", "throw"):
        return None
    try:
        dst = prefix(words[0] if "/" in words[0] else f"{words[0]}/32")
        attrs = dict(zip(words[1::2], words[2::2], strict=False))
        dev = ifname(attrs.get("dev"))
        via = ipv4(attrs["via"]) if "via" in attrs else None
        value = attrs.get("metric")
        metric = None if value is None else number(int(value) if value.isascii() else -1, 0, 2**32 - 1)
    except (ValueError, KeyError):
        return None
    mtu, lock = None, False
    if "mtu" in words:
        rest = words[words.index("mtu") + 1 :][:2]
        lock = bool(rest) and rest[0] == "lock"
        value = rest[1 if lock else 0] if len(rest) > int(lock) else ""
        mtu = int(value) if value.isascii() and value.isdigit() else None
    return KernelRoute(dst, dev, via, mtu, lock, metric, kernel="kernel" in words)


def parse_routes(text: str) -> dict[str, KernelRoute]:
    routes: dict[str, KernelRoute] = {}
    for line in text.splitlines():
        route = parse_route(line)
        if route is not None:
            routes.setdefault(route.dst, route)
    return routes


def default_route(text: str) -> tuple[str | None, str] | None:
    """(`via`, `dev`) of the first line of `ip -4 route show default`; None when there is none the agent can use."""
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] != "default":
            continue
        attrs = dict(zip(words[1::2], words[2::2], strict=False))
        try:
            return (ipv4(attrs["via"]) if "via" in attrs else None), ifname(attrs.get("dev"))
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class Managed:
    """The host state beyond wg0's peers that one applied plan stands for."""

    generation: int
    mss: int
    listen_port: int
    listen_sources: tuple[str, ...] = ()
    masquerade_dev: str | None = None  # the default route's device the MASQUERADE rule names; None: no masquerade
    endpoint_routes: tuple[tuple[str, str | None, str], ...] = ()  # (host/32, via, dev)
    route_mtus: tuple[tuple[str, int], ...] = ()
    forward: bool = True  # False: a single host (InterfacePlan.forward): no FORWARD rules
    relay_flows: tuple[tuple[str, str], ...] = ()  # a relay's (InterfacePlan.relay_flows)

    def rule_objects(self) -> list[Rule]:
        return host_rules(
            self.mss,
            self.listen_port,
            self.listen_sources,
            self.masquerade_dev is not None,
            self.forward,
            self.relay_flows,
        )

    def kernel_routes(self) -> dict[str, KernelRoute]:
        return {host: KernelRoute(host, dev, via) for host, via, dev in self.endpoint_routes}

    def to_json(self) -> str:
        return json.dumps(
            {
                "generation": self.generation,
                "mss": self.mss,
                "listen_port": self.listen_port,
                "listen_sources": list(self.listen_sources),
                "masquerade_dev": self.masquerade_dev,
                "endpoint_routes": [list(r) for r in self.endpoint_routes],
                "route_mtus": [list(r) for r in self.route_mtus],
                **({} if self.forward else {"forward": False}),  # a gateway's record as before
                **({"relay_flows": [list(f) for f in self.relay_flows]} if self.relay_flows else {}),  # a relay's
            },
            sort_keys=True,
        )


def needs_default_route(plan: InterfacePlan) -> bool:
    return (plan.masquerade and plan.forward) or bool(endpoint_routes(plan))


def managed(plan: InterfacePlan, generation: int, default: tuple[str | None, str] | None) -> Managed:
    """What `plan` puts on the host; `default`: the default route's (via, dev) (ValueError when needed and None)."""
    if default is None and needs_default_route(plan):
        raise ValueError("no usable default route (`ip -4 route show default`)")
    via, dev = default if default is not None else (None, "")
    return Managed(
        generation,
        plan.mss,
        plan.listen_port,
        tuple(prefix(s) for s in plan.listen_sources),  # as parse_managed reads them back (and iptables prints them)
        dev if plan.masquerade and plan.forward else None,
        tuple((host, via, dev) for host in endpoint_routes(plan)),
        tuple(route_mtus(plan)),
        plan.forward,
        tuple((prefix(a), prefix(b)) for a, b in plan.relay_flows) if plan.forward else (),
    )


def parse_managed(text: str) -> Managed:
    """The persisted record, every value checked (ValueError, never anything else, for any text)."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    try:
        sources, routes, mtus = raw["listen_sources"], raw["endpoint_routes"], raw["route_mtus"]
        if not all(isinstance(v, list) and len(v) <= 4096 for v in (sources, routes, mtus)):
            raise ValueError("a list is missing or too long")
        dev, forward, flows = raw["masquerade_dev"], raw.get("forward", True), raw.get("relay_flows", [])
        if not isinstance(forward, bool):
            raise ValueError(f"forward: {forward!r} is not true or false")
        if (
            not isinstance(flows, list)
            or len(flows) > 4096
            or not all(isinstance(f, list) and len(f) == 2 for f in flows)
        ):
            raise ValueError("relay_flows: not a list of (source, destination) pairs")
        return Managed(
            number(raw["generation"], 0, 2**64),
            number(raw["mss"], 500, 65535),
            number(raw["listen_port"], 1, 65535),
            tuple(prefix(s) for s in sources),
            None if dev is None else ifname(dev),
            tuple(_endpoint_route(r) for r in routes),
            tuple((prefix(r[0]), number(r[1], 576, 65535)) for r in mtus if isinstance(r, list) and len(r) == 2),
            forward,
            tuple((prefix(a), prefix(b)) for a, b in flows),
        )
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"field {exc}") from None


def _endpoint_route(raw: object) -> tuple[str, str | None, str]:
    if not isinstance(raw, list) or len(raw) != 3:
        raise ValueError(f"endpoint route {raw!r}")
    host = prefix(raw[0])
    if not host.endswith("/32"):
        raise ValueError(f"endpoint route {host} is not a host")
    return host, None if raw[1] is None else ipv4(raw[1]), ifname(raw[2])


def rule_commands(rules: list[Rule], argvs: list[list[str]], present: list[bool]) -> list[list[str]]:
    """The iptables argvs that bring `rules` (their `-C` argvs, whether each is there) onto the host: the missing
    ones added (-I or -A). A re-inserted DROP (-I) would shadow the ACCEPTs inserted after it (a relay's flows above
    its wg0 -> wg0 DROP, a source's ACCEPT above the WireGuard port's DROP): those of its chain that are present move
    back above it (deleted, inserted again)."""
    out: list[list[str]] = []
    moved: set[tuple[str, str]] = set()
    for rule, argv, there in zip(rules, argvs, present, strict=True):
        chain = (rule.table, rule.chain)
        if there and not (rule.first and chain in moved):
            continue
        if there:
            out.append([*argv[:3], "-D", *argv[4:]])
        if rule.first and rule.args[-1] == "DROP":
            moved.add(chain)
        out.append([*argv[:3], "-I" if rule.first else "-A", *argv[4:]])
    return out
