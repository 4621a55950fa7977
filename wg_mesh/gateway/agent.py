"""wg-mesh-agent: fetch this gateway's peer document, check it, apply it; export what happened as metrics.

    python3 -m wgmesh_gateway.agent --config /etc/wg-mesh/agent.json [--once [--timeout S]] [--root DIR]

Default: a daemon (wg-mesh-agent.service). Every source is polled every `poll_seconds`. Every cycle is
level-triggered (wg_mesh.gateway.apply): the same document again changes nothing, drift is repaired. A document
that does not parse, belongs to another site, would remove every peer, or whose key the store does not hold (yet) is
refused: the running config stays, the failure is logged and counted.
`--once`: cycles until a document is applied (exit 0) or the timeout (exit 1); cloud-init runs it before wg0 exists.
Logs go to stderr (the journal) and never carry key material; the metrics go to node-exporter's textfile directory.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import reresolve
from .apply import APPLY_REASON, KEY_REASON, ApplyError, Paths, Runner, atomic_write, read_text, redact
from .apply import run_command as default_runner
from .document import REASONS, SINGLE, Document, DocumentError, Trust, decode, parse_trust
from .ha_config import HaConfig, parse_ha
from .pmtu import PathWatch, Settings
from .rotation import RotatingApplier
from .sources import FetchError, FileSource, Source
from .wgconf import INTERFACE, InterfacePlan

FAILURE_REASONS = (*REASONS, KEY_REASON, APPLY_REASON)
ONCE_RETRY_S = 2.0
PMTU_SECONDS = 15  # agent.json's default; issue #14: every 15-30 s (3 failed ticks make a black hole: 30-45 s)
METRICS: dict[str, tuple[str, str]] = {  # name -> (type, help), in output order
    "wgmesh_agent_applied_generation": ("gauge", "Running peer document (0: none)."),
    "wgmesh_agent_desired_generation": ("gauge", "Last fetched peer document (0: none)."),
    "wgmesh_agent_last_apply_success": ("gauge", "1 if the last fetched document runs."),
    "wgmesh_agent_apply_failures_total": ("counter", "Documents refused or not applied, by reason."),
    "wgmesh_agent_fetch_failures_total": ("counter", "Failed fetches of the document or key."),
    "wgmesh_agent_last_fetch_timestamp_seconds": ("gauge", "Last fetch of the document."),
    "wgmesh_agent_last_apply_timestamp_seconds": ("gauge", "Last time wg0 matched the document."),
    "wgmesh_agent_peers": ("gauge", "Peers in the running document."),
}


@dataclass(frozen=True)
class Config:
    site: str
    source: dict[str, Any]
    # What every document is checked against (wg_mesh.gateway.trust): required in agent.json; None only in tests
    # that never decode (a None trust refuses every document, reason `signature`)
    trust: Trust | None = None
    interface: str = INTERFACE
    poll_seconds: int = 10
    pmtu_seconds: int = PMTU_SECONDS  # path-MTU probes every this many seconds (wg_mesh.gateway.pmtu); 0: none
    pmtu_heal: bool = True
    ha: HaConfig | None = None  # an HA site's gateway (issue 11, wg_mesh.gateway.ha); None: a single gateway, as ever


def load_config(text: str) -> Config:
    """agent.json, checked; ValueError naming the field."""
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    site, source = raw.get("site"), raw.get("source")
    interface, poll = raw.get("interface", INTERFACE), raw.get("poll_seconds", 10)
    if not isinstance(site, str) or not site:
        raise ValueError(f"site: {site!r}")
    if not isinstance(source, dict):
        raise ValueError("source: not an object")
    if not isinstance(interface, str) or not interface:
        raise ValueError(f"interface: {interface!r}")
    if not isinstance(poll, int) or isinstance(poll, bool) or not 1 <= poll <= 3600:
        raise ValueError(f"poll_seconds: {poll!r} is not 1..3600")
    pmtu, heal = raw.get("pmtu_seconds", PMTU_SECONDS), raw.get("pmtu_heal", True)
    if not isinstance(pmtu, int) or isinstance(pmtu, bool) or not (pmtu == 0 or 5 <= pmtu <= 300):
        raise ValueError(f"pmtu_seconds: {pmtu!r} is not 0 (off) or 5..300")
    if not isinstance(heal, bool):
        raise ValueError(f"pmtu_heal: {heal!r} is not true or false")
    ha = parse_ha(raw["ha"]) if "ha" in raw else None
    if "trust" not in raw:
        raise ValueError("trust: missing (the signing key and the site's facts every document is checked against)")
    trust = parse_trust(raw["trust"])
    if trust.site != site:
        raise ValueError(f"trust.site: {trust.site!r} is not this gateway's site {site!r}")
    return Config(site, source, trust, interface, poll, pmtu, heal, ha)


@dataclass
class Status:
    applied_generation: int = 0
    desired_generation: int = 0
    last_success: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    fetch_failures: int = 0
    last_fetch: float = 0.0
    last_apply: float = 0.0
    peers: int = 0


def metrics_text(site: str, status: Status) -> str:
    label = f'site="{site}"'
    values: dict[str, list[tuple[str, float]]] = {
        "wgmesh_agent_applied_generation": [(label, status.applied_generation)],
        "wgmesh_agent_desired_generation": [(label, status.desired_generation)],
        "wgmesh_agent_last_apply_success": [(label, status.last_success)],
        "wgmesh_agent_apply_failures_total": [(f'{label},reason="{r}"', n) for r, n in status.failures.items()],
        "wgmesh_agent_fetch_failures_total": [(label, status.fetch_failures)],
        "wgmesh_agent_last_fetch_timestamp_seconds": [(label, status.last_fetch)],
        "wgmesh_agent_last_apply_timestamp_seconds": [(label, status.last_apply)],
        "wgmesh_agent_peers": [(label, status.peers)],
    }
    lines = []
    for name, (kind, help_text) in METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{labels}}} {value:.15g}" for labels, value in values[name]]
    return "\n".join(lines) + "\n"


def log_stderr(message: str) -> None:
    print(f"wg-mesh-agent: {message}", file=sys.stderr, flush=True)


class Agent:
    def __init__(
        self,
        config: Config,
        source: Source,
        runner: Runner = default_runner,
        paths: Paths | None = None,
        log: Callable[[str], None] = log_stderr,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.source = source
        self.paths = paths or Paths()
        self.apply_lock = threading.RLock()  # the document cycle, the HA controller's role changes, key switches
        # an Applier that holds announced keys until their key_at and switches them then (wg_mesh.gateway.rotation)
        self.applier = RotatingApplier(
            runner, self.paths, config.interface, lock=self.apply_lock, log=lambda m: self.log(m), clock=clock
        )
        # an HA gateway starts standby (its first boot and every restart): the controller claims when it may
        self.applier.role = "standby" if config.ha else "active"
        self.applier.relay = config.trust.relay if config.trust is not None else None  # the mapping's relayed peers
        self.doc: Document | None = None
        self._log = log
        self.clock = clock
        self.status = Status()
        self.last_problem = ""
        self.state = self._load_state()
        self.status.applied_generation = int(self.state.get("applied_generation", 0))
        self.plan: InterfacePlan | None = None  # the running document's; the path-MTU probes read it

    def path_watch(self) -> PathWatch:
        """The path-MTU monitor on the running document's peers, its metrics in their own textfile."""

        def write(text: str) -> None:
            atomic_write(self.paths.path_metrics, text, 0o644)

        settings = Settings(heal=self.config.pmtu_heal)
        return PathWatch(lambda: self.plan, write, self.log, self.config.pmtu_seconds, settings)

    def log(self, message: str) -> None:
        self._log(redact(message))  # the messages hold no key; this keeps it so if one ever slips into an error

    def problem(self, message: str) -> None:
        """A failure, logged when it differs from the previous one (a refused document is not logged every poll)."""
        if message != self.last_problem:
            self.log(message)
        self.last_problem = message

    def _load_state(self) -> dict[str, Any]:
        try:
            state = json.loads(read_text(self.paths.state) or "{}")
        except (ValueError, OSError):  # OSError: a symlink where the state file belongs (files.read_text)
            state = {}
        return state if isinstance(state, dict) else {}

    def applied_serial(self) -> int:
        """The serial of the document that runs (the state file): no older one is ever applied again (replay)."""
        serial = self.state.get("applied_serial", 0)
        return serial if isinstance(serial, int) and not isinstance(serial, bool) and serial >= 0 else 0

    def _decode(self, text: str) -> Document:
        if self.config.trust is None:
            raise DocumentError("signature", "agent.json has no trust: no document can be verified")
        generation = self.state.get("applied_generation")
        return decode(
            text,
            self.config.trust,
            min_serial=self.applied_serial(),  # `now`: the wall clock (self.clock is the metrics' and tests')
            applied_generation=generation if isinstance(generation, int) and self.applied_serial() else None,
        )

    def _fail(self, reason: str, message: str) -> bool:
        self.status.failures[reason] += 1
        self.status.last_success = 0
        self.problem(f"refused ({reason}), the running config stays: {message}")
        return False

    def cycle(self) -> bool:
        """One fetch and apply; True when the fetched document runs. Never raises for a bad fetch or document."""
        try:
            return self._cycle()
        finally:
            try:
                label = f'site="{self.config.site}"'
                extra = "\n".join(self.applier.metric_lines(label)) + "\n"
                atomic_write(self.paths.metrics, metrics_text(self.config.site, self.status) + extra, 0o644)
            except OSError as exc:
                self.log(f"cannot write {self.paths.metrics}: {exc}")

    def _cycle(self) -> bool:
        try:
            text = self.source.document()
        except FetchError as exc:
            self.status.fetch_failures += 1
            self.problem(f"fetching the peer document failed: {exc}")
            return False
        self.status.last_fetch = self.clock()
        try:
            doc = self._decode(text)
        except DocumentError as exc:
            if exc.generation is not None:  # only a signed document's claim is a metric
                self.status.desired_generation = exc.generation
            return self._fail(exc.reason, str(exc))
        self.status.desired_generation = doc.generation
        try:
            with self.apply_lock:
                changes = self.applier.apply(doc, self.source.private_key)
        except FetchError as exc:
            self.status.fetch_failures += 1
            self.status.last_success = 0
            self.problem(f"fetching the private key failed: {exc}")
            return False
        except ApplyError as exc:
            if exc.rollback_failed:  # loudly, every time: the host may be neither the old state nor the new one
                self.log(f"ERROR applying generation {doc.generation:012x}: {exc}")
            return self._fail(exc.reason, str(exc))
        except OSError as exc:
            return self._fail(APPLY_REASON, f"{exc.__class__.__name__}: {exc}")
        if changes or self.state.get("applied_generation") != doc.generation or self.applied_serial() != doc.serial:
            self.state = {
                "applied_generation": doc.generation,
                "applied_serial": doc.serial,
            }
            try:
                atomic_write(self.paths.state, json.dumps(self.state) + "\n", 0o644)
            except OSError as exc:
                self.log(f"cannot write {self.paths.state}: {exc}")
        if self.last_problem:
            self.log(f"generation {doc.generation:012x} runs again after: {self.last_problem}")
            self.last_problem = ""
        if changes:
            self.log(f"applied generation {doc.generation:012x} ({len(doc.plan.peers)} peers): {'; '.join(changes)}")
        self.status.applied_generation, self.plan, self.doc = doc.generation, doc.plan, doc
        self.status.last_success, self.status.last_apply, self.status.peers = 1, self.clock(), len(doc.plan.peers)
        return True

    # -- what the HA controller (wg_mesh.gateway.ha_run) uses ---------------------------------------------------

    def applied(self) -> bool:
        """Whether the last fetched document runs (a health check)."""
        return self.doc is not None and self.status.last_success == 1

    def stood_down(self) -> bool:
        """Whether the running document says the site has one gateway (an HA pair being retired stands down)."""
        return self.doc is not None and self.doc.gateways == SINGLE

    def set_role(self, role: str) -> None:
        """wg0 to `role` now: the running document applied again in that role (ApplyError, FetchError raise)."""
        with self.apply_lock:
            self.applier.role = role
            if self.doc is None:
                return
            changes = self._apply_again(self.doc)
        self.log(f"wg0 {role}: {'; '.join(changes) or 'no change'}")

    def _apply_again(self, doc: Document) -> list[str]:
        """The running document applied again (under apply_lock)."""
        return self.applier.apply(doc, self.source.private_key)

    def rearm(self, keys: list[str]) -> None:
        """Remove and re-add these peers of the active wg0 (the running document applied again): their next packet
        initiates a handshake at once (wg_mesh.gateway.ha_kick). A standby does nothing (ApplyError, FetchError
        raise)."""
        with self.apply_lock:
            if self.doc is None or self.applier.role != "active":
                return
            self.applier.rearm = frozenset(keys)
            try:
                changes = self._apply_again(self.doc)
            finally:
                self.applier.rearm = frozenset()
        self.log(f"wg0 active: {'; '.join(changes) or 'no change'}")

    def write_ha_metrics(self, text: str) -> None:
        try:
            atomic_write(self.paths.ha_metrics, text, 0o644)
        except OSError as exc:
            self.problem(f"cannot write {self.paths.ha_metrics}: {exc}")

    def ha_controller(self) -> Any:
        """The HA controller of agent.json's `ha` (None without one)."""
        if self.config.ha is None:
            return None
        from .ha_run import Controller, cloud_factory

        ha, site, trust = self.config.ha, self.config.site, self.config.trust
        if trust is None:
            raise ValueError("trust: missing (an HA gateway writes routes only towards what it allows)")
        return Controller(site, ha, self, cloud_factory(site, ha, trust), interface=self.config.interface, trust=trust)

    def once(self, timeout_s: float, sleep: Callable[[float], None] = time.sleep) -> int:
        give_up = time.monotonic() + timeout_s
        while not self.cycle():
            if time.monotonic() >= give_up:
                self.log(f"no peer document applied within {timeout_s:.0f} s")
                return 1
            sleep(min(ONCE_RETRY_S, max(0.0, give_up - time.monotonic())))
        return 0

    def forever(self, sleep: Callable[[float], None] = time.sleep, controller: Any = None) -> None:
        """The daemon: fetch and apply in this thread, the path-MTU probes in their own (unless pmtu_seconds is 0),
        and an HA gateway's controller in its own (every 0.5 s, with /healthz)."""
        if self.config.pmtu_seconds:
            self.path_watch().start()
        reresolve.watch(self).start()  # DNS-named peers' endpoints (a thread that idles without any)
        if controller is not None:
            controller.start()
        while True:
            started = time.monotonic()
            self.cycle()
            sleep(max(0.0, self.config.poll_seconds - (time.monotonic() - started)))


