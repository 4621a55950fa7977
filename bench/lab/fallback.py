"""`sudo .venv/bin/python -m bench underlay --fallback`: the private path's fallback to the public endpoints, measured
in the lab (issue 13 item 4, docs/underlay.md). Writes docs/bench/underlay-fallback.json; `bench doc` renders it as
section 11.1 of docs/benchmarks.md.

The underlay stack (examples/underlay/Pulumi.underlay.yaml, `delivery: live`) with one change for this run only: the
agents' `pmtu_seconds` is 5 instead of the shipped 15 (`with_pmtu_seconds`, on the rendered user data's
/etc/wg-mesh/agent.json), so the drill takes seconds, not minutes. The agents' fallback (wg_mesh/gateway/fallback.py)
runs on that thread: 3 ticks with both the tunnel's small probe and a direct ping of the peer's private address
failing switch the peer to its public endpoint; 3 ticks of the direct ping passing switch it back.

1. steady   a ping every 10 ms (wg_mesh/lab/drills/traffic.py Pinger) and a SHA-256-verified TCP stream from the AWS
            host to the GCP host; both gateways' `wg show wg0 endpoints` at the private addresses
2. cut      every packet the AWS VPC router forwards onto or from the private link dropped (`iptables -I FORWARD -i/-o
            pp<j> -j DROP` in that router's namespace: the link is up, nothing crosses it, a dead interconnect as the
            gateways see it); measured: seconds until the first agent switched (its metric), until pings flow again,
            the longest ping gap, pings lost; until both endpoints are public
3. restore  the two rules deleted; seconds until both endpoints are private again, the ping gap meanwhile
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import yaml

from bench.lab.underlay import live_lab
from wg_mesh.config import MeshConfig
from wg_mesh.lab.checks.underlaycheck import wg_endpoints
from wg_mesh.lab.drills.drill import metric
from wg_mesh.lab.drills.pmtudrill import path_metrics
from wg_mesh.lab.drills.traffic import Pinger, Stream
from wg_mesh.lab.fabric.netns import LabError, run
from wg_mesh.lab.fabric.networks import iptables
from wg_mesh.lab.fabric.plan import GatewayArtifacts, SitePlan
from wg_mesh.lab.fabric.privatepath import LinkEnd
from wg_mesh.lab.machines.build import BuiltLab

AGENT_JSON = "/etc/wg-mesh/agent.json"
PMTU_SECONDS = 5  # this run's agents; the shipped default is 15
DEFAULT_PMTU_SECONDS = 15
TICKS = 3  # consecutive ticks the agent waits for, each way (wg_mesh/gateway/fallback.py)
STEADY_S, HOLD_S = 3.0, 3.0
SWITCH_TIMEOUT_S = 90.0
SAMPLE_S = 0.2
Log = Callable[[str], None]


def with_pmtu_seconds(user_data: str, seconds: int) -> str:
    """The user data with its agent.json's `pmtu_seconds` set (every other byte of the config as rendered)."""
    doc = yaml.safe_load(user_data)
    found = [f for f in doc.get("write_files") or [] if f.get("path") == AGENT_JSON]
    if len(found) != 1:
        raise LabError(f"the user data has {len(found)} {AGENT_JSON}: not a `delivery: live` gateway")
    config = json.loads(found[0]["content"])
    config["pmtu_seconds"] = seconds
    found[0]["content"] = json.dumps(config, indent=1, sort_keys=True) + "\n"
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, width=1 << 20)


def adjust_pmtu(seconds: int) -> Callable[[dict[str, GatewayArtifacts]], dict[str, GatewayArtifacts]]:
    def adjust(artifacts: dict[str, GatewayArtifacts]) -> dict[str, GatewayArtifacts]:
        return {n: replace(a, user_data=with_pmtu_seconds(a.user_data, seconds)) for n, a in artifacts.items()}

    return adjust


def classify(endpoint: str | None, peer: SitePlan) -> str:
    if endpoint == str(peer.gateway_ip.ip):
        return "private"
    if endpoint == str(peer.public_ip):
        return "public"
    return f"other ({endpoint})"


