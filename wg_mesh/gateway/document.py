"""The peer document: everything a gateway's wg0.conf holds except its private key, as one JSON text.

In `delivery: live` the Pulumi program writes one document per site into the cloud's store (AWS Secrets Manager,
GCE instance metadata, a file on a static site) and the gateway agent (wg_mesh.gateway.agent) reads, checks and
applies it. Both sides use this module: `encode` in `pulumi up`, `decode` on the gateway.

The generation is derived from the content (the first 48 bits of its SHA-256, exact in a float64 metric), so the
same mesh always gives the same document and a second `pulumi up` changes nothing; it also catches a document
that was damaged on the way (`generation` no longer matches). Generations are ids, not counters: "applied equals
desired" is what the agent and the alerts compare.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
from dataclasses import asdict, dataclass
from typing import Any

from .wgconf import InterfacePlan, Peer

FORMAT = "wg-mesh.peers/1"
GENERATION_HEX_DIGITS = 12  # 48 bits: a float64 metric holds it exactly
MIN_MTU, MAX_MTU = 1280, 65535 - 80

# Why a document was refused (the `reason` label of wgmesh_agent_apply_failures_total).
PARSE = "parse"  # not JSON, or not an object
FORMAT_MISMATCH = "format"  # another format or version
WRONG_SITE = "site"  # written for another site
NO_PEERS = "no_peers"  # would remove every peer
INVALID = "invalid"  # a field has the wrong type or value
GENERATION = "generation"  # the content does not match its generation (damaged, or edited by hand)
REASONS = (PARSE, FORMAT_MISMATCH, WRONG_SITE, NO_PEERS, INVALID, GENERATION)


class DocumentError(ValueError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Document:
    site: str
    generation: int
    public_key: str  # the site's own public key: the private key fetched from the store must match it
    plan: InterfacePlan
    key_at: int | None = None  # from when `public_key` is valid (wg_mesh.gateway.rotation); None: now


def _body(plan: InterfacePlan, public_key: str, key_at: int | None = None) -> dict[str, Any]:
    interface = asdict(plan)
    # a peer's `mtu` and `fallback_endpoint` only when it has them (docs/underlay.md): a mesh without private paths
    # keeps its documents' bytes
    optional = ("mtu", "fallback_endpoint", "key_at")
    interface["peers"] = [
        {
            k: v
            for k, v in {**asdict(p), "allowed_ips": list(p.allowed_ips)}.items()
            if k not in optional or v is not None
        }
        for p in plan.peers
    ]
    interface["listen_sources"] = list(plan.listen_sources)
    body = {"format": FORMAT, "site": plan.site, "public_key": public_key, "interface": interface}
    return body if key_at is None else {**body, "key_at": key_at}


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def generation_of(body: dict[str, Any]) -> int:
    content = {k: v for k, v in body.items() if k != "generation"}
    return int(hashlib.sha256(_canonical(content).encode()).hexdigest()[:GENERATION_HEX_DIGITS], 16)


def encode(plan: InterfacePlan, public_key: str, key_at: int | None = None) -> str:
    """The document of one site: canonical JSON (sorted keys, no spaces), the same bytes for the same mesh. `key_at`:
    the moment from which `public_key` is valid (an announced rotation); None: not in the document."""
    body = _body(plan, public_key, key_at)
    body["generation"] = generation_of(body)
    return _canonical(body)


def is_key(value: object) -> bool:
    """A WireGuard key as wg(8) prints it: 32 bytes, base64 (44 characters)."""
    if not isinstance(value, str) or len(value) != 44:
        return False
    try:
        return len(base64.b64decode(value, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise DocumentError(INVALID, message)


def _int(value: object, low: int, high: int, what: str) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool) and low <= value <= high, f"{what}: {value!r}")
    assert isinstance(value, int)
    return value


def _network(value: object, what: str) -> str:
    _need(isinstance(value, str), f"{what}: {value!r} is not a string")
    try:
        return str(ipaddress.IPv4Network(str(value), strict=True))
    except ValueError as exc:
        raise DocumentError(INVALID, f"{what}: {exc}") from None


def _endpoint(value: object, what: str) -> str:
    _need(isinstance(value, str) and value.count(":") == 1, f"{what}: {value!r} is not HOST:PORT")
    host, _, port = str(value).partition(":")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise DocumentError(INVALID, f"{what}: {host!r} is not an IPv4 address") from None
    _need(port.isdigit() and 1 <= int(port) <= 65535, f"{what}: port {port!r}")
    return str(value)


def _peer(raw: object, i: int) -> Peer:
    what = f"peers[{i}]"
    _need(isinstance(raw, dict), f"{what}: not an object")
    assert isinstance(raw, dict)
    _need(isinstance(raw.get("name"), str) and bool(raw["name"]), f"{what}.name: {raw.get('name')!r}")
    _need(is_key(raw.get("public_key")), f"{what}.public_key: not a WireGuard key")
    allowed = raw.get("allowed_ips")
    _need(isinstance(allowed, list) and bool(allowed), f"{what}.allowed_ips: not a non-empty list")
    assert isinstance(allowed, list)
    return Peer(
        name=raw["name"],
        public_key=raw["public_key"],
        allowed_ips=tuple(_network(a, f"{what}.allowed_ips") for a in allowed),
        endpoint=_endpoint(raw.get("endpoint"), f"{what}.endpoint"),
        persistent_keepalive=_int(raw.get("persistent_keepalive"), 0, 65535, f"{what}.persistent_keepalive"),
        mtu=None if raw.get("mtu") is None else _int(raw["mtu"], MIN_MTU, MAX_MTU, f"{what}.mtu"),
        fallback_endpoint=None
        if raw.get("fallback_endpoint") is None
        else _endpoint(raw["fallback_endpoint"], f"{what}.fallback_endpoint"),
        key_at=_key_at(raw, what),
    )


def _plan(raw: object, site: str) -> InterfacePlan:
    _need(isinstance(raw, dict), "interface: not an object")
    assert isinstance(raw, dict)
    address = raw.get("address")
    try:
        ipaddress.IPv4Interface(str(address))
    except ValueError:
        raise DocumentError(INVALID, f"interface.address: {address!r}") from None
    peers_raw = raw.get("peers")
    _need(isinstance(peers_raw, list), "interface.peers: not a list")
    assert isinstance(peers_raw, list)
    peers = tuple(_peer(p, i) for i, p in enumerate(peers_raw))
    above = [
        p.name for p in peers if p.mtu is not None and p.mtu > _int(raw.get("mtu"), MIN_MTU, MAX_MTU, "interface.mtu")
    ]
    _need(not above, f"interface.peers: the MTU of {', '.join(above)} is above the interface's")
    keys = [p.public_key for p in peers]
    _need(len(set(keys)) == len(keys), "interface.peers: a public key appears twice")
    sources = raw.get("listen_sources", [])
    _need(isinstance(sources, list), "interface.listen_sources: not a list")
    _need(isinstance(raw.get("masquerade"), bool), "interface.masquerade: not true/false")
    return InterfacePlan(
        site=site,
        address=str(address),
        listen_port=_int(raw.get("listen_port"), 1, 65535, "interface.listen_port"),
        mtu=_int(raw.get("mtu"), MIN_MTU, MAX_MTU, "interface.mtu"),
        mss=_int(raw.get("mss"), MIN_MTU - 40, MAX_MTU - 40, "interface.mss"),
        masquerade=raw["masquerade"],
        peers=peers,
        listen_sources=tuple(_network(s, "interface.listen_sources") for s in sources),
    )


def decode(text: str | bytes, site: str) -> Document:
    """The document for `site`, checked; DocumentError (with its reason) for anything a gateway must refuse."""
    try:
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DocumentError(PARSE, f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise DocumentError(PARSE, f"not a JSON object but {type(body).__name__}")
    if body.get("format") != FORMAT:
        raise DocumentError(FORMAT_MISMATCH, f"format {body.get('format')!r}, this agent reads {FORMAT!r}")
    if body.get("site") != site:
        raise DocumentError(WRONG_SITE, f"written for site {body.get('site')!r}, this gateway is {site!r}")
    generation = body.get("generation")
    if generation != generation_of(body):
        raise DocumentError(GENERATION, f"generation {generation!r} does not match the content")
    _need(is_key(body.get("public_key")), "public_key: not a WireGuard key")
    plan = _plan(body.get("interface"), site)
    if not plan.peers:
        raise DocumentError(NO_PEERS, "no peers: applying it would cut the site off the mesh")
    if any(p.public_key == body["public_key"] for p in plan.peers):
        raise DocumentError(INVALID, "a peer has the site's own public key")
    key_at = _key_at(body, "")
    return Document(site=site, generation=int(generation), public_key=body["public_key"], plan=plan, key_at=key_at)


# --- announced key rotation (wg_mesh.gateway.rotation): the optional `key_at` of the site and of each peer ------------
KEY_AT_MAX = 2**40  # unix seconds (year ~36800): an int a float64 and every JSON parser hold exactly


def _key_at(raw: dict[str, Any], what: str) -> int | None:
    """An optional `key_at`: absent or null is None, else unix seconds in [0, KEY_AT_MAX]."""
    value = raw.get("key_at")
    return None if value is None else _int(value, 0, KEY_AT_MAX, f"{what}.key_at" if what else "key_at")
