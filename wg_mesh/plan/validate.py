"""Loading a mesh config for use: the model's fields and rules, then the limits a `pulumi up` would cross.

The model (wg_mesh.config) imports nothing above it, so it cannot render; whether each gateway's user data (or, live,
peer document) fits its cloud's limit needs rendering (wg_mesh.plan.userdata.size_problems), and so does whether an AWS
gateway role's inline policies fit IAM's (wg_mesh.plan.awsiam.policy_problems); both are checked here, together with
the clouds' quotas. Every caller that loads a config to deploy, validate or run it (the component's
MeshArgs, the stack file of `python -m wg_mesh validate` and the program, the lab, the benchmarks) loads it through
`load_mesh`.
"""

from __future__ import annotations

from typing import Any

from wg_mesh.config import ConfigError, MeshConfig, quotas
from wg_mesh.config.model import parse_mesh
from wg_mesh.plan import awsiam
from wg_mesh.plan.userdata import ESTIMATE_PROJECT, ESTIMATE_STACK, size_problems


def load_mesh(
    raw: Any, *, check_limits: bool = True, project: str = ESTIMATE_PROJECT, stack: str = ESTIMATE_STACK
) -> MeshConfig:
    """Validate the raw `wg-mesh:mesh` value; raise ConfigError listing every problem.

    check_limits: also refuse a mesh that crosses the clouds' quotas (wg_mesh.config.quotas) or whose gateways' user
    data or IAM policies would not fit their limits (the benchmarks turn it off to chart sizes past them). project,
    stack: the Pulumi project and stack the names in those policies carry (the program's own; elsewhere an estimate,
    wg_mesh.plan.userdata's)."""
    cfg = parse_mesh(raw, check_limits=check_limits)
    if check_limits and (
        limits := quotas.problems(cfg) + size_problems(cfg) + awsiam.policy_problems(cfg, project, stack)
    ):
        raise ConfigError(limits)
    return cfg