def outage(replies: Sequence[tuple[float, int]], start: float, end: float) -> dict[str, Any]:
    """The longest silence between replies in [start, end] (bounded by the replies just outside), the pings lost,
    and when the reply that ended the silence came (seconds after `start`)."""
    ordered = sorted(replies)
    before = [r for r in ordered if r[0] < start][-1:]
    inside = [r for r in ordered if start <= r[0] <= end]
    after = [r for r in ordered if r[0] > end][:1]
    bounded = before + inside + after
    if len(bounded) < 2:
        return {"replies": len(inside), "lost": None, "longest_gap_ms": None, "resumed_s": None}
    seqs = sorted({seq for _, seq in bounded})
    lost = (seqs[-1] - seqs[0] + 1) - len(seqs)
    earlier, later = max(itertools.pairwise(bounded), key=lambda pair: pair[1][0] - pair[0][0])
    return {"replies": len(inside), "lost": lost, "longest_gap_ms": round((later[0] - earlier[0]) * 1000, 1),
            "resumed_s": round(later[0] - start, 2)}  # fmt: skip


def first_at(events: Sequence[Mapping[str, Any]], since: float, **match: Any) -> float | None:
    """Seconds after `since` of the first event at or after it whose fields match."""
    times = [e["t"] for e in events if e["t"] >= since and all(e.get(k) == v for k, v in match.items())]
    return round(min(times) - since, 2) if times else None


class Sampler:
    """Every SAMPLE_S: both gateways' path metric (`wgmesh_underlay_path{peer_site,path}`), fallback counters and
    `wg show wg0 endpoints`; an event on every change (epoch time, site, what, value)."""

    def __init__(self, lab: BuiltLab, names: Mapping[str, str], a: SitePlan, b: SitePlan) -> None:
        self.lab, self.names, self.pairs = lab, names, ((a, b), (b, a))
        self.events: list[dict[str, Any]] = []
        self.last: dict[tuple[str, str], Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self) -> dict[tuple[str, str], Any]:
        seen: dict[tuple[str, str], Any] = {}
        for near, far in self.pairs:
            node = self.lab.gateways[near.name]
            samples = path_metrics(node)
            on = [p for p in ("private", "public") if metric(samples, "wgmesh_underlay_path", peer_site=far.name,
                                                              path=p) == 1]  # fmt: skip
            seen[(near.name, "metric")] = on[0] if on else None
            seen[(near.name, "fallbacks")] = metric(samples, "wgmesh_underlay_fallbacks_total", peer_site=far.name)
            seen[(near.name, "endpoint")] = classify(wg_endpoints(node, self.names).get(far.name), far)
        return seen

    def sample(self) -> None:
        now, seen = time.time(), self.read()
        for key, value in seen.items():
            if self.last.get(key, object()) != value:
                self.events.append({"t": now, "site": key[0], "what": key[1], "value": value})
        self.last = seen

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                self.sample()
            except Exception as e:  # a failed sample is noted, the drill goes on
                self.events.append({"t": time.time(), "site": "-", "what": "sample error", "value": str(e)[:200]})

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def endpoints(self) -> dict[str, Any]:
        return {near.name: self.last.get((near.name, "endpoint")) for near, _ in self.pairs}

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(SAMPLE_S)
        return False


def cut_rules(end: LinkEnd) -> list[tuple[str, ...]]:
    return [("FORWARD", "-i", end.interface, "-j", "DROP"), ("FORWARD", "-o", end.interface, "-j", "DROP")]


def both(sampler: Sampler, what: str, value: str) -> Callable[[], bool]:
    return lambda: all(sampler.last.get((site, what)) == value for site in sampler.endpoints())


def phase(sampler: Sampler, pinger: Pinger, since: float, until: float, want: str) -> dict[str, Any]:
    events = sampler.events
    sites = list(sampler.endpoints())
    per_site = {
        s: {what + "_s": first_at(events, since, site=s, what=what, value=want) for what in ("metric", "endpoint")}
        for s in sites
    }
    switched = [v["metric_s"] for v in per_site.values() if v["metric_s"] is not None]
    ends = [v["endpoint_s"] for v in per_site.values()]
    return {
        "first_agent_switched_s": min(switched) if switched else None,
        "both_endpoints_s": max(ends) if all(e is not None for e in ends) else None,  # type: ignore[type-var]
        "sites": per_site,
        "pings": outage(pinger.replies, since, until),
    }


