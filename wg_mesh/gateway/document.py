"""The peer document: everything a gateway's wg0.conf holds except its private key, signed, as one JSON text.

In `delivery: live` the Pulumi program writes one document per site into the cloud's store (AWS Secrets Manager,
GCE instance metadata, a file on a static site) and the gateway agent (wg_mesh.gateway.agent) reads, checks and
applies it. The program encodes (`encode_body`) and signs (wg_mesh.plan.signing); the gateway `decode`s: standard
library, and python3-nacl (Ubuntu 24.04) imported only to verify.

The document is a DSSE envelope (https://github.com/secure-systems-lab/dsse, envelope.md and protocol.md):
`{"payloadType": PAYLOAD_TYPE, "payload": base64(body), "signatures": [{"keyid": ..., "sig": base64(Ed25519)}]}`,
the signature over PAE = b"DSSEv1 <len(type)> <type> <len(body)> <body>". The body is canonical JSON (sorted keys,
no spaces, ASCII): format, scope ("project/stack"), site, serial (a counter of the content's changes kept in the
stack's state, wg_mesh.tools.serial: a gateway never goes back to a lower one), public_key, key_at, not_after (a cloud
gateway's document: when it expires), gateways, interface, generation. `gateways` (1, present only for a cloud site
with one gateway) tells a high-availability agent that its pair is retired (`gateways: 2` -> 1): it stands down
(wg_mesh.gateway.ha); a document can make an HA agent write less, never claim. The generation is a content id (the
first 48 bits of the SHA-256 of the body without generation and serial, exact in a float64 metric): "applied equals
desired" is what the agent and the alerts compare.

A gateway treats every fetched text as hostile: `decode` never raises anything but DocumentError (with a reason, the
`reason` label of wgmesh_agent_apply_failures_total) and reads nothing it has not bounded: the size before any
parse, the nesting depth before json.loads, every count and string after, and the signature before the body.
Stricter than DSSE's "consumers MUST ignore unrecognized fields": we are the only producer, so an unknown field is
a refusal. Then the invariants of wg_mesh.gateway.trust, which no signature can override.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict, dataclass, replace
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Any

from . import reresolve
from .signed import EXPIRED as EXPIRED
from .signed import FORMAT_MISMATCH as FORMAT_MISMATCH
from .signed import GENERATION as GENERATION
from .signed import INVALID as INVALID
from .signed import MAX_BYTES as MAX_BYTES
from .signed import MAX_DEPTH as MAX_DEPTH
from .signed import NO_PEERS as NO_PEERS
from .signed import PARSE as PARSE
from .signed import PAYLOAD_TYPE as PAYLOAD_TYPE
from .signed import REASONS as REASONS
from .signed import REPLAY as REPLAY
from .signed import SCOPE_MISMATCH as SCOPE_MISMATCH
from .signed import SIGNATURE as SIGNATURE
from .signed import UNSAFE as UNSAFE
from .signed import WRONG_SITE as WRONG_SITE
from .signed import DocumentError as DocumentError
from .signed import canonical as canonical
from .signed import envelope as envelope
from .signed import load_json as load_json
from .signed import pae as pae
from .signed import verified_payload as verified_payload
from .trust import MAX_MTU, MIN_MTU, SCOPE, plan_problem
from .trust import Trust as Trust
from .trust import is_key as is_key
from .trust import parse_trust as parse_trust
from .trust import unsafe_destination as unsafe_destination
from .wgconf import InterfacePlan, Peer

FORMAT = "wg-mesh.peers/2"
GENERATION_HEX_DIGITS = 12  # 48 bits: a float64 metric holds it exactly
# A peer's AllowedIPs: its own ranges (an overlay /32 and at most 64 cidrs) and, on a relayed site's entry for its
# relay, its partners' too (wg_mesh.gateway.relaytrust pins them): at most the bound of any list (_strings_clean).
MAX_PEERS, MAX_STRING = 512, 128
MAX_ALLOWED_IPS = 2 * MAX_PEERS
MAX_SERIAL = 2**53
# A serial counts its document's changes (wg_mesh.tools.serial): one `pulumi up` adds one. One further than this past
# the floor is no deployer's; it is refused, or it would become the floor and every correct document after it a
# replay.
MAX_SERIAL_JUMP = 2**20
SINGLE = 1  # the only `gateways` a document says: the site has one gateway (an HA pair reading it stands down)


@dataclass(frozen=True)
class Document:
    site: str
    generation: int
    public_key: str  # the site's own public key: the private key fetched from the store must match it
    plan: InterfacePlan
    serial: int = 0
    key_at: int | None = None  # from when public_key is the site's key (zero-loss rotation); None: now
    not_after: int | None = None  # when it expires (a cloud gateway's); None: never
    gateways: int | None = None  # SINGLE: the site has one gateway, an HA pair stands down; None: not said


# --- the deployer's side ---------------------------------------------------------------------------------------

# only when set: a mesh without them keeps its bytes
PEER_OPTIONAL = ("mtu", "fallback_endpoint", "key_at", "endpoint_name", "reresolve_s")


def _interface(plan: InterfacePlan) -> dict[str, Any]:
    # not `forward`: the agent takes it from its trust (a single host's document is a gateway's in form)
    interface = {k: v for k, v in asdict(plan).items() if k not in ("site", "forward", "relay_ranges", "public_ip")}
    interface["peers"] = [
        {k: v for k, v in asdict(p).items() if k not in PEER_OPTIONAL or v is not None}
        | {"allowed_ips": list(p.allowed_ips)}
        for p in plan.peers
    ]
    interface["listen_sources"] = list(plan.listen_sources)
    if plan.relay_ranges:  # a relay's only: every other document keeps its bytes (and its generation)
        interface["relay_ranges"] = list(plan.relay_ranges)
    if plan.public_ip is not None:  # a site whose address is known in advance
        interface["public_ip"] = plan.public_ip
    return interface


def generation_of(body: dict[str, Any]) -> int:
    content = {k: v for k, v in body.items() if k not in ("generation", "serial")}
    return int(hashlib.sha256(canonical(content).encode()).hexdigest()[:GENERATION_HEX_DIGITS], 16)


def encode_body(
    plan: InterfacePlan,
    public_key: str,
    *,
    scope: str,
    serial: int,
    key_at: int | None = None,
    not_after: int | None = None,
    gateways: int | None = None,
) -> str:
    """The payload of a site's document: canonical JSON, the same bytes for the same mesh and serial. `gateways`:
    SINGLE for a cloud site with one gateway, None (not written) otherwise."""
    body: dict[str, Any] = {"format": FORMAT, "scope": scope, "site": plan.site, "public_key": public_key}
    body["interface"] = _interface(plan)
    if key_at is not None:
        body["key_at"] = key_at
    if not_after is not None:  # a cloud gateway's (wg_mesh.plan.live.expires): in the content, so in the generation
        body["not_after"] = not_after
    if gateways is not None:
        body["gateways"] = gateways
    body["generation"] = generation_of(body)
    body["serial"] = serial
    return canonical(body)


# --- the body --------------------------------------------------------------------------------------------------

BODY_KEYS = {
    "format", "scope", "site", "serial", "public_key", "key_at", "not_after", "gateways", "interface", "generation"
}  # fmt: skip
INTERFACE_KEYS = {
    "address", "listen_port", "mtu", "mss", "masquerade", "peers", "listen_sources", "relay_ranges", "public_ip"
}  # fmt: skip
# A relay's ranges: two rules each in its chains (wgconf.relay_chains). _strings_clean bounds any list at this: the
# relayed sites behind MAX_PEERS peers, each with its overlay /32 and one LAN (wg_mesh.config.relay keeps to it).
MAX_RELAY_RANGES = 2 * MAX_PEERS
PEER_KEYS = {"name", "public_key", "allowed_ips", "endpoint", "persistent_keepalive", *PEER_OPTIONAL}


def _need(condition: bool, message: str, reason: str = INVALID) -> None:
    if not condition:
        raise DocumentError(reason, message)


def _strings_clean(value: Any, where: str = "body") -> None:
    """Every string (keys included) printable ASCII and short: no control, format or line-separator character
    (U+2028 and U+0085 end a line for str.splitlines, NUL ends a C string) can reach a file, a command or a log."""
    if isinstance(value, str):
        _need(value.isascii() and value.isprintable(), f"{where}: a string with a control or non-ASCII character",
              UNSAFE)  # fmt: skip
        _need(len(value) <= MAX_STRING, f"{where}: a string of {len(value)} characters", UNSAFE)
    elif isinstance(value, dict):
        for key, item in value.items():
            _strings_clean(key, where)
            _strings_clean(item, f"{where}.{key}" if key.isascii() and key.isprintable() else where)
    elif isinstance(value, list):
        _need(len(value) <= MAX_PEERS * 2, f"{where}: a list of {len(value)} items")
        for item in value:
            _strings_clean(item, where)


def _fields(raw: object, what: str, allowed: set[str], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    _need(isinstance(raw, dict), f"{what}: not an object")
    assert isinstance(raw, dict)
    unknown = sorted(set(raw) - allowed)
    _need(not unknown, f"{what}: unknown field {unknown[0] if unknown else ''!r}")
    missing = sorted(allowed - set(raw) - set(optional))
    _need(not missing, f"{what}: no {missing[0] if missing else ''!r}")
    return raw


def _int(value: object, low: int, high: int, what: str) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool) and low <= value <= high, f"{what}: {value!r}")
    assert isinstance(value, int)
    return value


def _network(value: object, what: str) -> str:
    _need(isinstance(value, str), f"{what}: {value!r} is not a string")
    try:
        network = str(IPv4Network(str(value), strict=True))
    except ValueError as exc:
        raise DocumentError(INVALID, f"{what}: {exc}") from None
    _need(network == value and "/" in network, f"{what}: {value!r} is not written as {network}")
    return network


def _address(value: object, what: str) -> str:
    """An IPv4 address written canonically (no leading zero, no prefix length)."""
    _need(isinstance(value, str), f"{what}: {value!r} is not an IPv4 address")
    try:
        address = IPv4Address(str(value))
    except ValueError:
        raise DocumentError(INVALID, f"{what}: {value!r} is not an IPv4 address") from None
    _need(str(address) == value, f"{what}: {value!r} is not written as {address}")
    return str(address)


def _endpoint(value: object, what: str) -> str:
    """IPv4 literal ':' port, the port 1..65535 in ASCII digits without a leading zero (`²` is a digit to Python)."""
    _need(isinstance(value, str) and value.count(":") == 1, f"{what}: {value!r} is not IPV4:PORT")
    host, _, port = str(value).partition(":")
    try:
        address = IPv4Address(host)
    except ValueError:
        raise DocumentError(INVALID, f"{what}: {host!r} is not an IPv4 address") from None
    _need(str(address) == host, f"{what}: {host!r} is not written as {address}")
    _need(re.fullmatch(r"[1-9][0-9]{0,4}", port) is not None and int(port) <= 65535, f"{what}: port {port!r}")
    return f"{address}:{int(port)}"


def _peer(raw: object, i: int, interface_mtu: int) -> Peer:
    what = f"peers[{i}]"
    peer = _fields(raw, what, PEER_KEYS, PEER_OPTIONAL)
    _need(isinstance(peer["name"], str) and bool(peer["name"]), f"{what}.name: {peer['name']!r}")
    _need(is_key(peer["public_key"]), f"{what}.public_key: not a WireGuard key")
    allowed = peer["allowed_ips"]
    _need(isinstance(allowed, list) and 0 < len(allowed) <= MAX_ALLOWED_IPS,
          f"{what}.allowed_ips: not a list of 1..{MAX_ALLOWED_IPS} prefixes")  # fmt: skip
    mtu = None if peer.get("mtu") is None else _int(peer["mtu"], MIN_MTU, MAX_MTU, f"{what}.mtu")
    _need(mtu is None or mtu <= interface_mtu, f"interface.peers: the MTU of {peer['name']} is above the interface's")
    key_at = peer.get("key_at")
    # null: a dynamic peer (issue 24): the key must be there (a missing one is refused), and it cannot fall back
    dynamic = peer["endpoint"] is None
    _need(not dynamic or peer.get("fallback_endpoint") is None, f"{what}: a dynamic peer with a fallback_endpoint")
    return Peer(
        name=peer["name"],
        public_key=peer["public_key"],
        allowed_ips=tuple(_network(a, f"{what}.allowed_ips") for a in allowed),
        endpoint=None if dynamic else _endpoint(peer["endpoint"], f"{what}.endpoint"),
        persistent_keepalive=_int(peer["persistent_keepalive"], 0, 65535, f"{what}.persistent_keepalive"),
        mtu=mtu,
        fallback_endpoint=None
        if peer.get("fallback_endpoint") is None
        else _endpoint(peer["fallback_endpoint"], f"{what}.fallback_endpoint"),
        key_at=None if key_at is None else _int(key_at, 0, MAX_SERIAL, f"{what}.key_at"),
        **_named(peer, what, dynamic),
    )


def _named(peer: dict[str, Any], what: str, dynamic: bool) -> dict[str, Any]:
    """A DNS-named peer's NAME:PORT and re-resolve interval (both or neither; its endpoint null, no fallback)."""
    name, every = peer.get("endpoint_name"), peer.get("reresolve_s")
    if name is None and every is None:
        return {}
    _need(name is not None and every is not None, f"{what}: endpoint_name and reresolve_s go together")
    _need(dynamic, f"{what}: a DNS-named peer with an endpoint")
    try:
        reresolve.split(name if isinstance(name, str) else "")
    except ValueError as exc:
        raise DocumentError(INVALID, f"{what}.endpoint_name: {exc}") from None
    low, high = reresolve.RERESOLVE_BOUNDS
    return {"endpoint_name": name, "reresolve_s": _int(every, low, high, f"{what}.reresolve_s")}


