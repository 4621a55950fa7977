"""The metrics mapping (/etc/wg-mesh/peers.json): a site's name, interface and peers by public key.

wg-mesh-metrics (wg_mesh/gateway/wgmetrics.py) labels peers with site names from it. Written by the user data
(`delivery: user-data`, through wg_mesh.plan.metrics) or by the agent from the peer document (`delivery: live`):
one builder for both. Public data only (public keys and prefixes): world-readable, no private key.
"""

from __future__ import annotations

import json

from .wgconf import INTERFACE, InterfacePlan

MAPPING_PATH = "/etc/wg-mesh/peers.json"  # = wgmetrics.MAPPING_PATH (a test checks it)


def peer_mapping(plan: InterfacePlan, interface: str = INTERFACE) -> str:
    doc = {
        "site": plan.site,
        "interface": interface,
        "peers": [
            {"site": peer.name, "public_key": peer.public_key, "allowed_ips": list(peer.allowed_ips)}
            for peer in plan.peers
        ],
    }
    return json.dumps(doc, indent=2) + "\n"
