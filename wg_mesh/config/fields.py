"""The config's field types, with messages a human can act on: CIDRs, addresses, ports, patterns.

Part of the config model (wg_mesh.config.sites builds the site models from them); pure, no Pulumi.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from wg_mesh.config import addressing
from wg_mesh.config.messages import quote


def parse_network(value: Any) -> Any:
    if isinstance(value, IPv4Network):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected an IPv4 CIDR such as 10.10.0.0/16, got {quote(value)}")
    shown = value if value and value.isprintable() and " " not in value and len(value) <= 60 else quote(value)
    if "/" not in value:
        raise ValueError(f"{shown} has no prefix length (write it as a CIDR, e.g. {shown}/16)")
    try:
        return IPv4Network(value, strict=True)
    except ValueError as exc:
        try:
            loose = IPv4Network(value, strict=False)
        except ValueError:
            raise ValueError(f"{shown} is not an IPv4 CIDR ({quote(str(exc))})") from None
        raise ValueError(f"{value} has host bits set (did you mean {loose}?)") from None


def parse_address(value: Any) -> Any:
    if isinstance(value, IPv4Address):
        return value
    try:
        return IPv4Address(str(value))
    except ValueError:
        raise ValueError(f"{quote(value)} is not an IPv4 address") from None


Cidr = Annotated[IPv4Network, BeforeValidator(parse_network)]
Address = Annotated[IPv4Address, BeforeValidator(parse_address)]
Port = Annotated[int, Field(ge=1, le=65535)]


def _not_the_internet(net: IPv4Network) -> IPv4Network:
    if net.prefixlen == 0:
        raise ValueError(
            f"{net} would open node-exporter (no authentication, no TLS) to the whole internet; "
            "list the networks of your Prometheus servers instead"
        )
    return net


def _usable(net: IPv4Network) -> IPv4Network:
    problem = addressing.cidr_problem(net)
    if problem is not None:
        raise ValueError(problem)
    return net


def _reachable(ip: IPv4Address) -> IPv4Address:
    problem = addressing.endpoint_problem(ip)
    if problem is not None:
        raise ValueError(problem)
    return ip


MonitoringCidr = Annotated[
    IPv4Network, BeforeValidator(parse_network), AfterValidator(_not_the_internet), AfterValidator(_usable)
]
# A site's network or the overlay: routed by every gateway, so no special-purpose range and not half the internet.
UsableCidr = Annotated[IPv4Network, BeforeValidator(parse_network), AfterValidator(_usable)]
Endpoint = Annotated[IPv4Address, BeforeValidator(parse_address), AfterValidator(_reachable)]


def pattern(regex: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"{quote(value)} is not {what}")
        return value

    return AfterValidator(check)