def _plan(raw: object, site: str) -> InterfacePlan:
    interface = _fields(raw, "interface", INTERFACE_KEYS, ("listen_sources", "relay_ranges", "public_ip"))
    address = interface["address"]
    try:
        parsed = str(IPv4Interface(str(address) if isinstance(address, str) else "-"))
    except ValueError:
        raise DocumentError(INVALID, f"interface.address: {address!r}") from None
    _need(parsed == address and "/" in parsed, f"interface.address: {address!r} is not written as ADDRESS/PREFIX")
    mtu = _int(interface["mtu"], MIN_MTU, MAX_MTU, "interface.mtu")
    peers_raw, sources = interface["peers"], interface.get("listen_sources", [])
    _need(
        isinstance(peers_raw, list) and len(peers_raw) <= MAX_PEERS,
        f"interface.peers: not a list of at most {MAX_PEERS}",
    )
    _need(isinstance(sources, list) and len(sources) <= 2 * MAX_PEERS, "interface.listen_sources: not a list")
    peers = tuple(_peer(p, i, mtu) for i, p in enumerate(peers_raw))
    keys, names = [p.public_key for p in peers], [p.name for p in peers]
    _need(len(set(keys)) == len(keys), "interface.peers: a public key appears twice")
    _need(len(set(names)) == len(names), "interface.peers: a name appears twice")
    _need(isinstance(interface["masquerade"], bool), "interface.masquerade: not true/false")
    return InterfacePlan(
        site=site,
        address=str(address),
        listen_port=_int(interface["listen_port"], 1, 65535, "interface.listen_port"),
        mtu=mtu,
        mss=_int(interface["mss"], MIN_MTU - 40, mtu - 40, "interface.mss"),
        masquerade=interface["masquerade"],
        peers=peers,
        listen_sources=tuple(_network(s, "interface.listen_sources") for s in sources),
        relay_ranges=_ranges(interface.get("relay_ranges", [])),
        public_ip=_address(interface["public_ip"], "interface.public_ip") if "public_ip" in interface else None,
    )


