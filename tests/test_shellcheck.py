"""shellcheck on every shell fragment we ship, each with the shell that runs it:

- bootcmd and runcmd: cloud-init writes each list into one `#!/bin/sh` script, a line per entry, a list entry's
  words single-quoted (cloudinit/util.py shellify; cc_bootcmd runs it with /bin/sh, scripts_user runs runcmd's);
- `sh -c` / `bash -c` strings inside those entries (the agent's first fetch);
- wg0.conf's PostUp/PostDown: wg-quick runs each hook with bash's `eval` after replacing `%i` with the interface
  (wg-quick's execute_hooks), and the agent with `bash -c`: as bash, with %i replaced;
- the repository's own shell scripts (.ci/run, scripts/check, scripts/check-package).
Every site of every stack file (tests/shipped.py), and the hooks of a plan with every optional rule (masquerade, a
host filter, endpoint routes, lower route MTUs) as the live agent renders them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests import shipped
from tests.test_default_route_hooks import every_rule_plan
from wg_mesh.gateway import wgconf
from wg_mesh.plan import render

needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck") is None, reason="needs shellcheck (.ci/run installs it)"
)
SCRIPTS = (".ci/run", "scripts/check", "scripts/check-package")
SHELLS = ("sh", "bash")


def shellify(entries: list[object]) -> str:
    """cloud-init's util.shellify: the script cloud-init writes for bootcmd and runcmd."""
    lines = ["#!/bin/sh"]
    for entry in entries:
        if isinstance(entry, list):
            lines.append(" ".join("'{}'".format(str(word).replace("'", "'\\''")) for word in entry))
        elif isinstance(entry, str):
            lines.append(entry)
    return "\n".join(lines) + "\n"


def fragments(doc: dict[str, object]) -> list[tuple[str, str, str]]:
    """(what, shell, text) of every shell fragment in a cloud-config."""
    out = []
    for key in ("bootcmd", "runcmd"):
        entries = doc.get(key) or []
        assert isinstance(entries, list)
        out.append((key, "sh", shellify(entries)))
        for entry in entries:
            if isinstance(entry, list) and len(entry) == 3 and entry[0] in SHELLS and entry[1] == "-c":
                out.append((f"{key}: {entry[0]} -c", entry[0], entry[2]))
    files = doc.get("write_files") or []
    assert isinstance(files, list)
    for entry in files:
        if entry["path"] == render.WG_CONF_PATH:
            out += hook_fragments(entry["content"])
        elif entry.get("encoding") is None and entry["content"].startswith(("#!/bin/sh", "#!/bin/bash")):
            out.append(
                (entry["path"], "bash" if "bash" in entry["content"].split("\n", 1)[0] else "sh", entry["content"])
            )
    return out


def hook_fragments(conf: str, interface: str = render.INTERFACE) -> list[tuple[str, str, str]]:
    interface_section = wgconf.parse_wg_quick_conf(conf)[0][1]
    return [
        (f"{key} = {hook}", "bash", hook.replace("%i", interface) + "\n")
        for key in ("PreUp", "PostUp", "PreDown", "PostDown")
        for hook in interface_section.get(key, [])
    ]


def shellcheck(shell: str, text: str) -> str:
    """shellcheck's findings ('' when clean) for `text` run by `shell`."""
    done = subprocess.run(
        # SC1091: a sourced file that exists only on the gateway (/etc/default/wg-mesh-agent) cannot be followed.
        ["shellcheck", f"--shell={shell}", "--severity=style", "--exclude=SC1091", "--format=gcc", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.strip()


@needs_shellcheck
@pytest.mark.parametrize("case", shipped.cases(), ids=shipped.case_id)
def test_every_fragment_of_the_user_data_is_shellcheck_clean(case: tuple[Path, str]) -> None:
    found = fragments(shipped.cloud_config(*case))
    assert {what for what, _, _ in found} >= {"bootcmd", "runcmd"}
    problems = [f"{what} ({shell}):\n{report}" for what, shell, text in found if (report := shellcheck(shell, text))]
    assert not problems, "\n\n".join(problems)


@needs_shellcheck
def test_every_hook_the_agent_can_render_is_shellcheck_clean() -> None:
    plan = every_rule_plan()
    assert wgconf.endpoint_routes(plan) and wgconf.route_mtus(plan)  # the plan does have every optional hook
    for role in wgconf.ROLES:
        found = hook_fragments(wgconf.wg_quick_conf(plan, "K" * 43 + "=", role))
        problems = [f"{what}:\n{report}" for what, shell, text in found if (report := shellcheck(shell, text))]
        assert not problems, "\n\n".join(problems)


@needs_shellcheck
@pytest.mark.parametrize("script", SCRIPTS)
def test_our_shell_scripts_are_shellcheck_clean(script: str) -> None:
    text = (shipped.REPO / script).read_text()
    assert text.startswith("#!/usr/bin/env bash")
    assert shellcheck("bash", text) == ""


@needs_shellcheck
def test_shellcheck_finds_what_it_should() -> None:
    """The check can fail: an unquoted expansion that can be empty, in a hook and in a runcmd line."""
    assert "SC2046" in shellcheck("bash", "ip route add 10.0.0.0/8 $(ip route show default)\n")
    assert "SC2086" in shellcheck("sh", shellify([["true"], "rm -rf $TARGET/cache"]))
