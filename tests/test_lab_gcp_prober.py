"""The lab's model of Google's health checking and of the ILB's failover policy (wg_mesh/lab/clouds/gcpprober.py): pure,
with a fake clock. The thresholds are the program's (wg_mesh.plan.ha.HEALTH_CHECK, which wg_mesh.gcp.ha declares): a
model with another threshold fails these tests."""

from __future__ import annotations

import pytest

from wg_mesh.lab.clouds.gcpprober import HEALTHY, UNHEALTHY, Prober, next_hop
from wg_mesh.plan import ha as mesh_ha
from wg_mesh.plan.ha import GcpFailoverPolicy, GcpHealthCheck

CHECK = mesh_ha.HEALTH_CHECK


def run(prober: Prober, letter: str, results: list[bool], elapsed: float = 0.01, start: float = 0.0) -> list[str]:
    """Feed probe results one interval apart; the state after each."""
    states, now = [], start
    for ok in results:
        assert prober.due(letter, now)
        prober.probed(letter, now, ok, elapsed)
        states.append(prober.backends[letter].state)
        now += CHECK.check_interval_sec
    return states


def test_the_program_declares_the_values_the_model_uses() -> None:
    # docs/ha.md 6.1: interval 1 s, timeout 1 s, unhealthy after 2 failed probes, healthy after 1
    assert (CHECK.check_interval_sec, CHECK.timeout_sec, CHECK.unhealthy_threshold, CHECK.healthy_threshold) == (
        1, 1, 2, 1
    )  # fmt: skip
    assert GcpFailoverPolicy(0.0, True, True) == mesh_ha.FAILOVER_POLICY


def test_a_backend_starts_unhealthy_and_turns_healthy_after_healthy_threshold_successes() -> None:
    prober = Prober(CHECK)
    assert prober.states() == {"a": UNHEALTHY, "b": UNHEALTHY}
    assert run(prober, "a", [True]) == [HEALTHY]  # healthy_threshold 1
    slow = Prober(GcpHealthCheck(healthy_threshold=3))
    assert run(slow, "a", [True, True, True]) == [UNHEALTHY, UNHEALTHY, HEALTHY]
    assert run(Prober(GcpHealthCheck(healthy_threshold=2)), "a", [True, False, True, True])[-1] == HEALTHY
    assert run(Prober(GcpHealthCheck(healthy_threshold=2)), "a", [True, False, True]) == [UNHEALTHY] * 3  # in a row


def test_unhealthy_only_after_unhealthy_threshold_failures_in_a_row() -> None:
    prober = Prober(CHECK)
    run(prober, "a", [True])
    # one failure is not enough (unhealthy_threshold 2); a success in between starts the count again
    assert run(prober, "a", [False, True, False], start=1.0) == [HEALTHY, HEALTHY, HEALTHY]
    assert run(prober, "a", [False], start=4.0) == [UNHEALTHY]
    three = Prober(GcpHealthCheck(unhealthy_threshold=3))
    run(three, "a", [True])
    assert run(three, "a", [False, False, False], start=1.0) == [HEALTHY, HEALTHY, UNHEALTHY]


def test_a_200_after_the_timeout_is_a_failure_and_probes_follow_the_interval() -> None:
    prober = Prober(CHECK)
    assert run(prober, "a", [True], elapsed=CHECK.timeout_sec + 0.2) == [UNHEALTHY]
    assert run(prober, "a", [True], elapsed=CHECK.timeout_sec - 0.2, start=1.0) == [HEALTHY]
    prober.probed("b", 10.0, False, 1.0)
    assert not prober.due("b", 10.0 + CHECK.check_interval_sec - 0.01) and prober.due("b", 11.0)


def test_the_state_change_is_reported_once() -> None:
    prober = Prober(CHECK)
    assert prober.probed("a", 0.0, True, 0.01) is True
    assert prober.probed("a", 1.0, True, 0.01) is False
    assert prober.probed("a", 2.0, False, 0.01) is False
    assert prober.probed("a", 3.0, False, 0.01) is True


def test_google_refuses_a_timeout_longer_than_the_interval() -> None:
    with pytest.raises(ValueError, match="timeout_sec"):
        Prober(GcpHealthCheck(check_interval_sec=1, timeout_sec=2))


@pytest.mark.parametrize(
    ("a", "b", "hop"),
    [
        (HEALTHY, UNHEALTHY, "a"),  # the primary while it is healthy
        (HEALTHY, HEALTHY, "a"),  # failover ratio 0: no failover while one primary VM is healthy
        (UNHEALTHY, HEALTHY, "b"),  # the failover backend when no primary VM is
        (UNHEALTHY, UNHEALTHY, None),  # drop_traffic_if_unhealthy: dropped, not spread over the primaries
    ],
)
def test_the_ilb_follows_the_failover_policy(a: str, b: str, hop: str | None) -> None:
    assert next_hop({"a": a, "b": b}, mesh_ha.FAILOVER_POLICY) == hop


def test_without_drop_traffic_the_ilb_sends_to_the_primary_when_nothing_is_healthy() -> None:
    policy = GcpFailoverPolicy(failover_ratio=0.0, drop_traffic_if_unhealthy=False)
    assert next_hop({"a": UNHEALTHY, "b": UNHEALTHY}, policy) == "a"


def test_a_higher_failover_ratio_fails_over_earlier() -> None:
    # two primaries, one healthy: ratio 0.5 is "at or below" 0.5 -> the failover backend
    states = {"a": HEALTHY, "a2": UNHEALTHY, "b": HEALTHY}
    assert next_hop(states, GcpFailoverPolicy(failover_ratio=0.5), ("a", "a2"), ("b",)) == "b"
    assert next_hop(states, GcpFailoverPolicy(failover_ratio=0.0), ("a", "a2"), ("b",)) == "a"


def test_a_failover_takes_unhealthy_threshold_intervals_and_failback_one() -> None:
    """The sequence Google's probers give when a's /healthz turns 503 at t=0 and b's turns 200 (the agents' takeover):
    the next hop is a until a's second failed probe, then b; back to a one probe after a answers 200 again."""
    prober = Prober(CHECK)
    prober.probed("a", -1.0, True, 0.01)
    hops = []
    for t in range(4):
        prober.probed("a", float(t), False, 0.01)
        prober.probed("b", float(t), True, 0.01)
        hops.append(next_hop(prober.states(), mesh_ha.FAILOVER_POLICY))
    assert hops == ["a", "b", "b", "b"]  # unhealthy_threshold 2: the second failed probe
    prober.probed("a", 4.0, True, 0.01)
    assert next_hop(prober.states(), mesh_ha.FAILOVER_POLICY) == "a"
