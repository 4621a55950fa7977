"""High availability (issue 11): agent.json's `ha` object, checked (the contract: /work/wt/HA.md; the program writes it
with wg_mesh.plan.ha.aws_ha / gcp_ha). The state machine that acts on it is wg_mesh.gateway.ha."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

GATEWAYS = ("a", "b")
# An interface endpoint's Regional DNS name (AWS PrivateLink: vpce-<id>-<suffix>.<service>.<region>.vpce.amazonaws.com;
# docs/ha.md 5.5: the agents call EC2 there, private DNS being off)
EC2_ENDPOINT = re.compile(r"https://vpce-[0-9a-z-]{1,60}\.ec2\.[a-z0-9-]{1,30}\.vpce\.amazonaws\.com(\.cn)?")


@dataclass(frozen=True)
class HaConfig:
    """agent.json's `ha` object (wg_mesh.gateway.agent.load_config); /work/wt/HA.md is the contract."""

    cloud: str
    gateway: str
    health_port: int = 9181
    # aws
    region: str = ""
    lease_table: str = ""
    allocation_id: str = ""
    route_table_ids: tuple[str, ...] = ()
    ec2_endpoint: str = ""  # the EC2 interface endpoint's own URL (created networks); "": the regional name
    # gcp
    project: str = ""
    address: str = ""
    address_ip: str = ""
    backend_service: str = ""
    groups: tuple[tuple[str, str, str], ...] = ()  # (gateway, zone, name)

    @property
    def other(self) -> str:
        return "b" if self.gateway == "a" else "a"

    def group(self, gateway: str) -> tuple[str, str]:
        """(zone, name) of a gateway's instance group (GCP)."""
        return next((zone, name) for g, zone, name in self.groups if g == gateway)


def _text(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"ha.{key}: {value!r} is not a non-empty string")
    return value


def parse_ha(raw: object) -> HaConfig:
    """The `ha` object, checked; ValueError naming the field (`ha.<field>`)."""
    if not isinstance(raw, dict):
        raise ValueError("ha: not an object")
    cloud, gateway, port = raw.get("cloud"), raw.get("gateway"), raw.get("health_port", 9181)
    if cloud not in ("aws", "gcp"):
        raise ValueError(f"ha.cloud: {cloud!r} is not aws or gcp")
    if gateway not in GATEWAYS:
        raise ValueError(f"ha.gateway: {gateway!r} is not a or b")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError(f"ha.health_port: {port!r} is not 1..65535")
    if cloud == "aws":
        tables = raw.get("route_table_ids")
        if not isinstance(tables, list) or not all(isinstance(t, str) and t.startswith("rtb-") for t in tables):
            raise ValueError(f"ha.route_table_ids: {tables!r} is not a list of rtb- ids")
        allocation = _text(raw, "allocation_id")
        if not allocation.startswith("eipalloc-"):
            raise ValueError(f"ha.allocation_id: {allocation!r} is not an eipalloc- id")
        endpoint = raw.get("ec2_endpoint", "")
        if endpoint != "" and not (isinstance(endpoint, str) and EC2_ENDPOINT.fullmatch(endpoint)):
            raise ValueError(f"ha.ec2_endpoint: {endpoint!r} is not https://vpce-...ec2.<region>.vpce.amazonaws.com")
        return HaConfig(
            "aws", gateway, port, _text(raw, "region"), _text(raw, "lease_table"), allocation, tuple(tables), endpoint
        )
    groups = raw.get("groups")
    if not isinstance(groups, dict) or set(groups) != set(GATEWAYS):
        raise ValueError("ha.groups: not an object with exactly the keys a and b")
    parsed = []
    for g in GATEWAYS:
        group = groups[g]
        if not isinstance(group, dict):
            raise ValueError(f"ha.groups.{g}: not an object")
        for key in ("zone", "name"):
            if not isinstance(group.get(key), str) or not group[key]:
                raise ValueError(f"ha.groups.{g}.{key}: {group.get(key)!r} is not a non-empty string")
        parsed.append((g, group["zone"], group["name"]))
    return HaConfig(
        "gcp",
        gateway,
        port,
        region=_text(raw, "region"),
        project=_text(raw, "project"),
        address=_text(raw, "address"),
        address_ip=_text(raw, "address_ip"),
        backend_service=_text(raw, "backend_service"),
        groups=tuple(parsed),
    )


__all__ = ["EC2_ENDPOINT", "GATEWAYS", "HaConfig", "parse_ha"]
