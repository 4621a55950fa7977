"""Make the running wg0 match a peer document: level-triggered, idempotent, never `wg-quick down/up`.

`Applier.apply` compares what the document asks for with what runs (read-only: `ip link`, `wg show dump`,
`ip route`) and changes only the difference, so a second run with the same document runs no mutating command
and drift (a peer removed by hand, a route deleted, iptables rules flushed) is repaired on the next run:
- /etc/wireguard/wg0.conf rewritten atomically (0600) when its text changes, so a reboot starts from the latest state;
- `wg syncconf wg0` from `wg-quick strip` of that file (peers, keys, keepalive, private key on rotation);
- `ip link set dev wg0 mtu N`, the overlay address, the AllowedIPs routes outside the interface's own prefix (as
  wg-quick adds them), and the PostUp/PostDown commands that changed (the old PostDown, then the new PostUp:
  e.g. the MSS clamp);
- the metrics mapping (/etc/wg-mesh/peers.json).
Without wg0 (first boot, before wg-quick@wg0 starts) only the files are written. Every command goes through one
injectable runner; key material travels only on a command's stdin/stdout and is never logged.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .document import Document, is_key
from .mapping import MAPPING_PATH, peer_mapping
from .wgconf import INTERFACE, WG_CONF_PATH, parse_wg_quick_conf, wg_quick_conf

KEY_REASON, APPLY_REASON = "key", "apply"  # refusals beyond the document's own (document.REASONS)
COMMAND_TIMEOUT_S = 30.0
_KEYLIKE = re.compile(r"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=")


def redact(text: str) -> str:
    """Anything shaped like a WireGuard key (wg(8) quotes a line it cannot parse, key included)."""
    return _KEYLIKE.sub("(key redacted)", text)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], "str | None"], Result]  # argv, stdin


def run_command(argv: Sequence[str], stdin: str | None = None) -> Result:
    """The real runner: sbin on PATH, C locale, a timeout; a missing tool or a hang is a failed command."""
    env = dict(os.environ, LC_ALL="C")
    env["PATH"] = "/usr/local/sbin:/usr/sbin:/sbin:" + env.get("PATH", "/usr/bin:/bin")
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Result(127, "", str(exc))
    return Result(done.returncode, done.stdout, done.stderr)


class ApplyError(RuntimeError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Paths:
    wg_conf: str = WG_CONF_PATH
    mapping: str = MAPPING_PATH
    state: str = "/var/lib/wg-mesh/agent-state.json"
    metrics: str = "/var/lib/prometheus/node-exporter/wg_mesh_agent.prom"
    path_metrics: str = "/var/lib/prometheus/node-exporter/wg_mesh_path.prom"  # wg_mesh.gateway.pmtu
    ha_metrics: str = "/var/lib/prometheus/node-exporter/wg_mesh_ha.prom"  # wg_mesh.gateway.ha_run

    @classmethod
    def under(cls, root: str) -> Paths:
        """The same paths below `root` (tests, and anyone who runs the agent outside /)."""
        default = cls()
        return cls(
            *(
                os.path.join(root, p.lstrip("/"))
                for p in (
                    default.wg_conf,
                    default.mapping,
                    default.state,
                    default.metrics,
                    default.path_metrics,
                    default.ha_metrics,
                )
            )
        )


def atomic_write(path: str, text: str, mode: int) -> None:
    """Write through a temporary file in the same directory (mode set before any byte), fsync, rename."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Running:
    """What `wg show IFACE dump` says, without the private key (its first field is dropped unread)."""

    public_key: str
    listen_port: int
    peers: dict[str, tuple[frozenset[str], int, bool]]  # public key -> (allowed ips, keepalive, has endpoint)


def parse_dump(text: str) -> Running:
    lines = [line.split("\t") for line in text.splitlines() if line.strip()]
    if not lines or len(lines[0]) != 4:
        raise ValueError("wg show dump: no interface line")
    peers = {}
    for fields in lines[1:]:
        if len(fields) != 8:
            raise ValueError(f"wg show dump: a peer line has {len(fields)} fields, not 8")
        key, _psk, endpoint, allowed, _hs, _rx, _tx, keepalive = fields
        ips = frozenset() if allowed == "(none)" else frozenset(allowed.split(","))
        peers[key] = (ips, 0 if keepalive == "off" else int(keepalive), endpoint != "(none)")
    return Running(public_key=lines[0][1], listen_port=int(lines[0][2]), peers=peers)


