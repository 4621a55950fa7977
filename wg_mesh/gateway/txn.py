"""The host as it was before an apply, and putting it back (wg_mesh.gateway.apply's rollback). Standard library only.

`Snapshot` holds what an apply may change, read before its first mutating step: wg0.conf, the metrics mapping and
the agent's record (bytes and mode), wg0's MTU, overlay addresses, private key (in memory only: it goes back on the
stdin of `wg syncconf`, never in argv, a log or a repr), listen port, fwmark and peers (allowed IPs, endpoint,
keepalive), the main table's routes on wg0 and to the endpoint hosts (MTU and `lock` included), and the chains the
agent's iptables rules live in (`iptables -t T -S CHAIN`). `restore` makes each part equal to it again, in reverse
order of the apply's steps, each part on its own (one that fails does not stop the others) and returns what failed.
A chain goes back whole and at once (`iptables-restore --noflush`: flushed and refilled in one commit), so the rules
are in their old order too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import files
from .hostplan import KernelRoute, parse_routes, table_chains

Lines = tuple[str, ...] | None  # an own chain's `-A` lines; None: it does not exist
Run = Callable[[Sequence[str], "str | None"], tuple[int, str, str]]  # argv, stdin -> (status, stdout, stderr)


@dataclass(frozen=True)
class WgPeer:
    public_key: str
    allowed_ips: tuple[str, ...]
    endpoint: str  # "(none)" when it has none
    keepalive: int


@dataclass(frozen=True)
class WgState:
    """`wg show IFACE dump` (its counters and handshakes left out)."""

    private_key: str = field(repr=False)
    public_key: str
    listen_port: int
    fwmark: str
    peers: dict[str, WgPeer]

    def config(self) -> str:
        """A wg(8) configuration (for `wg syncconf IFACE /dev/stdin`) that brings wg0 back to this state."""
        lines = ["[Interface]", f"PrivateKey = {self.private_key}", f"ListenPort = {self.listen_port}"]
        lines.append(f"FwMark = {self.fwmark}")
        for peer in self.peers.values():
            lines += ["", "[Peer]", f"PublicKey = {peer.public_key}"]
            lines += [f"AllowedIPs = {', '.join(peer.allowed_ips)}"] if peer.allowed_ips else []
            lines += [f"Endpoint = {peer.endpoint}"] if peer.endpoint != "(none)" else []
            lines.append(f"PersistentKeepalive = {peer.keepalive}")
        return "\n".join(lines) + "\n"


def parse_dump(text: str) -> WgState:
    lines = [line.split("\t") for line in text.splitlines() if line.strip()]
    if not lines or len(lines[0]) != 4:
        raise ValueError("wg show dump: no interface line")
    private, public, port, fwmark = lines[0]
    peers = {}
    for fields in lines[1:]:
        if len(fields) != 8:
            raise ValueError(f"wg show dump: a peer line has {len(fields)} fields, not 8")
        key, _psk, endpoint, allowed, _hs, _rx, _tx, keepalive = fields
        ips = () if allowed == "(none)" else tuple(allowed.split(","))
        if not (keepalive == "off" or (keepalive.isascii() and keepalive.isdigit())) or not port.isdigit():
            raise ValueError("wg show dump: a keepalive or port is not a number")
        peers[key] = WgPeer(key, ips, endpoint, 0 if keepalive == "off" else int(keepalive))
    return WgState(private, public, int(port), fwmark, peers)


def link_mtu(text: str) -> int | None:
    match = re.search(r" mtu (\d+) ", text)
    return int(match.group(1)) if match else None


def addresses(text: str) -> list[str]:
    return re.findall(r" inet (\S+)", text)


ROUTES_ARGV = ["ip", "-4", "-o", "route", "show", "table", "main"]


@dataclass(frozen=True)
class Saved:
    """A file as it was (None: absent), to put back as it was (mode included)."""

    path: str
    data: bytes | None
    mode: int = 0o600

    def __repr__(self) -> str:  # wg0.conf holds the private key: never in a repr
        return f"Saved({self.path!r}, {'absent' if self.data is None else f'{len(self.data)} bytes'})"


def save_file(path: str, mode: int) -> Saved:
    data = files.read_bytes(path)
    if data is not None:
        with contextlib.suppress(OSError):
            mode = stat.S_IMODE(os.lstat(path).st_mode)
    return Saved(path, data, mode)


def restore_file(saved: Saved) -> bool:
    """Put the file back; True when it was different."""
    if files.read_bytes(saved.path) == saved.data:
        return False
    if saved.data is None:
        os.unlink(saved.path)
    else:
        files.atomic_write(saved.path, saved.data, saved.mode)
    return True


@dataclass(frozen=True)
class Snapshot:
    files: tuple[Saved, ...]  # in the order the apply writes them
    interface: str
    up: bool = False  # wg0 existed: the running parts below are meaningful
    mtu: int | None = None
    addresses: tuple[str, ...] = ()
    wg: WgState | None = None
    routes: dict[str, KernelRoute] = field(default_factory=dict)  # the main table's, by destination
    route_scope: frozenset[str] = frozenset()  # endpoint hosts the apply may touch (besides the routes on wg0)
    chains: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (table, chain) -> `-A` lines
    # the agent's own chains (a relay's, wgconf.relay_chains): (table, chain) -> `-A` lines, None: it did not exist
    own_chains: dict[tuple[str, str], Lines] = field(default_factory=dict)


def chain_lines(text: str) -> tuple[str, ...]:
    return tuple(line for line in text.splitlines() if line.startswith("-A "))


def managed_routes(snapshot: Snapshot, routes: dict[str, KernelRoute]) -> set[str]:
    on_wg = {dst for dst, r in routes.items() if r.dev == snapshot.interface and not r.kernel}
    return on_wg | snapshot.route_scope


def restore(run: Run, snapshot: Snapshot) -> list[str]:
    """The host back to `snapshot`, part by part; the parts that could not be restored (empty: all of it)."""
    failed: list[str] = []

    def must(argv: Sequence[str], stdin: str | None = None) -> str:
        status, out, err = run(argv, stdin)
        if status != 0:
            raise RuntimeError(f"`{' '.join(argv[:6])}` failed: {err.strip()[-200:]}")
        return out

    def part(name: str, action: Callable[[], object]) -> None:
        try:
            action()
        except (OSError, RuntimeError, ValueError) as exc:
            failed.append(f"{name}: {exc}")

    for saved in reversed(snapshot.files[1:]):  # the mapping and the record; wg0.conf last (the first written)
        part(saved.path, functools.partial(restore_file, saved))
    if snapshot.up:
        part("mtu", lambda: _mtu(must, snapshot))
        part("iptables", lambda: _chains(must, snapshot))
        part("iptables chains", lambda: _own_chains(must, snapshot))
        part("routes", lambda: _routes(must, snapshot))
        part("addresses", lambda: _addresses(must, snapshot))
        part("peers", lambda: _peers(must, snapshot))
    if snapshot.files:
        part(snapshot.files[0].path, lambda: restore_file(snapshot.files[0]))
    return failed


def _mtu(must: Callable[..., str], snap: Snapshot) -> None:
    if snap.mtu is not None and link_mtu(must(["ip", "-o", "link", "show", "dev", snap.interface])) != snap.mtu:
        must(["ip", "link", "set", "dev", snap.interface, "mtu", str(snap.mtu)])


def _chains(must: Callable[..., str], snap: Snapshot) -> None:
    """The built-in chains back, and first the agent's own chains that existed (a rule may jump to them)."""
    for (table, chain), lines in snap.own_chains.items():
        if lines is not None and table_chains(must(["iptables", "-t", table, "-S"])).get(chain) != lines:
            must(
                ["iptables-restore", "--noflush"],
                "\n".join([f"*{table}", f":{chain} - [0:0]", *lines, "COMMIT"]) + "\n",
            )
    for (table, chain), lines in snap.chains.items():
        if chain_lines(must(["iptables", "-t", table, "-S", chain])) != lines:
            must(["iptables-restore", "--noflush"], "\n".join([f"*{table}", f"-F {chain}", *lines, "COMMIT"]) + "\n")


