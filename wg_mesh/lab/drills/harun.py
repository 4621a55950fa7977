"""One run of the HA drill (hadrill.py) on a `delivery: live` stack with a site of `gateways: 2` (AWS or GCP): build
the lab with every HA site as a pair and its cloud's model (hacloud.py), start each pair (a first), the traffic
P -> S (or, when S relays a pair of dynamic sites, between that pair through S: `traffic_path`), the steps on S, tear
down (always); the report (drillreport.DrillReport, kind "ha") whose JSON
docs/benchmarks.md's tables are rendered from (bench/hafailover.py).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from wg_mesh.config import MeshConfig
from wg_mesh.config import relay as relaying
from wg_mesh.gateway import rearm
from wg_mesh.lab.checks.mesh import latest_handshakes
from wg_mesh.lab.checks.report import Steps
from wg_mesh.lab.clouds.controlplane import ControlPlane
from wg_mesh.lab.clouds.hacloud import HaCloud
from wg_mesh.lab.clouds.live import control_plane_hook, live_configs
from wg_mesh.lab.drills.drillreport import DrillReport
from wg_mesh.lab.drills.hadowngrade import STEP as DOWNGRADE
from wg_mesh.lab.drills.hadowngrade import DowngradeStep
from wg_mesh.lab.drills.hadrill import FAILOVER_TIMEOUT_S, STEPS, HaDrill
from wg_mesh.lab.drills.haupgrade import STEP as UPGRADE
from wg_mesh.lab.drills.haupgrade import UpgradeStep
from wg_mesh.lab.drills.hawatch import judge
from wg_mesh.lab.drills.traffic import Pinger, Stream, stop_traffic
from wg_mesh.lab.fabric.netns import LabError, missing_requirements, new_state
from wg_mesh.lab.fabric.plan import LabKeys, SitePlan, plan_lab, render_artifacts
from wg_mesh.lab.fabric.session import LabEnvironmentError, _Cleanup, new_prefix, signals_end_the_run
from wg_mesh.lab.machines.build import BuiltLab, build
from wg_mesh.lab.machines.machine import NamespaceGateway
from wg_mesh.plan import relay

TRAFFIC_TIMEOUT_S = 60.0
GCP_NOTE = (
    "cloud model: the Compute REST subset (compute.py) with zonal operations DONE on their second read (the agent "
    "polls every 0.2 s), Google's probers every check_interval_sec 1 s with timeout_sec 1 s, unhealthy after 2 "
    "failed probes, healthy after 1 (wg_mesh.plan.ha.HEALTH_CHECK), the ILB's next hop by the failover policy, state "
    "applied every 50 ms"
)


def ha_sites(cfg: MeshConfig) -> list[str]:
    """The sites with `gateways: 2` (AWS and GCP), which the lab runs as pairs."""
    return [s.name for s in cfg.sites if getattr(s, "gateways", 1) == 2]


def pick(sites: tuple[SitePlan, ...], pairs: list[str], chosen: str | None = None) -> tuple[SitePlan, SitePlan]:
    """(S: the drilled HA site, `chosen` or the first; P: the traffic's source, the first other site, preferring
    one of another cloud)."""
    s = next(x for x in sites if x.name == (chosen or pairs[0]))
    p = next((x for x in sites if x is not s and x.cloud != s.cloud), next(x for x in sites if x is not s))
    return s, p


def traffic_path(cfg: MeshConfig, sites: tuple[SitePlan, ...], s: SitePlan, p: SitePlan
                 ) -> tuple[SitePlan, SitePlan, list[str]]:  # fmt: skip
    """(source, destination, partners) of the drill's traffic. When S is the relay of a pair with no direct path (two
    `endpoint: dynamic` sites, wg_mesh.plan.relay), the traffic runs between the first such pair, its first site's
    host to its partner's, THROUGH S's active gateway: partners names the pair. Else P's host to S's, partners []."""
    pairs = relaying.relayed_pairs(cfg.sites)
    if not pairs or relay.relay_of(cfg) != s.name:
        return p, s, []
    by_name = {x.name: x for x in sites}
    return by_name[pairs[0][0]], by_name[pairs[0][1]], list(pairs[0])


def resume_timeout(cfg: MeshConfig, relayed: bool) -> float:
    """How long a step waits for its traffic to flow again. Relayed: the relay's new active has no endpoint for a
    dynamic site (its peers learn it from the site's packets), so each office makes its session again: the sending
    one when WireGuard's new-handshake timer fires (KeepaliveTimeout + RekeyTimeout, 15 s after unanswered data), an
    idle one when its re-arm watchdog does (persistent_keepalive + MARGIN_S quiet, a probe, KEEPALIVE_TIMEOUT_S +
    MARGIN_S unanswered: wg_mesh.gateway.rearm)."""
    if not relayed:
        return FAILOVER_TIMEOUT_S
    return FAILOVER_TIMEOUT_S + cfg.persistent_keepalive + 2 * rearm.MARGIN_S + rearm.KEEPALIVE_TIMEOUT_S


def direct_peering(lab: BuiltLab, keys: LabKeys, pair: list[str]) -> list[str]:
    """What either site of a relayed pair has of the other on its wg0: a peer entry ('A has B') or a handshake
    ('A handshook with B'); [] when they never met directly, as a relayed pair must not."""
    found = []
    for a, b in (pair, pair[::-1]):
        node = lab.machines[a].node
        peers = node.run(["wg", "show", "wg0", "peers"], timeout=10).stdout.split()
        if keys.public[b] in peers:
            found.append(f"{a} has {b}")
        if latest_handshakes(node, {keys.public[b]: b}).get(b):
            found.append(f"{a} handshook with {b}")
    return found


def wait_replies(pinger: Pinger, since: float, timeout: float) -> bool:
    """True once a reply came after `since`; False after `timeout`; LabError when ping is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pinger.replied_since(since):
            return True
        if (exited := pinger.exited()) is not None:
            raise LabError(exited)
        time.sleep(0.1)
    return False


def run_ha_drill(cfg: MeshConfig, label: str, *, site: str | None = None, steps: Collection[str] = (),
                 delay_s: float = 0.0) -> DrillReport:  # fmt: skip
    """`site`: the HA site to drill (default the first); `steps`: only these steps (hadrill.STEPS, default all).
    Raises LabError before anything is created when the stack has no site with `gateways: 2`, `site` is not one, or
    the stack does not deliver peers live; LabEnvironmentError when the machine cannot run the lab."""
    pairs = ha_sites(cfg)
    if not pairs:
        raise LabError(f"{label}: no site with `gateways: 2` (see docs/ha.md)")
    if site is not None and site not in pairs:
        raise LabError(f"{label}: --ha-site {site} is not a site with `gateways: 2` (those are: {', '.join(pairs)})")
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise LabError(f"no HA drill step {', '.join(sorted(unknown))}: {', '.join(STEPS)}")
    if UPGRADE in steps and DOWNGRADE not in steps:
        raise LabError(f"the HA drill step {UPGRADE!r} starts from a single gateway: name {DOWNGRADE!r} too")
    started = time.monotonic()
    plan = plan_lab(cfg, new_prefix(), ha_sites=pairs)
    keys = LabKeys.generate(cfg)
    artifacts = render_artifacts(cfg, plan, keys)
    configs = live_configs(artifacts)
    if not configs:
        raise LabError(f"{label}: the user data does not deliver peers live (set `delivery: live`)")
    if len(plan.sites) < 2:
        raise LabError(f"{label}: the HA drill needs a second site for the traffic")
    s, p = pick(plan.sites, pairs, site)
    src, dst, partners = traffic_path(cfg, plan.sites, s, p)
    problems = missing_requirements()
    if problems:
        raise LabEnvironmentError("; ".join(problems))
    report = DrillReport(label, "ha", prefix=plan.prefix)
    report.sites = {
        "S": {"name": s.name, "cloud": s.cloud, "gateways": "a, b"},
        "P": {"name": p.name, "cloud": p.cloud, "gateways": "a, b" if p.name in pairs else "a"},
    }
    report.traffic = {"from": src.name, "to": dst.name, "via": s.name, "relayed": bool(partners),
                      "partners": partners}  # fmt: skip
    if s.cloud == "aws":
        notes = [f"cloud model: moto polled every 50 ms, state applied {delay_s:g} s after it is read"]
    else:
        notes = [GCP_NOTE]
    state = new_state(plan.prefix, f"{label} (ha drill)")
    state.save()
    cleanup = _Cleanup(state, Console(stderr=True))
    planes: list[ControlPlane] = []
    clouds: list[HaCloud] = []
    pinger = stream = None
    drill: HaDrill | None = None

    def hook(lab: Any) -> None:
        control_plane_hook(cfg, keys, configs, started=planes.append)(lab)

    with Steps(5 + len(steps or STEPS), Console(stderr=True)) as step, signals_end_the_run():
        try:
            step(f"build: every site's fabric and gateway, the pairs ({', '.join(pairs)}) and their clouds' models")
            others = [x.name for x in plan.sites if x.name not in pairs]
            lab = build(plan, artifacts, state, lambda _: None, NamespaceGateway, before_gateways=hook, start=others)
            # the pairs' clouds once the fabric exists (their models apply NAT and routes there); a claims first
            clouds.append(HaCloud(cfg, lab, planes[0], delay_s=delay_s))
            cloud = clouds[0]
            cloud.start()
            for name in pairs:
                lab.machines[name].start()
            for name in pairs:
                cloud.standbys[name].start()
            through = f" through {s.name}'s active gateway (relayed)" if partners else ""
            step(f"traffic: ping every 10 ms and a TCP stream, host {src.name} -> host {dst.name}{through}")
            plane = planes[0]

            def publish(after: MeshConfig) -> dict[str, Any]:  # `pulumi up` writing every store for `after`
                return plane.publish(after, keys.private, keys.public, configs)

            poll_s = max(float(str(c.get("poll_seconds", 10))) for c in configs.values())
            drill = HaDrill(cloud, s.name, step, peer=(lab.machines[src.name].node, keys.public[s.name]), steps=steps,
                            partner=lab.machines[dst.name].node if partners else None,
                            resume_s=resume_timeout(cfg, bool(partners)),
                            downgrade=lambda d: DowngradeStep(d, publish, cfg, poll_s),
                            upgrade=lambda d: UpgradeStep(d, publish, cfg))  # fmt: skip
            # P's host routes to S through P's active: a pair's (the cloud model's routes) are blackholes until it
            # is steady, and ping exits at once on a blackhole route (traffic.Pinger.exited)
            steadies = [(s.name, drill)] + ([(p.name, HaDrill(cloud, p.name, step))] if p.name in pairs else [])
            for name, pair in steadies:
                if pair.steady() is None:
                    raise LabError(f"{name}: the pair never became steady: {pair.roles()}, cloud {cloud.latest}")
            pinger = Pinger(lab.hosts[src.name], state, src.host_ns, str(dst.host_ip.ip))
            since = time.time()
            pinger.start()
            if not wait_replies(pinger, since, TRAFFIC_TIMEOUT_S):
                raise LabError(f"no ping from {src.name}'s host reached {dst.name}'s host through {s.name}'s active")
            target = str(dst.host_ip.ip)
            stream = Stream(lab.hosts[src.name], src.host_ns, lab.hosts[dst.name], dst.host_ns, target, state)
            stream.start()
            drill.traffic = (pinger, stream)
            time.sleep(1)
            direct = [direct_peering(lab, keys, partners)] if partners else []
            drill.run()
            if partners:  # the pair never peered, before the steps nor after: every packet went through the relay
                report.traffic["direct_peering"] = [*direct, direct_peering(lab, keys, partners)]
            pinger.stop()
            report.stream = stream.stop()
            report.steps = drill.steps
            summary = judge(report.steps, pinger, stream, drill.sampler, relayed=bool(partners))
            report.ok = summary.pop("ok") and not any(report.traffic.get("direct_peering", []))
            report.summary = {**summary, "notes": notes}
        except LabError as exc:
            report.error = str(exc)
            if drill is not None:
                report.steps = drill.steps
        finally:
            step("teardown")
            if drill is not None:
                drill.sampler.stop()
            stop_traffic(pinger, stream)
            for cloud in clouds:
                cloud.stop()
            if not report.ok and state.log_dir.is_dir():  # the agents' and the cloud model's logs, for the why
                kept = Path(tempfile.mkdtemp(prefix=f"wg-mesh-ha-drill-{plan.prefix}-"))
                shutil.copytree(state.log_dir, kept, dirs_exist_ok=True)
                report.summary["logs"] = str(kept)
            cleanup()
    return report.finish(cleanup.problems, started)


def _v(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def _handshakes(step: dict[str, Any]) -> str:
    """The traffic's source's handshake after the address moved; relayed, its partner's too."""
    if "partner_handshake_s" in step:
        return f"{_v(step.get('peer_handshake_s'))} / {_v(step['partner_handshake_s'])}"
    return _v(step.get("peer_handshake_s"))


def print_ha(report: DrillReport, console: Console) -> None:
    table = Table(title=f"ha drill: {report.label}", title_justify="left")
    columns = ("step", "fault on", "active", "EIP/routes moved s", "moves", "peer handshake s", "outage ms", "lost",
               "stall ms")  # fmt: skip
    for column in (*columns, "2 active", ""):
        table.add_column(column)
    for s in report.steps:
        table.add_row(
            s["step"], s["fault_on"], f"{s['active_before']} -> {_v(s['active_after'])}",
            f"{_v(s['eip_moved_s'])} / {_v(s.get('routes_moved_s'))}",
            f"{_v(s.get('address_moves'))} / {_v(s.get('route_moves'))}", _handshakes(s),
            _v(s.get("outage_ms")), _v(s.get("pings_lost")),
            _v(s.get("longest_stall_ms")), _v(s.get("two_active_samples")), "ok" if s.get("ok") else "FAIL",
        )  # fmt: skip
    console.print(table)
    traffic = report.traffic
    if traffic.get("relayed"):
        met = traffic.get("direct_peering", [["not checked"]])
        console.print(f"traffic: host {traffic['from']} -> host {traffic['to']} relayed by {traffic['via']} (peer "
                      f"handshake s: {traffic['from']}'s / {traffic['to']}'s with {traffic['via']}); direct between "
                      f"them: {'; '.join(x for found in met for x in found) or 'never'}")  # fmt: skip
    summary = report.summary
    if "outage_median_ms" in summary:
        met = "met" if summary["outage_target_met"] else "NOT met"
        console.print(f"outage median {_v(summary['outage_median_ms'])} ms (target <= 5000 ms: {met}); "
                      f"{summary['two_active_samples']} of {summary['samples']} samples with two actives")  # fmt: skip
        for note in summary.get("notes", []):
            console.print(f"note: {note}")
    if report.summary.get("logs"):
        console.print(f"logs of the failed drill: {report.summary['logs']}")
    if report.stream:
        console.print(f"stream: {report.stream.get('bytes', 0) / 2**20:.0f} MiB, sha256 "
                      f"{'match' if report.stream.get('verified') else 'MISMATCH'}")  # fmt: skip
    if report.error:
        console.print(f"[red]error: {report.error}[/red]")
    console.print("[green]drill passed[/green]" if report.ok else "[red]drill FAILED[/red]")
