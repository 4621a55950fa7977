"""What this program's pulumi-command `local.Command`s run: POSIX shell texts that are the same on every machine.

How the provider runs one (pulumi-command 1.2.1, provider/pkg/provider/local/commandOutputs.go, `run`): the
`interpreter` (default `/bin/sh -c`, `cmd /C` on Windows) with the text as its last argument, in `dir` or else the
provider's own working directory, with the provider's environment plus `environment` plus, when the previous run
printed something, `PULUMI_COMMAND_STDOUT`/`PULUMI_COMMAND_STDERR` (what the previous create or update printed: set
for `update` and `delete`, never for a first `create`). The engine starts the provider in the Pulumi project's
directory (`main`'s, when Pulumi.yaml sets one) with the engine's environment and `PULUMI_RUNTIME_<OPTION>` for every
runtime option of Pulumi.yaml, e.g. `PULUMI_RUNTIME_VIRTUALENV=.venv` ("Runtime options are passed as environment
variables to the provider": pulumi/pulumi, sdk/go/common/resource/plugin/provider_plugin.go, NewProvider; the
working directory: pkg/engine, getPwdMain).

What an input change does (provider/pkg/provider/common/inputs.go): `triggers` is replaceOnChanges (the resource is
replaced: `create` runs, with no previous output); a change of any other input (`create`, `update`, `environment`,
`interpreter`, ...) is an update: `update` runs, or `create` again when there is no `update`.

So every input of every Command here is text that does not depend on the machine running `pulumi up`: no
interpreter path, no absolute path, no working directory, nothing of the OS. Before, `create` began with
`sys.executable`, so an `up` from another machine, virtualenv or OS updated every Command: it ran every stamp and
readiness gate again (issue 32, item 5). The Python a gate needs is found when it runs (`python_module`), the way
Pulumi's own Python dynamic provider finds its interpreter (pulumi/pulumi,
sdk/python/dist/pulumi-resource-pulumi-python: Pulumi.yaml's `virtualenv`, relative to the working directory, or the
toolchain's, else `python3`). The texts are POSIX shell, run by an explicit `/bin/sh -c`: `pulumi up` runs on Linux
or macOS (on Windows, in WSL).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_command as command

INTERPRETER = ["/bin/sh", "-c"]
# An operator's explicit choice of interpreter (from the environment `pulumi up` runs in, never an input).
PYTHON_ENV = "WG_MESH_PYTHON"
# What keeps the previous output: an `update` for a Command whose output must not change when only its command text
# (a new wg-mesh) or a non-trigger input does.
KEEP_OUTPUT = 'printf "%s\\n" "${PULUMI_COMMAND_STDOUT:-}"'

_FIND_PYTHON = """\
v=${PULUMI_RUNTIME_VIRTUALENV:-}
if [ -z "$v" ]; then case ${PULUMI_RUNTIME_TOOLCHAIN:-} in
  uv) v=.venv;; poetry) v=$(poetry env info --path 2>/dev/null);; esac; fi
for p in "${WG_MESH_PYTHON:-}" "${v:+${v%/}/bin/python}" "${PULUMI_PYTHON_CMD:-python3}"; do
  if [ -n "$p" ] && "$p" -c 'import wg_mesh' 2>/dev/null; then exec "$p" "$@"; fi
done
echo "wg-mesh: no Python here imports wg_mesh (tried WG_MESH_PYTHON, Pulumi.yaml's virtualenv in $PWD, \
${PULUMI_PYTHON_CMD:-python3}): set WG_MESH_PYTHON to the interpreter that runs the program" >&2
exit 127"""


def python_module(module: str, *args: str) -> str:
    """`python -m MODULE ARGS...` as shell text, with the first of these Pythons that imports wg_mesh: $WG_MESH_PYTHON,
    Pulumi.yaml's virtualenv (`PULUMI_RUNTIME_VIRTUALENV`, or the `uv`/`poetry` toolchain's), `$PULUMI_PYTHON_CMD` or
    `python3` on the PATH. The same text on every machine; every argument quoted."""
    words = " ".join(shlex.quote(word) for word in ("-m", module, *args))
    return f"set -- {words}\n{_FIND_PYTHON}"


def local_command(
    name: str,
    *,
    create: pulumi.Input[str],
    update: pulumi.Input[str],
    environment: Mapping[str, pulumi.Input[str]] | None = None,
    triggers: Sequence[pulumi.Input[str]] | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> command.local.Command:
    """A Command of this program: its interpreter explicit, an `update` always (what an input change that is not a
    trigger does: a new wg-mesh's command text is one)."""
    return command.local.Command(
        name,
        create=create,
        update=update,
        environment=dict(environment) if environment is not None else None,
        triggers=list(triggers) if triggers is not None else None,
        interpreter=INTERPRETER,
        opts=opts,
    )
