"""`python -m wg_mesh lab --drill roam --stack S [--json PATH]`: a dynamic-address site's public address changes,
idle and mid-transfer, behind a cone and then a symmetric NAT, a DNS-named site moves and its name is re-pointed, and
how long the mesh takes to follow each (issue 24).

The plan (sites, changes, targets, the outage's definition) is roamplan.py's; the NAT is roamnat.py's. Here: build
the lab (either delivery), wait until every gateway has learnt D's address, run the idle changes (each with a ping
P -> D started after it), start the traffic (a ping every 10 ms from P's host to D's, a SHA-256-verified stream from
D's host to P's: D sends, so its data teaches the peers), run the other changes, stop the traffic, judge, tear down
(always: drillreport.DrillReport.finish, the lab's state by name and pids).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from rich.console import Console
from rich.table import Table

from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks.report import Steps
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.drills.drillreport import DrillReport
from wg_mesh.lab.drills.harun import wait_replies
from wg_mesh.lab.drills.roamplan import Change, RoamPlan, back_at, met, plan_roam
from wg_mesh.lab.drills.traffic import Pinger, Stream, stop_traffic
from wg_mesh.lab.fabric.netns import LabError, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import LabKeys, SitePlan, plan_lab, render_artifacts
from wg_mesh.lab.fabric.procs import stop
from wg_mesh.lab.fabric.roamnat import NatFront, NatState, symmetric_ports
from wg_mesh.lab.fabric.session import LabEnvironmentError, _Cleanup, new_prefix, signals_end_the_run
from wg_mesh.lab.machines import cloudinit
from wg_mesh.lab.machines.build import BuiltLab, build
from wg_mesh.lab.machines.machine import NamespaceGateway
from wg_mesh.plan.render import INTERFACE

LEARN_TIMEOUT_S = 30.0  # D's first handshakes (a peer started after D: its retry every 5 s)
TRAFFIC_TIMEOUT_S = 20.0
STALE_EVERY_S = 0.005  # the fault's loop: `wg set` the old endpoint again after this pause


def endpoint_of(wg_show_endpoints: str, public_key: str) -> str | None:
    """HOST:PORT of the peer with `public_key` in `wg show IFACE endpoints` output (None: none, or no such peer)."""
    for line in wg_show_endpoints.splitlines():
        key, _, endpoint = line.strip().partition("\t")
        if key.strip() == public_key and endpoint.strip() not in ("", "(none)"):
            return endpoint.strip()
    return None


def has_endpoint(want: str, _: SitePlan, endpoint: str | None) -> bool:
    return endpoint == want


class RoamRun:
    """The changes, against a built lab; `traffic` (pinger P -> D, stream D -> P) once it flows."""

    def __init__(self, lab: BuiltLab, keys: LabKeys, roam: RoamPlan, step: Callable[[str], None]) -> None:
        self.lab, self.keys, self.roam, self.step = lab, keys, roam, step
        # a site's NAT: from its first change on (a DNS-named site's: from the lab's start)
        self.nats: dict[str, NatFront] = lab.nats
        self.addresses = {s.name: str(s.public_ip) for s in roam.sites}  # as the peers should see them now
        for s in roam.sites:
            if s.dns_name and lab.resolver is not None:
                self.addresses[s.name] = lab.resolver.address_of(s.dns_name)
        self.port = lab.plan.listen_port
        self.traffic: tuple[Pinger, Stream] | None = None
        self.steps: list[dict[str, Any]] = []

    def endpoints(self, site: SitePlan) -> dict[str, str | None]:
        """Each other gateway: `site`'s endpoint as its WireGuard has it now."""
        key = self.keys.public[site.name]
        return {
            s.name: endpoint_of(self.lab.gateways[s.name].run(["wg", "show", INTERFACE, "endpoints"]).stdout, key)
            for s in self.roam.others(site)
        }

    def wait_learnt(self, site: SitePlan, want: Callable[[SitePlan, str | None], bool],
                    deadline: float) -> dict[str, str | None]:  # fmt: skip
        seen = self.endpoints(site)
        while not all(want(s, seen[s.name]) for s in self.roam.others(site)) and time.monotonic() < deadline:
            time.sleep(0.1)
            seen = self.endpoints(site)
        return seen

    def ports(self, site: SitePlan) -> dict[str, tuple[int, int]]:
        """Symmetric NAT: each other gateway's public address as it is now (what the site's packets go to: a DNS-named
        site's NAT address) -> its port range."""
        return symmetric_ports([self.addresses[s.name] for s in self.roam.others(site)])

    def expected(self, change: Change, peer: SitePlan, endpoint: str | None) -> bool:
        host, _, port = (endpoint or "").rpartition(":")
        if change.kind.nat != "symmetric":
            return host == change.address and port == str(self.port)
        low, high = self.ports(change.site)[self.addresses[peer.name]]
        return host == change.address and port.isdigit() and low <= int(port) <= high

    def move(self, change: Change) -> None:
        """The site's NAT maps it to the change's address (cone or symmetric): APPLY's entry for the NAT's kinds."""
        site = change.site
        nat = self.nats.setdefault(site.name, NatFront(self.lab.plan.internet_ns, site.index, str(site.public_ip)))
        ports = self.ports(site) if change.kind.nat == "symmetric" else None
        nat.apply(NatState(change.address, change.kind.nat, ports))

    def repoint(self, change: Change) -> None:
        """The `dns` change: the site's static NAT moves to the new address (reachable there before it sends), then
        the lab's resolver answers its name with it: APPLY's entry for `dns`."""
        site = change.site
        if self.lab.resolver is None or site.dns_name is None:
            raise LabError(f"{site.name} is not a DNS-named site the lab's resolver serves")
        self.move(change)
        self.lab.resolver.repoint(site.dns_name, change.address)

    def stale_loop(self, site: SitePlan, old: str | None) -> subprocess.Popen[str]:
        """The fault: P's gateway sets the site's old endpoint back, again and again (a peer whose config keeps a
        stale endpoint: what issue 24 item 3 forbids of the agent, syncconf, a reboot), until it is stopped."""
        p = self.roam.peer
        if old is None:
            raise LabError(f"{p.name} had no endpoint for {site.name} to keep")
        script = f'while :; do wg set {INTERFACE} peer "$0" endpoint "$1"; sleep {STALE_EVERY_S}; done'
        argv = ["sh", "-c", script, self.keys.public[site.name], old]
        proc: subprocess.Popen[str] = self.lab.gateways[p.name].popen(argv, stdout=subprocess.DEVNULL)
        self.lab.state.track(proc.pid, p.gateway_ns, "stale endpoint (roam drill fault)")
        return proc

    def run_change(self, change: Change, n: int) -> None:
        site, p = change.site, self.roam.peer
        self.step(f"{n}/{len(self.roam.changes)} {change.label}: {change.kind.describe} ({site.name} -> "
                  f"{change.address})")  # fmt: skip
        before = self.endpoints(site)
        start, t0 = time.time(), time.monotonic()
        APPLY[change.kind.name](self, change)
        applied_ms = round((time.monotonic() - t0) * 1000, 1)
        fault = self.stale_loop(site, before[p.name]) if change.stale_peer else None
        # the drill's pinger when the traffic flows to this site; else one from P's host started after the change
        own = self.traffic is None or not change.kind.traffic or site is not self.roam.site
        if own:
            pinger = Pinger(self.lab.hosts[p.name], self.lab.state, p.host_ns, str(site.host_ip.ip))
            pinger.start()
        else:
            assert self.traffic is not None
            pinger = self.traffic[0]
        deadline, symmetric = t0 + change.bound_s, change.kind.nat == "symmetric"
        everyone = change.kind.nat != "cone"  # every gateway must follow: symmetric, and dns (each re-resolves)
        back = None
        try:
            while back is None and time.monotonic() < deadline:
                time.sleep(0.05)
                back = back_at(list(pinger.replies), start)
                if (exited := pinger.exited()) is not None:
                    raise LabError(exited)
            # symmetric: until every gateway has the new address (the others learn it from the site's next
            # keepalive to them); dns: each gateway's own re-resolve; cone: what they have now (P's is the new one
            # once traffic is back)
            seen = self.wait_learnt(site, lambda s, e: self.expected(change, s, e), deadline if everyone else 0.0)
            all_learnt = time.monotonic() - t0
        finally:
            if fault is not None:
                stop(fault)
            if own:
                pinger.stop()
        end = time.time()
        learnt = {s.name: self.expected(change, s, seen[s.name]) for s in self.roam.others(site)}
        outage_ms = None if back is None else round((back - start) * 1000, 1)
        record: dict[str, Any] = {
            "step": change.label, "kind": change.kind.name, "site": site.name, "nat": change.kind.nat,
            "traffic": change.kind.traffic, "own_pinger": own, "from": self.addresses[site.name],
            "to": change.address, "start": start, "end": end, "nat_applied_ms": applied_ms,
            "target_s": change.target_s, "bound_s": change.bound_s, "outage_ms": outage_ms,
            "met": met(outage_ms, change.target_s), "stale_peer": change.stale_peer,
            "endpoints_before": before, "endpoints": seen, "learnt": learnt,
        }  # fmt: skip
        if own:  # the ping started after the change: every ping before its first reply is lost
            window, replies = pinger.window(start, end), sorted(pinger.replies, key=lambda r: r[1])
            lost = None if not replies or window["lost"] is None else window["lost"] + replies[0][1] - 1
            record |= {"pings_lost": lost, "longest_ping_gap_ms": window["longest_gap_ms"]}
        if symmetric:
            record |= self.symmetric_view(site, seen, learnt)
        if everyone:
            record["all_learnt_s"] = round(all_learnt, 1) if all(learnt.values()) else None
        self.addresses[site.name] = change.address
        self.steps.append(record)

    def symmetric_view(self, site: SitePlan, seen: dict[str, str | None], learnt: dict[str, bool]) -> dict[str, Any]:
        """Every gateway at its own port, and each other site's workload host reaches the site's (P's: the pinger)."""
        ports = [(e or "").rpartition(":")[2] for e in seen.values()]
        reached = {}
        for s in self.roam.others(site)[1:]:
            argv = ["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", str(site.host_ip.ip)]
            reached[s.name] = self.lab.hosts[s.name].run(argv, check=False, timeout=10).returncode == 0
        return {"ports_distinct": all(learnt.values()) and len(set(ports)) == len(ports), "hosts_reach_site": reached}


