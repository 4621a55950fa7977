"""doctor: how this gateway reaches each peer (issue 24). Its kind: `configured` (an Endpoint in the config), `dynamic`
(none: learnt from the peer's packets, `endpoint: dynamic`) or `relayed` (through a relay's peer entry), from the
metrics mapping (/etc/wg-mesh/peers.json) or else the config; the endpoint WireGuard has now; when it last roamed,
from wg-mesh-metrics' state file (wg_mesh.gateway.wgmetrics.track). And a dynamic site's silence threshold.

Pure given a `Host`; standard library only (it runs on a bare gateway). Files that are missing or unreadable make the
report say so: they never fail a check.
"""

from __future__ import annotations

from wg_mesh.gateway.doctor.base import OK, Check, ConfPeer, Host, WgConf, ago
from wg_mesh.gateway.wgmetrics import (
    HANDSHAKE_STALE_SECONDS,
    MAPPING_PATH,
    STATE_PATH,
    Mapping,
    PeerStat,
    Seen,
    endpoint_label,
    parse_mapping,
    parse_state,
)


def default_silence(keepalive: int) -> int:
    """A dynamic site's threshold when none is given (= wg_mesh.config.alerting.default_silence, which the gateway
    cannot import: a test holds them equal): 2 x 180 s + 4 x its persistent keepalive."""
    return 2 * HANDSHAKE_STALE_SECONDS + 4 * keepalive


def read_mapping(host: Host, path: str = MAPPING_PATH) -> Mapping | None:
    try:
        return parse_mapping(host.read(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def read_roams(host: Host, path: str = STATE_PATH) -> dict[str, Seen] | None:
    """wg-mesh-metrics' last known endpoints; None when there is no state (a gateway without the metrics unit)."""
    try:
        return parse_state(host.read(path))
    except OSError:
        return None


def kind_of(public_key: str, mapping: Mapping | None, conf_peer: ConfPeer | None) -> str:
    known = next((p.kind for p in mapping.direct if p.public_key == public_key), None) if mapping else None
    if known is not None:
        return known
    if conf_peer is None:
        return "unknown"
    return "dynamic" if conf_peer.endpoint is None else "configured"


def roam_text(public_key: str, roams: dict[str, Seen] | None, now: float) -> str:
    if roams is None:
        return f"last roam unknown (no {STATE_PATH}: wg-mesh-metrics keeps it)"
    seen = roams.get(public_key)
    if seen is None or seen.roamed == 0:
        return "no roam seen"
    return f"last roamed {ago(now - seen.roamed)} ago"


def check_endpoint(peer: PeerStat, name: str, site: str | None, conf: WgConf | None, mapping: Mapping | None,
                   roams: dict[str, Seen] | None, now: float) -> Check:  # fmt: skip
    """One line per peer: its kind, the endpoint WireGuard has now, its last roam. Informational (always ok)."""
    conf_peer = next((p for p in conf.peers if p.public_key == peer.public_key), None) if conf else None
    kind = kind_of(peer.public_key, mapping, conf_peer)
    current = endpoint_label(peer.endpoint)
    if current is None:
        where = "no endpoint yet (learnt from its first packet)" if kind == "dynamic" else "no endpoint"
    elif kind == "dynamic":
        where = f"endpoint {current} (learnt from its packets)"
    elif conf_peer is not None and conf_peer.endpoint and endpoint_label(conf_peer.endpoint) != current:
        where = f"endpoint {current} (configured {conf_peer.endpoint}: it came from there, or a fallback moved it)"
    else:
        where = f"endpoint {current}"
    return Check("endpoint", OK, f"{name}: {kind}, {where}, {roam_text(peer.public_key, roams, now)}", peer_site=site)


def relayed_checks(mapping: Mapping | None) -> list[Check]:
    """The sites this gateway reaches through a relay: no peer entry of their own, their prefixes in the relay's."""
    relayed = [p for p in mapping.peers if p.kind == "relayed"] if mapping else []
    return [
        Check("endpoint", OK, f"{p.site}: relayed through {p.via} (its prefixes ride {p.via}'s peer entry)",
              peer_site=p.site)
        for p in relayed
    ]  # fmt: skip
