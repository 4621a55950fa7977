"""How often an HA site's address and routes moved in a window of the drill (hadrill.py), from the cloud model's
change lines (awsmodel.py / gcpmodel.py through haapply.Applier.event; GCP's holder is the place whose VM's access
config has the static address, its routes the load balancer's next hop): a fight between gateways shows as many
moves, a handover as one (issue 21); and GCP's health view (`gcp_serving`). Pure."""

from __future__ import annotations

from typing import Any


def count_moves(events: list[dict[str, Any]], site: str, start: float, end: float) -> tuple[int, int]:
    """(address moves, route moves) of `site` within [start, end] from the cloud model's change lines: how often the
    address went to another gateway than the last one that held it, and the most times any one route did (a route
    table seen half moved is one move; GCP's delete-then-add of the access config, holder a -> none -> b, is one).
    A fight between two gateways shows as many; a handover as one (issue 21)."""
    mine = sorted((e for e in events if e.get("site") == site and "holder" in e), key=lambda e: float(e.get("t", 0)))
    before = [e for e in mine if e["t"] < start]
    last_holder = before[-1]["holder"] if before else None
    last_routes: dict[str, Any] = dict(before[-1].get("routes") or {}) if before else {}
    address, routes = 0, dict.fromkeys(last_routes, 0)
    for e in (e for e in mine if start <= e["t"] <= end):
        holder = e.get("holder")
        if holder is not None and holder != last_holder:
            address += last_holder is not None  # the first holder ever (nobody held it) is not a move
            last_holder = holder
        for cidr, target in (e.get("routes") or {}).items():
            if target is not None and target != last_routes.get(cidr):
                routes[cidr] = routes.get(cidr, 0) + (last_routes.get(cidr) is not None)
                last_routes[cidr] = target
    return address, max(routes.values(), default=0)


def gcp_serving(events: list[dict[str, Any]], site: str, start: float, end: float) -> tuple[int, int]:
    """GCP's health view within [start, end] from gcpmodel.py's lines: (probes a backend answered 200 without holding
    the address, episodes of two backends HEALTHY at once, one already under way at `start` included). Both are 0
    when one gateway serves at a time: a 200 from a VM in a group is traffic the load balancer may send it."""
    mine = sorted((e for e in events if e.get("site") == site), key=lambda e: float(e.get("t", 0)))
    stale = sum(1 for e in mine if e.get("stale_200") and start <= e["t"] <= end)
    edges = [e for e in mine if "two_healthy" in e]
    before = [e for e in edges if e["t"] < start]
    two = int(bool(before and before[-1]["two_healthy"]))
    two += sum(1 for e in edges if start <= e["t"] <= end and e["two_healthy"])
    return stale, two


__all__ = ["count_moves", "gcp_serving"]
