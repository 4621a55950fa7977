"""Make the running wg0 match a peer document: level-triggered, idempotent, transactional, never `wg-quick down/up`.

`Applier.apply` reads what runs (`ip link`, `wg show dump`, `ip address`, `ip route`, `iptables -C`, the default
route), plans only the difference as a list of steps, and runs them; the same document again runs no mutating
command, and drift (a peer removed by hand, a route deleted, iptables rules flushed) is repaired on the next run:
- /etc/wireguard/wg0.conf rewritten atomically (0600) when its text changes, so a reboot starts from the latest state
  (its PostUp/PostDown lines are for wg-quick at boot: the agent never runs them, nor anything else through a shell);
- `wg syncconf wg0 /dev/stdin` (the same configuration without wg-quick's keys; private key on stdin only), or,
  when whole peers come and go, `wg set` for those only (wg_mesh.gateway.peerset: the peers that stay lose nothing);
- `ip link set dev wg0 mtu N`, the overlay address, the AllowedIPs routes outside the interface's own prefix;
- the iptables rules, the endpoint host routes and the lower route MTUs of wg_mesh.gateway.hostplan.Managed, every
  argv built from typed values (the masquerade's device and the host routes' `via`/`dev` from the default route the
  agent parses itself, refusing to act without one); what to remove comes from the Managed record of the last apply
  (/var/lib/wg-mesh/applied.json, parsed back strictly), never from a file's text;
- the metrics mapping (/etc/wg-mesh/peers.json) and that record.
Before the first mutating step the host is captured (wg_mesh.gateway.txn.Snapshot); when a step fails, everything
is restored and the ApplyError says "rolled back to generation X: step Y failed: ..." (or that the rollback failed:
then `half_applied`). Without wg0 (first boot, before wg-quick@wg0 starts) only the files are written. Every command
goes through one injectable runner; key material travels only on a command's stdin/stdout and is never logged.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import hostplan, peerset, txn
from .document import UNSAFE, Document, is_key
from .files import atomic_write, read_text
from .hostplan import KernelRoute, Managed, rule_commands
from .mapping import MAPPING_PATH, Relay, peer_mapping
from .runner import Result, Runner, redact, run_command
from .trust import own_key_problem
from .wgconf import INTERFACE, WG_CONF_PATH, parse_wg_quick_conf, wg_quick_conf

__all__ = ["Applier", "ApplyError", "Paths", "Result", "Runner", "atomic_write", "read_text", "redact", "run_command"]
KEY_REASON, APPLY_REASON = "key", "apply"  # refusals beyond the document's own (document.REASONS)
WG_QUICK_ONLY = ("Address", "DNS", "MTU", "Table", "PreUp", "PostUp", "PreDown", "PostDown", "SaveConfig")
STEPS = ("wg0.conf", "peers", "mtu", "address", "routes", "rules", "endpoint_routes", "route_mtus", "mapping", "record")
METRICS: dict[str, tuple[str, str]] = {
    "wgmesh_agent_rollbacks_total": ("counter", "Applies undone after a failed step, by the step that failed."),
    "wgmesh_agent_rollback_failures_total": ("counter", "Rollbacks that could not restore every part of the host."),
    "wgmesh_agent_half_applied": ("gauge", "1 after a failed rollback, until an apply succeeds."),
}


class ApplyError(RuntimeError):
    def __init__(self, reason: str, message: str, step: str | None = None, rollback_failed: bool = False) -> None:
        super().__init__(message)
        self.reason, self.step, self.rollback_failed = reason, step, rollback_failed


@dataclass(frozen=True)
class Paths:
    wg_conf: str = WG_CONF_PATH
    mapping: str = MAPPING_PATH
    state: str = "/var/lib/wg-mesh/agent-state.json"
    metrics: str = "/var/lib/prometheus/node-exporter/wg_mesh_agent.prom"
    path_metrics: str = "/var/lib/prometheus/node-exporter/wg_mesh_path.prom"  # wg_mesh.gateway.pmtu
    ha_metrics: str = "/var/lib/prometheus/node-exporter/wg_mesh_ha.prom"  # wg_mesh.gateway.ha_run
    applied: str = "/var/lib/wg-mesh/applied.json"  # hostplan.Managed of the last apply

    @classmethod
    def under(cls, root: str) -> Paths:
        """The same paths below `root` (tests, and anyone who runs the agent outside /)."""
        default = cls()
        names = ("wg_conf", "mapping", "state", "metrics", "path_metrics", "ha_metrics", "applied")
        return cls(*(os.path.join(root, getattr(default, name).lstrip("/")) for name in names))


def desired_routes(doc: Document) -> set[str]:
    """The AllowedIPs that wg-quick would route: those not already covered by the interface's own prefix."""
    own = ipaddress.IPv4Interface(doc.plan.address).network
    return {
        cidr for peer in doc.plan.peers for cidr in peer.allowed_ips if not ipaddress.IPv4Network(cidr).subnet_of(own)
    }