def _ranges(raw: object) -> tuple[str, ...]:
    """A relay's ranges: [prefix, ...], each written canonically, none twice (what they may be: relaytrust)."""
    what = "interface.relay_ranges"
    _need(isinstance(raw, list) and len(raw) <= MAX_RELAY_RANGES, f"{what}: not a list of at most {MAX_RELAY_RANGES}")
    assert isinstance(raw, list)
    ranges = tuple(_network(r, f"{what}[{i}]") for i, r in enumerate(raw))
    _need(len(set(ranges)) == len(ranges), f"{what}: a range appears twice")
    return ranges


def decode(
    text: str | bytes,
    trust: Trust,
    *,
    min_serial: int = 0,
    now: float | None = None,
    applied_generation: int | None = None,
) -> Document:
    """The document for trust.site, verified and checked; DocumentError (with its reason) for anything a gateway must
    refuse, and never any other exception. The floor is `min_serial` (the serial of the running document, persisted by
    the agent) or agent.json's `trust.floor`, the higher: a lower serial is a replay, unless its content is the running
    one's (`applied_generation`: a state restored from an older checkpoint signs the running content again; applying
    it changes nothing and the floor stays); the floor's own serial only with the running content; one more than
    MAX_SERIAL_JUMP past a floor is refused. `now` (the gateway's clock): a `not_after` must not have passed."""
    payload = verified_payload(text, trust)
    body = load_json(payload, "payload")
    _need(isinstance(body, dict), "payload: not a JSON object", PARSE)
    claimed = body.get("generation")
    try:
        return _document(body, payload, trust, min_serial, time.time() if now is None else now, applied_generation)
    except DocumentError as exc:
        if isinstance(claimed, int) and not isinstance(claimed, bool) and 0 <= claimed < 2**48:
            exc.generation = claimed
        raise