def run_fallback_bench(cfg: MeshConfig, log: Log, *, pmtu_seconds: int = PMTU_SECONDS) -> dict[str, Any]:
    started = time.monotonic()
    with live_lab(cfg, log, adjust=adjust_pmtu(pmtu_seconds)) as (lab, keys):
        plan = lab.plan
        if not plan.private_links:
            raise LabError("underlay-fallback: no private path in the stack")
        link = plan.private_links[0]
        a, b = plan.site(link.a.site), plan.site(link.b.site)
        names = {public: site for site, public in keys.public.items()}
        sampler = Sampler(lab, names, a, b)
        sampler.start()
        pinger = Pinger(lab.hosts[a.name], lab.state, a.host_ns, str(b.host_ip.ip))
        stream = Stream(lab.hosts[a.name], a.host_ns, lab.hosts[b.name], b.host_ns, str(b.host_ip.ip), lab.state)
        cut = cut_rules(link.a)
        rules_in = False
        try:
            pinger.start()
            stream.start()
            t0 = time.time()
            time.sleep(STEADY_S)
            steady = {"endpoints": sampler.endpoints(), "pings": outage(pinger.replies, t0, time.time())}
            log(f"steady: endpoints {steady['endpoints']}, pings {steady['pings']}")
            t_cut = time.time()
            for rule in cut:
                iptables(link.a.vpc_ns, "-I", *rule[:1], "1", *rule[1:])
            rules_in = True
            log(f"cut: {a.name}'s VPC router drops everything on {link.a.interface}")
            public = sampler.wait(both(sampler, "endpoint", "public"), SWITCH_TIMEOUT_S)
            sampler.wait(lambda: pinger.replied_since(time.time() - 0.5), 10)
            time.sleep(HOLD_S)
            t_restore = time.time()
            for rule in cut:
                iptables(link.a.vpc_ns, "-D", *rule)
            rules_in = False
            log(f"restore: the link carries again (public reached: {public})")
            private = sampler.wait(both(sampler, "endpoint", "private"), SWITCH_TIMEOUT_S)
            time.sleep(HOLD_S)
            t_end = time.time()
        finally:
            if rules_in:
                for rule in cut:
                    run(["ip", "netns", "exec", link.a.vpc_ns, "iptables", "-w", "-D", *rule], check=False)
            sampler.stop()
            pinger.stop()
            streamed = stream.stop()
        cut_phase = phase(sampler, pinger, t_cut, t_restore, "public")
        restore_phase = phase(sampler, pinger, t_restore, t_end, "private")
        logs = {s.name: [line for line in lab.log_path(s.name).read_text(errors="replace").splitlines()
                         if "underlay:" in line][-10:] for s in (a, b)}  # fmt: skip
    cut_phase["reached"], restore_phase["reached"] = public, private
    stream_result = {"verified": streamed.get("verified", False), "bytes": streamed.get("bytes"),
                     "longest_stall_cut_ms": stream.longest_stall_ms(t_cut, t_restore),
                     "longest_stall_restore_ms": stream.longest_stall_ms(t_restore, t_end)}  # fmt: skip
    ok = bool(public and private and steady["endpoints"] == {a.name: "private", b.name: "private"})
    ok = ok and cut_phase["first_agent_switched_s"] is not None and stream_result["verified"]
    return {
        "ok": ok,
        "stack": "underlay",
        "duration_s": round(time.monotonic() - started, 1),
        "pmtu_seconds": pmtu_seconds,
        "default_pmtu_seconds": DEFAULT_PMTU_SECONDS,
        "ticks": TICKS,
        "fault": f"iptables -I FORWARD -i/-o {link.a.interface} -j DROP in {a.name}'s VPC router namespace",
        "sites": {"A": a.name, "B": b.name},
        "private_path": link.to_json(),
        "steady": steady,
        "cut": cut_phase,
        "restore": restore_phase,
        "stream": stream_result,
        "events": [{**e, "t": round(e["t"] - t_cut, 2)} for e in sampler.events],
        "agent_logs": logs,
    }