def make_source(spec: dict[str, Any]) -> Source:
    """The source of agent.json's "source" object; ValueError naming what is wrong."""
    kind = spec.get("kind")
    fields: dict[str, tuple[str, ...]] = {
        "aws": ("region", "document_secret", "private_key_parameter"),
        "gcp": ("document_secret", "private_key_secret"),
        "file": ("document", "private_key"),
    }
    if kind not in fields:
        raise ValueError(f"source.kind: {kind!r} is not one of {', '.join(fields)}")
    missing = [f for f in fields[kind] if not isinstance(spec.get(f), str) or not spec[f]]
    if missing:
        raise ValueError(f"source ({kind}): missing {', '.join(missing)}")
    if kind == "aws":
        from .source_aws import AwsSource  # only the modules of the gateway's own cloud ship (wg_mesh.gateway.ship)

        return AwsSource(spec["region"], spec["document_secret"], spec["private_key_parameter"])
    if kind == "gcp":
        from .source_gcp import GcpSource

        return GcpSource(spec["document_secret"], spec["private_key_secret"])
    return FileSource(spec["document"], spec["private_key"])


def main(argv: Sequence[str] | None = None, runner: Runner = default_runner) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-agent", description="Apply this gateway's peer document to wg0.")
    parser.add_argument("--config", required=True, help="agent.json (site, interface, poll_seconds, source)")
    parser.add_argument("--once", action="store_true", help="apply one document, then exit (0: applied)")
    parser.add_argument("--timeout", type=float, default=300.0, help="--once: give up after this many seconds")
    parser.add_argument("--root", default="/", help="prefix of the files the agent writes (tests)")
    args = parser.parse_args(argv)
    try:
        config = load_config(read_text(args.config) or "")
        source = make_source(config.source)
    except (ValueError, OSError) as exc:
        print(f"wg-mesh-agent: {args.config}: {exc}", file=sys.stderr)
        return 2
    paths = Paths() if args.root == "/" else Paths.under(args.root)
    agent = Agent(config, source, runner, paths)
    if args.once:
        return agent.once(args.timeout)
    agent.log(f"site {config.site}: watching the peer document ({config.source.get('kind')})")
    controller = agent.ha_controller()
    if controller is not None:
        agent.log(f"HA gateway {config.ha.gateway if config.ha else ''}: standby until it may claim")

        def stop(signum: int, frame: object) -> None:
            controller.shutdown()  # planned handover (docs/ha.md section 9): release, 503, standby wg0
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    agent.forever(controller=controller)
    return 0


if __name__ == "__main__":
    sys.exit(main())