def _floor_of(min_serial: int, trust: Trust) -> str:
    return "the running document's" if min_serial >= trust.floor else "agent.json's: this gateway was made after it"


def _expiry(value: object, trust: Trust, now: float) -> int | None:
    """The document's `not_after`, checked against the gateway's clock; required where agent.json says `expiring`."""
    if value is None:
        _need(not trust.expiring, "no not_after: this gateway applies only documents that expire", EXPIRED)
        return None
    not_after = _int(value, 0, MAX_SERIAL, "not_after")
    _need(now <= not_after, f"expired at {not_after} (this gateway's clock: {int(now)})", EXPIRED)
    return not_after


def _document(
    body: dict[str, Any], payload: bytes, trust: Trust, min_serial: int, now: float, applied_generation: int | None
) -> Document:
    _strings_clean(body)
    _need(body.get("format") == FORMAT, f"format {body.get('format')!r}, this agent reads {FORMAT!r}", FORMAT_MISMATCH)
    _fields(body, "body", BODY_KEYS, ("key_at", "not_after", "gateways"))
    _need(canonical(body).encode() == payload, "payload: not canonical JSON", PARSE)
    _need(isinstance(body["scope"], str) and SCOPE.fullmatch(body["scope"]) is not None, "scope: not PROJECT/STACK")
    _need(
        body["scope"] == trust.scope, f"written for {body['scope']!r}, this gateway is {trust.scope!r}", SCOPE_MISMATCH
    )
    _need(body["site"] == trust.site, f"written for site {body['site']!r}, this gateway is {trust.site!r}", WRONG_SITE)
    generation = _int(body["generation"], 0, 2**48 - 1, "generation")
    _need(generation == generation_of(body), f"generation {generation:012x} does not match the content", GENERATION)
    serial = _int(body["serial"], 1, MAX_SERIAL, "serial")
    floor = max(min_serial, trust.floor)
    far = floor and serial > floor + MAX_SERIAL_JUMP
    _need(not far, f"serial {serial} is more than {MAX_SERIAL_JUMP} past the floor {floor}: no deployer counts so fast")
    running = applied_generation == generation  # the running content, signed again
    older = f"serial {serial} is older than the floor {floor} ({_floor_of(min_serial, trust)})"
    _need(serial >= floor or running, older, REPLAY)
    same = serial != min_serial or applied_generation in (None, generation)
    _need(same, f"serial {serial} is the running document's, with other content", REPLAY)
    not_after = _expiry(body.get("not_after"), trust, now)
    _need(is_key(body["public_key"]), "public_key: not a WireGuard key")
    key_at, gateways = body.get("key_at"), body.get("gateways")
    if "gateways" in body:  # written only as 1: anything else, null included, is refused
        _int(gateways, SINGLE, SINGLE, "gateways")
    # Forwarding is the site's own configured fact (agent.json: a site without cidrs is a single host), never the
    # document's: no signed document can turn a single host into a router.
    plan = replace(_plan(body["interface"], trust.site), forward=trust.forwards)
    _need(bool(plan.peers), "no peers: applying it would cut the site off the mesh", NO_PEERS)
    _need(all(p.public_key != body["public_key"] for p in plan.peers), "a peer has the site's own public key")
    problem = plan_problem(plan, trust)
    _need(problem is None, str(problem), UNSAFE)
    return Document(
        site=trust.site,
        generation=generation,
        public_key=body["public_key"],
        plan=plan,
        serial=serial,
        key_at=None if key_at is None else _int(key_at, 0, MAX_SERIAL, "key_at"),
        not_after=not_after,
        gateways=gateways,
    )