# What each change kind does to the lab (roamplan.CHANGE_KINDS): one more kind is one more entry.
APPLY: dict[str, Callable[[RoamRun, Change], None]] = {"idle": RoamRun.move, "flowing": RoamRun.move,
                                                       "symmetric": RoamRun.move, "dns": RoamRun.repoint}  # fmt: skip


def judge(steps: list[dict[str, Any]], traffic: tuple[Pinger, Stream] | None) -> bool:
    """The traffic steps' lost pings, longest gap and stall (from the drill's pinger and stream); each change's
    verdict: its target met (symmetric: and every gateway learnt the new address, each at its own port, and every
    other site's host reaches D's; dns: and every gateway followed the name); the drill's: every change's, and the
    stream's bytes verify."""
    ok = bool(steps)
    for s in steps:
        if not s["own_pinger"] and traffic is not None:
            pinger, stream = traffic
            window = pinger.window(s["start"], s["end"])
            s["pings_lost"], s["longest_ping_gap_ms"] = window["lost"], window["longest_gap_ms"]
            s["longest_stall_ms"] = stream.longest_stall_ms(s["start"], s["end"])
        s["ok"] = s["met"]
        if s["nat"] != "cone":  # symmetric and dns: every gateway followed
            s["ok"] = s["ok"] and all(s["learnt"].values())
        if s["nat"] == "symmetric":
            s["ok"] = s["ok"] and s["ports_distinct"]
            s["ok"] = s["ok"] and all(s["hosts_reach_site"].values())
        ok = ok and s["ok"]
    if traffic is not None:
        ok = ok and bool(traffic[1].result.get("verified"))
    return ok


