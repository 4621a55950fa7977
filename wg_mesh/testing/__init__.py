"""Run a Pulumi program that uses wg-mesh under Pulumi's mocks (no engine, no cloud): for this repository's tests,
the example's test, and your own program's unit tests.

`RecordingMocks` records every resource (type, name, inputs, which inputs were secret), every invoke and every
component's registered outputs, and answers wg-mesh's invokes (AMI lookups, zone offerings, caller identity, ...)
with deterministic fake cloud values. In preview the mocks return no computed outputs, so they are unknown exactly
as in `pulumi preview`. `execute(run, program, config)` runs a program file in a fresh thread, event loop and
`contextvars.Context` (Pulumi keeps its runtime state in context variables), so runs cannot see each other; the
thread is joined with a timeout so that a deadlock (e.g. a deferred output that never resolves) is an error, not
a hang. Test-only: imports nothing a program needs at run time. The mocks themselves: wg_mesh.testing.mocks.
"""

from __future__ import annotations

import asyncio
import contextvars
import runpy
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.settings import get_project, get_root_resource, get_stack
from pulumi.runtime.stack import run_pulumi_func

from wg_mesh.testing import aliases
from wg_mesh.testing.mocks import (
    FAKE_PUBLIC_NET,
    FAKE_STAMP_BASE,
    NOT_OFFERED_TYPE,
    Call,
    Recorded,
    RecordingMocks,
    unwrap_secrets,
)

RUN_TIMEOUT_S = 60.0  # a run takes about a second; this only turns a deadlock into a failure

__all__ = [
    "FAKE_PUBLIC_NET",
    "FAKE_STAMP_BASE",
    "NOT_OFFERED_TYPE",
    "RUN_TIMEOUT_S",
    "Call",
    "Options",
    "ProgramRun",
    "Recorded",
    "RecordingMocks",
    "RecordingMonitor",
    "Resolved",
    "execute",
    "new_run",
    "unwrap_secrets",
]


@dataclass(frozen=True)
class Options:
    """The resource options of one registration, as the engine received them."""

    protect: bool
    retain_on_delete: bool
    delete_before_replace: bool
    ignore_changes: tuple[str, ...]
    dependencies: tuple[str, ...]  # URNs of explicit and implicit dependencies
    aliases: tuple[str, ...]  # the names of the aliases given (alias specs)
    replace_on_changes: tuple[str, ...] = ()  # the program's replace_on_changes ('metadata["user-data"]', ...)
    # input name -> the URNs its value came from (what a replaced dependency makes unknown in a preview)
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    replacement_trigger: Any = None  # the option's value (a change of it replaces the resource), None: not given


def _scalar(value: Any) -> Any:
    """A google.protobuf Value's plain value (a string, number or bool; a list or map as its protobuf text)."""
    kind = value.WhichOneof("kind")
    if kind in (None, "null_value"):
        return None
    found = getattr(value, kind)
    return found if isinstance(found, str | float | bool) else str(found)


class RecordingMonitor(MockMonitor):
    """Pulumi's mock monitor, also keeping each registration's options and each component's outputs.

    Given `olds` (the URNs of an earlier run: the stack's state, URN -> name), it finds the old resource each
    registration is as the engine does, following aliases (wg_mesh.testing.aliases): `aliased` maps the URN of each
    one found by an alias to its old URN, and the mocks answer it as they answered the old one (its id, address,
    key bytes: what a deployed resource keeps in its state)."""

    def __init__(self, mocks: RecordingMocks, olds: Mapping[str, str] | None = None) -> None:
        super().__init__(mocks)
        self.olds = dict(olds or {})
        self._seeds = mocks.seeds  # what the mocks answer a registration found by an alias with
        self.aliased: dict[str, str] = {}  # URN -> the old URN it was found by (an alias)
        self._taken: dict[str, str] = {}  # old URN -> the URN found by it
        self._root = ""  # the root stack's URN
        self._alias_lock = threading.Lock()
        self.component_outputs: dict[str, dict[str, Any]] = {}
        self.options: dict[tuple[str, str], Options] = {}  # (type, name) -> options
        self.replace_on_changes: dict[str, list[str]] = {}  # resource name -> its replace_on_changes
        self.urns: list[str] = []  # every registration's URN (type chain and name: what identifies it in a state)
        self.urn_of: dict[tuple[str, str], str] = {}  # (type, name) -> its URN

    def _find_old(self, request: Any) -> None:
        """The old resource this registration is (getOldResource); found by an alias: answered as that one was."""
        own = self.make_urn(request.parent, request.type, request.name)
        with self._alias_lock:
            if request.type == aliases.ROOT_STACK_TYPE:
                self._root = own
                return
            registration = (request.name, request.type, request.parent)
            candidates = aliases.alias_urns(
                get_stack(), get_project(), self._root, registration, request.aliases, self.aliased
            )
            was = aliases.old_resource(own, candidates, self.olds, self._taken)
            if was and was != own:
                self.aliased[own], self._taken[was] = was, own
                self._seeds[(request.type, request.name)] = aliases.urn_name(was)

    def RegisterResource(self, request: Any) -> Any:
        self._find_old(request)
        self.replace_on_changes[request.name] = list(request.replaceOnChanges)
        self.options[(request.type, request.name)] = Options(
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            delete_before_replace=bool(request.deleteBeforeReplace),
            ignore_changes=tuple(request.ignoreChanges),
            dependencies=tuple(
                {*request.dependencies, *(u for deps in request.propertyDependencies.values() for u in deps.urns)}
            ),
            aliases=tuple(alias.spec.name or alias.urn for alias in request.aliases),
            replace_on_changes=tuple(request.replaceOnChanges),
            property_dependencies={k: tuple(v.urns) for k, v in request.propertyDependencies.items()},
            replacement_trigger=_scalar(request.replacement_trigger)
            if request.HasField("replacement_trigger")
            else None,
        )
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        self.urns.append(str(response.urn))
        self.urn_of[(request.type, request.name)] = str(response.urn)
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        self.component_outputs[request.urn] = rpc.deserialize_properties(request.outputs, keep_unknowns=True)
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]


