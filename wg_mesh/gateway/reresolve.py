"""wg-mesh-reresolve: follow a DNS-named peer's address without a restart (issue 24). Standard library only, one
file (user-data mode runs it as a script; the agent's document check imports its name rules).

    python3 wg-mesh-reresolve /etc/wg-mesh/reresolve.json /var/lib/wg-mesh/reresolve.json

One mechanism, two callers: in `delivery: live` the agent runs `Reresolver.tick` in a thread of its own on the
running document's DNS-named peers (`watch`: active role only, under its apply lock); in user-data mode a systemd
timer runs this file once every `reresolve_seconds` on the peers cloud-init listed (wg_mesh.plan.reresolveunit), its
memory in a state file.

The name and port come from the signed document or the user data (written from the same plan), never from DNS, and
are checked again with the config's rules (`name_problem`, wg_mesh.config.dnsname's; tests hold both to the same
verdicts). Each tick, per DNS-named peer that is due: resolve the name (getaddrinfo, IPv4, in a thread given
`TIMEOUT_S`). The answer is hostile input: only one public IPv4 address is accepted (`answer_problem`: the ranges of
wg_mesh.config.addressing.endpoint_problem, a test compares the lists, and nothing inside wg0's AllowedIPs, which
would loop; at most MAX_ANSWERS records, two different addresses refused), and never one this site owns or another
peer uses (issue 33 item 6): this site's public address and ranges (`taken`: the running document's public_ip and
agent.json's cidrs, or the user-data file's `own`), an address of this host (`ip -4 -o address show`), another
peer's endpoint (wg0's, and the document's configured ones). A failure keeps the running endpoint and
is counted. Then `decide`, which settles the name against WireGuard's roaming:
- the running endpoint already is the answer: nothing;
- the peer has no endpoint yet (boot, a new peer, an HA promotion): the answer;
- the answer differs from the last answer seen (the name moved: its owner said so): the answer;
- no handshake for STALE_S (the session is dead, whatever its endpoint): the answer;
- otherwise WireGuard roamed to where the peer's authenticated packets come from, and the name has not changed:
  the roam stands (a stale name is never put back over it).
Setting is `wg set IFACE peer KEY endpoint IP:PORT` (an argv list, no shell), only for a peer wg0 has (never creating
one), never touching another peer or restarting anything.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .files import atomic_write, read_text

RERESOLVE_BOUNDS = (2, 3600)  # seconds: wg_mesh.config.dnsname's MIN_RERESOLVE_SECONDS, MAX_RERESOLVE_SECONDS
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# wg_mesh.config.addressing's SPECIAL_PURPOSE and NOT_INTERNET_REACHABLE (a test keeps them equal)
NOT_AN_ENDPOINT = [
    ipaddress.IPv4Network(n)
    for n in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "192.0.0.0/24", "224.0.0.0/4", "240.0.0.0/4",
              "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "198.18.0.0/15")
]  # fmt: skip
TIMEOUT_S = 5.0
MAX_ANSWERS = 16
# wireguard-tools' contrib/reresolve-dns.sh re-resolves a peer whose latest handshake is older than 135 s: a live
# session handshakes every REKEY_AFTER_TIME (120 s) while it sends, keepalives included.
STALE_S = 135
METRICS_PATH = "/var/lib/prometheus/node-exporter/wg_mesh_reresolve.prom"
METRICS: dict[str, tuple[str, str]] = {  # name -> (type, help), per DNS-named peer
    "wgmesh_reresolve_failures_total": (
        "counter",
        "Resolutions refused or failed, and failed wg sets (endpoint kept).",
    ),
    "wgmesh_reresolve_changes_total": ("counter", "Endpoints set from the peer's DNS name."),
}
PATH = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
Lookup = Callable[..., Any]  # socket.getaddrinfo's signature
Run = Callable[[Sequence[str]], tuple[int, str]]  # argv -> (status, stdout)


def name_problem(text: str) -> str | None:
    """Why `text` is not a lower-case, fully qualified host name (wg_mesh.config.dnsname's rules), or None."""
    labels = text.split(".")
    if not text.isascii() or len(text) > 253 or len(labels) < 2 or not all(map(_LABEL.fullmatch, labels)):
        return "not a fully qualified host name"
    return "an all-numeric last label" if labels[-1].isdigit() else None


def split(value: str) -> tuple[str, int]:
    """NAME:PORT as the plan writes it (topology.peer_endpoint_name); ValueError for anything else."""
    name, _, port = value.rpartition(":")
    problem = name_problem(name)
    if problem or not re.fullmatch(r"[1-9][0-9]{0,4}", port) or int(port) > 65535:
        raise ValueError(f"{value!r} is not NAME:PORT ({problem or 'port'})")
    return name, int(port)


def answer_problem(answer: str, allowed_ips: Sequence[str] = (), taken: Mapping[str, str] | None = None) -> str | None:
    """Why a resolver's answer cannot be a peer's endpoint, or None: one public IPv4 address, outside every
    AllowedIPs of the interface (an endpoint routed into the tunnel would loop), and none of `taken` (prefix -> what
    it is: this site's own public address and ranges, an address of this host, another peer's endpoint; issue 33
    item 6)."""
    try:
        ip = ipaddress.IPv4Address(answer)
    except ValueError:
        return "not an IPv4 address"
    bad = [str(n) for n in NOT_AN_ENDPOINT if ip in n] or [a for a in allowed_ips if ip in ipaddress.ip_network(a)]
    if bad:
        return f"{ip} is in {bad[0]}: not a public endpoint"
    what = next((w for prefix, w in (taken or {}).items() if ip in ipaddress.IPv4Network(prefix)), None)
    return None if what is None else f"{ip} is {what}: never a peer's endpoint"


def host_addresses(text: str) -> dict[str, str]:
    """`ip -4 -o address show`'s addresses as `taken` entries (an endpoint on this host is a tunnel to itself)."""
    found = re.findall(r" inet (\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})/", text)
    return {f"{a}/32": "an address of this host" for a in found if _is_address(a)}


def _is_address(text: str) -> bool:
    try:
        return str(ipaddress.IPv4Address(text)) == text
    except ValueError:
        return False


def own_addresses(public_ip: str | None, cidrs: Sequence[str]) -> dict[str, str]:
    """This site's own public address and ranges as `taken` entries (the document's public_ip, agent.json's cidrs; in
    user-data mode, the peers file's `own`)."""
    own = {f"{public_ip}/32": "this site's own public address"} if public_ip else {}
    return own | {str(ipaddress.IPv4Network(c)): f"in this site's own {c}" for c in cidrs}


def peer_endpoints(endpoints: Mapping[str, str | None], skip: str) -> dict[str, str]:
    """Peers' endpoints (public key -> IP:PORT or None) but `skip`'s, as `taken` entries."""
    return {
        f"{e.rpartition(':')[0]}/32": "another peer's endpoint"
        for key, e in endpoints.items()
        if key != skip and e and _is_address(e.rpartition(":")[0])
    }


class Target(NamedTuple):
    """A DNS-named peer as the plan gives it."""

    peer: str  # its site name (a metric label)
    public_key: str
    name: str
    port: int
    every: int  # seconds between resolutions


def resolve(name: str, timeout_s: float = TIMEOUT_S, lookup: Lookup | None = None) -> str:
    """The one public IPv4 address `name` resolves to; OSError with why not (no answer, none within timeout_s, more
    than MAX_ANSWERS records, two addresses, a refused one)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((lookup or socket.getaddrinfo)(name, None, socket.AF_INET, socket.SOCK_DGRAM))
        except (OSError, UnicodeError, ValueError) as exc:
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)  # getaddrinfo has no timeout of its own
    thread.start()
    thread.join(timeout_s)
    found = box[0] if box else OSError(f"no answer within {timeout_s:g} s")
    if isinstance(found, Exception):
        raise OSError(f"does not resolve: {str(found)[:200]}")
    if not isinstance(found, list) or len(found) > MAX_ANSWERS:
        raise OSError(f"not 1 to {MAX_ANSWERS} records")
    addresses = {str(entry[4][0]) for entry in found}
    if len(addresses) != 1:
        raise OSError(f"{len(addresses)} IPv4 addresses, not one")
    (address,) = addresses
    problem = answer_problem(address)
    if problem:
        raise OSError(problem)
    return address


def decide(answer: str, port: int, last: str | None, endpoint: str | None, handshake: int, now: float) -> str | None:
    """The IP:PORT to set, or None (module docstring): `last` the previous accepted answer, `endpoint` the running
    one (None: none), `handshake` the latest one (unix seconds, 0: never)."""
    want = f"{answer}:{port}"
    changed = last is not None and last != answer
    if endpoint != want and (endpoint is None or changed or now - handshake > STALE_S):
        return want
    return None


def running_peers(dump: str) -> tuple[dict[str, tuple[str | None, int]], list[str]]:
    """`wg show IFACE dump`'s peers: key -> (endpoint or None, latest handshake), and every peer's AllowedIPs.
    ValueError when malformed."""
    peers, allowed = {}, []
    for line in dump.splitlines()[1:]:
        key, _, endpoint, ips, handshake, *rest = line.split("\t")
        if len(rest) != 3 or not (handshake.isascii() and handshake.isdigit()):
            raise ValueError("wg show dump: a malformed peer line")
        peers[key] = (None if endpoint == "(none)" else endpoint, int(handshake))
        allowed += [str(ipaddress.IPv4Network(a)) for a in ips.split(",") if ips != "(none)"]
    return peers, allowed


class Reresolver:
    """One gateway's re-resolutions: the last answer per peer (`last`, by public key), when each is due, counters by
    peer name (`failures`: refused or failed resolutions and `wg set`s, `changes`: endpoints set)."""

    def __init__(self, interface: str, run: Run, lookup: Lookup | None = None, timeout_s: float = TIMEOUT_S):
        self.interface, self.run, self.lookup, self.timeout_s = interface, run, lookup, timeout_s
        # what no answer may be beyond wg0's own view (prefix -> what): this site's public address and ranges, the
        # plan's configured endpoints; set by the caller (watch: every tick from the running document)
        self.taken: dict[str, str] = {}
        self.last: dict[str, str] = {}
        self.due: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self.changes: dict[str, int] = {}

    def tick(self, targets: Sequence[Target], now: float, force: bool = False, lock: Any = None,
             active: Callable[[], bool] = lambda: True) -> list[str]:  # fmt: skip
        """Resolve the targets that are due (outside `lock`: a slow resolver never holds up an apply or a failover),
        then, under it and only while `active()`, set what `decide` says; log lines of what happened."""
        due = [t for t in targets if force or self.due.get(t.public_key, 0.0) <= now]
        found: dict[str, str | OSError] = {}
        for t in due:
            self.due[t.public_key] = now + t.every
            try:
                found[t.public_key] = resolve(t.name, self.timeout_s, self.lookup)
            except OSError as exc:
                found[t.public_key] = exc
        with lock or contextlib.nullcontext():
            return self._settle(due, found, now) if due and active() else []

    def _settle(self, due: Sequence[Target], found: dict[str, str | OSError], now: float) -> list[str]:
        status, out = self.run(["wg", "show", self.interface, "dump"])
        try:
            running, allowed = running_peers(out if status == 0 else "\n(failed)")
        except ValueError:
            return [f"wg show {self.interface} dump failed: no endpoint checked"]
        status, out = self.run(["ip", "-4", "-o", "address", "show"])
        if status != 0:
            return ["ip -4 -o address show failed: no endpoint checked (an answer could be this host)"]
        taken = self.taken | host_addresses(out)
        endpoints = {key: endpoint for key, (endpoint, _) in running.items()}
        logs = []
        for t in due:
            answer = found[t.public_key]
            mine = taken | peer_endpoints(endpoints, t.public_key)
            problem = answer if isinstance(answer, OSError) else answer_problem(answer, allowed, mine)
            if problem or isinstance(answer, OSError):
                self.failures[t.peer] = self.failures.get(t.peer, 0) + 1
                logs.append(f"{t.peer}: {t.name}: {problem}; its endpoint stays")
                continue
            if t.public_key not in running:  # not (or no longer) a peer of wg0: never create one
                continue
            endpoint, handshake = running[t.public_key]
            want = decide(answer, t.port, self.last.get(t.public_key), endpoint, handshake, now)
            self.last[t.public_key] = answer
            if want is None:
                continue
            status, _ = self.run(["wg", "set", self.interface, "peer", t.public_key, "endpoint", want])
            counter = self.changes if status == 0 else self.failures
            counter[t.peer] = counter.get(t.peer, 0) + 1
            logs.append(f"{t.peer}: endpoint {endpoint or '(none)'} -> {want} ({t.name}): status {status}")
        return logs

    def metrics(self, targets: Sequence[Target]) -> str:
        lines = []
        for (name, (kind, text)), counts in zip(METRICS.items(), (self.failures, self.changes), strict=True):
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            lines += [f'{name}{{peer="{t.peer}"}} {counts.get(t.peer, 0)}' for t in targets]
        return "\n".join(lines) + "\n"

    def restore(self, state: Any) -> None:
        """A state file (`main`), parsed strictly: anything else leaves the memory empty."""
        if not isinstance(state, dict):
            return
        for key, into, kind in (
            ("last", self.last, str),
            ("failures", self.failures, int),
            ("changes", self.changes, int),
        ):
            part = state.get(key)
            if isinstance(part, dict) and len(part) <= 512:
                into.update({k: v for k, v in part.items() if isinstance(k, str) and type(v) is kind})  # type: ignore[misc]


def plan_targets(peers: Sequence[Any]) -> list[Target]:
    """The DNS-named peers among an InterfacePlan's peers (or the user-data file's same fields)."""
    return [
        Target(p.name, p.public_key, *split(p.endpoint_name), p.reresolve_s)
        for p in peers
        if p.endpoint_name is not None and p.reresolve_s is not None
    ]


def live_metrics_path(path_metrics: str) -> str:
    """delivery: live: the re-resolver's textfile, beside the agent's path-MTU one (its Paths.path_metrics)."""
    return os.path.join(os.path.dirname(path_metrics), os.path.basename(METRICS_PATH))


def watch(agent: Any) -> threading.Thread:
    """delivery: live: a daemon thread of the agent (wg_mesh.gateway.agent) that ticks every second on the running
    plan's DNS-named peers, in the active role only, under the apply lock (a peer an apply removes is never set),
    its metrics beside the path-MTU ones. A promotion to active resolves at once."""
    applier = agent.applier
    reresolver = Reresolver(agent.config.interface, lambda argv: _pair(applier.run(argv, None)))
    path = live_metrics_path(agent.paths.path_metrics)

    def active() -> bool:
        return bool(applier.role == "active")

    def loop() -> None:
        was_active = False
        while True:
            try:
                plan, trust = agent.plan, agent.config.trust
                targets = plan_targets(plan.peers) if plan is not None else []
                reresolver.taken = taken_by(plan, trust.cidrs if trust is not None else ())
                now_active = active()
                if targets and now_active:
                    for line in reresolver.tick(targets, time.time(), not was_active, agent.apply_lock, active):
                        agent.log(f"reresolve: {line}")
                    write(path, reresolver.metrics(targets))
                was_active = now_active
            except Exception as exc:  # the thread outlives any one tick
                agent.log(f"reresolve: tick failed: {exc.__class__.__name__}: {exc}")
            time.sleep(1.0)

    return threading.Thread(target=loop, daemon=True, name="wg-mesh-reresolve")


def taken_by(plan: Any, cidrs: Sequence[str]) -> dict[str, str]:
    """delivery: live: what the running document says no answer may be: this site's public address (its public_ip)
    and ranges (agent.json's cidrs), and the peers' configured endpoints (a DNS-named peer has none)."""
    if plan is None:
        return own_addresses(None, cidrs)
    configured = {f"{p.name}/{e}": e for p in plan.peers for e in (p.endpoint, p.fallback_endpoint) if e}
    return own_addresses(plan.public_ip, cidrs) | peer_endpoints(configured, "")


def _pair(result: Any) -> tuple[int, str]:
    return result.returncode, result.stdout


def write(path: str, text: str) -> None:
    """Atomically, mode 0644, never through a link planted at the path (wg_mesh.gateway.files); OSError when it
    cannot."""
    atomic_write(path, text, 0o644)


def load_peers(text: str) -> tuple[str, list[Target], dict[str, str]]:
    """The user-data file (wg_mesh.plan.reresolveunit.peers_file): interface, targets and what no answer may be (its
    `own`: this site's public address and ranges); ValueError, KeyError, TypeError or AttributeError when
    malformed."""
    raw = json.loads(text)
    interface, peers, own = raw["interface"], raw["peers"], raw.get("own", {})
    if not (isinstance(interface, str) and interface.isalnum() and isinstance(peers, list) and len(peers) <= 512):
        raise ValueError("not a reresolve file")
    if not (isinstance(own, dict) and len(own) <= 66 and all(type(v) is str for v in own.values())):
        raise ValueError("own: not an object of at most 66 prefixes")
    taken = {str(ipaddress.IPv4Network(k)): v for k, v in own.items()}
    targets = [Target(p["name"], p["public_key"], *split(p["endpoint_name"]), p["reresolve_s"]) for p in peers]
    low, high = RERESOLVE_BOUNDS
    if not all(type(t.peer) is type(t.public_key) is str and type(t.every) is int and low <= t.every <= high
               for t in targets):  # fmt: skip
        raise ValueError("a malformed peer")
    return interface, targets, taken


def main(argv: Sequence[str], run: Run | None = None) -> int:
    """user-data mode: `wg-mesh-reresolve CONFIG STATE`, one run (the timer repeats it)."""
    try:
        config, state = argv
        interface, targets, taken = load_peers(read_text(config) or "")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"wg-mesh-reresolve CONFIG STATE: {exc}", file=sys.stderr)
        return 2
    reresolver = Reresolver(interface, run or run_command)
    reresolver.taken = taken
    # first run, or a damaged file (a link, not a regular file): no memory (the roam stands, a missing endpoint is set)
    with contextlib.suppress(OSError, ValueError):
        reresolver.restore(json.loads(read_text(state) or "{}"))
    for line in reresolver.tick(targets, time.time(), force=True):
        print(f"wg-mesh-reresolve: {line}", file=sys.stderr)
    memory = {"last": reresolver.last, "failures": reresolver.failures, "changes": reresolver.changes}
    for path, text in ((state, json.dumps(memory) + "\n"), (METRICS_PATH, reresolver.metrics(targets))):
        try:
            write(path, text)
        except OSError as exc:
            print(f"wg-mesh-reresolve: {exc}", file=sys.stderr)
    return 0


def run_command(argv: Sequence[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, env={"PATH": PATH}, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 127, ""
    return done.returncode, done.stdout


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
