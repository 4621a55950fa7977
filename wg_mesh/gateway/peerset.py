"""Peers added and removed without touching the peers that stay. Standard library only.

`wg syncconf` re-sets every peer of its file, AllowedIPs included: wg(8) marks each `[Peer]` it reads
`replace_allowed_ips=true` (a peer section without an AllowedIPs line is left with none), and wireguard-go carries
that out as `RemoveByPeer` followed by one `Insert` per `allowed_ip=` line (device/uapi.go, `handlePeerLine`). A
packet to or from a peer that did not change, looked up in between, finds no peer and is dropped. So a mesh change
that only adds or removes sites used to cost the sites that stay a packet now and then: the live drill's "A<->B lose
no ping" failed about one run in ten (one lost ping in `add vps-fra` or `remove vps-fra`), and two namespaces with
wireguard-go lose ~1 flood ping in 7 syncconfs of an unchanged peer, none with the `wg set` commands below.

`peer_commands` plans that case as `wg set` commands (public keys in argv, as wg(8) takes them; no secret): each new
peer with its AllowedIPs, keepalive and endpoint, an endpoint the file changes, then each peer that is gone removed.
Anything else (the interface's key or port, a staying peer's AllowedIPs or keepalive, a field it does not know) is
left to `wg syncconf`: None.

A dynamic peer (issue 24: `endpoint: dynamic`, Peer.endpoint None) has no Endpoint line in the file, so neither these
commands nor `wg syncconf` (which leaves a field the file does not name as it runs) ever set, reset or remove the
endpoint WireGuard learnt from its packets; `running_view` keeps the apply from calling that endpoint drift, and
from re-arming (removing) the peer after an HA promotion, which would forget it.
"""

from __future__ import annotations

from .txn import WgState
from .wgconf import InterfacePlan, parse_wg_quick_conf

PEER_KEYS = frozenset({"PublicKey", "AllowedIPs", "Endpoint", "PersistentKeepalive"})
INTERFACE_KEYS = frozenset({"PrivateKey", "ListenPort"})


def _one(values: dict[str, list[str]], key: str) -> str | None:
    found = values.get(key, [])
    if len(found) > 1:
        raise ValueError(f"{key} given {len(found)} times")
    return found[0] if found else None


def _ips(text: str | None) -> frozenset[str]:
    return frozenset(a.strip() for a in (text or "").split(",") if a.strip())


def peer_commands(interface: str, running: WgState, config: str) -> list[list[str]] | None:
    """The `wg set` commands that take `running` to `config` (wg(8)'s format, as `wg syncconf` would get it) when
    they differ in whole peers and endpoints only; None otherwise."""
    try:
        sections = parse_wg_quick_conf(config)
        if not sections or sections[0][0] != "Interface" or set(sections[0][1]) - INTERFACE_KEYS:
            return None
        own = sections[0][1]
        if _one(own, "PrivateKey") != running.private_key or _one(own, "ListenPort") != str(running.listen_port):
            return None
        wanted: dict[str, dict[str, list[str]]] = {}
        for name, values in sections[1:]:
            key = _one(values, "PublicKey")
            if name != "Peer" or set(values) - PEER_KEYS or key is None or key in wanted:
                return None
            wanted[key] = values
    except ValueError:
        return None
    add, endpoints = [], []
    for key, values in wanted.items():
        ips, keepalive = _ips(_one(values, "AllowedIPs")), _one(values, "PersistentKeepalive")
        endpoint = _one(values, "Endpoint")
        peer = running.peers.get(key)
        if peer is None:
            argv = ["wg", "set", interface, "peer", key, "allowed-ips", ",".join(sorted(ips))]
            argv += ["persistent-keepalive", keepalive] if keepalive is not None else []
            add.append(argv + (["endpoint", endpoint] if endpoint is not None else []))
            continue
        if ips != frozenset(peer.allowed_ips) or (keepalive is not None and keepalive != str(peer.keepalive)):
            return None
        if endpoint is not None and endpoint != peer.endpoint:
            endpoints.append(["wg", "set", interface, "peer", key, "endpoint", endpoint])
    gone = [["wg", "set", interface, "peer", key, "remove"] for key in running.peers if key not in wanted]
    return add + endpoints + gone


Seen = dict[str, tuple[frozenset[str], int, bool]]  # key -> (AllowedIPs, keepalive, has an endpoint)


def running_view(running: WgState, plan: InterfacePlan, active: bool) -> tuple[Seen, frozenset[str]]:
    """wg0's peers as the apply's drift check compares them, and the keys of the plan's dynamic peers. In the active
    role a dynamic peer counts as having its endpoint whether WireGuard has learnt one yet or not (it is WireGuard's
    to learn, never drift); a standby's peers have none in any case (wgconf.wg_quick_conf)."""
    dynamic = frozenset(p.public_key for p in plan.peers if p.endpoint is None) if active else frozenset()
    seen = {
        k: (frozenset(p.allowed_ips), p.keepalive, k in dynamic or p.endpoint != "(none)")
        for k, p in running.peers.items()
    }
    return seen, dynamic
