"""Property-based: whatever the input, `load_mesh` gives a config that renders, or field-prefixed one-line problems.

Starting from a valid mesh, hypothesis replaces or adds values anywhere (wrong types, YAML booleans, names with
newlines, special-purpose and huge prefixes, nested junk); no input may escape as another exception."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_config import base
from wg_mesh.config import ConfigError
from wg_mesh.plan import render, topology
from wg_mesh.plan.topology import PeerAddress
from wg_mesh.plan.validate import load_mesh

PROBLEM = re.compile(r"^(\(top level\)|\(more\)|[A-Za-z_][\w\-\[\]\.]*): \S.*$")
KEYS = [
    "overlay_cidr", "listen_port", "mtu", "persistent_keepalive", "masquerade", "monitoring_cidrs", "exporter_port",
    "name", "cloud", "region", "zone", "overlay_ip", "cidrs", "endpoint", "key_epoch", "underlay_mtu",
    "instance_type", "project", "vpc_id", "subnet_id", "route_table_ids", "network", "subnetwork", "sites",
]  # fmt: skip
SCALARS = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.sampled_from(
        [
            "auto", "yes", "10.0.0.0/8", "0.0.0.0/0", "0.0.0.0/1", "169.254.169.254", "169.254.0.0/16", "127.0.0.1",
            "224.0.0.0/4", "255.255.255.255", "10.200.0.0/24", "10.200.0.7", "203.0.113.7", "203.0.113.0/24",
            "us-east-1a", "use1-az1", "europe-west3-a", "aws", "gcp", "static", "c6i.2xlarge", "rtb-0a1b2c3d",
            "x\nsites[0].name: forged", "aws-use1 ", "\x00", "\u2028", "é" * 100,
        ]
    ),
    st.text(max_size=30),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=12,
)


def _sites(raw: Any) -> list[dict[str, Any]]:
    sites = raw.get("sites")
    return [s for s in sites if isinstance(s, dict)] if isinstance(sites, list) else []


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    raw: Any = copy.deepcopy(base())
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        sites = _sites(raw)
        target = draw(st.sampled_from(sites)) if sites and draw(st.booleans()) else raw
        target[draw(st.sampled_from(KEYS))] = draw(VALUES)
    return raw


def directory_for(cfg: Any) -> dict[str, PeerAddress]:
    return {s.name: PeerAddress(f"198.51.100.{i + 1}", f"key{i}=") for i, s in enumerate(cfg.sites)}


@given(mutated())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_input_renders_or_gives_one_line_field_problems(raw: Any) -> None:
    try:
        cfg = load_mesh(raw)
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert "\n" not in problem and "\r" not in problem and len(problem) <= 400, problem
            assert PROBLEM.match(problem), problem
        return
    directory = directory_for(cfg)
    for site in cfg.sites:
        plan = topology.interface_plan(cfg, site.name, directory)
        conf = render.wg_quick_conf(plan, "cHJpdmF0ZQ==")
        assert render.cloud_config(conf).startswith("#cloud-config\n")
        assert 1280 <= plan.mtu <= 8920


YAML_PIECES = st.sampled_from(
    ["config:\n", "  wg-mesh:mesh:\n", "    sites: ", "[", "]", "{", "}", "&a ", "*a ", "*b ", "- ", "x: ", "x: 1\n",
     "<<: *a\n", "!!python/object:os.system ", "\t", "\x00", "\ufeff", "'", '"', "\n", "  ", "yes", "? ", ": "]
)  # fmt: skip


@given(st.lists(YAML_PIECES | st.text(max_size=5), max_size=40))
@settings(max_examples=300, deadline=None)
def test_any_stack_file_text_gives_a_value_or_one_line_problems(parts: list[str]) -> None:
    from pathlib import Path

    from wg_mesh.tools.stackfile import parse

    try:
        parse("".join(parts), Path("Pulumi.fuzz.yaml"))
    except ConfigError as exc:
        assert exc.problems, exc
        for problem in exc.problems:  # YAML keys can be anything: the field is whatever precedes the first ": "
            assert "\n" not in problem and ": " in problem and not problem.startswith(": "), problem
