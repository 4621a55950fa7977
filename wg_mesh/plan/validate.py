"""Loading a mesh config for use: the model's fields and rules, then the limits a `pulumi up` would cross.

The model (wg_mesh.config) imports nothing above it, so it cannot render; whether each gateway's user data (or, live,
peer document) fits its cloud's limit needs rendering (wg_mesh.plan.userdata.size_problems), and is checked here,
together with the clouds' quotas. Every caller that loads a config to deploy, validate or run it (the component's
MeshArgs, the stack file of `python -m wg_mesh validate` and the program, the lab, the benchmarks) loads it through
`load_mesh`.
"""

from __future__ import annotations

from typing import Any

from wg_mesh.config import ConfigError, MeshConfig, quotas
from wg_mesh.config.model import parse_mesh
from wg_mesh.plan.userdata import size_problems


def load_mesh(raw: Any, *, check_limits: bool = True) -> MeshConfig:
    """Validate the raw `wg-mesh:mesh` value; raise ConfigError listing every problem.

    check_limits: also refuse a mesh that crosses the clouds' quotas (wg_mesh.config.quotas) or whose gateways' user
    data would not fit their limits (the benchmarks turn it off to chart sizes past them)."""
    cfg = parse_mesh(raw, check_limits=check_limits)
    if check_limits and (limits := quotas.problems(cfg) + size_problems(cfg)):
        raise ConfigError(limits)
    return cfg