def _own_chains(must: Callable[..., str], snap: Snapshot) -> None:
    """The agent's own chains that did not exist removed, once the built-in chains no longer jump to them."""
    for (table, chain), lines in reversed(snap.own_chains.items()):  # a chain before the one it jumps to
        if lines is None and chain in table_chains(must(["iptables", "-t", table, "-S"])):
            must(["iptables-restore", "--noflush"], f"*{table}\n-F {chain}\n-X {chain}\nCOMMIT\n")


def _routes(must: Callable[..., str], snap: Snapshot) -> None:
    now = parse_routes(must(ROUTES_ARGV))
    for dst in sorted(managed_routes(snap, now) | managed_routes(snap, snap.routes)):
        want, have = snap.routes.get(dst), now.get(dst)
        if want == have or (want is not None and want.kernel):
            continue
        moved = want is None or (have is not None and (have.metric, have.dev) != (want.metric, want.dev))
        if have is not None and not have.kernel and moved:
            must(have.del_argv())
        if want is not None:
            must(want.replace_argv())


def _addresses(must: Callable[..., str], snap: Snapshot) -> None:
    now = addresses(must(["ip", "-4", "-o", "address", "show", "dev", snap.interface]))
    for address in snap.addresses:
        if address not in now:
            must(["ip", "-4", "address", "add", address, "dev", snap.interface])
    for address in now:
        if address not in snap.addresses:
            must(["ip", "-4", "address", "del", address, "dev", snap.interface])


def _peers(must: Callable[..., str], snap: Snapshot) -> None:
    if snap.wg is None:
        return
    now = parse_dump(must(["wg", "show", snap.interface, "dump"]))
    if now == snap.wg:
        return
    for key, peer in now.peers.items():  # an endpoint cannot be unset by a sync: such a peer is removed first
        old = snap.wg.peers.get(key)
        if old is not None and old.endpoint == "(none)" and peer.endpoint != "(none)":
            must(["wg", "set", snap.interface, "peer", key, "remove"])
    must(["wg", "syncconf", snap.interface, "/dev/stdin"], snap.wg.config())
