"""The HA controller of wg-mesh-agent (agent.json has an `ha` object): the thin shell around wg_mesh.gateway.ha.

Every 0.5 s, in its own thread next to the document cycle: one local health sample (ha_health), the arbiter
(AWS: the lease item while standby; the Elastic IP's holder at most once a second while active; GCP: the address
holder and Google's health view of the other gateway's group), `Machine.tick`, then the actions through the cloud
adapter. Claims, renewals and releases run in this thread; the address and route reconcile runs in a worker (at
most one at a time) that asks the machine's write window before every write; the role change is the agent's
level-triggered apply with the other role (`Agent.set_role`), followed on promotion by one ping to every peer's
overlay address so the new active initiates a handshake with all peers at once, then the kick (ha_kick): every second,
the peers still without a handshake since the promotion re-armed and pinged. Writes wg_mesh_ha.prom every tick
and serves /healthz. `shutdown()` (SIGTERM: `systemctl stop`, shutdown, termination) releases the lease, turns
/healthz 503 and demotes wg0: a planned handover. Every tick also asks the agent whether the applied document says
the site has one gateway (`Host.stood_down`, issue 32: the pair is being retired, `gateways: 2` -> 1): the machine
then claims nothing and writes nothing (wg_mesh.gateway.ha), and `shutdown()` releases nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from .ha import (
    Action,
    Claim,
    Demote,
    Health,
    Lease,
    LeaseView,
    Machine,
    Outcome,
    Promote,
    Reconcile,
    Release,
    Renew,
    Settings,
    Unreachable,
)
from .ha_config import HaConfig
from .ha_health import HealthServer, LocalChecks, Run, TunnelProbe, run_command
from .ha_kick import Kick
from .ha_routes import safe_ranges
from .pmtu_heal import overlay_address
from .trust import Trust
from .wgconf import INTERFACE, InterfacePlan

METRICS: dict[str, tuple[str, str]] = {
    "wgmesh_ha_role": ("gauge", "1 if this gateway is its site's active gateway, 0 if standby."),
    "wgmesh_ha_healthy": ("gauge", "1 if this gateway passes its health checks (docs/ha.md section 4)."),
    "wgmesh_ha_failovers_total": ("counter", "Claims of the active role by this gateway, by reason."),
    "wgmesh_ha_lease_epoch": ("gauge", "Epoch of the lease this gateway holds or last saw (AWS)."),
    "wgmesh_ha_last_claim_seconds": ("gauge", "Duration of this gateway's last claim (arbiter, address, routes)."),
    "wgmesh_ha_stood_down": ("gauge", "1 if the site's document says it has one gateway: this pair claims nothing."),
}


RECONCILE_WAIT_S = 3.0  # shutdown: a reconcile in flight ends within its calls' timeouts (connect 1 s + read 2 s)


class Host(Protocol):
    """What the controller needs of the agent (wg_mesh.gateway.agent.Agent)."""

    plan: InterfacePlan | None

    def set_role(self, role: str) -> None: ...

    def rearm(self, keys: list[str]) -> None: ...

    def applied(self) -> bool: ...

    def stood_down(self) -> bool: ...

    def log(self, message: str) -> None: ...

    def write_ha_metrics(self, text: str) -> None: ...


class Cloud(Protocol):
    """The adapter's calls the controller makes (ha_aws.AwsHa, ha_gcp.GcpHa); failures raise."""

    def holder(self) -> str: ...

    def reconcile(self, ranges: list[str], may_write: Callable[[], bool]) -> list[str]: ...


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class Controller:
    def __init__(
        self,
        site: str,
        config: HaConfig,
        host: Host,
        cloud: Callable[[], Any],
        run: Run = run_command,
        clock: Callable[[], float] = time.monotonic,
        settings: Settings | None = None,
        interface: str = INTERFACE,
        wall: Callable[[], float] = time.time,
        trust: Trust | None = None,
    ) -> None:
        self.site, self.config, self.host, self.run, self.clock, self.wall = site, config, host, run, clock, wall
        self.trust = trust  # what a route destination is checked against (None: no route is ever written)
        self.make_cloud: Callable[[], Any] = cloud
        self.cloud: Any = None  # made on the first tick that can (IMDS, metadata may lag)
        arbiter = "lease" if config.cloud == "aws" else "health"
        self.machine = Machine(config.gateway, arbiter, settings or Settings())
        self.checks = LocalChecks(host.applied, interface, run)
        self.tunnel = TunnelProbe(lambda: host.plan, lambda: self.checks.dump, run)
        self.failed = "not sampled yet"
        self.tunnel_ok = True
        self.kick = Kick()  # after a promotion: the peers without a handshake since, re-armed every second
        self.last_holder_read = -1e9
        self.claim_seconds = 0.0
        self.lease_epoch = 0
        self.lock = threading.Lock()  # one tick at a time (the loop, shutdown)
        self.reconciling = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wg-mesh-ha-cloud")
        # role changes in their own worker, in order: a document cycle that waits on a hung `wg` (the applier's 30 s
        # command timeout) holds the apply lock, and the 0.5 s ticks must go on meanwhile
        self.roles = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wg-mesh-ha-role")
        self.last_error = ""
        self.stopped = False

    # -- status ---------------------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return not self.failed and (self.machine.role != "active" or self.tunnel_ok)

    def healthz(self) -> tuple[int, str]:
        if self.failed:
            return 503, f"unhealthy: {self.failed}"
        if self.machine.role != "active" or self.stopped:
            return 503, "standby"
        if self.config.cloud == "gcp" and not (self.cloud is not None and self.cloud.serving()):
            return 503, "active, not known to hold the address"  # a stale ex-active (ha_gcp.Witness)
        return 200, "active"

    def metrics_text(self) -> str:
        labels = f'site="{_escape(self.site)}",gateway="{self.config.gateway}"'
        m = self.machine
        values: dict[str, list[tuple[str, float]]] = {
            "wgmesh_ha_role": [(labels, 1 if m.role == "active" else 0)],
            "wgmesh_ha_healthy": [(labels, 1 if self.healthy else 0)],
            "wgmesh_ha_failovers_total": [(f'{labels},reason="{r}"', n) for r, n in m.claims.items()],
            "wgmesh_ha_lease_epoch": [(labels, self.lease_epoch)],
            "wgmesh_ha_last_claim_seconds": [(labels, self.claim_seconds)],
            "wgmesh_ha_stood_down": [(labels, 1 if m.stood_down else 0)],
        }
        lines = []
        for name, (kind, help_text) in METRICS.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            lines += [f"{name}{{{label}}} {value:.15g}" for label, value in values[name]]
        return "\n".join(lines) + "\n"

    def problem(self, message: str) -> None:
        if message != self.last_error:
            self.host.log(message)
        self.last_error = message

    # -- one tick ---------------------------------------------------------------------------------------------

    def _observe(self, now: float) -> tuple[LeaseView, str | None, str | None]:
        view: LeaseView = Unreachable("not read")
        holder: str | None = None
        other: str | None = None
        try:
            if self.config.cloud == "aws":
                if self.machine.role == "standby":
                    view = self.cloud.read_lease()
                    if isinstance(view, Lease):
                        self.lease_epoch = view.epoch
                # while renewals succeed the lease fences and the reconcile reads the holder; without them (the
                # arbiter unreachable) the holder is read here, at most once a second, to see a takeover
                writable = self.machine.may_write(now)
                if self.machine.role == "active" and not writable and now - self.last_holder_read >= 1.0:
                    self.last_holder_read = now
                    holder = self.cloud.holder()
            else:
                holder = self.cloud.holder()
                if self.machine.role == "standby" and holder == "other" and not self.machine.stood_down:
                    other = self.cloud.other_health()
            self.last_error = ""
        except Exception as exc:  # unreachable: the machine is told nothing new
            self.problem(f"HA: the cloud did not answer: {exc.__class__.__name__}: {exc}")
        return view, holder, other

    def tick(self) -> None:
        with self.lock:
            if self.stopped:
                return
            now = self.clock()
            self.failed = self.checks.sample()
            if self.cloud is None:
                try:
                    self.cloud = self.make_cloud()
                except Exception as exc:
                    self.problem(f"HA: cannot set up the cloud adapter: {exc.__class__.__name__}: {exc}")
                    self.host.write_ha_metrics(self.metrics_text())
                    return
                if self.config.cloud == "aws":  # the lease's holder is the adapter's identity (the instance id)
                    self.machine.lease_id = str(self.cloud.me)
            self._stand_down(self.host.stood_down())
            self.tunnel_ok = self.tunnel.ok() if self.machine.role == "active" else True
            view, holder, other = self._observe(now)
            queue: list[Action] = list(self.machine.tick(now, Health(self.failed, self.tunnel_ok), view, holder, other))
            while queue:
                queue += self._run(queue.pop(0))
            stale = self.kick.due(now, self.checks.dump) if self.machine.role == "active" and not self.failed else []
            if stale:
                self.roles.submit(self._rearm, stale)
            self.host.write_ha_metrics(self.metrics_text())

    def _stand_down(self, stood_down: bool) -> None:
        """The applied document's word on the pair (wg_mesh.gateway.ha, "Stood down"); logged when it changes."""
        if stood_down != self.machine.stood_down:
            self.machine.stood_down = stood_down
            down = f"standing down as {self.machine.role} (no claim, no address or route write, no release)"
            self.host.log(f"HA: the site's document says it has one gateway: {down}" if stood_down else
                          "HA: the site's document names no single gateway now: the pair's rules again")  # fmt: skip

    def _outcome(self, call: Callable[[], Any]) -> tuple[Outcome, Any]:
        try:
            result = call()
        except Exception as exc:
            self.problem(f"HA: {exc.__class__.__name__}: {exc}")
            return None, None
        return (result is not None and result is not False), result

    def _run(self, action: Action) -> list[Action]:
        m = self.machine
        if isinstance(action, Claim):
            started = self.clock()
            if self.config.cloud == "aws":
                outcome, lease = self._outcome(lambda: self.cloud.claim(action.seen))
                if outcome:
                    # the Elastic IP first, then the promotion: wg0's first handshake initiations (the keepalives
                    # `wg syncconf` queues, the pings) must leave from the site's address, or every peer drops them
                    # and WireGuard retries only after REKEY_TIMEOUT (5 s). The routes follow in the reconcile.
                    self._outcome(self._take_address)
            else:
                outcome, lease = self._outcome(lambda: self.cloud.take_address() or True)
            if outcome:
                self.claim_seconds = self.clock() - started
                if isinstance(lease, Lease):
                    self.lease_epoch = lease.epoch
                self.host.log(f"HA: claimed the active role ({action.reason}) in {self.claim_seconds:.2f} s")
            return m.done(started, action, outcome, lease if isinstance(lease, Lease) else None)
        if isinstance(action, Renew):
            sent = self.clock()
            outcome, _ = self._outcome(lambda: self.cloud.renew(action.epoch))
            if outcome is None:
                return m.done(sent, action, None)
            return m.done(sent, action, bool(outcome))
        if isinstance(action, Release):
            self.host.log(f"HA: releasing the active role: {action.why}")
            self._outcome(lambda: self.cloud.release(action.epoch))
            return []
        if isinstance(action, Promote):
            self.tunnel.reset()
            self.kick.promoted(self.clock(), self.wall())
            self.roles.submit(self._set_role, "active")
            return []
        if isinstance(action, Demote):
            self.host.log(f"HA: standby: {action.why}")
            self.kick.stop()
            self.roles.submit(self._set_role, "standby")
            return []
        if isinstance(action, Reconcile):
            if self.reconciling.acquire(blocking=False):
                self.pool.submit(self._reconcile)
            return []
        raise AssertionError(action)

    def _take_address(self) -> None:
        if self.cloud.holder() != "me":
            self.cloud.take_address()

    def _set_role(self, role: str) -> None:
        try:
            self.host.set_role(role)
        except Exception as exc:  # the next document cycle applies the role again (the applier holds it)
            self.problem(f"HA: wg0 to {role} failed: {exc.__class__.__name__}: {exc}")
        if role == "active" and self.machine.role == "active":
            self._ping_all()

    def _rearm(self, keys: list[str]) -> None:
        """The kick (wg_mesh.gateway.ha_kick): re-arm these peers, then ping them (each initiates at once)."""
        if self.machine.role != "active":
            return
        self.host.log(f"HA: no handshake since the promotion with {len(keys)} peers: re-armed, pinging")
        try:
            self.host.rearm(keys)
        except Exception as exc:  # the next kick tries again
            self.problem(f"HA: re-arming peers failed: {exc.__class__.__name__}: {exc}")
            return
        self._ping_all(set(keys))

    def wait_idle(self) -> None:
        """Until the role change and the reconcile submitted so far are done (tests, shutdown)."""
        self.roles.submit(lambda: None).result()
        self.pool.submit(lambda: None).result()

    def _ping_all(self, keys: set[str] | None = None) -> None:
        """One ping to every peer's overlay address (or those of `keys`): each starts a handshake (docs/ha.md
        section 3)."""
        plan = self.host.plan
        if plan is None:
            return
        for peer in (p for p in plan.peers if keys is None or p.public_key in keys):
            argv = ["ping", "-n", "-q", "-c", "1", "-W", "1", overlay_address(plan, peer.name)]
            threading.Thread(target=self.run, args=(argv, 2.0), daemon=True).start()

    def _reconcile(self) -> None:
        try:
            plan = self.host.plan
            if plan is not None:
                ranges, refused = safe_ranges(plan, self.trust)
                if refused:
                    self.problem(f"HA: routes refused: {'; '.join(refused)}")
                changed = self.cloud.reconcile(ranges, lambda: self.machine.may_write(self.clock()))
                if changed:
                    self.host.log(f"HA: moved to this gateway: {', '.join(changed)}")
        except Exception as exc:
            self.problem(f"HA: reconcile: {exc.__class__.__name__}: {exc}")
        finally:
            self.reconciling.release()

    # -- the thread -----------------------------------------------------------------------------------------

    def run_forever(self, stop: threading.Event) -> None:
        interval = self.machine.settings.tick_s
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception as exc:  # a failed tick must not end the controller
                self.problem(f"HA tick failed: {exc.__class__.__name__}: {exc}")
            stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def start(self) -> threading.Event:
        stop = threading.Event()
        server = HealthServer(self.config.health_port, self.healthz)
        server.start()
        threading.Thread(target=self.tunnel.run_forever, args=(stop,), name="wg-mesh-tunnel", daemon=True).start()
        threading.Thread(target=self.run_forever, args=(stop,), name="wg-mesh-ha", daemon=True).start()
        return stop

    def shutdown(self) -> None:
        """A planned handover: release, 503, standby wg0. Idempotent."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            m = self.machine
            if m.role == "active":
                # the write window closes first and a reconcile in flight ends before the release: once the lease
                # is none the standby (or the replacement) claims at its next read, and no write of ours may follow
                # its moves (the address and routes move once, docs/ha.md 9)
                m.role = "standby"
                if self.reconciling.acquire(timeout=RECONCILE_WAIT_S):
                    self.reconciling.release()
                if m.stood_down:  # the pair is retired: a release would let a partner that still claims take over
                    self.host.log("HA: stopping: stood down, nothing released")
                else:
                    if self.config.cloud == "aws" and self.cloud is not None:
                        self._outcome(lambda: self.cloud.release(m.epoch))
                    self.host.log("HA: stopping: released the active role")
                self.roles.submit(self._set_role, "standby")
                # bounded: a hung `wg` must not keep systemd waiting (the address has moved by then anyway)
                done = self.roles.submit(lambda: None)
                try:
                    done.result(timeout=5.0)
                except Exception:
                    self.host.log("HA: stopping: wg0 to standby did not finish in 5 s")
            self.host.write_ha_metrics(self.metrics_text())


def cloud_factory(site: str, config: HaConfig, trust: Trust) -> Callable[[], Any]:
    """The adapter of agent.json's ha.cloud, made when first needed (only that cloud's module ships). GCP writes no
    route (the internal load balancer follows the health check), AWS checks every destination against `trust`."""

    def make() -> Any:
        if config.cloud == "aws":
            from .ha_aws import AwsHa, own_interface

            instance, eni = own_interface()  # the lease names the instance, not the letter (docs/ha.md 5.3)
            return AwsHa(config.region, config.lease_table, site, instance, config.allocation_id,
                         config.route_table_ids, eni, trust=trust, ec2_endpoint=config.ec2_endpoint)  # fmt: skip
        from .ha_gcp import GcpHa

        return GcpHa(config)

    return make