def parse_routes(text: str) -> set[str]:
    """Destinations of `ip -4 route show dev IFACE`, without the kernel's own (the interface's prefix)."""
    routes = set()
    for line in text.splitlines():
        fields = line.split()
        if not fields or "kernel" in fields or fields[0] == "default":
            continue
        routes.add(str(ipaddress.IPv4Network(fields[0], strict=False)))
    return routes


def desired_routes(doc: Document) -> set[str]:
    """The AllowedIPs that wg-quick would route: those not already covered by the interface's own prefix."""
    own = ipaddress.IPv4Interface(doc.plan.address).network
    return {
        cidr for peer in doc.plan.peers for cidr in peer.allowed_ips if not ipaddress.IPv4Network(cidr).subnet_of(own)
    }


def hooks(conf: str | None) -> tuple[list[str], list[str]]:
    """The PostUp and PostDown commands of a wg-quick file (none for no file)."""
    if not conf:
        return [], []
    interface = dict(parse_wg_quick_conf(conf)).get("Interface", {})
    return interface.get("PostUp", []), interface.get("PostDown", [])


class Applier:
    def __init__(self, runner: Runner, paths: Paths, interface: str = INTERFACE) -> None:
        self.run = runner
        self.paths = paths
        self.interface = interface
        # wgconf.ROLES: "standby" only on an HA site's gateway while the other one is active (wg_mesh.gateway.ha_run
        # sets it; the next apply renders and syncs it, level-triggered like everything else)
        self.role = "active"
        # public keys the next apply removes and re-adds (the active role; wg_mesh.gateway.ha_kick): a fresh peer in
        # wireguard-go has no handshake timer, so the next packet to it initiates at once (device/send.go)
        self.rearm: frozenset[str] = frozenset()

    def _must(self, argv: Sequence[str], stdin: str | None = None) -> Result:
        result = self.run(argv, stdin)
        if result.returncode != 0:
            # argv never holds a key (keys go on stdin); wg may quote one in its error: redacted
            raise ApplyError(APPLY_REASON, f"`{' '.join(argv)}` failed: {redact(result.stderr.strip())[-300:]}")
        return result

    def public_key(self, private_key: str) -> str:
        return self._must(["wg", "pubkey"], private_key + "\n").stdout.strip()

    def private_key(self, doc: Document, old_conf: str | None, fetch_key: Callable[[], str]) -> str:
        """The key of wg0.conf while it still matches the document's public key; after a rotation (or on the first
        run) the store's, which must match: otherwise the store is behind the document (reason `key`)."""
        if old_conf:
            current = dict(parse_wg_quick_conf(old_conf)).get("Interface", {}).get("PrivateKey", [""])[0]
            if is_key(current) and self.public_key(current) == doc.public_key:
                return current
        key = fetch_key().strip()
        if not is_key(key):
            raise ApplyError(KEY_REASON, "the private key from the store is not a WireGuard key")
        if self.public_key(key) != doc.public_key:
            raise ApplyError(KEY_REASON, "the private key from the store does not match the document's public key")
        return key

    def _wg_drift(self, doc: Document) -> tuple[bool, list[str]]:
        """Whether wg0 differs from the document in this role, and the peers that must be removed before the sync:
        a standby's peers that still have an endpoint or a keepalive (`wg syncconf` leaves fields the file does not
        name, and an endpoint cannot be unset: the peer is removed and re-added without one, its session gone); in
        the active role, the running peers of `rearm`."""
        running = parse_dump(self._must(["wg", "show", self.interface, "dump"]).stdout)
        active = self.role == "active"
        wanted = {
            p.public_key: (frozenset(p.allowed_ips), p.persistent_keepalive if active else 0, active)
            for p in doc.plan.peers
        }
        stale = (
            sorted(k for k in running.peers if k in self.rearm)
            if active
            else sorted(k for k, (_, keepalive, endpoint) in running.peers.items() if keepalive or endpoint)
        )
        drift = (
            running.public_key != doc.public_key
            or running.listen_port != doc.plan.listen_port
            or running.peers != wanted
        )
        return drift, stale

    def apply(
        self, doc: Document, fetch_key: Callable[[], str], applied_hooks: tuple[list[str], list[str]] | None = None
    ) -> list[str]:
        """Bring wg0, its files and routes to `doc`; returns what changed (no key in it). `applied_hooks`: the
        PostUp/PostDown commands that run now (the state file's), else those of the wg0.conf on disk."""
        old_conf = read_text(self.paths.wg_conf)
        key = self.private_key(doc, old_conf, fetch_key)
        conf = wg_quick_conf(doc.plan, key, self.role)
        changes = []
        if conf != old_conf:
            atomic_write(self.paths.wg_conf, conf, 0o600)
            changes.append(f"wrote {self.paths.wg_conf}")
        link = self.run(["ip", "-o", "link", "show", "dev", self.interface], None)
        if link.returncode == 0:
            changes += self._running(doc, conf, conf != old_conf, link.stdout, applied_hooks or hooks(old_conf))
        elif "does not exist" not in link.stderr:
            raise ApplyError(APPLY_REASON, f"`ip link show dev {self.interface}` failed: {link.stderr.strip()[-300:]}")
        mapping = peer_mapping(doc.plan, self.interface)
        if read_text(self.paths.mapping) != mapping:
            atomic_write(self.paths.mapping, mapping, 0o644)
            changes.append(f"wrote {self.paths.mapping}")
        return changes

    def _running(
        self, doc: Document, conf: str, conf_changed: bool, link: str, old_hooks: tuple[list[str], list[str]]
    ) -> list[str]:
        iface, changes = self.interface, []
        drift, stale = self._wg_drift(doc)
        if conf_changed or drift or stale:
            for peer in stale:  # a public key is not a secret; it goes in argv as wg(8) takes it
                self._must(["wg", "set", iface, "peer", peer, "remove"])
            if stale:
                changes.append(
                    f"{self.role}: {len(stale)} peers " + ("re-armed" if self.role == "active" else "without endpoint")
                )
            stripped = self._must(["wg-quick", "strip", self.paths.wg_conf]).stdout
            self._must(["wg", "syncconf", iface, "/dev/stdin"], stripped)
            changes.append("wg syncconf")
        mtu = re.search(r" mtu (\d+) ", link)
        # A larger MTU goes on last, after the routes and their hooks: a private path's jumbo wg0 (docs/underlay.md)
        # must not carry internet peers' traffic before their routes have their own MTU. A smaller one goes first.
        raising = mtu is not None and int(mtu.group(1)) < doc.plan.mtu
        if not raising and (mtu is None or int(mtu.group(1)) != doc.plan.mtu):
            changes.append(self._set_mtu(mtu.group(1) if mtu else "?", doc.plan.mtu))
        addresses = re.findall(r" inet (\S+)", self._must(["ip", "-4", "-o", "address", "show", "dev", iface]).stdout)
        if addresses != [doc.plan.address]:  # a new overlay address: the new one first, then the old ones go
            if doc.plan.address not in addresses:
                self._must(["ip", "-4", "address", "add", doc.plan.address, "dev", iface])
            for address in (a for a in addresses if a != doc.plan.address):
                self._must(["ip", "-4", "address", "del", address, "dev", iface])
            changes.append(f"address {', '.join(addresses)} -> {doc.plan.address}")
        running = parse_routes(self._must(["ip", "-4", "route", "show", "dev", iface]).stdout)
        wanted = desired_routes(doc)
        for cidr in sorted(wanted - running):
            self._must(["ip", "-4", "route", "add", cidr, "dev", iface])
            changes.append(f"route + {cidr}")
        for cidr in sorted(running - wanted):
            self._must(["ip", "-4", "route", "del", cidr, "dev", iface])
            changes.append(f"route - {cidr}")
        up, down = hooks(conf)
        old_up, old_down = old_hooks
        # the PostDown of what is gone, the PostUp that is new, and every iptables rule (a firewall reload that
        # dropped one is drift like any other: checked with -C, added only when missing)
        new_up = [c for c in up if c not in old_up or c.startswith("iptables ")]
        for command in [c for c in old_down if c not in down] + new_up:
            if self._hook(command.replace("%i", iface)):
                changes.append(f"hook: {command}")
        if raising and mtu is not None:
            changes.append(self._set_mtu(mtu.group(1), doc.plan.mtu))
        return changes

    def _set_mtu(self, old: str, new: int) -> str:
        self._must(["ip", "link", "set", "dev", self.interface, "mtu", str(new)])
        return f"mtu {old} -> {new}"

    def _hook(self, command: str) -> bool:
        """Run one hook as wg-quick does (bash, after replacing %i: the masquerade rule has a $(...) in it). An
        iptables rule is looked up first (-C) and added only when missing, deleted only when present, so a hook
        run that failed halfway is simply run again."""
        verb = re.search(r" -([AID]) ", command)
        if command.startswith("iptables ") and verb:
            present = self.run(["bash", "-c", command[: verb.start()] + " -C " + command[verb.end() :]], None)
            if (present.returncode == 0) != (verb[1] == "D"):
                return False
        self._must(["bash", "-c", command])
        return True
