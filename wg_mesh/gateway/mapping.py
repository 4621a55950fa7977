"""The metrics mapping (/etc/wg-mesh/peers.json): a site's name, interface and peers by public key, with their kinds.

wg-mesh-metrics (wg_mesh/gateway/wgmetrics.py) labels peers with site names and kinds from it; doctor reads the kinds.
Written by the user data (`delivery: user-data`, through wg_mesh.plan.metrics) or by the agent from the peer document
(`delivery: live`): one builder for both. Public data only (public keys and prefixes): world-readable, no private key.

A peer's kind (= wgmetrics.KINDS): `configured` (an Endpoint in its config; no `kind` key, so a mesh without dynamic
sites has the mapping it had, and each peer costs no more user data) or `dynamic` (none: learnt from its packets,
`endpoint: dynamic`, issue 24). A site reached through a relay (issue 24 item 2) is an entry of kind `relayed` with
`via` (the relay's site name) and the relay's public key: the peer entry that carries its AllowedIPs. Those entries
come from the site's own pinned relay (`relay`: agent.json's `trust.relay`, wg_mesh.gateway.relaytrust; the user data
renders the same from the config), never from a document. A DNS-named peer (`endpoint_name`) is `configured`: its
gateways dial it (wg_mesh.gateway.reresolve sets its endpoint), it is not learnt from its packets.
"""

from __future__ import annotations

import json

from .relaytrust import Relay as Relay  # re-exported: the Applier holds one
from .wgconf import INTERFACE, InterfacePlan

MAPPING_PATH = "/etc/wg-mesh/peers.json"  # = wgmetrics.MAPPING_PATH (a test checks it)


def peer_mapping(plan: InterfacePlan, interface: str = INTERFACE, relay: Relay | None = None) -> str:
    via = next((p for p in plan.peers if relay is not None and p.name == relay.site), None)
    relayed = [
        {"site": name, "public_key": via.public_key, "allowed_ips": list(ranges), "kind": "relayed", "via": via.name}
        for name, ranges in (relay.partners if relay is not None else ())
        if via is not None
    ]
    doc = {
        "site": plan.site,
        "interface": interface,
        "peers": [
            {
                "site": peer.name,
                "public_key": peer.public_key,
                "allowed_ips": list(peer.allowed_ips),
                **({"kind": "dynamic"} if peer.endpoint is None and peer.endpoint_name is None else {}),
            }
            for peer in plan.peers
        ]
        + relayed,
    }
    return json.dumps(doc, indent=2) + "\n"
