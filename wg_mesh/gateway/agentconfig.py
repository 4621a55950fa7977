"""agent.json, the gateway's trust anchor: its site, interface, polling, source, HA settings and `trust` (the pinned
signing key and the site's facts, wg_mesh.gateway.trust), checked (`load_config`), and the source it names
(`make_source`). The program writes it into the user data (wg_mesh.gateway.ship.agent_config); the agent's unit
mounts it read-only (ship.READ_ONLY_PATHS). Standard library only.

Checked as strictly as a document (issue 33 item 6): read by the documents' bounded JSON reader (size, nesting, ASCII,
duplicate keys, NaN and huge numbers refused before json.loads builds anything: a deeply nested file is a refusal,
never a traceback), an unknown field refused wherever it is (top level, source, ha, trust), every string printable
and at most MAX_TEXT characters, the interface a Linux interface name (it reaches every argv), the source's and the
HA settings' fields of their kind, and the site's kind (trust.cloud) that of its source and HA cloud. A ValueError
names the field; the agent then exits 2 and changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .document import DocumentError, Trust, load_json, parse_trust
from .ha_config import HaConfig, parse_ha
from .hostplan import ifname
from .sources import FileSource, Source
from .trust import is_name
from .wgconf import INTERFACE

PMTU_SECONDS = 15  # agent.json's default; issue #14: every 15-30 s (3 failed ticks make a black hole: 30-45 s)
KEYS = {"site", "interface", "poll_seconds", "source", "ha", "trust", "bundle_sha256", "pmtu_seconds", "pmtu_heal"}
# each source kind's fields (wg_mesh.gateway.ship.aws_source, gcp_source, file_source): required, then optional
SOURCE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "aws": (("region", "document_secret", "private_key_parameter"), ("bundle_secret",)),
    "gcp": (("document_secret", "private_key_secret"), ("bundle_file",)),
    "file": (("document", "private_key"), ()),
}
# the `ha` object's fields by cloud (wg_mesh.plan.ha.aws_ha, gcp_ha; parse_ha checks their values)
HA_FIELDS = {
    "aws": {"cloud", "gateway", "health_port", "region", "lease_table", "allocation_id", "route_table_ids",
            "ec2_endpoint"},
    "gcp": {"cloud", "gateway", "health_port", "project", "region", "address", "address_ip", "backend_service",
            "groups"},
}  # fmt: skip
MAX_TEXT = 1024  # characters of any string (an ARN, a secret's name, a path); a list holds at most MAX_ITEMS
MAX_ITEMS = 1100  # a relay's pinned ranges: 1024 partners' and its own 65 (trust.relay's own bounds are tighter)
REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]{1,2}")


@dataclass(frozen=True)
class Config:
    site: str
    source: dict[str, Any]
    # What every document is checked against (wg_mesh.gateway.trust): required in agent.json; None only in tests
    # that never decode (a None trust refuses every document, reason `signature`)
    trust: Trust | None = None
    interface: str = INTERFACE
    poll_seconds: int = 10
    pmtu_seconds: int = PMTU_SECONDS  # path-MTU probes every this many seconds (wg_mesh.gateway.pmtu); 0: none
    pmtu_heal: bool = True
    ha: HaConfig | None = None  # an HA site's gateway (issue 11, wg_mesh.gateway.ha); None: a single gateway, as ever


def _known(raw: object, allowed: set[str], what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{what}: not an object")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ValueError(f"{what}: unknown field {unknown[0]!r}")
    return raw


def _strings(value: object, where: str) -> None:
    """Every string printable ASCII of at most MAX_TEXT characters, every list of at most MAX_ITEMS (keys too)."""
    if isinstance(value, str):
        if not (value.isascii() and value.isprintable() and len(value) <= MAX_TEXT):
            raise ValueError(f"{where}: not a printable string of at most {MAX_TEXT} characters")
    elif isinstance(value, dict):
        for key, item in value.items():
            _strings(key, where)
            _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise ValueError(f"{where}: a list of {len(value)} items, more than {MAX_ITEMS}")
        for item in value:
            _strings(item, where)


def _int(raw: dict[str, Any], key: str, default: int, ok: Any, expected: str) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
        raise ValueError(f"{key}: {value!r} is not {expected}")
    return value


def check_source(spec: object) -> dict[str, Any]:
    """agent.json's `source`, its fields those of its kind; ValueError naming the field."""
    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind not in SOURCE_FIELDS:
        raise ValueError(f"source.kind: {kind!r} is not one of {', '.join(SOURCE_FIELDS)}")
    required, optional = SOURCE_FIELDS[kind]
    raw = _known(spec, {"kind", *required, *optional}, f"source ({kind})")
    missing = [f for f in required if not isinstance(raw.get(f), str) or not raw[f]]
    if missing:
        raise ValueError(f"source ({kind}): missing {', '.join(missing)}")
    if kind == "aws" and not REGION.fullmatch(raw["region"]):
        raise ValueError(f"source.region: {raw['region']!r} is not an AWS region")
    if kind == "file" and not all(raw[f].startswith("/") for f in required):
        raise ValueError("source (file): document and private_key are absolute paths")
    if "bundle_file" in raw and not (isinstance(raw["bundle_file"], str) and raw["bundle_file"].startswith("/")):
        raise ValueError("source.bundle_file: not an absolute path")
    return raw


