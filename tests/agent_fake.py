"""A pretend gateway for the agent's pure tests: the commands the agent runs, answered from an in-memory wg0.

`FakeHost` plays `ip`, `wg`, `wg-quick strip` and the hooks' `bash -c` the way the real tools answer (the dump's
tab-separated fields, `ip route`'s lines), records every argv and stdin, and keeps the state the mutating commands
change, so a test sees both the exact command sequence and its effect. No root, no network.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.test_render import REPO, fake_public_key
from wg_mesh import signing, wgkey
from wg_mesh.gateway.apply import Result
from wg_mesh.gateway.document import canonical, encode_body, generation_of
from wg_mesh.gateway.trust import Trust
from wg_mesh.gateway.wgconf import InterfacePlan, Peer, parse_wg_quick_conf
from wg_mesh.stackfile import load
from wg_mesh.topology import PeerAddress, interface_plan

SITE = "aws-use1"
WG_QUICK_ONLY = {"Address", "DNS", "MTU", "Table", "PreUp", "PostUp", "PreDown", "PostDown", "SaveConfig"}
# The commands that only look; everything else the agent runs changes the host.
READ_ONLY = (
    ("ip", "-o", "link", "show"),
    ("wg", "show"),
    ("ip", "-4", "route", "show"),
    ("ip", "-4", "-o", "address", "show"),
    ("wg", "pubkey"),
)


def is_mutating(argv: Sequence[str]) -> bool:
    if argv[:2] == ["bash", "-c"] and " -C " in argv[2]:  # iptables -C: is the rule there?
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
    wg0: bool = False
    mtu: int = 1420
    private_key: str = ""
    listen_port: int = 0
    peers: dict[str, tuple[list[str], int, str]] = field(default_factory=dict)  # key -> (allowed, keepalive, endpoint)
    routes: set[str] = field(default_factory=set)
    rules: set[tuple[str, str, str]] = field(default_factory=set)  # iptables (table, chain, spec)
    network: str = "10.200.0.0/24"  # the kernel's route of the interface's prefix
    addresses: list[str] = field(default_factory=lambda: ["10.200.0.1/24"])
    calls: list[tuple[list[str], str | None]] = field(default_factory=list)
    fail: dict[str, Result] = field(default_factory=dict)  # argv[0..1] joined -> forced result

    @property
    def commands(self) -> list[list[str]]:
        return [argv for argv, _ in self.calls]

    def mutating(self) -> list[list[str]]:
        return [argv for argv in self.commands if is_mutating(argv)]

    def up_from(self, conf_path: Path) -> None:
        """What `wg-quick up` leaves: wg0 configured from the file, its MTU and the AllowedIPs routes."""
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
                [a.strip() for a in p["AllowedIPs"][0].split(",")],
                int(p.get("PersistentKeepalive", [str(old.get(p["PublicKey"][0], ([], 0, ""))[1])])[0]),
                p.get("Endpoint", [old.get(p["PublicKey"][0], ([], 0, "(none)"))[2]])[0],
            )
            for name, p in sections[1:]
            if name == "Peer"
        }
        if keep_wg_quick:
            for hook in interface["PostUp"]:
                self._iptables(hook.replace("%i", "wg0"))
            self.mtu = int(interface["MTU"][0])
            self.routes = {a for allowed, _, _ in self.peers.values() for a in allowed if not a.startswith("10.200.0.")}

    def dump(self) -> str:
        lines = [f"{self.private_key}\t{wgkey.public_key(self.private_key)}\t{self.listen_port}\toff"]
        for key, (allowed, keepalive, endpoint) in self.peers.items():
            lines.append(f"{key}\t(none)\t{endpoint}\t{','.join(allowed)}\t0\t0\t0\t{keepalive or 'off'}")
        return "\n".join(lines) + "\n"

    def __call__(self, argv: Sequence[str], stdin: str | None) -> Result:
        argv = list(argv)
        self.calls.append((argv, stdin))
        forced = self.fail.get(" ".join(argv[:2]))
        if forced is not None:
            return forced
        if argv[:2] == ["wg", "pubkey"]:
            assert stdin is not None
            return Result(0, wgkey.public_key(stdin.strip()) + "\n", "")
        if argv[:4] == ["ip", "-o", "link", "show"]:
            if not self.wg0:
                return Result(1, "", 'Device "wg0" does not exist.\n')
            flags = "<POINTOPOINT,NOARP,UP,LOWER_UP>"
            return Result(0, f"5: wg0: {flags} mtu {self.mtu} qdisc fq_codel state UNKNOWN\n", "")
        assert self.wg0, f"{argv} run without wg0"
        if argv[:3] == ["wg", "show", "wg0"] and argv[3:] == ["dump"]:
            return Result(0, self.dump(), "")
        if argv[:2] == ["wg-quick", "strip"]:
            conf = Path(argv[2]).read_text()
            kept = [line for line in conf.splitlines() if line.split("=", 1)[0].strip() not in WG_QUICK_ONLY]
            return Result(0, "\n".join(kept) + "\n", "")
        if argv == ["wg", "syncconf", "wg0", "/dev/stdin"]:
            assert stdin is not None
            self._sync(stdin)
            return Result(0, "", "")
        if argv[:4] == ["wg", "set", "wg0", "peer"] and argv[5:] == ["remove"]:
            self.peers.pop(argv[4], None)
            return Result(0, "", "")
        if argv[:5] == ["ip", "link", "set", "dev", "wg0"] and argv[5] == "mtu":
            self.mtu = int(argv[6])
            return Result(0, "", "")
        if argv[:3] == ["ip", "-4", "route"]:
            verb, cidr = argv[3], argv[4] if len(argv) > 4 else ""
            if verb == "show":
                lines = [f"{self.network} proto kernel scope link src 10.200.0.1"]
                lines += [f"{r.removesuffix('/32')} scope link" for r in sorted(self.routes)]
                return Result(0, "\n".join(lines) + "\n", "")
            if verb == "add":
                if cidr in self.routes:
                    return Result(2, "", "RTNETLINK answers: File exists\n")
                self.routes.add(cidr)
            else:
                self.routes.discard(cidr)
            return Result(0, "", "")
        if argv[:5] == ["ip", "-4", "-o", "address", "show"]:
            lines = [f"5: wg0    inet {a} scope global wg0\\       valid_lft forever" for a in self.addresses]
            return Result(0, "".join(line + "\n" for line in lines), "")
        if argv[:4] == ["ip", "-4", "address", "add"]:
            self.addresses.append(argv[4])
            return Result(0, "", "")
        if argv[:4] == ["ip", "-4", "address", "del"]:
            self.addresses.remove(argv[4])
            return Result(0, "", "")
        if argv[:2] == ["bash", "-c"]:
            return self._iptables(argv[2])
        raise AssertionError(f"unexpected command {argv}")

    def _iptables(self, command: str) -> Result:
        """`iptables -t TABLE -A|-I|-D|-C CHAIN SPEC` on the rule set; any other hook succeeds."""
        fields = command.split(" ", 5)
        if fields[0] != "iptables":
            return Result(0, "", "")
        _, _, table, verb, chain, spec = fields
        rule = (table, chain, spec)
        if verb in ("-A", "-I"):
            self.rules.add(rule)
        elif rule not in self.rules:
            return Result(1, "", "iptables: Bad rule (does a matching rule exist in that chain?).\n")
        elif verb == "-D":
            self.rules.discard(rule)
        return Result(0, "", "")
