"""What the agent puts on a host beyond wg0's own configuration, as typed values (pure; standard library only).

`Managed` is derived from the interface plan the agent applies and from the default route it read itself: the
iptables rules (wgconf.host_rules, the masquerade on the default route's device) and a relay's own chains
(wgconf.relay_chains, written whole: chain_commands), the host routes to endpoints that
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

from .wgconf import (
    Chain,
    InterfacePlan,
    Rule,
    chains_removal,
    chains_restore,
    endpoint_routes,
    host_rules,
    relay_chains,
    route_mtus,
)

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
    relay_ranges: tuple[str, ...] = ()  # a relay's (InterfacePlan.relay_ranges)

    def rule_objects(self) -> list[Rule]:
        return host_rules(
            self.mss,
            self.listen_port,
            self.listen_sources,
            self.masquerade_dev is not None,
            self.forward,
            self.relay_ranges,
        )

    def chain_objects(self) -> list[Chain]:
        return relay_chains(self.relay_ranges) if self.forward else []

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
                **({"relay_ranges": list(self.relay_ranges)} if self.relay_ranges else {}),  # a relay's
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
        tuple(prefix(r) for r in plan.relay_ranges) if plan.forward else (),
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
        dev, forward, ranges = raw["masquerade_dev"], raw.get("forward", True), raw.get("relay_ranges", [])
        if not isinstance(forward, bool):
            raise ValueError(f"forward: {forward!r} is not true or false")
        if not isinstance(ranges, list) or len(ranges) > 4096:
            raise ValueError("relay_ranges: not a list of prefixes")
        return Managed(
            number(raw["generation"], 0, 2**64),
            number(raw["mss"], 500, 65535),
            number(raw["listen_port"], 1, 65535),
            tuple(prefix(s) for s in sources),
            None if dev is None else ifname(dev),
            tuple(_endpoint_route(r) for r in routes),
            tuple((prefix(r[0]), number(r[1], 576, 65535)) for r in mtus if isinstance(r, list) and len(r) == 2),
            forward,
            tuple(prefix(r) for r in ranges),
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


def _target(rule: Rule) -> str:
    return rule.args[rule.args.index("-j") + 1] if "-j" in rule.args else ""


def rule_commands(rules: list[Rule], argvs: list[list[str]], present: list[bool]) -> list[list[str]]:
    """The iptables argvs that bring `rules` (their `-C` argvs, whether each is there) onto the host: the missing
    ones added (-I or -A). A rule inserted first (-I) lands above the rules of its chain inserted after it at up: a
    present one that follows it in `rules` with another target would be shadowed (a source's ACCEPT by a re-inserted
    DROP of the WireGuard port, a relay's jump to its chains by a re-inserted ACCEPT of wg0): it moves back above
    it (deleted, inserted again)."""
    out: list[list[str]] = []
    inserted: dict[tuple[str, str], set[str]] = {}  # the targets of the rules inserted first so far, by chain
    for rule, argv, there in zip(rules, argvs, present, strict=True):
        chain = (rule.table, rule.chain)
        if there and not (rule.first and inserted.get(chain, set()) - {_target(rule)}):
            continue
        if there:
            out.append([*argv[:3], "-D", *argv[4:]])
        if rule.first:
            inserted.setdefault(chain, set()).add(_target(rule))
        out.append([*argv[:3], "-I" if rule.first else "-A", *argv[4:]])
    return out


def table_chains(text: str) -> dict[str, tuple[str, ...]]:
    """`iptables -t T -S` (a whole table): each chain that exists (`-P` a built-in one, `-N` a user-defined one) and
    its `-A` lines, in order."""
    chains: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("-P", "-N"):
            chains.setdefault(words[1], [])
        elif len(words) >= 2 and words[0] == "-A":
            chains.setdefault(words[1], []).append(line)
    return {name: tuple(lines) for name, lines in chains.items()}


def chain_commands(
    want: Managed, last: Managed | None, tables: dict[str, dict[str, tuple[str, ...]]]
) -> tuple[dict[tuple[str, str], tuple[str, ...] | None], list[tuple[str, str]]]:
    """The agent's own chains of `want` and `last` as they run (`tables`: table_chains of each table; None: no such
    chain), and the `iptables-restore --noflush` inputs that bring them to `want`, with what each does: the chains of
    `last` no longer wanted, removed (run after the rules that jump to them are gone); the wanted ones, created or
    refilled whole when one is missing or differs (run before the rules that jump to them)."""
    chains, old = want.chain_objects(), last.chain_objects() if last else []
    running = {(c.table, c.name): tables.get(c.table, {}).get(c.name) for c in chains + old}
    gone = [c for c in old if c.name not in {w.name for w in chains} and running[(c.table, c.name)] is not None]
    stale = [c for c in chains if running[(c.table, c.name)] != tuple(c.lines())]
    texts = [(chains_removal(gone), "removed")] if gone else []
    return running, texts + ([(chains_restore(chains), "written")] if stale else [])
