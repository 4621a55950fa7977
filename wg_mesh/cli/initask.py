"""`wg-mesh init`'s questions, in a terminal: each answer checked when it is given, asked again until it is right.

Each site is checked as it is given, with the sites before it, exactly as `wg-mesh validate` would read them (a
region, an address, an overlap with an earlier site): a problem of this answer is printed and the same question asked
again; every earlier answer is kept. A problem that a later site can still fix (two `endpoint: dynamic` sites and no
cloud site yet to relay them) waits for the end of the list. At the end the whole mesh is checked; a problem left
(fewer than two sites, say) is printed and another site asked for. If the input ends or is interrupted first,
nothing is written and every answer given is printed as the one `wg-mesh init` command that gives them again.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from wg_mesh.cli import initsize, initspec
from wg_mesh.config import ConfigError
from wg_mesh.config import relay as relaying
from wg_mesh.plan.validate import load_mesh

Read = Callable[[str], str]
_SITE_REF = re.compile(r"sites\[(\d+)\](?: \([^)]*\))?")  # `sites[2]`, or `sites[2] (office)` once messages name it

EXISTING = {  # per cloud: the questions for an existing network, as (key, question, a list?)
    "aws": (
        ("vpc_id", "existing VPC id (empty: wg-mesh creates the VPC)", False),
        ("subnet_id", "its public subnet for the gateway (subnet-...)", False),
        ("route_table_ids", "the route tables that get routes to the other sites (rtb-..., comma-separated)", True),
    ),
    "gcp": (
        ("network", "existing network, name or self link (empty: wg-mesh creates the network)", False),
        ("subnetwork", "its subnetwork for the gateway, name or self link", False),
    ),
}


@dataclass
class Answers:
    """Everything typed so far, as `wg-mesh init`'s flags: nothing is lost when a later answer is refused."""

    stack: str
    overlay_cidr: str
    gcp_project: str | None
    specs: list[str] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)

    def command(self) -> str:
        """The one command that gives these answers again."""
        argv = ["wg-mesh", "init", "--stack", self.stack]
        if self.overlay_cidr != initspec.DEFAULT_OVERLAY:
            argv += ["--overlay-cidr", self.overlay_cidr]
        if self.gcp_project is not None:
            argv += ["--gcp-project", self.gcp_project]
        argv += [f"--site={spec}" for spec in self.specs] + [f"--set={text}" for text in self.sets]
        return shlex.join(argv)


def _normal(problem: str) -> str:
    return _SITE_REF.sub(lambda m: f"sites[{m.group(1)}]", problem)


def _names_site(problem: str, index: int) -> bool:
    return any(int(m.group(1)) == index for m in _SITE_REF.finditer(problem))


def _later(sites: Sequence[dict[str, Any]]) -> set[str]:
    """The problems a site still to come can fix: two dynamic sites wait for a cloud site to relay them."""
    if any(site["cloud"] in relaying.CLOUDS for site in sites):
        return set()
    parsed = [SimpleNamespace(**{"cidrs": [], "endpoint": None, **site}) for site in sites]
    return {_normal(problem) for problem in relaying.problems(parsed, None)}


def site_problems(answers: Answers, specs: Sequence[str], sets: Sequence[str]) -> list[str]:
    """The problems of the last site in `specs` (with the sites before it and the --set values so far), as
    `validate` words them; [] when it is right as far as the sites so far can tell."""
    try:
        mesh = initspec.mesh_dict(specs, answers.overlay_cidr, answers.gcp_project, sets)
    except ConfigError as exc:  # more sites than --overlay-cidr has addresses
        return exc.problems
    try:
        load_mesh(mesh)
    except ConfigError as exc:
        index, later = len(specs) - 1, _later(mesh["sites"])
        return [p for p in exc.problems if _names_site(p, index) and _normal(p) not in later]
    return []


def _say(problems: Sequence[str]) -> None:
    print(*problems, sep="\n")