# --- a program run --------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """An Output's value as the run resolved it: known or not (a preview's computed values), secret or not."""

    value: Any  # None when unknown
    known: bool
    secret: bool


async def resolve(output: pulumi.Output[Any]) -> Resolved:
    known = await output.is_known()
    return Resolved(await output.future() if known else None, known, await output.is_secret())


@dataclass
class ProgramRun:
    """One run of a program: what the mocks recorded, the stack's exports, the program's module namespace."""

    preview: bool
    mocks: RecordingMocks
    monitor: RecordingMonitor
    error: BaseException | None = None
    exports: dict[str, Resolved] = field(default_factory=dict)
    namespace: dict[str, Any] = field(default_factory=dict)

    @property
    def resources(self) -> list[Recorded]:
        """Every resource registered, in registration order."""
        return self.mocks.resources

    def of_type(self, typ: str) -> list[Recorded]:
        """The resources of one type token (`aws:ec2/route:Route`)."""
        return [r for r in self.resources if r.type == typ]

    def named(self, typ: str, name: str) -> Recorded:
        """The one resource of this type and logical name (an AssertionError unless exactly one)."""
        found = [r for r in self.of_type(typ) if r.name == name]
        assert len(found) == 1, f"expected one {typ} named {name}, found {len(found)}"
        return found[0]

    def options(self, typ: str, name: str) -> Options:
        """The resource options its registration carried."""
        return self.monitor.options[(typ, name)]

    def depends_on(self, typ: str, name: str, on_type: str, on_name: str) -> bool:
        """Whether the registration of (typ, name) named (on_type, on_name) among its dependencies."""
        return any(
            urn.endswith(f"::{on_name}") and f"{on_type}::" in urn for urn in self.options(typ, name).dependencies
        )


Collect = Callable[[ProgramRun], Awaitable[None]]


def new_run(preview: bool, olds: Mapping[str, str] | None = None, prior: Sequence[Recorded] = ()) -> ProgramRun:
    """A run to `execute`; `olds`: an earlier run's URNs (URN -> name), the state whose resources aliases find;
    `prior`: that run's recorded resources, whose Commands this run updates (a counter counts on, a stamp keeps its
    moment) as `pulumi up` from that state would."""
    mocks = RecordingMocks(preview, prior)
    return ProgramRun(preview=preview, mocks=mocks, monitor=RecordingMonitor(mocks, olds))


Program = Path | Callable[[], object]  # a program file, or a function that is the program


def _run_in_this_thread(
    run: ProgramRun, program: Program, config: Mapping[str, str], project: str, stack: str, collect: Collect | None
) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        pulumi.runtime.set_all_config(dict(config))
        pulumi.runtime.set_mocks(run.mocks, project=project, stack=stack, preview=run.preview, monitor=run.monitor)

        def body() -> None:
            if isinstance(program, Path):
                run.namespace.update(runpy.run_path(str(program), run_name="__main__"))
            else:
                run.namespace["program"] = program()

        try:
            loop.run_until_complete(run_pulumi_func(body))
        except pulumi.RunError as exc:
            run.error = exc
            return
        loop.run_until_complete(_collect(run, collect))
    finally:
        _end_outstanding(loop)
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def _end_outstanding(loop: asyncio.AbstractEventLoop) -> None:
    """After a run that failed (a RunError while outputs resolve, say), Pulumi leaves the run's unfinished output tasks
    in `SETTINGS.outputs`, a set a later run in this process can still see (pulumi._utils.ContextProperty keeps the
    last value set as the default for new contexts) and wait on, on this loop once closed: "Event loop is closed" in
    whichever run came next. Cancel them, let them end, and empty the set."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    with pulumi_settings.SETTINGS.lock:
        pulumi_settings.SETTINGS.outputs.clear()


async def _collect(run: ProgramRun, collect: Collect | None) -> None:
    root = get_root_resource()
    assert root is not None
    for name, value in getattr(root, "outputs", {}).items():
        run.exports[name] = await resolve(pulumi.Output.from_input(value))
    if collect is not None:
        await collect(run)


def execute(
    run: ProgramRun,
    program: Program,
    config: Mapping[str, str],
    *,
    project: str,
    stack: str = "test",
    collect: Collect | None = None,
    timeout: float = RUN_TIMEOUT_S,
) -> ProgramRun:
    """Run the program (a file, or a function: its result is `run.namespace["program"]`) with this config
    (`{"project:key": "json or text"}`) into `run`. A RunError (an invalid
    config, say) is returned in `run.error`; anything else raises. `collect` resolves more outputs in the run's loop."""
    failure: list[BaseException] = []

    def work() -> None:
        try:
            _run_in_this_thread(run, program, config, project, stack, collect)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    context = contextvars.Context()  # fresh Pulumi runtime state: no root stack, no config, no settings
    thread = threading.Thread(target=context.run, args=(work,), name=f"pulumi-program-{stack}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"the program did not finish within {timeout:.0f}s (deferred output deadlock?)")
    if failure:
        raise failure[0]
    return run
