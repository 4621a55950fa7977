"""What a gateway is shipped, for the tests that check all of it (the units' sandbox, shellcheck): every site of every
stack file in the repository (Pulumi.*.yaml, examples/), its user data rendered as `pulumi up` renders it (the
clouds' last steps included), with the lab's stand-in addresses and keys."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

from tests.stacks import example_stack_files, stack_files
from wg_mesh.lab.fabric.plan import LabKeys, plan_lab
from wg_mesh.plan import live, render, topology, userdata
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent
STACK_FILES = (*stack_files(), *example_stack_files())
PREFIX = "wgl0b0b"


@cache
def user_data(stack_file: Path) -> dict[str, str]:
    """site -> its `#cloud-config` text."""
    cfg = load(stack_file)
    plan = plan_lab(cfg, PREFIX)
    keys = LabKeys.generate(cfg)
    directory = plan.directory(dict(keys.public))
    out = {}
    for site in cfg.sites:
        if cfg.delivery == "live":
            source = live.agent_source(site, "wg-mesh", "stack")
            trust = userdata.estimate_trust(cfg, site, "wg-mesh", "stack")
            out[site.name] = userdata.render_live_user_data(cfg, site.name, source, trust=trust)
        else:
            conf = render.wg_quick_conf(topology.interface_plan(cfg, site.name, directory), keys.private[site.name])
            out[site.name] = userdata.render_user_data(cfg, site.name, conf, directory)
    return out


def cloud_config(stack_file: Path, site: str) -> dict[str, object]:
    doc = yaml.safe_load(user_data(stack_file)[site])
    assert isinstance(doc, dict)
    return doc


def cases() -> list[tuple[Path, str]]:
    return [(path, site.name) for path in STACK_FILES for site in load(path).sites]


def case_id(case: tuple[Path, str]) -> str:
    return f"{case[0].name}-{case[1]}"