def _ask_spec(read: Read, answers: Answers) -> str | None:
    """A site's NAME:CLOUD:WHERE[:CIDRS], asked until it parses and the model takes it; None: the list is done."""
    number = len(answers.specs) + 1
    while True:
        spec = read(f"site {number} (empty to finish): ").strip()
        if not spec:
            return None
        try:
            cloud = initspec.parse_site(spec, "0.0.0.0", "-")["cloud"]  # the form only: addresses and project later
        except ConfigError as exc:
            _say(exc.problems)
            continue
        if cloud == "gcp" and answers.gcp_project is None:
            answers.gcp_project = _ask_project(read, answers, spec)
        problems = site_problems(answers, [*answers.specs, spec], answers.sets)
        if not problems:
            return spec
        _say(problems)


def _ask_project(read: Read, answers: Answers, spec: str) -> str:
    """The GCP project, asked at the first GCP site and checked as that site's `project`."""
    while True:
        project = read("GCP project for the GCP sites: ").strip()
        trial = Answers(answers.stack, answers.overlay_cidr, project or "-", [*answers.specs, spec], answers.sets)
        problems = [p for p in site_problems(trial, trial.specs, trial.sets) if ".project" in p] if project else []
        if project and not problems:
            return project
        _say(problems or ["a GCP site needs the project it is created in"])


def _ask_network(read: Read, answers: Answers, name: str, cloud: str) -> list[str]:
    """A cloud site's existing network as --set values ([]: wg-mesh creates one), asked until the model takes
    them (an existing network is all of its ids or none)."""
    while True:
        sets: list[str] = []
        for key, question, listed in EXISTING.get(cloud, ()):
            answer = read(f"  {name}: {question}: ").strip()
            if not answer:
                break  # a new network: no more questions (the model wants all of an existing network's ids or none)
            sets.append(f"{name}.{key}={f'[{answer}]' if listed else answer}")
        problems = site_problems(answers, answers.specs, [*answers.sets, *sets])
        if not problems:
            return sets
        _say(problems)


def _ask_size(read: Read, answers: Answers, site: dict[str, Any]) -> list[str]:
    """A cloud site's gateway size from the priced choices (or any type typed in), asked until the model takes it."""
    menu = initsize.menu(site["cloud"], site["region"])
    print(menu.text(site["name"]))
    while True:
        chosen = menu.pick(read(f"  {site['name']}: gateway size [1]: ").strip())
        if chosen is None:
            _say([f"  a number from 1 to {len(menu.choices)}, or an instance type"])
            continue
        sets = [] if chosen == menu.default else [f"{site['name']}.instance_type={chosen}"]
        problems = site_problems(answers, answers.specs, [*answers.sets, *sets])
        if not problems:
            return sets
        _say(problems)


def ask(read: Read, answers: Answers) -> None:
    """The sites, one at a time (an empty answer ends the list once the mesh is whole), each cloud site's network
    and gateway size; into `answers` as they are given. ConfigError printing the answers as a command if the input
    ends first."""
    print(f"Sites, one a line as {initspec.SPEC}; WHERE is an AWS region, a GCP zone, a static site's public IPv4 or")
    print("dynamic. Each answer is checked when it is given; a wrong one is said and asked again.")
    try:
        while True:
            spec = _ask_spec(read, answers)
            if spec is None:
                problems = whole_problems(answers)
                if not problems:
                    return
                _say([*problems, "add a site (or end the input: your answers are printed as a command)"])
                continue
            answers.specs.append(spec)
            site = initspec.mesh_dict(answers.specs, answers.overlay_cidr, answers.gcp_project, ())["sites"][-1]
            if site["cloud"] in EXISTING:
                answers.sets += _ask_network(read, answers, site["name"], site["cloud"])
                answers.sets += _ask_size(read, answers, site)
    except (EOFError, KeyboardInterrupt):
        raise ConfigError(
            [f"init: the input ended before the mesh was whole; nothing written. Your answers: {answers.command()}"]
        ) from None


def whole_problems(answers: Answers) -> list[str]:
    try:
        load_mesh(initspec.mesh_dict(answers.specs, answers.overlay_cidr, answers.gcp_project, answers.sets))
    except ConfigError as exc:
        return exc.problems
    return []
