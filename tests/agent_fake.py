"""A pretend gateway for the agent's pure tests: the commands the agent runs, answered from an in-memory wg0.

`FakeHost` plays `ip`, `wg`, `iptables` and `iptables-restore` the way the real tools answer (the dump's
tab-separated fields, `ip route`'s lines, `iptables -S`), records every argv and stdin, and keeps the state the
mutating commands change, so a test sees both the exact command sequence and its effect; `fail_at` makes its Nth
mutating command fail. No root, no network.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import itertools
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.test_render import REPO, fake_public_key
from wg_mesh.gateway.apply import Result
from wg_mesh.gateway.document import canonical, encode_body, generation_of
from wg_mesh.gateway.trust import Trust
from wg_mesh.gateway.wgconf import (
    DEFAULT_ROUTE_GUARD,
    DEFAULT_ROUTE_GW,
    InterfacePlan,
    Peer,
    parse_wg_quick_conf,
)
from wg_mesh.plan import signing, wgkey
from wg_mesh.plan.topology import PeerAddress, interface_plan
from wg_mesh.tools.stackfile import load

SITE = "aws-use1"
# The commands that only look; everything else the agent runs changes the host.
READ_ONLY = (
    ("ip", "-o", "link", "show"),
    ("wg", "show"),
    ("ip", "-4", "route", "show"),
    ("ip", "-4", "-o", "route", "show"),
    ("ip", "-4", "-o", "address", "show"),
    ("wg", "pubkey"),
)


def is_mutating(argv: Sequence[str]) -> bool:
    if argv[0] == "iptables" and len(argv) > 3 and argv[3] in ("-C", "-S"):  # is the rule there? / list a chain
        return False
    return not any(tuple(argv[: len(prefix)]) == prefix for prefix in READ_ONLY)


def base_plan() -> InterfacePlan:
    cfg = load(REPO / "Pulumi.prod.yaml")
    directory = {s.name: PeerAddress(f"198.51.100.{i + 1}", fake_public_key(s.name)) for i, s in enumerate(cfg.sites)}
    return interface_plan(cfg, SITE, directory)


def with_peer(plan: InterfacePlan, name: str, cidr: str) -> InterfacePlan:
    peer = Peer(name, fake_public_key(name), (cidr,), "203.0.113.9:51820", 25)
    return dataclasses.replace(plan, peers=(*plan.peers, peer))


def without_peer(plan: InterfacePlan, name: str) -> InterfacePlan:
    return dataclasses.replace(plan, peers=tuple(p for p in plan.peers if p.name != name))


def with_mtu(plan: InterfacePlan, mtu: int) -> InterfacePlan:
    return dataclasses.replace(plan, mtu=mtu, mss=mtu - 40)


@dataclass
class Keys:
    private: str = field(default_factory=wgkey.generate_private_key)

    @property
    def public(self) -> str:
        return wgkey.public_key(self.private)


# The test mesh's signing key (a fixed seed: tests only) and what aws-use1's agent.json says (Pulumi.prod.yaml).
SEED = bytes(range(32))
SCOPE = "wg-mesh/prod"
TRUST = Trust(
    signing_key=signing.verify_key_b64(SEED),
    scope=SCOPE,
    site=SITE,
    cidrs=("10.10.0.0/16",),
    overlay="10.200.0.0/24",
    address="10.200.0.1/24",
    masquerade=False,
    cloud="aws",
)
TRUST_JSON = dataclasses.asdict(TRUST) | {"cidrs": list(TRUST.cidrs)}  # agent.json's `trust` object
_serials = itertools.count(1_700_000_000)  # every document a test makes is newer than the one before


def next_serial() -> int:
    return next(_serials)


def sign(payload: str, seed: bytes = SEED) -> str:
    return signing.sign(payload, seed)


def signed(plan: InterfacePlan, public_key: str, *, serial: int | None = None, scope: str = SCOPE) -> str:
    """The signed document of `plan` (what the program stores), the next serial unless given."""
    return sign(encode_body(plan, public_key, scope=scope, serial=next_serial() if serial is None else serial))


def doc_text(plan: InterfacePlan, keys: Keys) -> str:
    return signed(plan, keys.public)


def body_of(text: str) -> dict[str, Any]:
    """The (signed) body of an envelope, without any check: for tests that edit one and sign it again."""
    body: dict[str, Any] = json.loads(base64.b64decode(json.loads(text)["payload"]))
    return body


def resign(body: dict[str, Any], *, reseal: bool = True, seed: bytes = SEED) -> str:
    """`body` (edited) signed again; `reseal`: with the generation of its new content."""
    body = dict(body)
    if reseal:
        body["generation"] = generation_of(body)
    return sign(canonical(body), seed)


@dataclass
class FakeHost:
    """wg0 and the bits of the host around it. `rules`: iptables rules in chain order, (table, chain, spec words
    joined by spaces); `routes`: prefixes routed into wg0 (`route_mtu`: their MTU and lock); `main`: other routes of
    the main table (endpoint hosts: 'via X dev Y'); `fail_at`: the Nth mutating command (from 1) fails, once."""

    wg0: bool = False
    mtu: int = 1420
    private_key: str = ""
    listen_port: int = 0
    peers: dict[str, tuple[list[str], int, str]] = field(default_factory=dict)  # key -> (allowed, keepalive, endpoint)
    routes: set[str] = field(default_factory=set)
    route_mtu: dict[str, tuple[int, bool]] = field(default_factory=dict)
    main: dict[str, str] = field(default_factory=dict)
    default: str | None = "via 10.0.0.1 dev eth0"
    rules: list[tuple[str, str, str]] = field(default_factory=list)
    own: list[tuple[str, str]] = field(default_factory=list)  # user-defined chains (table, name), in creation order
    network: str = "10.200.0.0/24"  # the kernel's route of the interface's prefix
    addresses: list[str] = field(default_factory=lambda: ["10.200.0.1/24"])
    calls: list[tuple[list[str], str | None]] = field(default_factory=list)
    fail: dict[str, Result] = field(default_factory=dict)  # argv[0..1] joined -> forced result
    fail_at: int | None = None
    mutations: int = 0
    sysctl: list[str] = field(default_factory=list)  # settings written (not part of `state`)

    @property
    def commands(self) -> list[list[str]]:
        return [argv for argv, _ in self.calls]

    def mutating(self) -> list[list[str]]:
        return [argv for argv in self.commands if is_mutating(argv)]

    def state(self) -> dict[str, object]:
        """Everything an apply may change (for before/after comparisons)."""
        chains: dict[tuple[str, str], list[str]] = {}  # the order within a chain is what iptables keeps
        for table, chain, spec in self.rules:
            chains.setdefault((table, chain), []).append(spec)
        return {
            name: copy.deepcopy(getattr(self, name))
            for name in ("wg0", "mtu", "private_key", "listen_port", "peers", "routes", "route_mtu", "main")
        } | {"addresses": list(self.addresses), "rules": chains, "own": sorted(self.own)}

    def up_from(self, conf_path: Path) -> None:
        """What `wg-quick up` leaves: wg0 configured from the file, its MTU, the AllowedIPs routes and the PostUp."""
        self.wg0 = True
        self._sync(conf_path.read_text(), keep_wg_quick=True)

    def _sync(self, conf: str, keep_wg_quick: bool = False) -> None:
        sections = parse_wg_quick_conf(conf)
        interface = sections[0][1]
        self.private_key = interface["PrivateKey"][0]
        self.listen_port = int(interface["ListenPort"][0])
        # as wg syncconf: peers not in the file go; a field the file does not name keeps its running value
        # (an endpoint cannot be unset, only the peer removed: `wg set wg0 peer K remove`)
        old = self.peers
        self.peers = {
            p["PublicKey"][0]: (
                [a.strip() for a in p.get("AllowedIPs", [""])[0].split(",") if a.strip()],
                int(p.get("PersistentKeepalive", [str(old.get(p["PublicKey"][0], ([], 0, ""))[1])])[0]),
                p.get("Endpoint", [old.get(p["PublicKey"][0], ([], 0, "(none)"))[2]])[0],
            )
            for name, p in sections[1:]
            if name == "Peer"
        }
        if keep_wg_quick:
            self.mtu = int(interface["MTU"][0])
            self.routes = {a for allowed, _, _ in self.peers.values() for a in allowed if not a.startswith("10.200.0.")}
            dev = self.default.split()[-1] if self.default else ""
            gw = self.default.split()[1] if self.default and self.default.startswith("via ") else ""
            for hook in interface["PostUp"]:
                # wg-quick's shell, for the hooks that look the default route up (DEFAULT_ROUTE_GUARD)
                hook = hook.removeprefix(DEFAULT_ROUTE_GUARD).removeprefix(f"gw={DEFAULT_ROUTE_GW}; ")
                hook = hook.replace('${gw:+via "$gw"}', f"via {gw}" if gw else "").replace('"$dev"', dev)
                if hook.startswith(("iptables ", "ip ")):
                    assert self._do(hook.replace("%i", "wg0").split(), None).returncode == 0, hook
                elif hook.startswith("printf ") and hook.endswith(" | iptables-restore --noflush"):  # restore_hook
                    words = shlex.split(hook.removesuffix(" | iptables-restore --noflush"))
                    assert words[:2] == ["printf", "%s\\n"], hook
                    assert self._restore("".join(f"{w}\n" for w in words[2:])).returncode == 0, hook

    def dump(self) -> str:
        lines = [f"{self.private_key}\t{wgkey.public_key(self.private_key)}\t{self.listen_port}\toff"]
        for key, (allowed, keepalive, endpoint) in self.peers.items():
            ips = ",".join(allowed) or "(none)"
            lines.append(f"{key}\t(none)\t{endpoint}\t{ips}\t0\t0\t0\t{keepalive or 'off'}")
        return "\n".join(lines) + "\n"

    def __call__(self, argv: Sequence[str], stdin: str | None) -> Result:
        argv = list(argv)
        self.calls.append((argv, stdin))
        forced = self.fail.get(" ".join(argv[:2]))
        if forced is not None:
            return forced
        if is_mutating(argv):
            self.mutations += 1
            if self.mutations == self.fail_at:
                return Result(1, "", f"injected failure of mutating command {self.mutations}\n")
        return self._do(argv, stdin)

    def _route_line(self, prefix: str) -> str:
        mtu = self.route_mtu.get(prefix)
        extra = f" mtu {'lock ' if mtu[1] else ''}{mtu[0]}" if mtu else ""
        return f"{prefix.removesuffix('/32')} dev wg0 scope link{extra}"

    def _do(self, argv: list[str], stdin: str | None) -> Result:
        if argv[:2] == ["wg", "pubkey"]:
            assert stdin is not None
            return Result(0, wgkey.public_key(stdin.strip()) + "\n", "")
        if argv[:4] == ["ip", "-o", "link", "show"]:
            if not self.wg0:
                return Result(1, "", 'Device "wg0" does not exist.\n')
            flags = "<POINTOPOINT,NOARP,UP,LOWER_UP>"
            return Result(0, f"5: wg0: {flags} mtu {self.mtu} qdisc fq_codel state UNKNOWN\n", "")
        if argv == ["ip", "-4", "route", "show", "default"]:
            return Result(0, f"default {self.default} proto dhcp metric 100\n" if self.default else "", "")
        if argv[:1] == ["iptables"]:
            return self._iptables(argv)
        assert self.wg0, f"{argv} run without wg0"
        if argv[:3] == ["wg", "show", "wg0"] and argv[3:] == ["dump"]:
            return Result(0, self.dump(), "")
        if argv == ["wg", "syncconf", "wg0", "/dev/stdin"]:
            assert stdin is not None
            self._sync(stdin)
            return Result(0, "", "")
        if argv[:4] == ["wg", "set", "wg0", "peer"] and argv[5:] == ["remove"]:
            self.peers.pop(argv[4], None)
            return Result(0, "", "")
        if argv[:4] == ["wg", "set", "wg0", "peer"] and len(argv) > 5:
            # `wg set wg0 peer K [allowed-ips A,B] [persistent-keepalive N] [endpoint E]`: a field not named keeps its
            # value; AllowedIPs move to this peer from any other that had them (as WireGuard does)
            options = dict(zip(argv[5::2], argv[6::2], strict=True))
            assert set(options) <= {"allowed-ips", "persistent-keepalive", "endpoint"}, argv
            allowed, keepalive, endpoint = self.peers.get(argv[4], ([], 0, "(none)"))
            if "allowed-ips" in options:
                allowed = [a for a in options["allowed-ips"].split(",") if a]
                for key, (ips, k, e) in list(self.peers.items()):
                    self.peers[key] = ([a for a in ips if a not in allowed], k, e)
            keepalive = int(options.get("persistent-keepalive", keepalive))
            self.peers[argv[4]] = (allowed, keepalive, options.get("endpoint", endpoint))
            return Result(0, "", "")
        if argv[:5] == ["ip", "link", "set", "dev", "wg0"] and argv[5] == "mtu":
            self.mtu = int(argv[6])
            return Result(0, "", "")
        if argv == ["ip", "-4", "-o", "route", "show", "table", "main"]:
            lines = [f"default {self.default} proto dhcp metric 100"] if self.default else []
            lines.append(f"{self.network} dev wg0 proto kernel scope link src 10.200.0.1")
            lines += [self._route_line(r) for r in sorted(self.routes)]
            lines += [f"{dst.removesuffix('/32')} {rest}" for dst, rest in sorted(self.main.items())]
            return Result(0, "\n".join(lines) + "\n", "")
        if argv[:3] == ["ip", "-4", "route"]:
            return self._ip_route(argv[3], argv[4], argv[5:])
        if argv[:5] == ["ip", "-4", "-o", "address", "show"]:
            lines = [f"5: wg0    inet {a} scope global wg0\\       valid_lft forever" for a in self.addresses]
            return Result(0, "".join(line + "\n" for line in lines), "")
        if argv[:4] == ["ip", "-4", "address", "add"]:
            self.addresses.append(argv[4])
            return Result(0, "", "")
        if argv[:4] == ["ip", "-4", "address", "del"]:
            self.addresses.remove(argv[4])
            return Result(0, "", "")
        if argv[:3] == ["sysctl", "-q", "-w"]:
            self.sysctl.append(argv[3])
            return Result(0, "", "")
        if argv == ["iptables-restore", "--noflush"]:
            assert stdin is not None
            return self._restore(stdin)
        raise AssertionError(f"unexpected command {argv}")

    def _ip_route(self, verb: str, dst: str, rest: list[str]) -> Result:
        dst = dst if "/" in dst else f"{dst}/32"
        attrs = dict(zip(rest[::2], rest[1::2], strict=False))
        on_wg = attrs.get("dev") == "wg0" and "via" not in attrs
        if verb == "del":
            if dst not in self.routes and dst not in self.main:
                return Result(2, "", "RTNETLINK answers: No such process\n")
            self.routes.discard(dst)
            self.route_mtu.pop(dst, None)
            self.main.pop(dst, None)
            return Result(0, "", "")
        if verb == "add" and (dst in self.routes or dst in self.main):
            return Result(2, "", "RTNETLINK answers: File exists\n")
        assert verb in ("add", "replace"), verb
        self.routes.discard(dst)
        self.route_mtu.pop(dst, None)
        self.main.pop(dst, None)
        if on_wg:
            self.routes.add(dst)
            if "mtu" in rest:
                lock = rest[rest.index("mtu") + 1] == "lock"
                self.route_mtu[dst] = (int(rest[rest.index("mtu") + 1 + lock]), lock)
        else:
            self.main[dst] = " ".join(rest)
        return Result(0, "", "")

    def _iptables(self, argv: list[str]) -> Result:
        """`iptables -t TABLE -S` (the table), or `-A|-I|-D|-C|-S|-N|-F|-X CHAIN [SPEC]` on the ordered rule list."""
        _, _, table, verb, *rest = argv
        if verb == "-S" and not rest:
            builtin = sorted({c for t, c, _ in self.rules if t == table and (t, c) not in self.own} | {"FORWARD"})
            lines = [f"-P {c} ACCEPT" for c in builtin] + [f"-N {c}" for t, c in self.own if t == table]
            return Result(
                0, "\n".join(lines + [f"-A {c} {spec}" for t, c, spec in self.rules if t == table]) + "\n", ""
            )
        rules, own = list(self.rules), list(self.own)
        problem = self._command(table, verb, rest)
        if problem:
            self.rules, self.own = rules, own
            return Result(1, "", f"iptables: {problem}.\n")
        return Result(0, self._listing, "")

    _listing = ""
    BUILTIN = ("INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING")
    TARGETS = ("ACCEPT", "DROP", "RETURN", "TCPMSS", "MASQUERADE")

    def _command(self, table: str, verb: str, words: list[str]) -> str | None:
        """One iptables command on the state (a problem: the caller puts the state back). A user-defined chain must
        exist to hold, list or be the target of a rule, and be empty and unreferenced to be deleted."""
        chain, args = words[0], words[1:]
        rule = (table, chain, " ".join(args))
        known = chain in self.BUILTIN or (table, chain) in self.own
        target = args[args.index("-j") + 1] if "-j" in args else None
        self._listing = ""
        if verb == "-N":
            if known:
                return "Chain already exists"
            self.own.append((table, chain))
            return None
        if not known:
            return "No chain/target/match by that name"
        if verb == "-S":
            head = [f"-P {chain} ACCEPT" if chain in self.BUILTIN else f"-N {chain}"]
            self._listing = "\n".join(
                head + [f"-A {c} {spec}" for t, c, spec in self.rules if (t, c) == (table, chain)]
            )
            self._listing += "\n"
        elif verb == "-F":
            self.rules = [r for r in self.rules if (r[0], r[1]) != (table, chain)]
        elif verb == "-X":
            if any((t, c) == (table, chain) for t, c, _ in self.rules):
                return "Directory not empty"
            if any(t == table and f"-j {chain}".split() == spec.split()[-2:] for t, _, spec in self.rules):
                return "Device or resource busy"
            self.own.remove((table, chain))
        elif verb in ("-A", "-I") and target not in (None, *self.TARGETS) and (table, target) not in self.own:
            return "No chain/target/match by that name"
        elif verb == "-A":
            self.rules.append(rule)
        elif verb == "-I":
            self.rules.insert(0, rule)
        elif rule not in self.rules:
            return "Bad rule (does a matching rule exist in that chain?)"
        elif verb == "-D":
            self.rules.remove(rule)
        return None

    def _restore(self, text: str) -> Result:
        """`iptables-restore --noflush`: `*TABLE`, `:CHAIN - [0:0]` (a user-defined chain created, or emptied when it
        exists), commands, `COMMIT`; all or nothing."""
        rules, own, table = list(self.rules), list(self.own), None
        for line in text.splitlines():
            words = line.split()
            if line.startswith("*"):
                table = line[1:]
                continue
            assert table is not None, text
            if line == "COMMIT":
                table = None
                continue
            if line.startswith(":"):
                chain = words[0][1:]
                problem = self._command(table, "-F" if (table, chain) in self.own else "-N", [chain])
            else:
                problem = self._command(table, words[0], words[1:])
            if problem:
                self.rules, self.own = rules, own
                return Result(1, "", f"iptables-restore: line failed: {problem}\n")
        assert table is None, text
        return Result(0, "", "")