def load_config(text: str) -> Config:
    """agent.json, checked (module docstring); ValueError naming the field."""
    try:
        raw = _known(load_json(text, "agent.json"), KEYS, "agent.json")
    except DocumentError as exc:  # too large, too deep, not ASCII, not JSON: a ValueError with its reason
        raise ValueError(str(exc)) from None
    _strings(raw, "")
    site, source = raw.get("site"), check_source(raw.get("source"))
    if not is_name(site):
        raise ValueError(f"site: {site!r} is not a site's name (a DNS label)")
    try:
        interface = ifname(raw.get("interface", INTERFACE))
    except ValueError:
        raise ValueError(
            f"interface: {raw.get('interface')!r} is not an interface name (it reaches every argv)"
        ) from None
    poll = _int(raw, "poll_seconds", 10, lambda v: 1 <= v <= 3600, "1..3600")
    pmtu = _int(raw, "pmtu_seconds", PMTU_SECONDS, lambda v: v == 0 or 5 <= v <= 300, "0 (off) or 5..300")
    heal = raw.get("pmtu_heal", True)
    if not isinstance(heal, bool):
        raise ValueError(f"pmtu_heal: {heal!r} is not true or false")
    sha = raw.get("bundle_sha256")
    if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        raise ValueError("bundle_sha256: not a SHA-256 in hex")
    ha = None
    if "ha" in raw:
        cloud = raw["ha"].get("cloud") if isinstance(raw["ha"], dict) else None
        _known(raw["ha"], HA_FIELDS.get(str(cloud), {"cloud"}), "ha")
        for letter, group in (raw["ha"].get("groups") or {}).items():
            _known(group, {"zone", "name"}, f"ha.groups.{letter}")
        ha = parse_ha(raw["ha"])
    if "trust" not in raw:
        raise ValueError("trust: missing (the signing key and the site's facts every document is checked against)")
    trust = parse_trust(raw["trust"])
    if trust.site != site:
        raise ValueError(f"trust.site: {trust.site!r} is not this gateway's site {site!r}")
    for what, cloud in (("source.kind", source["kind"]), ("ha.cloud", ha.cloud if ha else None)):
        if trust.cloud is not None and cloud in ("aws", "gcp") and cloud != trust.cloud:
            raise ValueError(f"{what}: {cloud!r}, and trust.cloud says this site is {trust.cloud!r}")
    return Config(site, source, trust, interface, poll, pmtu, heal, ha)


def make_source(spec: dict[str, Any]) -> Source:
    """The source of agent.json's "source" object; ValueError naming what is wrong."""
    kind = spec.get("kind")
    fields: dict[str, tuple[str, ...]] = {
        "aws": ("region", "document_secret", "private_key_parameter"),
        "gcp": ("document_secret", "private_key_secret"),
        "file": ("document", "private_key"),
    }
    if kind not in fields:
        raise ValueError(f"source.kind: {kind!r} is not one of {', '.join(fields)}")
    missing = [f for f in fields[kind] if not isinstance(spec.get(f), str) or not spec[f]]
    if missing:
        raise ValueError(f"source ({kind}): missing {', '.join(missing)}")
    if kind == "aws":
        from .source_aws import AwsSource  # only the modules of the gateway's own cloud ship (wg_mesh.gateway.ship)

        return AwsSource(spec["region"], spec["document_secret"], spec["private_key_parameter"])
    if kind == "gcp":
        from .source_gcp import GcpSource

        return GcpSource(spec["document_secret"], spec["private_key_secret"])
    return FileSource(spec["document"], spec["private_key"])
