"""Running the Pulumi program (`__main__.py`) under Pulumi's mocks (wg_mesh.testing).

`run_program(raw, preview=...)` runs the real `__main__.py` with `wg-mesh:mesh` set to `raw`, against
wg_mesh.testing's mocks, which record every resource (type, name, inputs, which inputs were secret), every invoke and
every component's registered outputs, and answer with deterministic fake cloud values. In preview the mocks return
no computed outputs, so they are unknown exactly as in `pulumi preview`. Each run gets a fresh thread, event loop and
`contextvars.Context`, joined with a timeout (a deadlock fails the test instead of hanging it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.stacks import STACK_FILES
from wg_mesh.mesh import Mesh
from wg_mesh.plan import ha, live
from wg_mesh.testing import (
    FAKE_PUBLIC_NET,
    NOT_OFFERED_TYPE,
    RUN_TIMEOUT_S,
    Call,
    Options,
    Recorded,
    RecordingMocks,
    RecordingMonitor,
    Resolved,
    execute,
    resolve,
    unwrap_secrets,
)
from wg_mesh.testing import ProgramRun as _Run
from wg_mesh.tools import serial
from wg_mesh.tools.stackfile import read_raw

PROJECT = "wg-mesh"  # the Pulumi project run_program gives the program

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "__main__.py"
NOW = time.time()  # the programs' clock (wg_mesh.tools.serial.now: documents' expiry), frozen for this process

__all__ = [
    "FAKE_PUBLIC_NET",
    "NOT_OFFERED_TYPE",
    "Call",
    "Options",
    "Recorded",
    "RecordingMocks",
    "Resolved",
    "unwrap_secrets",
]


@dataclass(frozen=True)
class SiteValues:
    """A site component's outputs, resolved."""

    cloud: str
    public_ip: Resolved
    overlay_ip: Resolved
    public_key: Resolved
    private_key: Resolved
    wg_config: Resolved
    user_data: Resolved


@dataclass
class ProgramRun(_Run):
    """A run of this repository's `__main__.py`: the raw `wg-mesh:mesh` it got and its sites' outputs, resolved."""

    raw: Any = None
    sites: dict[str, SiteValues] = field(default_factory=dict)
    stack: str = "test"
    signing_seed: Resolved | None = None  # delivery: live: the Mesh's SigningKey.seed (base64), resolved
    verify_key: Resolved | None = None  # and its verify_key

    def vm(self, typ: str, prefix: str) -> Recorded:
        """Gateway instance `prefix` (a site's name; `<site>-b` for its standby): `<prefix>-instance`, or with
        `gateways: 2` on GCP, the name with the stack's scope (wg_mesh.plan.ha.vm_name)."""
        names = {f"{prefix}-instance", ha.vm_name(prefix, live.scope(PROJECT, self.stack))}
        (found,) = [r for r in self.of_type(typ) if r.name in names]
        return found

    def private_keys(self) -> list[str]:
        keys = [s.private_key.value for s in self.sites.values()]
        assert all(isinstance(k, str) and k for k in keys), "private keys are not all known"
        return keys


async def _collect_sites(run: _Run) -> None:
    assert isinstance(run, ProgramRun)
    meshes = [v for v in run.namespace.values() if isinstance(v, Mesh)]
    assert len(meshes) == 1, "__main__.py should build exactly one Mesh"
    if meshes[0].signing_key is not None:
        run.signing_seed = await resolve(meshes[0].signing_key.seed)
        run.verify_key = await resolve(meshes[0].signing_key.verify_key)
    for site in meshes[0].config.sites:
        component = meshes[0].sites[site.name]
        run.sites[site.name] = SiteValues(
            cloud=site.cloud,
            public_ip=await resolve(component.public_ip),
            overlay_ip=await resolve(component.overlay_ip),
            public_key=await resolve(component.public_key),
            private_key=await resolve(component.key.private_key),
            wg_config=await resolve(component.wg_config),
            user_data=await resolve(component.user_data),
        )


