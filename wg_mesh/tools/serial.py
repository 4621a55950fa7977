"""Document serials and floors, the program's side (docs/security.md, "Freshness").

A site's document serial is a counter kept in the stack's state, never a clock reading: the `<site>-serial` Command
(wg_mesh.tools.localcmd) prints `SERIAL DIGEST`, DIGEST being the SHA-256 of the document's content without its
serial (wg_mesh.plan.live.unsigned_digest). The digest is the Command's `environment`, not a trigger, so a change of
content is an *update*: pulumi-command runs `update` with the previous output in `PULUMI_COMMAND_STDOUT`, and
`update` prints the previous serial plus one with the new digest (the same serial when the digest is the one it
recorded: a new wg-mesh's command text renews nothing). Created, it prints 1. No deployer clock, no Python.

Why the recorded digest: the serial and the content it was counted for come out of one resource, so a document is
signed only with a serial counted for its own content. `pulumi up --target` on a document's store leaves the
`-serial` Command out (its state still records the old content): the program then stops with a message naming the
fix, instead of shipping new content under the old content's serial, which every agent refuses (issue 32, item 6).
In a preview the Command has not run yet: the serial it will print is predicted (one more, or 1).

Stacks from before counters: the `-serial` Command then held a stamp (the Unix time of the content's last change,
~1.7e9) and `triggers: [digest]`. `ignore_changes=["triggers"]` keeps that trigger in the state (a changed trigger
would replace the Command and restart the count at 1), so the first `pulumi up` updates it: the counter carries on
from the stamp plus one, which agents of that age accept (their rule: not below the running serial and at most a day
ahead of their clock; a counter stays behind the clock for as long as documents change less than once a second).

The floor a gateway is built with: `floor_pin` (`<gateway>-floor`) prints the site's serial when it is created and
keeps printing it (`update` keeps the previous output); it is replaced, and prints the serial of that moment, only
when the rest of the gateway's user data changes, which replaces the gateway anyway. agent.json's `trust.floor` is
that pin: a new gateway applies no document older than the one current when it was made, and the user data stays the
same when the mesh changes (docs/concepts/delivery.md).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence

import pulumi

from wg_mesh.tools import localcmd

CONTENT_ENV = "WG_MESH_CONTENT"
SERIAL_ENV = "WG_MESH_SERIAL"
COUNTER_CREATE = f'printf "1 %s\\n" "${CONTENT_ENV}"'
# `set -f`: no globbing of the split words. The previous output is "SERIAL DIGEST", or a stamp before counters.
COUNTER_UPDATE = f"""set -f
set -- ${{PULUMI_COMMAND_STDOUT:-}}
case ${{1:-}} in ''|*[!0-9]*) echo "wg-mesh: the previous serial is not a number: '${{1:-}}'" >&2; exit 1;; esac
if [ "${{2:-}}" = "${CONTENT_ENV}" ]; then printf "%s %s\\n" "$1" "$2"
else printf "%s %s\\n" "$(($1 + 1))" "${CONTENT_ENV}"; fi"""
PIN_CREATE = f'printf "%s\\n" "${SERIAL_ENV}"'
MAX_SERIAL = 2**53  # the agent's bound (wg_mesh.gateway.document.MAX_SERIAL)
# The one clock the program reads for documents: their expiry (wg_mesh.plan.live.expires), never their serial. Tests
# set it (a document's bytes depend on the renewal period they are signed in).
now: Callable[[], float] = time.time


class SerialError(ValueError):
    """A document whose serial was counted for other content (`pulumi up --target`), or a Command's output that is not
    a serial: the update stops before anything is signed with it."""


def parse_counter(stdout: str) -> tuple[int, str | None]:
    """`SERIAL DIGEST` (or a stamp, from before counters: no digest); SerialError for anything else."""
    words = stdout.split()
    if not 1 <= len(words) <= 2 or not (words[0].isascii() and words[0].isdigit()):
        raise SerialError(f"the serial command printed {stdout[:80]!r}, not SERIAL DIGEST")
    serial = int(words[0])
    if not 1 <= serial <= MAX_SERIAL:
        raise SerialError(f"the serial command printed {serial}, not a serial of 1..2**53")
    return serial, words[1] if len(words) == 2 else None


def serial_for(name: str, stdout: str, digest: str, dry_run: bool) -> int:
    """The serial of the content whose digest is `digest`, from the Command's output. In a preview the Command has
    not run for new content yet: its next serial (one more, or 1 for a new one). In an update it has, unless it was
    left out of a targeted one: SerialError naming the fix."""
    if dry_run and not stdout.strip():
        return 1  # created by this update: it will print 1
    serial, recorded = parse_counter(stdout)
    if recorded == digest:
        return serial
    if dry_run:
        return serial + 1
    raise SerialError(
        f"{name}: the document's content changed, but its serial was counted for other content ({name}-serial did "
        f"not run in this update: `pulumi up --target`?). Signing it with serial {serial} would ship a document "
        f"every gateway refuses. Run `pulumi up` without --target, or target {name}-serial too "
        f"(pulumi up --target-dependents, or --target with the URN of {name}-serial)"
    )


def document_serial(name: str, digest: pulumi.Output[str], parent: pulumi.Resource) -> pulumi.Output[int]:
    """The serial of the document whose unsigned content's digest is `digest` (`<name>-serial`)."""
    run = localcmd.local_command(
        f"{name}-serial",
        create=COUNTER_CREATE,
        update=COUNTER_UPDATE,
        environment={CONTENT_ENV: digest},
        # the trigger of a stack from before counters stays in the state: never a replacement (module doc)
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["triggers"]),
    )
    values = pulumi.Output.all(stdout=run.stdout, digest=digest)
    return values.apply(lambda v: serial_for(name, v["stdout"], v["digest"], pulumi.runtime.is_dry_run()))


