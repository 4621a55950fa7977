"""A private path's fallback to the internet (issue 13 item 4, docs/underlay.md section 7): level-triggered, per peer.

A peer on a private path has two endpoints in the plan: its private address (wg0.conf's Endpoint) and its public
one (`Peer.fallback_endpoint`). Each tick of the path-MTU thread (wg_mesh.gateway.pmtu.PathWatch) brings two facts
per such peer: did the small probe through the tunnel come back, and did a direct ping of the peer's private address
(outside the tunnel, over the path itself) come back. Then:

- on the private path, `fail_after` ticks in a row with both failing: `wg set wg0 peer K endpoint <public>`. One side
  is enough for the pair: WireGuard answers the last authenticated source, so the peer roams to this gateway's
  public address at the first packet (its firewall admits both sources of a path peer, topology.peer_source_ranges);
- on the internet, `pass_after` ticks in a row with the direct private ping passing: back to the private endpoint.
  The direct ping tests the path without moving the tunnel, so a path that stays down costs nothing after the switch;
- on the internet, a running endpoint that is the private one again (a `wg syncconf` of a new document wrote
  wg0.conf's) is set back to the public one at the next tick.

A tunnel probe that passes keeps the peer where it is, whatever the direct ping says (ICMP to the gateway's private
address may be filtered: the tunnel is what matters). Standard library only; pure but for the commands it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from .wgconf import INTERFACE, InterfacePlan

PRIVATE, PUBLIC = "private", "public"


@dataclass(frozen=True)
class Route:
    """Which endpoint one peer is on, and the ticks counted towards a switch."""

    peer: str
    public_key: str
    private: str  # HOST:PORT
    public: str
    on: str = PRIVATE
    count: int = 0
    switches: int = 0


def host(endpoint: str) -> str:
    return endpoint.rpartition(":")[0]


def routes(plan: InterfacePlan, old: Mapping[str, Route] | None = None) -> dict[str, Route]:
    """The peers with a fallback endpoint; a peer whose endpoints did not change keeps its state."""
    out = {}
    for p in plan.peers:
        if p.fallback_endpoint is None or p.endpoint is None:  # a dynamic peer is never on a path (the config refuses)
            continue
        fresh = Route(p.name, p.public_key, p.endpoint, p.fallback_endpoint)
        kept = (old or {}).get(p.name)
        same = kept is not None and (kept.private, kept.public, kept.public_key) == (
            p.endpoint,
            p.fallback_endpoint,
            p.public_key,
        )
        out[p.name] = kept if same and kept is not None else fresh
    return out


def step(route: Route, tunnel_ok: bool | None, private_ok: bool | None, fail_after: int, pass_after: int) -> Route:
    """One tick's verdict for one peer (None: not probed this tick, nothing counts)."""
    if tunnel_ok is None or private_ok is None:
        return route
    if route.on == PRIVATE:
        down = not tunnel_ok and not private_ok
        count = route.count + 1 if down else 0
        if count >= fail_after:
            return replace(route, on=PUBLIC, count=0, switches=route.switches + 1)
        return replace(route, count=count)
    count = route.count + 1 if private_ok else 0
    if count >= pass_after:
        return replace(route, on=PRIVATE, count=0)
    return replace(route, count=count)


def commands(before: Route, after: Route, running: Mapping[str, str]) -> list[list[str]]:
    """`wg set` for a switch, or for a public choice that a `wg syncconf` undid (`running`: key -> endpoint)."""
    want = after.public if after.on == PUBLIC else after.private
    switched = before.on != after.on
    undone = after.on == PUBLIC and running.get(after.public_key) not in (None, after.public)
    if switched or undone:
        return [["wg", "set", INTERFACE, "peer", after.public_key, "endpoint", want]]
    return []


def parse_endpoints(text: str) -> dict[str, str]:
    """`wg show wg0 endpoints`: 'KEY\\tHOST:PORT' lines ('(none)' for a peer without one)."""
    found = {}
    for line in text.splitlines():
        key, _, endpoint = line.partition("\t")
        if key and endpoint and endpoint != "(none)":
            found[key.strip()] = endpoint.strip()
    return found


METRICS = {
    "wgmesh_underlay_path": ("gauge", "1 for the path the tunnel to a private-path peer uses now (private or public)."),
    "wgmesh_underlay_fallbacks_total": ("counter", "Switches from a peer's private path to its public endpoint."),
}


def metric_lines(site: Mapping[str, str], state: Mapping[str, Route]) -> list[str]:
    """Prometheus text lines for the routes (HELP/TYPE once per metric; none when there is no private-path peer)."""
    if not state:
        return []
    base = ",".join(f'{k}="{v}"' for k, v in site.items())
    lines = []
    for name, (kind, help_text) in METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for peer, route in sorted(state.items()):
            labels = f'{base},peer_site="{peer}"'
            if name == "wgmesh_underlay_path":
                lines += [f'{name}{{{labels},path="{path}"}} {int(route.on == path)}' for path in (PRIVATE, PUBLIC)]
            else:
                lines.append(f"{name}{{{labels}}} {route.switches}")
    return lines
