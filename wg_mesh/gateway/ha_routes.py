"""Which routes an HA gateway may write (wg_mesh.gateway.ha_run's reconcile, ha_aws): the remote ranges its document
names, each checked once more against agent.json's trust (IAM has no condition key for a route's destination: this
is the guard, docs/ha.md 5.4)."""

from __future__ import annotations

import ipaddress

from .trust import Trust, unsafe_destination
from .wgconf import InterfacePlan


def remote_ranges(plan: InterfacePlan) -> list[str]:
    """What the site's route tables send to its gateway (wg_mesh.plan.topology.remote_ranges): the overlay and every
    peer's CIDRs, read from the document."""
    own = ipaddress.IPv4Interface(plan.address).network
    ranges = [str(own)]
    for peer in plan.peers:
        ranges += [c for c in peer.allowed_ips if not ipaddress.IPv4Network(c).subnet_of(own) and c not in ranges]
    return ranges


def safe_ranges(plan: InterfacePlan, trust: Trust | None) -> tuple[list[str], list[str]]:
    """(remote ranges the route tables may send to this gateway, refusals with their reasons): the document's ranges
    (verified, after its invariants) checked once more against agent.json's trust; none at all without a trust."""
    if trust is None:
        return [], ["no trust in agent.json: no route is written"]
    ranges, refused = [], []
    for cidr in remote_ranges(plan):
        problem = unsafe_destination(cidr, trust)
        if problem is None:
            ranges.append(cidr)
        else:
            refused.append(problem)
    return ranges, refused


__all__ = ["remote_ranges", "safe_ranges"]