def keepalive_of(cfg: MeshConfig, artifacts: dict[str, Any], site: str) -> int:
    """The persistent_keepalive D's gateway sends its peers (its rendered interface plan)."""
    peers = artifacts[site].interface.peers
    return max((p.persistent_keepalive for p in peers), default=cfg.persistent_keepalive)


def run_roam_drill(cfg: MeshConfig, label: str, *, changes: Sequence[str] | None = None,
                   stale: Sequence[int] = ()) -> DrillReport:  # fmt: skip
    """`changes`: roamplan.CHANGE_KINDS names (idle ones run first; default: roamplan.default_changes, every kind
    the stack's sites allow); `stale`: indexes of changes that get the
    stale-endpoint fault (tests). Raises LabError / LabPlanError / UserDataError before anything is created when the
    stack cannot be drilled (no dynamic site), LabEnvironmentError when the machine cannot run the lab."""
    started = time.monotonic()
    plan = plan_lab(cfg, new_prefix())
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    configs = live_configs(artifacts)
    dynamic = next((s.name for s in plan.sites if s.dynamic), None)
    keepalive = keepalive_of(cfg, artifacts, dynamic) if dynamic else 0
    roam = plan_roam(plan, label, keepalive, changes, stale)
    if not configs:
        for a in artifacts.values():
            cloudinit.interpret(a.user_data)  # refuse what the lab cannot reproduce before building anything
    problems = missing_requirements()
    if problems:
        raise LabEnvironmentError("; ".join(problems))
    d, p = roam.site, roam.peer
    learn = list(dict.fromkeys([d, *(c.site for c in roam.changes)]))  # D, and N when a change moves it
    report = DrillReport(label, "roam", prefix=plan.prefix)
    report.sites = {"D": {"name": d.name, "cloud": d.cloud, "role": "dynamic address, behind the lab's NAT"},
                    "P": {"name": p.name, "cloud": p.cloud, "role": "fixed address; its host pings D's"}}  # fmt: skip
    named = next((c.site for c in roam.changes if c.site.dns_name), None)
    if named is not None:
        report.sites["N"] = {"name": named.name, "cloud": named.cloud,
                             "role": f"endpoint {named.dns_name}, served by the lab's resolver"}  # fmt: skip
    report.summary = {"persistent_keepalive_s": keepalive, "delivery": cfg.delivery, "inside": str(d.public_ip),
                      "reresolve_s": plan.reresolve_s}  # fmt: skip
    state = new_state(plan.prefix, f"{label} (roam drill)")
    state.save()
    cleanup = _Cleanup(state, Console(stderr=True))
    pinger = stream = None
    run: RoamRun | None = None
    with Steps(4 + len(roam.changes), Console(stderr=True)) as step, signals_end_the_run():
        try:
            step(f"build: every site's fabric and gateway ({cfg.delivery})")
            hook = control_plane_hook(cfg, keys, configs) if configs else None
            lab = build(plan, artifacts, state, lambda _: None, NamespaceGateway, before_gateways=hook)
            run = RoamRun(lab, keys, roam, step)
            step(f"every gateway learns {' and '.join(s.name for s in learn)}'s address (packets, the resolver)")
            for s in learn:
                first = f"{run.addresses[s.name]}:{plan.listen_port}"
                seen = run.wait_learnt(s, partial(has_endpoint, first), time.monotonic() + LEARN_TIMEOUT_S)
                if not all(e == first for e in seen.values()):
                    raise LabError(f"the gateways did not learn {s.name}'s address within {LEARN_TIMEOUT_S:.0f} s: "
                                   f"{seen}")  # fmt: skip
            for n, change in enumerate(roam.changes, 1):
                if change.kind.traffic and run.traffic is None:
                    step(f"traffic: ping every 10 ms host {p.name} -> host {d.name}, a stream {d.name} -> {p.name}")
                    pinger = Pinger(lab.hosts[p.name], state, p.host_ns, str(d.host_ip.ip))
                    since = time.time()
                    pinger.start()
                    if not wait_replies(pinger, since, TRAFFIC_TIMEOUT_S):
                        raise LabError(f"no ping from {p.name}'s host reached {d.name}'s host")
                    stream = Stream(lab.hosts[d.name], d.host_ns, lab.hosts[p.name], p.host_ns, str(p.host_ip.ip),
                                    state)  # fmt: skip
                    stream.start()
                    run.traffic = (pinger, stream)
                    time.sleep(1)
                run.run_change(change, n)
            if pinger is not None and stream is not None:
                pinger.stop()
                report.stream = stream.stop()
            report.steps = run.steps
            report.ok = judge(report.steps, run.traffic)
        except LabError as exc:
            report.error = str(exc)
            if run is not None:
                report.steps = run.steps
        finally:
            step("teardown")
            stop_traffic(pinger, stream)
            cleanup()
    return report.finish(cleanup.problems, started)