def wg_config(conf: str) -> str:
    """wg(8)'s configuration from our own rendered wg0.conf text (in memory): wg-quick's keys dropped."""
    kept = [line for line in conf.splitlines() if line.split("=", 1)[0].strip() not in WG_QUICK_ONLY]
    return "\n".join(kept) + "\n"


@dataclass(frozen=True)
class Step:
    """One mutating step: a command (argv and stdin) or a file write (path, text, mode), or only a note."""

    name: str  # one of STEPS (the metrics' label)
    change: str  # what the log says changed ("" for bookkeeping)
    argv: tuple[str, ...] = ()
    stdin: str | None = field(default=None, repr=False)
    write: tuple[str, str, int] | None = field(default=None, repr=False)


def cmd(name: str, change: str, argv: Sequence[str], stdin: str | None = None) -> Step:
    return Step(name, change, tuple(argv), stdin)


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
        self.rollbacks = dict.fromkeys(STEPS, 0)
        self.rollback_failures, self.half_applied = 0, False
        self.relay: Relay | None = None  # a relayed site's pinned relay (agent.json): the mapping's relayed entries
        self.announced: frozenset[str] = frozenset()  # own public keys announced beyond the document's (rotation.py)

    def metric_lines(self, label: str) -> list[str]:
        values = {
            "wgmesh_agent_rollbacks_total": [(f'{label},step="{s}"', n) for s, n in self.rollbacks.items()],
            "wgmesh_agent_rollback_failures_total": [(label, self.rollback_failures)],
            "wgmesh_agent_half_applied": [(label, int(self.half_applied))],
        }
        lines = []
        for name, (kind, help_text) in METRICS.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            lines += [f"{name}{{{labels}}} {value}" for labels, value in values[name]]
        return lines

    def _must(self, argv: Sequence[str], stdin: str | None = None) -> Result:
        result = self.run(argv, stdin)
        if result.returncode != 0:
            # argv never holds a key (keys go on stdin); wg may quote one in its error: redacted
            raise ApplyError(APPLY_REASON, f"`{' '.join(argv)}` failed: {redact(result.stderr.strip())[-300:]}")
        return result

    def public_key(self, private_key: str) -> str:
        return self._must(["wg", "pubkey"], private_key + "\n").stdout.strip()

    def conf_key(self, conf: str | None) -> tuple[str, str] | None:
        """wg0.conf's private key and its public key (what this gateway runs and boots with); None without one."""
        try:
            key = dict(parse_wg_quick_conf(conf or "")).get("Interface", {}).get("PrivateKey", [""])[0]
        except ValueError:
            return None
        return (key, self.public_key(key)) if is_key(key) else None

    def refuse_own_keys(self, doc: Document, *own: str | None) -> None:
        """ApplyError (unsafe, before any change) when a peer has a public key of ours: `own`, `announced`."""
        problem = own_key_problem(doc.plan, {k for k in (*own, *self.announced) if k})
        if problem:
            raise ApplyError(UNSAFE, problem)

    def private_key(self, doc: Document, running: tuple[str, str] | None, fetch_key: Callable[[], str]) -> str:
        """wg0.conf's key (`running`) while it matches the document's public key; after a rotation (or on the first
        run) the store's, which must match: otherwise the store is behind the document (reason `key`)."""
        if running and running[1] == doc.public_key:
            return running[0]
        key = fetch_key().strip()
        if not is_key(key):
            raise ApplyError(KEY_REASON, "the private key from the store is not a WireGuard key")
        if self.public_key(key) != doc.public_key:
            raise ApplyError(KEY_REASON, "the private key from the store does not match the document's public key")
        return key

    def _read(self, path: str, mode: int) -> txn.Saved:
        try:
            return txn.save_file(path, mode)
        except OSError as exc:  # a symlink or a directory where the agent's own file belongs: not touched
            raise ApplyError(APPLY_REASON, f"{path} is not the agent's regular file: {exc}") from None

    def last_applied(self, saved: txn.Saved) -> Managed | None:
        """The record of the last apply (None: none, or one that does not parse: nothing is removed then)."""
        if saved.data is None:
            return None
        try:
            return hostplan.parse_managed(saved.data.decode("utf-8", errors="replace"))
        except ValueError:
            return None

    def apply(self, doc: Document, fetch_key: Callable[[], str]) -> list[str]:
        """Bring wg0, its files, routes and rules to `doc`, all or nothing; returns what changed (no key in it)."""
        saved = tuple(self._read(p, m) for p, m in ((self.paths.wg_conf, 0o600), (self.paths.mapping, 0o644)))
        record = self._read(self.paths.applied, 0o600)
        old_conf = None if saved[0].data is None else saved[0].data.decode("utf-8", errors="replace")
        running = self.conf_key(old_conf)
        self.refuse_own_keys(doc, running[1] if running else None)
        key = self.private_key(doc, running, fetch_key)
        conf = wg_quick_conf(doc.plan, key, self.role)
        link = self.run(["ip", "-o", "link", "show", "dev", self.interface], None)
        if link.returncode != 0 and "does not exist" not in link.stderr:
            raise ApplyError(APPLY_REASON, f"`ip link show dev {self.interface}` failed: {link.stderr.strip()[-300:]}")
        up = link.returncode == 0
        default = None
        if hostplan.needs_default_route(doc.plan):
            default = hostplan.default_route(self._must(["ip", "-4", "route", "show", "default"]).stdout)
        try:
            want = hostplan.managed(doc.plan, doc.generation, default)
        except ValueError as exc:
            raise ApplyError(APPLY_REASON, f"refusing to act: {exc}") from None
        last = self.last_applied(record)
        snapshot = txn.Snapshot((*saved, record), self.interface)
        steps: list[Step] = []
        if conf.encode() != saved[0].data:
            steps.append(Step("wg0.conf", f"wrote {self.paths.wg_conf}", write=(saved[0].path, conf, 0o600)))
        if up:
            snapshot = self._plan_running(doc, conf, link.stdout, want, last, snapshot, steps)
        mapping = peer_mapping(doc.plan, self.interface, self.relay)
        if mapping.encode() != saved[1].data:
            steps.append(Step("mapping", f"wrote {self.paths.mapping}", write=(saved[1].path, mapping, 0o644)))
        if want.to_json().encode() != record.data:
            steps.append(Step("record", "", write=(record.path, want.to_json(), 0o600)))
        if steps and up:
            snapshot = self._capture_chains(snapshot, want, last)
        return self._execute(steps, snapshot, last)

    def _execute(self, steps: list[Step], snapshot: txn.Snapshot, last: Managed | None) -> list[str]:
        for step in steps:
            try:
                if step.argv:
                    self._must(step.argv, step.stdin)
                if step.write:
                    atomic_write(*step.write)
            except (ApplyError, OSError) as exc:
                self.rollbacks[step.name] += 1
                failed = txn.restore(lambda a, i: dataclasses.astuple(self.run(a, i)), snapshot)
                was = f"generation {last.generation:012x}" if last else "the state before it"
                cause = f"step {step.name} failed: {redact(str(exc))}"
                if failed:
                    self.rollback_failures += 1
                    self.half_applied = True
                    lost = "; ".join(failed)
                    message = f"ROLLBACK FAILED, the host may be half-applied: {cause}; not restored: {lost}"
                else:
                    message = f"rolled back to {was}: {cause}"
                raise ApplyError(APPLY_REASON, redact(message), step.name, bool(failed)) from None
        self.half_applied = False
        return [step.change for step in steps if step.change]

    def _wg_drift(self, doc: Document, running: txn.WgState) -> tuple[bool, list[str]]:
        """Whether wg0 differs from the document in this role, and the peers that must be removed before the sync:
        a standby's peers that still have an endpoint or a keepalive (`wg syncconf` leaves fields the file does not
        name, and an endpoint cannot be unset: the peer is removed and re-added without one, its session gone); in
        the active role, the running peers of `rearm` but a dynamic one's (peerset.running_view)."""
        active = self.role == "active"
        wanted = {
            p.public_key: (frozenset(p.allowed_ips), p.persistent_keepalive if active else 0, active)
            for p in doc.plan.peers
        }
        peers, dynamic = peerset.running_view(running, doc.plan, active)
        stale = (
            sorted(k for k in running.peers if k in self.rearm - dynamic)
            if active
            else sorted(k for k, (_, keepalive, endpoint) in peers.items() if keepalive or endpoint)
        )
        drift = running.public_key != doc.public_key or running.listen_port != doc.plan.listen_port or peers != wanted
        return drift, stale

    def _plan_running(
        self,
        doc: Document,
        conf: str,
        link: str,
        want: Managed,
        last: Managed | None,
        snapshot: txn.Snapshot,
        steps: list[Step],
    ) -> txn.Snapshot:
        """The steps on a running wg0 (appended to `steps`), and the snapshot with what runs now."""
        iface, must = self.interface, self._must
        try:
            running = txn.parse_dump(must(["wg", "show", iface, "dump"]).stdout)
        except ValueError as exc:
            raise ApplyError(APPLY_REASON, f"`wg show {iface} dump`: {exc}") from None
        self.refuse_own_keys(doc, running.public_key)  # what wg0 runs, whatever wg0.conf says
        addresses = txn.addresses(must(["ip", "-4", "-o", "address", "show", "dev", iface]).stdout)
        routes = hostplan.parse_routes(must(txn.ROUTES_ARGV).stdout)
        mtu = txn.link_mtu(link)
        hosts = {r[0] for m in (want, last) if m for r in m.endpoint_routes}
        snapshot = dataclasses.replace(snapshot, up=True, mtu=mtu, addresses=tuple(addresses), wg=running)
        snapshot = dataclasses.replace(snapshot, routes=routes, route_scope=frozenset(hosts))
        drift, stale = self._wg_drift(doc, running)
        if drift or stale:
            for peer in stale:  # a public key is not a secret; it goes in argv as wg(8) takes it
                steps.append(cmd("peers", "", ["wg", "set", iface, "peer", peer, "remove"]))
            if stale:
                what = "re-armed" if self.role == "active" else "without endpoint"
                steps.append(Step("peers", f"{self.role}: {len(stale)} peers {what}"))
            # Whole peers added or removed: `wg set` for those alone (peerset.py: a syncconf drops packets of the
            # peers that stay); anything else: `wg syncconf`.
            gentle = None if stale else peerset.peer_commands(iface, running, wg_config(conf))
            if gentle is None:
                steps.append(cmd("peers", "wg syncconf", ["wg", "syncconf", iface, "/dev/stdin"], wg_config(conf)))
            for argv in gentle or ():
                steps.append(cmd("peers", "", argv))
            if gentle:
                added, removed = (sum(a[5] == what for a in gentle) for what in ("allowed-ips", "remove"))
                steps.append(Step("peers", f"wg set: {added} peers added, {removed} removed"))
        # A larger MTU goes on last, after the routes and the route MTUs: a private path's jumbo wg0 (docs/underlay.md)
        # must not carry internet peers' traffic before their routes have their own MTU. A smaller one goes first.
        new_mtu = doc.plan.mtu
        raising = mtu is not None and mtu < new_mtu
        if not raising and mtu != new_mtu:
            steps.append(self._mtu_step(mtu, new_mtu))
        if addresses != [doc.plan.address]:  # a new overlay address: the new one first, then the old ones go
            if doc.plan.address not in addresses:
                steps.append(cmd("address", "", ["ip", "-4", "address", "add", doc.plan.address, "dev", iface]))
            # Without promote_secondaries, deleting the primary address deletes the secondaries in its subnet (the new
            # one) and, with no IPv4 address left, the kernel flushes every route on wg0 (fib_del_ifaddr). Ubuntu turns
            # it on for all interfaces (systemd's sysctl.d/50-default.conf); the agent does not rely on that.
            if any(a != doc.plan.address for a in addresses):
                knob = f"net.ipv4.conf.{iface}.promote_secondaries=1"
                steps.append(cmd("address", "", ["sysctl", "-q", "-w", knob]))
            for address in (a for a in addresses if a != doc.plan.address):
                steps.append(cmd("address", "", ["ip", "-4", "address", "del", address, "dev", iface]))
            steps.append(Step("address", f"address {', '.join(addresses)} -> {doc.plan.address}"))
        self._plan_routes(doc, want, last, routes, steps)
        snapshot = dataclasses.replace(snapshot, own_chains=self._plan_rules(want, last, steps))
        self._plan_endpoint_routes(want, last, routes, steps)
        if raising:
            steps.append(self._mtu_step(mtu, new_mtu))
        return snapshot

    def _mtu_step(self, old: int | None, new: int) -> Step:
        argv = ["ip", "link", "set", "dev", self.interface, "mtu", str(new)]
        return cmd("mtu", f"mtu {old if old is not None else '?'} -> {new}", argv)

    def _plan_routes(
        self, doc: Document, want: Managed, last: Managed | None, routes: dict[str, KernelRoute], steps: list[Step]
    ) -> None:
        iface = self.interface
        on_wg = {dst for dst, r in routes.items() if r.dev == iface and not r.kernel and not r.via}
        wanted, mtus = desired_routes(doc), dict(want.route_mtus)
        for cidr in sorted(wanted - on_wg, key=ipaddress.IPv4Network):
            argv = ["ip", "-4", "route", "add", cidr, "dev", iface]
            argv += ["mtu", str(mtus[cidr])] if cidr in mtus else []
            steps.append(cmd("routes", f"route + {cidr}", argv))
        for cidr in sorted(on_wg - wanted, key=ipaddress.IPv4Network):
            steps.append(cmd("routes", f"route - {cidr}", ["ip", "-4", "route", "del", cidr, "dev", iface]))
        # a route MTU that is new since the last apply, or missing (the path-MTU heal's lower `mtu lock` is kept)
        old_mtus = dict(last.route_mtus) if last else {}
        for cidr, value in want.route_mtus:
            route = routes.get(cidr)
            if route is None or cidr not in wanted or cidr not in on_wg:
                continue
            if old_mtus.get(cidr) != value or route.mtu is None:
                argv = ["ip", "-4", "route", "replace", cidr, "dev", iface, "mtu", str(value)]
                steps.append(cmd("route_mtus", f"route {cidr} mtu {value}", argv))
        for cidr, value in old_mtus.items():  # no longer lower than wg0's: back to the plain route wg-quick makes
            route = routes.get(cidr)
            if cidr not in mtus and cidr in wanted and route is not None and route.mtu == value and not route.lock:
                argv = ["ip", "-4", "route", "replace", cidr, "dev", iface]
                steps.append(cmd("route_mtus", f"route {cidr} mtu -", argv))

    def _rules(self, managed: Managed | None) -> list[list[str]]:
        """Each rule's `iptables -t T -C CHAIN ...` argv (verb at index 3)."""
        return [r.argv("-C", self.interface, managed.masquerade_dev) for r in managed.rule_objects()] if managed else []

    def _plan_rules(self, want: Managed, last: Managed | None, steps: list[Step]) -> dict[tuple[str, str], txn.Lines]:
        """Old rules gone, the agent's own chains removed or written whole, the wanted rules missing; each looked up
        (-C, -S): a firewall reload is drift like any other. Returns the own chains as they run (for the snapshot)."""
        new = self._rules(want)
        for argv in [a for a in self._rules(last) if a not in new]:
            if self.run(argv, None).returncode == 0:
                delete = [*argv[:3], "-D", *argv[4:]]
                steps.append(cmd("rules", f"iptables {' '.join(delete[1:])}", delete))
        tables = {c.table for m in (want, last) if m for c in m.chain_objects()}
        parsed = {t: hostplan.table_chains(self._must(["iptables", "-t", t, "-S"]).stdout) for t in sorted(tables)}
        running, texts = hostplan.chain_commands(want, last, parsed)
        steps += [cmd("rules", f"iptables chains {what}", ["iptables-restore", "--noflush"], t) for t, what in texts]
        present = [self.run(argv, None).returncode == 0 for argv in new]
        for argv in rule_commands(want.rule_objects(), new, present):
            steps.append(cmd("rules", f"iptables {' '.join(argv[1:])}", argv))
        return running

    def _plan_endpoint_routes(
        self, want: Managed, last: Managed | None, routes: dict[str, KernelRoute], steps: list[Step]
    ) -> None:
        wanted = want.kernel_routes()
        for host in last.kernel_routes() if last else {}:
            have = routes.get(host)
            if host not in wanted and have is not None and have.dev != self.interface:
                steps.append(cmd("endpoint_routes", f"route - {host}", have.del_argv()))
        for host, route in wanted.items():
            have = routes.get(host)
            if have is None or (have.via, have.dev) != (route.via, route.dev):
                steps.append(cmd("endpoint_routes", f"route {host}", route.replace_argv()))

    def _capture_chains(self, snapshot: txn.Snapshot, want: Managed, last: Managed | None) -> txn.Snapshot:
        chains = sorted({(r.table, r.chain) for m in (want, last) if m for r in m.rule_objects()})
        lines = {(t, c): txn.chain_lines(self._must(["iptables", "-t", t, "-S", c]).stdout) for t, c in chains}
        return dataclasses.replace(snapshot, chains=lines)
