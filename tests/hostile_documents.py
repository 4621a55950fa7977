"""Hostile peer documents for aws-use1's gateway (Pulumi.prod.yaml): every attack of issue 20 and more, each with the
reason the agent must refuse it for (wg_mesh.gateway.document.REASONS).

`corpus(sign) -> [(name, text)]`; `cases(sign)` the same with the expected reason. `sign(payload) -> envelope` is the
deployer's signature with the key the gateway trusts (tests/agent_fake.sign: TRUST's key): most documents are signed,
because a stolen store credential is not the only attacker; the signature cases make their own. A gateway first runs
`base(sign)` (serial SERIAL, private key PRIVATE_KEY) and must then refuse every entry and change nothing: `decode`
with `min_serial=SERIAL, applied_generation=base_generation(sign)`, the pretend gateway (tests/test_document_hostile.py)
and the real agent in a namespace (helper C's netns suite).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from tests.agent_fake import SCOPE, SITE, TRUST, base_plan
from wg_mesh.gateway import document as d
from wg_mesh.gateway.document import canonical, encode_body, generation_of
from wg_mesh.plan import signing, wgkey

Sign = Callable[[str], str]
SERIAL = 1_700_000_100  # the running document's; a hostile one is newer unless it is a replay
PRIVATE_KEY = base64.b64encode(hashlib.sha256(b"wg-mesh hostile documents: test key").digest()).decode()
PUBLIC_KEY = wgkey.public_key(PRIVATE_KEY)
OTHER_SEED = hashlib.sha256(b"wg-mesh hostile documents: another signing key").digest()
INJECTION = "\n[Interface]\nPostUp = touch /tmp/wg-mesh-pwned\n#"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    reason: str
    text: str | bytes


@functools.cache
def _base_payload() -> str:
    return encode_body(base_plan(), PUBLIC_KEY, scope=SCOPE, serial=SERIAL)  # base_plan() loads a stack: seconds


def _mtu() -> str:
    """The interface's MTU as the canonical body writes it (before any peer's: keys are sorted)."""
    return f'"mtu":{base_body()["interface"]["mtu"]}'


def base_body() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(_base_payload())
    return body


def base(sign: Sign) -> str:
    """The document the gateway runs before each hostile one."""
    return sign(canonical(base_body()))


def base_generation() -> int:
    return int(base_body()["generation"])


def _signed(sign: Sign, body: dict[str, Any], reseal: bool = True) -> str:
    body = dict(body)
    if reseal:
        body["generation"] = generation_of(body)
    return sign(canonical(body))


def _peers(body: dict[str, Any]) -> list[dict[str, Any]]:
    peers: list[dict[str, Any]] = body["interface"]["peers"]
    return peers


def _edit(sign: Sign, change: Callable[[dict[str, Any]], object], serial: int = SERIAL + 1) -> str:
    body = json.loads(json.dumps(base_body()))
    body["serial"] = serial
    change(body)
    return _signed(sign, body)


def _payload_text(sign: Sign, old: str, new: str) -> str:
    """The base payload with `old` replaced by `new` as text (what json.dumps would never write), signed."""
    text = canonical({**base_body(), "serial": SERIAL + 1})
    assert old in text, old
    return sign(text.replace(old, new, 1))


def _peer(body: dict[str, Any], i: int = 0, **fields: object) -> None:
    _peers(body)[i].update(fields)


def _extra_peer(body: dict[str, Any], name: str, cidrs: list[str], endpoint: str = "198.51.100.77:51820") -> None:
    key = base64.b64encode(hashlib.sha256(name.encode()).digest()).decode()
    _peers(body).append({"name": name, "public_key": key, "allowed_ips": cidrs, "endpoint": endpoint,
                         "persistent_keepalive": 25})  # fmt: skip


def _iface(body: dict[str, Any], **fields: object) -> None:
    body["interface"].update(fields)


def own_key_as_peer(sign: Sign, new_public_key: str, key_at: int | None) -> str:
    """Issue 33 item 3: a document announcing the site's new key (for `key_at`; None: at once) that gives peer 0 the
    running key (PUBLIC_KEY). `decode` cannot see it (it does not know the running key): the apply refuses it."""
    return _edit(sign, lambda b: (b.update(public_key=new_public_key, **({} if key_at is None else {"key_at": key_at})),
                                  _peer(b, public_key=PUBLIC_KEY)))  # fmt: skip


def _envelope(sign: Sign, change: Callable[[dict[str, Any]], object]) -> str:
    raw = json.loads(_edit(sign, lambda b: None))
    change(raw)
    return json.dumps(raw)


def _names(sign: Sign) -> list[Case]:
    u, i = d.UNSAFE, INJECTION
    return [
        Case("name with a newline and an [Interface] PostUp", u, _edit(sign, lambda b: _peer(b, name="gcp-euw3" + i))),
        Case(
            "name with U+2028 (str.splitlines breaks, wg-quick not)",
            u,
            _edit(sign, lambda b: _peer(b, name="gcp-euw3\u2028[Interface]\u2028PostUp = id")),
        ),
        Case("name with U+0085 (NEL)", u, _edit(sign, lambda b: _peer(b, name="gcp\x85euw3"))),
        Case("name with U+2029", u, _edit(sign, lambda b: _peer(b, name="gcp\u2029euw3"))),
        Case("name with NUL", u, _edit(sign, lambda b: _peer(b, name="gcp\x00euw3"))),
        Case("name with a carriage return", u, _edit(sign, lambda b: _peer(b, name="gcp\reuw3"))),
        Case("name with a zero-width space (format character)", u, _edit(sign, lambda b: _peer(b, name="gcp\u200b"))),
        Case("name with a bidi override", u, _edit(sign, lambda b: _peer(b, name="gcp\u202eeuw3"))),
        Case("name with a '#' and spaces", u, _edit(sign, lambda b: _peer(b, name="gcp # PostUp = id"))),
        Case("name in upper case", u, _edit(sign, lambda b: _peer(b, name="GCP-EUW3"))),
        Case("name of 64 characters", u, _edit(sign, lambda b: _peer(b, name="a" * 64))),
        Case("name of 300 characters", u, _edit(sign, lambda b: _peer(b, name="a" * 300))),
        Case("name that is this site's", u, _edit(sign, lambda b: _peer(b, name=SITE))),
        Case("two peers with one name", d.INVALID, _edit(sign, lambda b: _peer(b, 1, name=_peers(b)[0]["name"]))),
        Case("empty name", d.INVALID, _edit(sign, lambda b: _peer(b, name=""))),
        Case("injection in an endpoint", u, _edit(sign, lambda b: _peer(b, endpoint="198.51.100.2:51820" + i))),
        Case("injection in a key", u, _edit(sign, lambda b: _peer(b, public_key=_peers(b)[0]["public_key"] + i))),
        Case("injection in AllowedIPs", u, _edit(sign, lambda b: _peer(b, allowed_ips=["10.100.0.0/16" + i]))),
        Case("injection in the address", u, _edit(sign, lambda b: _iface(b, address="10.200.0.1/24" + i))),
        Case("injection in the scope", u, _edit(sign, lambda b: b.update(scope=SCOPE + i))),
        Case("a PostUp field in the interface", d.INVALID, _edit(sign, lambda b: _iface(b, post_up="id"))),
        Case("a PostUp field in the body", d.INVALID, _edit(sign, lambda b: b.update(PostUp="id"))),
        Case("a hooks field in a peer", d.INVALID, _edit(sign, lambda b: _peer(b, hooks=["id"]))),
    ]


def _prefixes(sign: Sign) -> list[Case]:
    u = d.UNSAFE

    def allowed(*cidrs: str) -> Callable[[dict[str, Any]], None]:
        return lambda b: _peer(b, allowed_ips=[_peers(b)[0]["allowed_ips"][0], *cidrs])

    cases = [
        Case(f"AllowedIPs {c}", u, _edit(sign, allowed(c)))
        for c in (
            "0.0.0.0/0",
            "0.0.0.0/1",
            "128.0.0.0/1",
            "10.0.0.0/7",
            "169.254.169.254/32",
            "169.254.0.0/16",
            "127.0.0.0/8",
            "127.0.0.53/32",
            "224.0.0.0/4",
            "239.1.2.3/32",
            "240.0.0.0/4",
            "255.255.255.255/32",
            "0.0.0.0/8",
            "10.10.0.0/16",
            "10.10.0.2/32",
            "10.0.0.0/8",
            "10.200.0.0/24",
            "10.200.0.0/16",
        )
    ]
    cases += [
        Case(
            "both halves of the default route on two peers",
            u,
            _edit(sign, lambda b: (_peer(b, 0, allowed_ips=["0.0.0.0/1"]), _peer(b, 1, allowed_ips=["128.0.0.0/1"]))),
        ),
        Case(
            "another peer's prefix",
            u,
            _edit(
                sign, lambda b: _peer(b, 1, allowed_ips=[*_peers(b)[1]["allowed_ips"], _peers(b)[0]["allowed_ips"][1]])
            ),
        ),
        Case(
            "a new peer inside another's prefix",
            u,
            _edit(sign, lambda b: _extra_peer(b, "site-c", ["10.100.128.0/17"])),
        ),
        Case(
            "a new peer with another's overlay /32",
            u,
            _edit(sign, lambda b: _extra_peer(b, "site-c", [_peers(b)[0]["allowed_ips"][0]])),
        ),
        Case(
            "one prefix twice in one peer",
            u,
            _edit(
                sign, lambda b: _peer(b, allowed_ips=[*_peers(b)[0]["allowed_ips"], _peers(b)[0]["allowed_ips"][-1]])
            ),
        ),
        Case("our own overlay address as a peer's", u, _edit(sign, lambda b: _peer(b, allowed_ips=["10.200.0.1/32"]))),
        Case(
            "the overlay's broadcast as a peer's", u, _edit(sign, lambda b: _peer(b, allowed_ips=["10.200.0.255/32"]))
        ),
        Case("two overlay /32s on one peer", u, _edit(sign, allowed("10.200.0.77/32"))),
        Case("address with a /1 prefix", u, _edit(sign, lambda b: _iface(b, address="10.200.0.1/1"))),
        Case("address with a /32 prefix", u, _edit(sign, lambda b: _iface(b, address="10.200.0.1/32"))),
        Case("address outside the overlay", u, _edit(sign, lambda b: _iface(b, address="10.201.0.1/24"))),
        Case("address of the metadata server", u, _edit(sign, lambda b: _iface(b, address="169.254.169.254/16"))),
        Case(
            "another address in the overlay (agent.json pins ours)",
            u,
            _edit(sign, lambda b: _iface(b, address="10.200.0.9/24")),
        ),
        Case("masquerade turned on", u, _edit(sign, lambda b: _iface(b, masquerade=True))),
        Case("listen source 0.0.0.0/0", u, _edit(sign, lambda b: _iface(b, listen_sources=["0.0.0.0/0"]))),
        Case("listen source 127.0.0.1/32", u, _edit(sign, lambda b: _iface(b, listen_sources=["127.0.0.1/32"]))),
    ]
    for endpoint in ("127.0.0.1:51820", "169.254.169.254:80", "224.0.0.1:51820", "0.0.0.0:51820",
                     "255.255.255.255:51820", "10.200.0.5:51820"):  # fmt: skip
        cases.append(Case(f"endpoint {endpoint}", u, _edit(sign, lambda b, e=endpoint: _peer(b, endpoint=e))))
    cases.append(Case("fallback endpoint 169.254.169.254:80", u,
                      _edit(sign, lambda b: _peer(b, fallback_endpoint="169.254.169.254:80"))))  # fmt: skip
    return cases + _own(sign)


def _own(sign: Sign) -> list[Case]:
    """Issue 33 item 6: what a cloud gateway is (no host filter) and what an endpoint can never be: this site's own
    public address (the document's public_ip), an address of its own ranges (agent.json), another peer's."""
    u, own = d.UNSAFE, base_body()["interface"]["public_ip"]
    first = _peers(base_body())[0]["endpoint"]
    return [
        Case("listen source a peer's /32 on a cloud gateway", u,
             _edit(sign, lambda b: _iface(b, listen_sources=["198.51.100.2/32"]))),
        Case("endpoint this site's own public address", u, _edit(sign, lambda b: _peer(b, endpoint=f"{own}:51820"))),
        Case("endpoint this site's own public address, another port", u,
             _edit(sign, lambda b: _peer(b, endpoint=f"{own}:443"))),
        Case("endpoint in this site's own range", u, _edit(sign, lambda b: _peer(b, endpoint="10.10.0.5:51820"))),
        Case("fallback endpoint in this site's own range", u,
             _edit(sign, lambda b: _peer(b, fallback_endpoint="10.10.7.7:51820"))),
        Case("endpoint another peer's", u, _edit(sign, lambda b: _peer(b, 1, endpoint=first))),
        Case("fallback endpoint another peer's endpoint", u,
             _edit(sign, lambda b: _peer(b, 1, fallback_endpoint=first))),
        Case("public_ip in the overlay", u, _edit(sign, lambda b: _iface(b, public_ip="10.200.0.5"))),
        Case("public_ip 127.0.0.1", u, _edit(sign, lambda b: _iface(b, public_ip="127.0.0.1"))),
    ]  # fmt: skip


def _values(sign: Sign) -> list[Case]:
    v = d.INVALID
    cases = [
        Case(
            "port \u00b2 (a digit to str.isdigit, not to int)",
            d.UNSAFE,
            _edit(sign, lambda b: _peer(b, endpoint="198.51.100.2:5182\u00b2")),
        ),
        Case(
            "port \u0665 (Arabic-Indic five)", d.UNSAFE, _edit(sign, lambda b: _peer(b, endpoint="198.51.100.2:\u0665"))
        ),
    ]
    for endpoint in (
        "198.51.100.2:0",
        "198.51.100.2:65536",
        "198.51.100.2:051820",
        "198.51.100.2:+5",
        "198.51.100.2:",
        "198.51.100.2",
        "[2001:db8::1]:51820",
        "2001:db8::1:51820",
        "gw.example.com:51820",
        "010.0.0.1:51820",
        "198.51.100.2:51820:1",
        " 198.51.100.2:51820",
    ):
        cases.append(Case(f"endpoint {endpoint!r}", v, _edit(sign, lambda b, e=endpoint: _peer(b, endpoint=e))))
    # a dynamic peer (issue 24) is `endpoint: null` and nothing else: not the config's word, not another type
    for endpoint in ("dynamic", "null", False, 0, [], {"host": "198.51.100.2"}):
        cases.append(Case(f"endpoint {endpoint!r} (dynamic is null)", v,
                          _edit(sign, lambda b, e=endpoint: _peer(b, endpoint=e))))  # fmt: skip
    falling_back = {"endpoint": None, "fallback_endpoint": "198.51.100.2:51820"}
    cases.append(Case("a dynamic peer with a fallback_endpoint", v, _edit(sign, lambda b: _peer(b, **falling_back))))
    for field, value in (("mtu", 0), ("mtu", 100000), ("mtu", 9000), ("mtu", 1279), ("mtu", True), ("mtu", "1420"),
                         ("listen_port", 0), ("listen_port", 65536), ("listen_port", True), ("mss", 2000),
                         ("masquerade", 1), ("masquerade", "false")):  # fmt: skip
        cases.append(Case(f"interface.{field} {value!r}", v,
                          _edit(sign, lambda b, f=field, x=value: _iface(b, **{f: x}))))  # fmt: skip
    key = _peers(base_body())[0]["public_key"]
    cases += [
        Case(
            "peer key of 31 bytes", v, _edit(sign, lambda b: _peer(b, public_key=base64.b64encode(bytes(31)).decode()))
        ),
        Case("peer key not canonical base64", v, _edit(sign, lambda b: _peer(b, public_key=key[:42] + "B="))),
        Case("peer key not base64", v, _edit(sign, lambda b: _peer(b, public_key="!" * 43 + "="))),
        Case("own key as a peer's", v, _edit(sign, lambda b: _peer(b, public_key=PUBLIC_KEY))),
        Case("a peer key twice", v, _edit(sign, lambda b: _peer(b, 1, public_key=key))),
        Case("own public key not a key", v, _edit(sign, lambda b: b.update(public_key="x"))),
        Case("keepalive a string", v, _edit(sign, lambda b: _peer(b, persistent_keepalive="25"))),
        Case("keepalive a bool", v, _edit(sign, lambda b: _peer(b, persistent_keepalive=False))),
        Case("a peer MTU above the interface's", v, _edit(sign, lambda b: _peer(b, mtu=8900))),
        Case("peer key_at a bool", v, _edit(sign, lambda b: _peer(b, key_at=True))),
        Case("key_at negative", v, _edit(sign, lambda b: b.update(key_at=-1))),
        *(
            Case(f"gateways {value!r} (only 1 is ever said)", v, _edit(sign, lambda b, x=value: b.update(gateways=x)))
            for value in (2, 0, True, "1", None, [1])
        ),
        Case("host bits set", v, _edit(sign, lambda b: _peer(b, allowed_ips=["10.100.1.2/16"]))),
        Case(
            "a netmask instead of a prefix length",
            v,
            _edit(sign, lambda b: _peer(b, allowed_ips=["10.100.0.0/255.255.0.0"])),
        ),
        Case("an IPv6 prefix", v, _edit(sign, lambda b: _peer(b, allowed_ips=["2001:db8::/32"]))),
        Case("no AllowedIPs", v, _edit(sign, lambda b: _peer(b, allowed_ips=[]))),
        Case(
            "66 AllowedIPs on one peer",  # its overlay /32 and 64 cidrs at most, but on a relay's entry (agent.json)
            d.UNSAFE,
            _edit(sign, lambda b: _peer(b, allowed_ips=[f"10.{k}.0.0/16" for k in range(30, 96)])),
        ),
        Case(
            "1025 AllowedIPs on one peer",
            v,
            _edit(sign, lambda b: _peer(b, allowed_ips=[f"10.{k // 256 + 30}.{k % 256}.0/24" for k in range(1025)])),
        ),
        Case("AllowedIPs a string", v, _edit(sign, lambda b: _peer(b, allowed_ips="10.100.0.0/16"))),
        Case("peers an object", v, _edit(sign, lambda b: _iface(b, peers={"a": 1}))),
        Case("interface a list", v, _edit(sign, lambda b: b.update(interface=[]))),
        Case("no listen_port", v, _edit(sign, lambda b: b["interface"].pop("listen_port"))),
        Case(
            "serial 2**20 + 1 past the running one (no deployer counts so fast)",
            v,
            _edit(sign, lambda b: None, serial=SERIAL + d.MAX_SERIAL_JUMP + 1),
        ),
        Case("not_after a string", v, _edit(sign, lambda b: b.update(not_after=str(int(time.time()) + 86400)))),
        Case("public_ip with a prefix length", v, _edit(sign, lambda b: _iface(b, public_ip="198.51.100.1/32"))),
        Case("public_ip null", v, _edit(sign, lambda b: _iface(b, public_ip=None))),
        Case("public_ip with a leading zero", v, _edit(sign, lambda b: _iface(b, public_ip="198.51.100.01"))),
        Case("serial zero", v, _edit(sign, lambda b: None, serial=0)),
        Case("serial a string", v, _edit(sign, lambda b: b.update(serial=str(SERIAL + 1)))),
        Case(
            "600 peers",
            v,
            _edit(sign, lambda b: [_extra_peer(b, f"p{k}", [f"11.{k // 256}.{k % 256}.0/24"]) for k in range(600)]),
        ),
        Case("no peers", d.NO_PEERS, _edit(sign, lambda b: _iface(b, peers=[]))),
    ]
    return cases


def _parsing(sign: Sign) -> list[Case]:
    p, good = d.PARSE, json.loads(base(sign))
    deep = "[" * 100_000 + "]" * 100_000
    return [
        Case("100,000-deep nesting", p, deep),
        Case("100,000-deep nesting inside the signed payload", p, sign(deep)),
        Case("9-deep nesting in the body", p, _payload_text(sign, _mtu(), '"mtu":' + "[" * 9 + "1" + "]" * 9)),
        Case("300 KiB document", p, json.dumps({**good, "padding": "x" * 300 * 1024})),
        Case("200 KiB payload (envelope past 256 KiB)", p, sign(" " * 200 * 1024 + canonical(base_body()))),
        Case("not JSON", p, "{corrupt"),
        Case("empty", p, ""),
        Case("not UTF-8", p, b"\xff\xfe{}"),
        Case("UTF-8 but not ASCII", p, '{"payload": "\u00e9"}'),
        Case("a list", p, "[]"),
        Case("a string", p, '"x"'),
        Case("duplicate keys in the envelope", p, base(sign)[:-1] + ',"payload":"e30="}'),
        Case("duplicate keys in the body", p, _payload_text(sign, _mtu(), _mtu() + ',"mtu":1280')),
        Case("NaN in the body", p, _payload_text(sign, _mtu(), '"mtu":NaN')),
        Case("Infinity in the body", p, _payload_text(sign, _mtu(), '"mtu":Infinity')),
        Case("a float in the body", p, _payload_text(sign, _mtu(), _mtu() + ".0")),
        Case("1e400 in the body", p, _payload_text(sign, _mtu(), '"mtu":1e400')),
        Case("a 400-digit integer", p, _payload_text(sign, _mtu(), '"mtu":' + "9" * 400)),
        Case("a 5000-digit integer (int's own limit)", p, _payload_text(sign, _mtu(), '"mtu":' + "9" * 5000)),
        Case("spaces in the payload (not canonical)", p, _payload_text(sign, _mtu(), _mtu().replace(":", ": "))),
        Case("payload not base64", p, json.dumps({**good, "payload": "not base64!"})),
        Case("payload not JSON", p, sign("not json")),
        Case("payload a list", p, sign("[]")),
        Case("an unknown envelope field", p, json.dumps({**good, "PostUp": "id"})),
        Case("9 signatures", p, json.dumps({**good, "signatures": good["signatures"] * 9})),
        Case("a signature entry not an object", p, json.dumps({**good, "signatures": ["x"]})),
        Case("sig not base64", p, json.dumps({**good, "signatures": [{**good["signatures"][0], "sig": "%%"}]})),
        Case("the body as JSON text with U+2028 raw", p, '{"payloadType": "\u2028"}'),
    ]


def _trust(sign: Sign) -> list[Case]:
    s, good = d.SIGNATURE, json.loads(base(sign))
    other = signing.sign(canonical({**base_body(), "serial": SERIAL + 1}), OTHER_SEED)
    mine_other = json.loads(other)
    mine_other["signatures"][0]["keyid"] = TRUST.keyid  # another key's signature under our keyid
    swapped = json.loads(_edit(sign, lambda b: _iface(b, masquerade=True)))
    swapped["payload"] = json.loads(_edit(sign, lambda b: _peer(b, persistent_keepalive=7)))["payload"]
    sig = base64.b64decode(good["signatures"][0]["sig"])
    return [
        Case("unsigned: the body alone", s, canonical({**base_body(), "serial": SERIAL + 1})),
        Case("unsigned: an empty object", s, "{}"),
        Case("no signatures", s, json.dumps({**good, "signatures": []})),
        Case("signed by another key", s, other),
        Case("another key's signature under our keyid", s, json.dumps(mine_other)),
        Case("the signature of another payload", s, json.dumps(swapped)),
        Case(
            "a signature one bit off",
            s,
            json.dumps(
                {
                    **good,
                    "signatures": [
                        {**good["signatures"][0], "sig": base64.b64encode(bytes([sig[0] ^ 1]) + sig[1:]).decode()}
                    ],
                }
            ),
        ),
        Case(
            "a signature of 63 bytes",
            s,
            json.dumps({**good, "signatures": [{**good["signatures"][0], "sig": base64.b64encode(sig[:63]).decode()}]}),
        ),
        Case(
            "an unknown keyid only",
            s,
            json.dumps({**good, "signatures": [{**good["signatures"][0], "keyid": "0" * 16}]}),
        ),
        Case("payloadType changed", d.FORMAT_MISMATCH, json.dumps({**good, "payloadType": "application/json"})),
        Case("format v1 (signed)", d.FORMAT_MISMATCH, _edit(sign, lambda b: b.update(format="wg-mesh.peers/1"))),
        Case("wrong site", d.WRONG_SITE, _edit(sign, lambda b: b.update(site="gcp-euw3"))),
        Case("wrong scope", d.SCOPE_MISMATCH, _edit(sign, lambda b: b.update(scope="wg-mesh/staging"))),
        Case("scope ../../etc", d.SCOPE_MISMATCH, _edit(sign, lambda b: b.update(scope="../../etc"))),
        Case("scope without a stack", d.INVALID, _edit(sign, lambda b: b.update(scope="wg-mesh"))),
        Case("older serial", d.REPLAY, _edit(sign, lambda b: _peer(b, persistent_keepalive=9), serial=SERIAL - 1)),
        Case("expired a second ago", d.EXPIRED, _edit(sign, lambda b: b.update(not_after=int(time.time()) - 1))),
        Case(
            "an old document (older serial, other content)",
            d.REPLAY,
            _edit(sign, lambda b: _peers(b).pop(), serial=SERIAL - 600),
        ),
        Case(
            "equal serial with other content",
            d.REPLAY,
            _edit(sign, lambda b: _peer(b, persistent_keepalive=7), serial=SERIAL),
        ),
        Case(
            "generation damaged",
            d.GENERATION,
            sign(canonical({**base_body(), "serial": SERIAL + 1, "generation": base_generation() ^ 1})),
        ),
    ]


def cases(sign: Sign) -> list[Case]:
    out = [*_names(sign), *_prefixes(sign), *_values(sign), *_parsing(sign), *_trust(sign)]
    names = [c.name for c in out]
    assert len(set(names)) == len(names), "case names are unique"
    return out


def corpus(sign: Sign) -> list[tuple[str, str | bytes]]:
    return [(c.name, c.text) for c in cases(sign)]