def run_program(
    raw: Any, *, preview: bool, stack: str = "test", prior: ProgramRun | None = None, untouched: Collection[str] = ()
) -> ProgramRun:
    """Run __main__.py with `wg-mesh:mesh` = raw. A RunError is returned in `.error`; anything else raises. `prior`:
    the run whose state this one starts from (its Commands are updated, RecordingMocks); `untouched`: Commands a
    `pulumi up --target` leaves out."""
    mocks = RecordingMocks(preview, prior.mocks.resources if prior is not None else (), untouched)
    serial.now = lambda: NOW  # one renewal period for every run of this process: documents' bytes are comparable
    run = ProgramRun(preview=preview, mocks=mocks, monitor=RecordingMonitor(mocks), raw=raw, stack=stack)
    try:
        execute(
            run,
            PROGRAM,
            {"wg-mesh:mesh": json.dumps(raw)},
            project=PROJECT,
            stack=stack,
            collect=_collect_sites,
            timeout=RUN_TIMEOUT_S,
        )
    except TimeoutError as exc:
        pytest.fail(str(exc))
    return run


assert STACK_FILES, "no Pulumi.*.yaml stack files found"

# The lab's longest single tests (seconds in CI runs), collected first so that its two workers end together: with no
# xdist groups (pytest 9.2 ignores them, pytest-xdist#1386; no lab test needs one), `--dist loadgroup` hands out one
# test at a time in collection order, each worker queueing up to three; the path-MTU drill, collected late, ran last,
# alone, while the other worker idled. Only the order changes.
LAB_LONGEST_FIRST = (
    "tests/test_lab_pmtu_drill.py::test_the_pmtu_drill_on_the_prod_stack",  # 147
    "tests/test_lab_ha_drill.py::test_the_ha_drill_on_the_gcp_pair_shortened",  # 87-127
    "tests/test_lab_ha_drill.py::test_the_ha_drill_on_the_aws_pair_shortened",  # 86-88
    "tests/test_lab_dynamic.py::",  # 54-69 each
    "tests/test_lab_roam_drill.py::",  # 37-42; 40-47 here (39 before) with its DNS-named branch
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, p in enumerate(LAB_LONGEST_FIRST) if item.nodeid.startswith(p)), len(LAB_LONGEST_FIRST))

    items.sort(key=rank)  # stable: everything else keeps its order


def _stack_name(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


@pytest.fixture(scope="session", params=STACK_FILES, ids=[p.name for p in STACK_FILES])
def applied(request: pytest.FixtureRequest) -> ProgramRun:
    """Each stack file's `pulumi up`, under mocks: one run per stack file and test process (an xdist worker), shared
    by every module that asks (a whole-program run costs seconds; 8 modules used to run their own). Read it only."""
    run = run_program(read_raw(request.param), preview=False, stack=_stack_name(request.param))
    assert run.error is None, run.error
    return run


def with_delivery(raw: Any, delivery: str) -> Any:
    """A copy of a stack's raw config with `delivery` forced (every stack file runs in both modes somewhere). Forced to
    user-data, HA sites (`gateways: 2`, which needs live delivery) run as single-gateway sites."""
    if delivery == "live":
        return {**raw, "delivery": delivery}
    ha_keys = ("gateways", "standby_zone", "standby_subnet_id")
    sites = [{k: v for k, v in site.items() if k not in ha_keys} for site in raw.get("sites", [])]
    return {**raw, "delivery": delivery, "sites": sites}


@pytest.fixture(scope="session", params=STACK_FILES, ids=[p.name for p in STACK_FILES])
def applied_user_data(request: pytest.FixtureRequest) -> ProgramRun:
    """Each stack file's `pulumi up` with `delivery: user-data` (wg0.conf in the user data), under mocks."""
    raw = with_delivery(read_raw(request.param), "user-data")
    run = run_program(raw, preview=False, stack=_stack_name(request.param))
    assert run.error is None, run.error
    return run


@pytest.fixture(scope="session", params=STACK_FILES, ids=[p.name for p in STACK_FILES])
def previewed(request: pytest.FixtureRequest) -> ProgramRun:
    """Each stack file's `pulumi preview`, under mocks: addresses, ids and keys are unknown."""
    run = run_program(read_raw(request.param), preview=True, stack=_stack_name(request.param))
    assert run.error is None, run.error
    return run


def pytest_configure(config: pytest.Config) -> None:
    # The SDKs warn about their own deprecated resources when their modules load; not ours to fix.
    config.addinivalue_line("filterwarnings", r"ignore::DeprecationWarning:pulumi_(aws|gcp)\.")


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """A real AWS API emulator (moto in server mode) on loopback for one test module; its endpoint URL."""
    from bench.motolocal import moto_server

    with moto_server() as url:
        yield url
