"""The lab's model of Google's health checking and of an internal passthrough load balancer's failover (docs/ha.md
6.2 and 11), the pure part: probe results in, each backend's health state and the ILB's next hop out. No I/O, no
clock of its own (the caller passes `now`): gcpmodel.py runs it against the gateways' /healthz.

Rules, each from Google's text:
* a probe succeeds when the HTTP answer is 200 within `timeout_sec`; one probe per backend every
  `check_interval_sec`; a backend turns HEALTHY after `healthy_threshold` successful probes in a row and UNHEALTHY
  after `unhealthy_threshold` failed probes in a row ("Health checks overview", success criteria and
  healthy/unhealthy thresholds: https://cloud.google.com/load-balancing/docs/health-check-concepts [19][20]);
  a backend nobody has probed yet is UNHEALTHY here (the lab's choice: traffic reaches no backend before it
  passed `healthy_threshold` probes);
* the next hop ("Failover for internal passthrough Network Load Balancers",
  https://cloud.google.com/load-balancing/docs/internal/failover-overview [7][21]; the Compute API's
  BackendServiceFailoverPolicy, https://cloud.google.com/python/docs/reference/compute/latest/
  google.cloud.compute_v1.types.BackendServiceFailoverPolicy, and pulumi-gcp's RegionBackendServiceFailoverPolicy
  docstrings): traffic goes to the primary backends (group `a`) unless the ratio
  of healthy primary VMs is at or below `failover_ratio`, then to the failover backends (group `b`) if one of them
  is healthy; when no VM of either is healthy, `drop_traffic_if_unhealthy` drops the traffic (False would spread it
  over every primary VM: the lab picks `a` then); failback to the primary when it is healthy again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wg_mesh.plan.ha import GcpFailoverPolicy, GcpHealthCheck

HEALTHY, UNHEALTHY = "HEALTHY", "UNHEALTHY"


@dataclass
class BackendHealth:
    """One backend VM as Google's probers see it."""

    state: str = UNHEALTHY
    successes: int = 0  # in a row
    failures: int = 0  # in a row
    next_probe: float = 0.0
    probes: int = 0


@dataclass
class Prober:
    """Health states of a site's backends (letter -> BackendHealth) under one health check."""

    check: GcpHealthCheck
    letters: tuple[str, ...] = ("a", "b")
    backends: dict[str, BackendHealth] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.check.timeout_sec > self.check.check_interval_sec:
            raise ValueError("timeout_sec must not exceed check_interval_sec (Google refuses such a health check)")
        for letter in self.letters:
            self.backends.setdefault(letter, BackendHealth())

    def due(self, letter: str, now: float) -> bool:
        return now >= self.backends[letter].next_probe

    def probed(self, letter: str, started: float, ok: bool, elapsed: float) -> bool:
        """A probe sent at `started` came back (`ok`: HTTP 200) after `elapsed` s; one beyond timeout_sec failed.
        Schedules the next probe check_interval_sec after this one's start. True when the state changed."""
        b, c = self.backends[letter], self.check
        b.probes += 1
        b.next_probe = started + c.check_interval_sec
        if ok and elapsed <= c.timeout_sec:
            b.successes, b.failures = b.successes + 1, 0
            if b.state != HEALTHY and b.successes >= c.healthy_threshold:
                b.state = HEALTHY
                return True
        else:
            b.successes, b.failures = 0, b.failures + 1
            if b.state != UNHEALTHY and b.failures >= c.unhealthy_threshold:
                b.state = UNHEALTHY
                return True
        return False

    def states(self) -> dict[str, str]:
        return {letter: b.state for letter, b in self.backends.items()}


def next_hop(states: dict[str, str], policy: GcpFailoverPolicy, primary: tuple[str, ...] = ("a",),
             failover: tuple[str, ...] = ("b",)) -> str | None:  # fmt: skip
    """The backend the ILB sends new traffic to (the first healthy of the active pool), None when it drops it."""
    healthy_primary = [g for g in primary if states.get(g) == HEALTHY]
    healthy_failover = [g for g in failover if states.get(g) == HEALTHY]
    if primary and len(healthy_primary) / len(primary) > policy.failover_ratio:
        return healthy_primary[0]
    if healthy_failover:
        return healthy_failover[0]
    if healthy_primary:  # at or below the ratio, and no healthy failover VM: the healthy primaries
        return healthy_primary[0]
    if policy.drop_traffic_if_unhealthy:
        return None
    return primary[0] if primary else None
