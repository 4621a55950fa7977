"""`python -m wg_mesh lab --drill ha --stack ha [--ha-site SITE]`: the failure modes of issue 11 (item 5) and a planned
replacement (item 7) on an HA site whose two gateways run their agents as shipped, against the lab's model of its
cloud (hacloud.py: AWS, moto + the model applying the EIP holder and the route targets; GCP, the Compute model, the
probers and the ILB's failover policy applying the address holder and the next hop).

The HA site S (`--ha-site`, default the first site with `gateways: 2`) and a peer site P (the first other site,
preferring another cloud; an HA site runs as a pair there too). A ping every 10 ms and a
SHA-256-verified TCP stream run from P's workload host through P's gateway and S's active gateway to S's workload
host for the whole drill; when S relays a pair with no direct path, from the pair's first site's host through S's
active gateway to its partner's host instead (relayed: harun.traffic_path), both offices' handshakes with S sampled.
Each step starts from the steady state (one gateway active, the other a healthy standby,
the EIP and every route on the active, traffic flowing) and injects its fault into the gateway it names; then, for a
failure of the active, it waits until the cloud model applied the EIP on the other gateway and traffic flows (else
OBSERVE_S of nothing moving), notes which gateway is active, replaces the failed gateway by a fresh one (every
process of the old one killed by pid, its user data carried out again: a new instance; the partition is healed
instead), waits for the pair to be steady and traffic to flow, and SETTLE_S. The step's traffic window is all of it:

1. standby killed      SIGKILL to every process of the standby (agent, wireguard-go): a crashed VM     -> 0 loss
2. active killed       the same to the active                                   -> the standby takes over
3. active's wg0 down   `ip link set wg0 down` on the active                     -> its agent releases, standby claims
4. forwarding off      net.ipv4.ip_forward=0 on the active                      -> the same
5. active hung         SIGSTOP to the active's wireguard-go                      -> `wg show` times out: the same
6. partition           the two gateways drop each other's packets (both still reach the cloud) -> nothing moves
7. planned replacement SIGTERM to the active's agent (systemd stopping it: a planned handover), then a new instance
                       in its place joins as standby
8. standby replaced beside the old   (the site's spare place; hareplace.py) Pulumi's create before delete: a new
                       instance with the standby's user data starts in a free place and runs beside the old one (three
                       agents) until it is a healthy standby (GCP: then its group holds it instead of the old VM) and
                       BESIDE_S more; then the old one is stopped (SIGTERM) and terminated (killed, its place free;
                       GCP: its VM deleted)                                     -> nothing moves
9. active replaced beside the old    the same for the active               -> the partner or the new instance takes
                       over, the address and each route move once, the outage within the target
10. stale ex-active    SIGSTOP to the active's agent, the standby takes over, SIGCONT: the resumed one must get no
                       traffic (GCP: never a 200 to the probers; hastale.py). Run only when named.
11. back to one gateway  `gateways: 2` -> 1 as `pulumi up` runs it (hadowngrade.py): the documents say the site has
                       one gateway, a new single gateway in the spare place, its gate, the address and routes moved
                       to it by "Pulumi", the pair deleted last -> the address and routes stay on the new gateway.
                       Run only when named, after the others (it ends the pair), with `publish` (harun.py).
12. back to two gateways  `gateways: 1` -> 2 as `pulumi up` runs it (haupgrade.py), right after 11: the documents for
                       two gateways, a new `a` in place a (its agent claims from the single gateway), its gate, `b`
                       after it, GCP's groups and routes, the single gateway deleted last -> the pair steady, the
                       address and routes moved once. Run only when named with 11, last.
GCP: each step also counts the 200s from a group member without the address and the episodes of two HEALTHY
backends (hamoves.gcp_serving): both must be 0. A sampler (hawatch.py, every SAMPLE_S) reads the agents'
wg_mesh_ha.prom and the cloud model's address holders: at no sample may two gateways report the active role, nor two
ENIs / VMs hold it.
Per step: the longest ping gap (the outage), pings lost, the stream's longest stall, which gateway ended active, the
failover seen in the cloud (when the address moved), and how often the address and each route moved
(`count_moves`): at most once in a failover step, never in the others (no flapping, issue 21).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from wg_mesh.lab.checks.mesh import latest_handshakes
from wg_mesh.lab.clouds.hacloud import HaCloud
from wg_mesh.lab.drills.drill import daemon_pids
from wg_mesh.lab.drills.hadowngrade import STEP as DOWNGRADE
from wg_mesh.lab.drills.hadowngrade import DowngradeStep
from wg_mesh.lab.drills.hamoves import count_moves, gcp_serving
from wg_mesh.lab.drills.hareplace import BesideStep
from wg_mesh.lab.drills.hastale import StaleStep
from wg_mesh.lab.drills.haupgrade import STEP as UPGRADE
from wg_mesh.lab.drills.haupgrade import UpgradeStep
from wg_mesh.lab.drills.hawatch import Sampler, ha_view
from wg_mesh.lab.drills.traffic import Pinger, Stream
from wg_mesh.lab.fabric.haplan import SPARE, HaSite
from wg_mesh.lab.fabric.netns import LabError, Node, pids_in_netns, proc_start_time, run
from wg_mesh.lab.machines.machine import NamespaceGateway

STEADY_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = 30.0
SETTLE_S = 2.0
PAUSE_S = 1.0  # between a step's end and the next fault: a silence at the edge belongs to one window only
OBSERVE_S = 5.0  # steps that must change nothing: how long they are watched (> the lease's 3 s and a read)
Step = Callable[[str], None]
STEPS = (
    "standby killed",
    "active killed",
    "active's wg0 down",
    "active's forwarding off",
    "active hung (SIGSTOP wireguard-go)",
    "partition between the pair",
    "planned replacement",
    "standby replaced beside the old",
    "active replaced beside the old",
    "stale ex-active comes back",  # GCP (hastale.py); only when named: --ha-steps, the GCP CI drill
    DOWNGRADE,  # after the others: it ends the pair (hadowngrade.py); only when named
    UPGRADE,  # the last: a pair again from DOWNGRADE's single gateway (haupgrade.py); only when named with it
)
# the site's spare place runs the new instance (haplan.SPARE; hareplace.py); UPGRADE starts from DOWNGRADE's
BESIDE = (*STEPS[7:9], DOWNGRADE, UPGRADE)
OPT_IN = (STEPS[9], DOWNGRADE, UPGRADE)


class HaDrill:
    """The steps against a lab whose HA site's gateways run; `traffic` flows P -> S throughout."""

    def __init__(self, cloud: HaCloud, site: str, step: Step, traffic: tuple[Pinger, Stream] | None = None,
                 peer: tuple[Node, str] | None = None, steps: Collection[str] = (),
                 partner: Node | None = None, resume_s: float = FAILOVER_TIMEOUT_S,
                 downgrade: Callable[[HaDrill], DowngradeStep] | None = None,
                 upgrade: Callable[[HaDrill], UpgradeStep] | None = None) -> None:  # fmt: skip
        """`peer`: the traffic's source gateway and this site's public key (its handshakes with the site are sampled);
        `steps`: the names (STEPS) of the steps to run, in STEPS's order (default all but OPT_IN); `partner`: relayed
        traffic (this site relays it, harun.traffic_path): the receiving site's gateway, whose handshakes with this
        site are sampled too; `resume_s`: how long a step waits for the traffic to flow again; `downgrade`: makes the
        step DOWNGRADE (it writes the stores: harun.py), which runs only with it; `upgrade`: likewise UPGRADE, which
        runs only after DOWNGRADE."""
        self.cloud, self.site, self.traffic, self.step = cloud, site, traffic, step
        self.resume_s, self.relayed = resume_s, partner is not None
        self.ha: HaSite = cloud.sites[site]
        spare = SPARE in (g.letter for g in self.ha.gateways)
        wanted = tuple(steps) if steps else tuple(n for n in STEPS if n not in OPT_IN)
        runs = {DOWNGRADE: downgrade is not None, UPGRADE: upgrade is not None and downgrade is not None
                and DOWNGRADE in wanted}  # fmt: skip
        self.selected = tuple(n for n in STEPS if n in wanted and (spare or n not in BESIDE) and runs.get(n, True))
        self.downgrade = downgrade(self) if downgrade is not None else None
        self.upgrade = upgrade(self) if upgrade is not None else None
        self.free = [SPARE] if spare else []  # places without an instance (the spare, a terminated one's)
        self.down: set[str] = set()  # gateways killed and not replaced yet
        self.steps: list[dict[str, Any]] = []
        self.letters: dict[str, str] = {}  # place -> the letter whose user data it runs, where not its own
        self.sampler = Sampler(self.nodes, lambda: cloud.holders(site))
        if peer is not None:
            node, key = peer
            self.sampler.handshake = lambda: latest_handshakes(node, {key: site}).get(site)
            if partner is not None:
                self.sampler.partner_handshake = lambda: latest_handshakes(partner, {key: site}).get(site)

    # --- looking -----------------------------------------------------------------------------------------------

    def machine(self, letter: str) -> NamespaceGateway:
        return self.cloud.machines(self.site)[letter]

    def nodes(self) -> dict[str, Node | None]:
        found: dict[str, Node | None] = {}
        for letter in (g.letter for g in self.ha.gateways):
            try:
                found[letter] = None if letter in self.down or letter in self.free else self.machine(letter).node
            except (LabError, KeyError):
                found[letter] = None
        return found

    def roles(self) -> dict[str, dict[str, float | None]]:
        return {k: (ha_view(n) if n is not None else {"role": None, "healthy": None}) for k, n in self.nodes().items()}

    def active(self) -> str | None:
        active = [k for k, v in self.roles().items() if v["role"] == 1]
        return active[0] if len(active) == 1 else None

    def steady_now(self) -> str | None:
        """The active gateway if the pair is steady now: one active (and holding the EIP and every route in the cloud
        model), the other a healthy standby; else None."""
        roles, latest = self.roles(), self.cloud.latest.get(self.site, {})
        active = [k for k, v in roles.items() if v["role"] == 1]
        standby = [k for k, v in roles.items() if v["role"] == 0 and v["healthy"] == 1]
        routes = set((latest.get("routes") or {}).values())
        if len(active) == 1 and len(standby) == 1 and latest.get("holder") == active[0] and routes == set(active):
            return active[0]
        return None

    def steady(self) -> str | None:
        """The active gateway once the pair is steady (`steady_now`); None if not within the timeout."""
        deadline = time.monotonic() + STEADY_TIMEOUT_S
        while time.monotonic() < deadline:
            if (active := self.steady_now()) is not None:
                return active
            time.sleep(0.1)
        return None

    # --- acting ------------------------------------------------------------------------------------------------

    def kill(self, letter: str) -> list[int]:
        """A crashed instance: SIGKILL to every process of the gateway (by pid: those in its network namespace,
        except the cloud's metadata server, which is not the instance's)."""
        netns = self.ha.gateway(letter).netns
        pids = [p for p in pids_in_netns(netns) if p not in self.cloud.metadata_pids]
        starts = {p: proc_start_time(p) for p in pids}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(proc_start_time(p) == starts[p] is not None for p in pids):
            for pid in pids:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            time.sleep(0.02)
        self.down.add(letter)
        return pids

    def replace(self, letter: str) -> float:
        """A new instance in the failed one's place (its processes killed first): seconds until the pair is steady."""
        if letter not in self.down:
            self.kill(letter)
        started = time.monotonic()
        self.cloud.renew(self.site, letter).start()
        self.down.discard(letter)
        if self.steady() is None:
            raise LabError(
                f"{self.site}-{letter}: the pair did not become steady after the replacement: {self.roles()}"
            )
        return round(time.monotonic() - started, 1)

    def partition(self, cut: bool) -> None:
        a, b = self.ha.gateway("a"), self.ha.gateway("b")
        verb = "-I" if cut else "-D"
        for g, other in ((a, b), (b, a)):
            for chain, direction in (("INPUT", "-s"), ("OUTPUT", "-d"), ("FORWARD", "-s"), ("FORWARD", "-d")):
                run(["ip", "netns", "exec", g.netns, "iptables", "-w", verb, chain, direction, other.private, "-j",
                     "DROP"])  # fmt: skip

    # --- the steps ---------------------------------------------------------------------------------------------

    def flowing(self, timeout: float | None = None, stream_too: bool = True) -> bool:
        """Until pings are answered (and, `stream_too`, the stream's bytes arrive) again after now; `timeout` default
        resume_s."""
        assert self.traffic is not None
        pinger, stream = self.traffic
        deadline, now = time.monotonic() + (self.resume_s if timeout is None else timeout), time.time()
        while time.monotonic() < deadline:
            if pinger.replied_since(now) and (not stream_too or stream.last_rx > now):
                return True
            time.sleep(0.05)
        return False

    def failed_over(self, before: str) -> bool:
        """Until the cloud model applied another holder of the EIP, then traffic flows."""
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        while self.cloud.holder(self.site) in (None, before) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.cloud.holder(self.site) not in (None, before) and self.flowing()

    def drill(self, name: str, target: str, before: str, inject: Callable[[str], Any], failover: bool,
              heal: Callable[[], Any] | None = None, observe: float = OBSERVE_S) -> None:  # fmt: skip
        """One step: the fault; the failover (or OBSERVE_S of nothing moving); which gateway is active; the failed
        gateway replaced by a new instance (or the fault healed); traffic again and SETTLE_S. The step's window, for
        its traffic numbers, is all of it."""
        time.sleep(PAUSE_S)
        live = [k for k, n in self.nodes().items() if n is not None and k != before]  # the partner, in its place
        start = time.time()
        inject(target)
        if failover:
            self.failed_over(before)
        else:
            time.sleep(observe)
        after, holder = self.active(), self.cloud.holder(self.site)
        extra: dict[str, Any] = {"partner": live[0]} if len(live) == 1 else {}
        if name in BESIDE:  # the partner or the replacement may take over (the first standby's claim wins)
            extra["successors"] = [k for k, n in self.nodes().items() if n is not None and k != before]
        if heal is not None:
            healed = heal()
            extra.update(healed if isinstance(healed, dict) else {})
        else:
            extra["replaced_in_s"] = self.replace(target)
        # the path back (pings answered: judged) and the stream moving again (reported: after a long silence TCP's
        # retransmission backoff, not the mesh, decides when; the stream's bytes are verified at the end)
        extra["flowing_at_end"] = self.flowing(stream_too=False)
        extra["stream_at_end"] = extra["flowing_at_end"] and self.flowing()
        time.sleep(SETTLE_S)
        end = time.time()
        extra["address_moves"], extra["route_moves"] = count_moves(list(self.cloud.events), self.site, start, end)
        if self.ha.cloud == "gcp":  # 200s from a backend without the address, episodes of two HEALTHY backends
            extra["stale_200"], extra["two_healthy"] = gcp_serving(list(self.cloud.events), self.site, start, end)
        moves = [e for e in self.cloud.events if e.get("site") == self.site and start <= e.get("t", 0) <= end]
        eip_moved = next((round(e["t"] - start, 2) for e in moves if e.get("holder") not in (None, before)), None)
        routes_moved = next((round(e["t"] - start, 2) for e in moves
                             if set(e.get("routes", {}).values()) - {None, before}), None)  # fmt: skip
        if eip_moved is not None:  # the peer's first handshake with the site after the EIP moved (1 s resolution)
            for key, seen in (("peer_handshake_s", self.sampler.handshakes),
                              ("partner_handshake_s", self.sampler.partner_handshakes)):  # fmt: skip
                after_move = [h for h in seen if h >= int(start + eip_moved)]
                if key == "peer_handshake_s" or self.relayed:  # the partner's: relayed traffic only
                    extra[key] = round(after_move[0] - start, 1) if after_move else None
        self.steps.append(
            {"step": name, "fault_on": target, "active_before": before, "start": start, "end": end,
             "active_after": after, "eip_holder_after": holder, "eip_moved_s": eip_moved,
             "routes_moved_s": routes_moved, "expect_failover": failover, **extra}
        )  # fmt: skip

    def run(self) -> None:
        active = self.steady()
        if active is None:
            raise LabError(f"{self.site}: the pair never became steady: {self.roles()}, cloud {self.cloud.latest}")
        self.sampler.start()
        stale, beside = StaleStep(self), BesideStep(self)
        every: list[tuple[str, Callable[[str], Any], str]] = [  # on: active, standby or both (the partition)
            (STEPS[0], self.kill, "standby"),
            (STEPS[1], self.kill, "active"),
            (STEPS[2], self.wg0_down, "active"),
            (STEPS[3], self.forwarding_off, "active"),
            (STEPS[4], self.hang, "active"),
            (STEPS[5], lambda _: self.partition(True), "both"),
            (STEPS[6], self.planned, "active"),
            (STEPS[7], beside.beside, "standby"),
            (STEPS[8], beside.beside, "active"),
            (STEPS[9], stale.freeze, "active"),
        ]
        faults = [f for f in every if f[0] in self.selected]
        total = len(faults) + (DOWNGRADE in self.selected) + (UPGRADE in self.selected)
        for i, (name, inject, on) in enumerate(faults, 1):
            self.step(f"{i}/{total} {name}")
            active = self.active() or active
            standby = next((k for k, n in self.nodes().items() if n is not None and k != active), "b")
            target = {"active": active, "standby": standby, "both": "both"}[on]
            heal = (lambda: self.partition(False)) if on == "both" else (stale.thaw if name == STEPS[9] else None)
            if name in BESIDE:  # the old instance is terminated, not replaced in place: its place is free
                heal = functools.partial(beside.terminate, target)
            self.drill(name, target, active, inject, on == "active", heal=heal, observe=1.0 if name in BESIDE else
                       OBSERVE_S)  # fmt: skip
        if self.downgrade is not None and DOWNGRADE in self.selected:  # after the others: it ends the pair
            self.step(f"{len(faults) + 1}/{total} {DOWNGRADE}")
            time.sleep(PAUSE_S)
            self.steps.append(self.downgrade.run(self.active() or active))
            if self.upgrade is not None and UPGRADE in self.selected:  # a pair again, from its single gateway
                self.step(f"{total}/{total} {UPGRADE}")
                time.sleep(PAUSE_S)
                self.steps.append(self.upgrade.run(self.downgrade.new))
        self.sampler.stop()

    def wg0_down(self, letter: str) -> None:
        run(["ip", "-n", self.ha.gateway(letter).netns, "link", "set", "wg0", "down"])

    def forwarding_off(self, letter: str) -> None:
        run(["ip", "netns", "exec", self.ha.gateway(letter).netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0"])

    def hang(self, letter: str) -> None:
        for pid in daemon_pids(self.ha.gateway(letter).netns):
            os.kill(pid, signal.SIGSTOP)

    def planned(self, letter: str) -> None:
        """What systemd does when the instance is stopped or terminated: SIGTERM to the agent's main process."""
        daemons = [p for p in self.machine(letter).daemons if p.poll() is None]
        if not daemons:
            raise LabError(f"{self.site}-{letter}: no running agent to stop")
        for proc in daemons:
            os.kill(proc.pid, signal.SIGTERM)


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        return " / ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""
