"""The stack output `ha_gateways` for `wg-mesh monitoring --ha-gateways FILE`: each HA site's gateways by letter, so
that the scrape job (wg_mesh.tools.monitoring.scrape_config) lists each by its VPC address (docs/ha.md section 10)."""

from __future__ import annotations

import ipaddress
import json

from wg_mesh.config import MeshConfig


def parse_ha_gateways(text: str, cfg: MeshConfig) -> dict[str, dict[str, str]]:
    """The stack output `ha_gateways` (`pulumi stack output ha_gateways --json`: {site: {a: IP, b: IP}}), checked
    against the stack; ValueError naming what is wrong."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"ha_gateways: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError("ha_gateways: not an object of site -> {a: IP, b: IP}")
    names = {site.name for site in cfg.sites}
    found: dict[str, dict[str, str]] = {}
    for site, gateways in raw.items():
        if site not in names:
            raise ValueError(f"ha_gateways.{site}: no such site in this stack")
        if not isinstance(gateways, dict) or not gateways:
            raise ValueError(f"ha_gateways.{site}: not an object of gateway -> IP")
        for letter, ip in gateways.items():
            try:
                ipaddress.IPv4Address(ip)
            except (ValueError, TypeError):
                raise ValueError(f"ha_gateways.{site}.{letter}: {ip!r} is not an IPv4 address") from None
        found[site] = {str(k): str(v) for k, v in gateways.items()}
    return found