def pin_for(stdout: str, dry_run: bool) -> int:
    """The pinned floor from the `-floor` Command's output (0 in the preview of its creation: not run yet)."""
    text = stdout.strip()
    if dry_run and not text:
        return 0
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_SERIAL:
        raise SerialError(f"the floor command printed {stdout[:80]!r}, not a serial")
    return int(text)


def user_data_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _serial_text(value: object) -> str:
    """The serial for the floor's environment; in a preview where it is unknown, a placeholder (module doc)."""
    return str(value) if isinstance(value, int) else "unknown in this preview"


def floor_pin(
    name: str,
    serial: pulumi.Output[int],
    rest: pulumi.Output[str],
    replaced_by: Sequence[str],
    parent: pulumi.Resource,
) -> pulumi.Output[int]:
    """The serial current when the gateway whose user data (without its floor) is `rest` was made (`<name>-floor`):
    renewed only when `rest` or one of `replaced_by` (the site's settings that replace its gateway, e.g. its instance
    type) changes. Its Output depends on this Command alone, never on the serial's own inputs: a preview in which
    the serial is unknown (a new site's address, a new key) must not make the user data unknown, which Pulumi would
    show as a replacement of every gateway. So the serial reaches the Command's environment known even in such a
    preview, as a placeholder: pulumi-command computes every output of a Command with an unknown input ("If any input
    is computed, then all outputs are computed": pulumi-command v0.9.1 release notes), and an update keeps its
    output whatever the value."""
    run = localcmd.local_command(
        f"{name}-floor",
        create=PIN_CREATE,
        update=localcmd.KEEP_OUTPUT,
        environment={SERIAL_ENV: serial.apply(_serial_text, run_with_unknowns=True)},
        triggers=[rest.apply(user_data_digest), *replaced_by],
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return run.stdout.apply(lambda out: pin_for(out, pulumi.runtime.is_dry_run()))
