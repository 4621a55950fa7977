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
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import floor, reresolve
from .agentconfig import PMTU_SECONDS as PMTU_SECONDS
from .agentconfig import Config as Config
from .agentconfig import load_config as load_config
from .agentconfig import make_source as make_source
from .agentmetrics import FAILURE_REASONS as FAILURE_REASONS
from .agentmetrics import METRICS as METRICS
from .agentmetrics import STATE_REASON, Status, metrics_text
from .apply import APPLY_REASON, ApplyError, Paths, Runner, atomic_write, read_text, redact
from .apply import run_command as default_runner
from .document import SINGLE, Document, DocumentError, decode
from .pmtu import PathWatch, Settings
from .rotation import RotatingApplier
from .sources import FetchError, Source
from .wgconf import InterfacePlan

ONCE_RETRY_S = 2.0


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
        self.state: dict[str, Any] = {}
        self.state_problem: str | None = None
        self._load_state()
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

    def _load_state(self) -> None:
        """The replay floor from the state file (wg_mesh.gateway.floor): known, or unknown and every document refused
        until it can be read again (an operator's `--reset-floor`)."""
        if self.config.trust is None:
            return
        loaded = floor.load(self.paths, self.config.trust)
        if loaded.note:
            self.log(loaded.note)
        if loaded.problem is not None:
            self.state, self.state_problem = {}, loaded.problem
            self.status.floor, self.status.state_lost = 0, 1
            return
        if self.state_problem is not None:
            self.log(f"the replay floor is known again: {self.paths.state}")
        self.state, self.state_problem = loaded.state, None
        self.status.floor, self.status.state_lost = floor.floor(self.state, self.config.trust), 0
        generation = self.state.get("applied_generation")
        self.status.applied_generation = generation if isinstance(generation, int) else 0

    def applied_serial(self) -> int:
        """The running document's serial, from the state file (0: none); decode adds agent.json's floor."""
        return int(self.state.get("applied_serial", 0))

    def _decode(self, text: str) -> Document:
        if self.config.trust is None:
            raise DocumentError("signature", "agent.json has no trust: no document can be verified")
        if self.state_problem is not None:
            self._load_state()  # an operator's --reset-floor since
        if self.state_problem is not None:
            raise DocumentError(
                STATE_REASON,
                f"ERROR the replay floor is unknown ({self.state_problem}): every document is refused, the running "
                "wg0 stays; after checking the current document's serial: wg-mesh-agent --reset-floor SERIAL "
                "(docs/security.md)",
            )
        generation = self.state.get("applied_generation")
        return decode(
            text,
            self.config.trust,
            min_serial=self.applied_serial(),  # `now`: the wall clock (self.clock is the metrics' and tests')
            applied_generation=generation if isinstance(generation, int) else None,
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
        self._record(doc)
        if self.last_problem:
            self.log(f"generation {doc.generation:012x} runs again after: {self.last_problem}")
            self.last_problem = ""
        if changes:
            self.log(f"applied generation {doc.generation:012x} ({len(doc.plan.peers)} peers): {'; '.join(changes)}")
        self.status.applied_generation, self.plan, self.doc = doc.generation, doc.plan, doc
        self.status.last_success, self.status.last_apply, self.status.peers = 1, self.clock(), len(doc.plan.peers)
        return True

    def _record(self, doc: Document) -> None:
        """The floor after `doc` runs: its serial, never lower than before (the running content signed again with a
        lower serial changes nothing), with the agent.json it was written under (wg_mesh.gateway.floor)."""
        assert self.config.trust is not None
        serial = max(self.status.floor, doc.serial)
        state = {"applied_generation": doc.generation, "applied_serial": serial, **floor.owner(self.config.trust)}
        self.status.floor, self.status.expiry = serial, doc.not_after or 0
        if state == self.state:
            return
        self.state = state
        try:
            floor.write(self.paths.state, state)
        except OSError as exc:  # the floor stays in memory; a restart before it is written reads the older one
            self.log(f"ERROR cannot write {self.paths.state}, the replay floor {serial} is not kept: {exc}")

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


def main(argv: Sequence[str] | None = None, runner: Runner = default_runner) -> int:
    parser = argparse.ArgumentParser(prog="wg-mesh-agent", description="Apply this gateway's peer document to wg0.")
    parser.add_argument("--config", required=True, help="agent.json (site, interface, poll_seconds, source)")
    parser.add_argument("--once", action="store_true", help="apply one document, then exit (0: applied)")
    parser.add_argument("--timeout", type=float, default=300.0, help="--once: give up after this many seconds")
    parser.add_argument("--root", default="/", help="prefix of the files the agent writes (tests)")
    parser.add_argument(
        "--reset-floor", type=int, metavar="SERIAL", help="write a new replay floor (its state lost), then exit"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(read_text(args.config) or "")
        source = make_source(config.source)
    except (ValueError, OSError) as exc:
        print(f"wg-mesh-agent: {args.config}: {exc}", file=sys.stderr)
        return 2
    paths = Paths() if args.root == "/" else Paths.under(args.root)
    if args.reset_floor is not None:
        return floor.reset_command(config.trust, paths, args.reset_floor)
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
