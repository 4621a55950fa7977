"""A stand-in `pulumi` for tests/test_readme_quickstart.py (no Pulumi CLI on the test machines).

It records every call (argv, directory) in STATE/calls.jsonl and fails, as the real CLI would, on: a subcommand or
flag outside tests/docblocks.py's PULUMI table (from the Pulumi CLI reference); a stack command before `pulumi
login`; no Pulumi.yaml in the directory; a passphrase stack without PULUMI_CONFIG_PASSPHRASE(_FILE); `stack init` of
a stack that exists, or any other command on one that does not. `preview` and `up` run the project's program under
wg-mesh's Pulumi mocks (wg_mesh.testing) with the Python of the virtualenv Pulumi.yaml names and the stack file's
config, so they exercise the package as installed there; `up` keeps the stack's outputs for `stack output`.
What it does not prove: the engine, provider plugins, credentials, the real CLI's Pulumi.yaml schema check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.docblocks import PULUMI, pulumi_problem

# Runs in the project's virtualenv: its wg_mesh, its Pulumi SDK.
RUNNER = """
import json, sys
from pathlib import Path
import wg_mesh
from wg_mesh.testing import execute, new_run
preview, project, stack, config = json.loads(sys.argv[1])
run = execute(new_run(preview), Path("__main__.py").resolve(), config, project=project, stack=stack)
if run.error is not None:
    sys.exit(f"the program failed under mocks: {run.error}")
exports = {k: ("[secret]" if v.secret else v.value) for k, v in run.exports.items()}
print(json.dumps({"package": wg_mesh.__file__, "resources": len(run.resources), "exports": exports}, default=str))
"""


def fail(message: str, code: int = 255) -> int:
    print(f"error (pulumi stub): {message}", file=sys.stderr)
    return code


def _flag(argv: list[str], *names: str) -> str | None:
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def _positionals(argv: list[str], sub: str) -> list[str]:
    _, valued, _ = PULUMI[sub]
    words, found = argv[len(sub.split()) :], []
    while words:
        word = words.pop(0)
        if word in valued:
            words.pop(0)
        elif not word.startswith("-"):
            found.append(word)
    return found


def main(state: Path) -> int:
    argv, cwd = sys.argv[1:], Path.cwd()
    with (state / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps({"argv": argv, "cwd": str(cwd)}) + "\n")
    if problem := pulumi_problem(argv):
        return fail(problem, 2)
    sub = " ".join(argv[:2]) if " ".join(argv[:2]) in PULUMI else argv[0]
    if sub == "version":
        print("v3.208.0 (stub)")
        return 0
    if sub == "login":
        (state / "logged-in").write_text(json.dumps(argv))
        return 0
    if not (state / "logged-in").exists():
        return fail("not logged in: `pulumi login` first (the real CLI would ask for a Pulumi Cloud token)")
    if not (cwd / "Pulumi.yaml").is_file():
        return fail(f"no Pulumi.yaml project file found in {cwd}")
    project = yaml.safe_load((cwd / "Pulumi.yaml").read_text())
    stacks_file = state / "stacks.json"
    stacks: dict[str, dict[str, Any]] = json.loads(stacks_file.read_text()) if stacks_file.exists() else {}
    named = _flag(argv, "--stack", "-s")
    if named is None and sub in ("stack init", "stack select", "stack rm"):
        named = next(iter(_positionals(argv, sub)), None)
    named = named or stacks.get(f"{cwd}:selected", {}).get("name")
    if named is None:
        return fail("no stack selected")
    key = f"{cwd}:{named}"
    if not os.environ.get("PULUMI_CONFIG_PASSPHRASE") and not os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
        return fail("passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE")
    if sub == "stack init":
        if key in stacks:
            return fail(f"stack '{named}' already exists")
        stacks[key] = {"name": named, "outputs": None}
    elif key not in stacks:
        return fail(f"no stack named '{named}' found")
    if sub in ("stack init", "stack select"):
        stacks[f"{cwd}:selected"] = {"name": named}
    elif sub in ("preview", "up"):
        venv = cwd / project["runtime"]["options"]["virtualenv"] / "bin" / "python"
        if not venv.exists():
            return fail(f"the virtualenv Pulumi.yaml names has no {venv}")
        stack_file = cwd / f"Pulumi.{named}.yaml"
        raw = (yaml.safe_load(stack_file.read_text()) or {}).get("config", {}) if stack_file.exists() else {}
        config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
        args = json.dumps([sub == "preview", project["name"], named, config])
        result = subprocess.run([str(venv), "-c", RUNNER, args], cwd=cwd, capture_output=True, text=True, check=False)
        if result.returncode:
            return fail(result.stderr.strip()[-2000:], 1)
        report = json.loads(result.stdout)
        with (state / "calls.jsonl").open("a") as calls:
            calls.write(json.dumps({"ran": sub, "cwd": str(cwd), **report}) + "\n")
        print(f"{sub} (stub, under mocks): {report['resources']} resources; wg_mesh from {report['package']}")
        if sub == "up":
            stacks[key]["outputs"] = report["exports"]
    elif sub == "stack output":
        outputs = stacks[key]["outputs"]
        if outputs is None:
            return fail(f"stack '{named}' has no outputs: run `pulumi up` first")
        wanted = _positionals(argv, sub)
        if wanted and wanted[0] not in outputs:
            return fail(f"current stack does not have output property '{wanted[0]}'")
        print(json.dumps(outputs[wanted[0]] if wanted else outputs, indent=2))
    elif sub == "stack rm":
        del stacks[key]
    stacks_file.write_text(json.dumps(stacks))
    return 0


def install(directory: Path, state: Path) -> Path:
    """Write the stub as `directory/pulumi` (run with this Python, this repository's tests importable)."""
    repo = Path(__file__).resolve().parent.parent
    stub = directory / "pulumi"
    stub.write_text(
        f"#!{sys.executable}\nimport sys\nfrom pathlib import Path\nsys.path.insert(0, {str(repo)!r})\n"
        f"from tests.pulumistub import main\nsys.exit(main(Path({str(state)!r})))\n"
    )
    stub.chmod(0o755)
    return stub
