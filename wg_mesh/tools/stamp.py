"""Moments from the program: the time on the deployer's machine when something changed, kept in Pulumi state.

`stamp(name, triggers, opts)` is a pulumi-command `local.Command` (wg_mesh.tools.localcmd) that prints the Unix time
(`date +%s`), once when created and again only when it is replaced: `triggers` changed ("The resource will be updated
(or replaced) if any of these values change. [...] If the `update` command was provided the resource will be updated,
otherwise it will be replaced using the `create` command": pulumi-command 1.2.1, local.Command `triggers`; the
provider marks `triggers` replaceOnChanges). Any other input change (a new wg-mesh's command text) runs `update`,
which prints the previous output again: the moment stays. Its stdout is in the state, so every later `pulumi up` reads
the same moment without running anything.

A moment is what a site's key_at is made of (wg_mesh.announce): when every party switches keys. A document's serial
is not a moment: it is a counter (wg_mesh.tools.serial), so that no clock decides which document is newer.

No resource is created inside an apply: the triggers are Outputs, resolved by the engine.
"""

from __future__ import annotations

import pulumi

from wg_mesh.tools import localcmd

CREATE = "date +%s"
# 2001-09-09 .. 2286-11-20: ten decimal digits; anything else is not a time this program printed.
MIN_STAMP, MAX_STAMP = 1_000_000_000, 9_999_999_999


def parse(stdout: str) -> int:
    """The Unix time the command printed; ValueError for anything else."""
    text = stdout.strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"the stamp command printed {stdout[:40]!r}, not a Unix time")
    value = int(text)
    if not MIN_STAMP <= value <= MAX_STAMP:
        raise ValueError(f"the stamp command printed {value}, not a Unix time of this era")
    return value


def stamp(
    name: str, triggers: list[pulumi.Input[str]], opts: pulumi.ResourceOptions | None = None
) -> pulumi.Output[int]:
    """The Unix time (int seconds) at which this Command was last created: a change of `triggers` renews it."""
    run = localcmd.local_command(name, create=CREATE, update=localcmd.KEEP_OUTPUT, triggers=triggers, opts=opts)
    return run.stdout.apply(parse)
