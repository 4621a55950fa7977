"""agent.json, the gateway's trust anchor: its site, interface, polling, source, HA settings and `trust` (the pinned
signing key and the site's facts, wg_mesh.gateway.trust), checked (`load_config`), and the source it names
(`make_source`). The program writes it into the user data (wg_mesh.gateway.ship.agent_config); the agent's unit
mounts it read-only (ship.READ_ONLY_PATHS). Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .document import Trust, parse_trust
from .ha import HaConfig, parse_ha
from .sources import GCP_ATTRIBUTE, FileSource, Source
from .wgconf import INTERFACE

PMTU_SECONDS = 15  # agent.json's default; issue #14: every 15-30 s (3 failed ticks make a black hole: 30-45 s)


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


def load_config(text: str) -> Config:
    """agent.json, checked; ValueError naming the field."""
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    site, source = raw.get("site"), raw.get("source")
    interface, poll = raw.get("interface", INTERFACE), raw.get("poll_seconds", 10)
    if not isinstance(site, str) or not site:
        raise ValueError(f"site: {site!r}")
    if not isinstance(source, dict):
        raise ValueError("source: not an object")
    if not isinstance(interface, str) or not interface:
        raise ValueError(f"interface: {interface!r}")
    if not isinstance(poll, int) or isinstance(poll, bool) or not 1 <= poll <= 3600:
        raise ValueError(f"poll_seconds: {poll!r} is not 1..3600")
    pmtu, heal = raw.get("pmtu_seconds", PMTU_SECONDS), raw.get("pmtu_heal", True)
    if not isinstance(pmtu, int) or isinstance(pmtu, bool) or not (pmtu == 0 or 5 <= pmtu <= 300):
        raise ValueError(f"pmtu_seconds: {pmtu!r} is not 0 (off) or 5..300")
    if not isinstance(heal, bool):
        raise ValueError(f"pmtu_heal: {heal!r} is not true or false")
    ha = parse_ha(raw["ha"]) if "ha" in raw else None
    if "trust" not in raw:
        raise ValueError("trust: missing (the signing key and the site's facts every document is checked against)")
    trust = parse_trust(raw["trust"])
    if trust.site != site:
        raise ValueError(f"trust.site: {trust.site!r} is not this gateway's site {site!r}")
    return Config(site, source, trust, interface, poll, pmtu, heal, ha)


def make_source(spec: dict[str, Any]) -> Source:
    """The source of agent.json's "source" object; ValueError naming what is wrong."""
    kind = spec.get("kind")
    fields: dict[str, tuple[str, ...]] = {
        "aws": ("region", "document_secret", "private_key_parameter"),
        "gcp": ("private_key_secret",),
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

        return GcpSource(spec["private_key_secret"], spec.get("attribute") or GCP_ATTRIBUTE)
    return FileSource(spec["document"], spec["private_key"])
