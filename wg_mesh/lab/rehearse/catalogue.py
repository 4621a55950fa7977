"""The changes a platform team makes to a running mesh, as pairs of stack configs: "What a change does" in
docs/concepts/replacements.md, row by row, for a given stack. Pure: a stack's raw config (its `wg-mesh:mesh` value) in,
(name, before, after) out; `python -m bench changes` rehearses each (run.py) and docs/benchmarks.md tabulates them.

Each change is made on the first site it applies to (the first AWS site for an AWS instance type, ...); a change the
stack cannot take (no static site to move to `endpoint: dynamic`, no live delivery for a signing key) is left out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Raw = dict[str, Any]
BIGGER = {"aws": "c6i.4xlarge", "gcp": "n2-standard-16"}
IMAGES = {"aws": "ami-0123456789abcdef0", "gcp": "ubuntu-os-cloud/ubuntu-2404-noble-amd64-v20251001"}
ADDED: dict[str, Any] = {"name": "vps-new", "cloud": "static", "endpoint": "203.0.113.50", "cidrs": ["10.60.0.0/24"]}


@dataclass(frozen=True)
class Change:
    name: str  # the row of "What a change does"
    before: Raw
    after: Raw
    site: str | None = None  # the site it is made on


def _first(raw: Raw, test: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    return next((s for s in raw["sites"] if test(s)), None)


def _free_overlay(raw: Raw) -> str:
    used = {s.get("overlay_ip") for s in raw["sites"]}
    base = raw["overlay_cidr"].split("/")[0].rsplit(".", 1)[0]
    return next(f"{base}.{i}" for i in range(200, 250) if f"{base}.{i}" not in used)


def _edited(raw: Raw, site: str | None, **values: Any) -> Raw:
    """`raw` with `values` set on the named site (None: on the mesh); a value that is a function gets the old one."""
    out = copy.deepcopy(raw)
    target = out if site is None else next(s for s in out["sites"] if s["name"] == site)
    for key, value in values.items():
        target[key] = value(target.get(key)) if callable(value) else value
    return out


def renamed(raw: Raw, old: str, new: str) -> Raw:
    """The site `old` renamed `new` with `old` in its previous_names, and every mention of it (the relay, private
    paths' members) following."""
    out = _edited(raw, old, name=new, previous_names=[old])
    if out.get("relay") == old:
        out["relay"] = new
    for path in out.get("private_paths") or []:
        path["sites"] = [new if s == old else s for s in path["sites"]]
    return out


def _bump(value: int | None) -> int:
    return (value or 0) + 1


def changes(raw: Raw) -> Iterator[Change]:
    """Every row of the catalogue the stack can take."""
    added = {**ADDED, "overlay_ip": _free_overlay(raw)}
    grown = {**copy.deepcopy(raw), "sites": [*copy.deepcopy(raw["sites"]), added]}
    yield Change("site added", raw, grown, added["name"])
    yield Change("site removed", grown, raw, added["name"])
    cloud = _first(raw, lambda s: s["cloud"] in ("aws", "gcp"))
    if cloud is not None:
        name = str(cloud["name"])
        yield Change("a site's key rotated", raw, _edited(raw, name, key_epoch=_bump), name)
        yield Change("site renamed", raw, renamed(raw, name, f"{name}-new"), name)
    if raw.get("delivery") == "live":
        yield Change("signing key rotated", raw, _edited(raw, None, signing_key_epoch=_bump))
    for kind in ("aws", "gcp"):
        site = _first(raw, lambda s, kind=kind: s["cloud"] == kind and s.get("gateways", 1) == 1)  # type: ignore[misc]
        if site is not None:
            name = str(site["name"])
            yield Change(f"instance type ({kind})", raw, _edited(raw, name, instance_type=BIGGER[kind]), name)
            yield Change(f"image pinned ({kind})", raw, _edited(raw, name, image=IMAGES[kind]), name)
    if raw.get("private_paths"):
        direct = {**copy.deepcopy(raw), "private_paths": []}
        yield Change("private path on", direct, raw)
        yield Change("private path off", raw, direct)
    static = _first(raw, lambda s: s["cloud"] == "static" and s.get("endpoint") != "dynamic" and bool(s.get("cidrs")))
    if static is not None:
        name = static["name"]
        yield Change("moved to endpoint: dynamic", raw, _edited(raw, name, endpoint="dynamic"), name)
    dynamic = _first(raw, lambda s: s["cloud"] == "static" and s.get("endpoint") == "dynamic")
    if dynamic is not None:
        name = dynamic["name"]
        yield Change("endpoint_ranges set", raw, _edited(raw, name, endpoint_ranges=["203.0.113.0/24"]), name)