def _v(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def rows(report: DrillReport) -> list[list[str]]:
    """The report's table: one row per change."""
    out = []
    for s in report.steps:
        why = {"idle": " (keepalive)", "dns": " (re-resolve)"}.get(s["kind"], "")
        target = f"<= {s['target_s']:g} s{why}"
        missed = "NOT met" if s["outage_ms"] is not None else f"NOT met (not back in {s['bound_s']:g} s)"
        verdict = "met" if s["met"] else missed
        out.append([s["step"], s["nat"], _v(s["outage_ms"]), _v(s.get("longest_stall_ms")), _v(s.get("pings_lost")),
                    target, verdict, "ok" if s.get("ok") else "FAIL"])  # fmt: skip
    return out


def print_roam(report: DrillReport, console: Console) -> None:
    table = Table(title=f"roam drill: {report.label}", title_justify="left")
    for column in ("change", "NAT", "outage ms", "stall ms", "pings lost", "target", "", ""):
        table.add_column(column)
    for row in rows(report):
        table.add_row(*row)
    console.print(table)
    sites = report.sites
    if sites:
        console.print(f"D {sites['D']['name']} (persistent_keepalive {report.summary['persistent_keepalive_s']} s), "
                      f"P {sites['P']['name']}; outage: from the change to the first reply of a second without a "
                      "lost ping (host P -> host D, every 10 ms)")  # fmt: skip
    if "N" in sites:
        console.print(f"N {sites['N']['name']}: {sites['N']['role']}, re-resolved every "
                      f"{report.summary.get('reresolve_s')} s")  # fmt: skip
    for s in report.steps:
        learnt = ", ".join(f"{g} {e or 'none'}" for g, e in s["endpoints"].items())
        who = "N" if s["kind"] == "dns" else "D"
        console.print(f"{s['step']}: {who} {s['from']} -> {s['to']}; the gateways' endpoint for {who}: {learnt}")
        if s["nat"] == "symmetric":
            reached = ", ".join(f"{g} {'yes' if r else 'NO'}" for g, r in s["hosts_reach_site"].items())
            console.print(f"  each at its own port: {'yes' if s['ports_distinct'] else 'NO'} (all within "
                          f"{_v(s['all_learnt_s'], ' s')}); other hosts reach D's host: {reached or '-'}")  # fmt: skip
        elif s["nat"] == "static":
            console.print(f"  every gateway followed the name: {'yes' if all(s['learnt'].values()) else 'NO'} "
                          f"(all within {_v(s['all_learnt_s'], ' s')})")  # fmt: skip
    if report.stream:
        console.print(f"stream: {report.stream.get('bytes', 0) / 2**20:.0f} MiB, sha256 "
                      f"{'match' if report.stream.get('verified') else 'MISMATCH'}")  # fmt: skip
    if report.error:
        console.print(f"[red]error: {report.error}[/red]")
    console.print("[green]drill passed[/green]" if report.ok else "[red]drill FAILED[/red]")
