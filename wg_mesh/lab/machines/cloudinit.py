"""What a gateway's `#cloud-config` asks for, read the way the lab can carry it out inside a namespace.

Pure. The lab does not run cloud-init itself (it would touch the host); it does what this user data
asks of cloud-init, in the gateway's own network and mount namespaces:

* `write_files` -> decoded (b64, gz+b64, ...) and written into the gateway's private /etc and /usr/local
  (copy-on-write overlays) or /run (a tmpfs);
* `runcmd: [sysctl, --system]` (or `[sysctl, -p, FILE]`: that file) -> the sysctl files it wrote are applied in the
  gateway's netns (only per-namespace `net.ipv4.*` / `net.ipv6.*` keys, so the host is never changed);
* `runcmd: [systemctl, enable, --now, wg-quick@IF]` -> the real `wg-quick up IF`;
* `runcmd: [chmod, MODE, PATH]` and `bootcmd: [install, -d, -m, MODE, PATH]` -> the mode, on a path under those
  private directories (a bootcmd's first, as cloud-init runs bootcmd before write_files);
* `runcmd: "set -eu"` -> nothing to do: the lab stops at a failed step anyway;
* `delivery: live`: `runcmd: [python3, -m, wgmesh_gateway.agent, ..., --once]` (optionally behind `env K=V ...`)
  -> that command, with Debian's /usr/bin/python3 and the agent unit's Environment; `runcmd: [systemctl, enable,
  --now, UNIT]` for a unit the user data writes whose ExecStart runs the agent -> that ExecStart as a lab-tracked
  daemon in the gateway, with the unit's Environment, EnvironmentFile and State/RuntimeDirectory (machine.py);
* `runcmd: [systemctl, enable, --now, UNIT]` for a unit whose ExecStart is `python3 SCRIPT ...`, SCRIPT written by the
  user data (a dynamic site's wg-mesh-rearm) -> that ExecStart as a lab-tracked daemon, as the agent's;
* `runcmd: [systemctl, enable, --now, UNIT.timer]` for a timer in TIMED_UNITS (the re-resolver's) whose service
  runs `python3 SCRIPT ...`, both written by the user data -> that ExecStart in a lab-tracked loop, once at once and
  then again `OnUnitActiveSec` after each run ends (the lab has no systemd; a run takes a fraction of a second);
  the `systemctl start UNIT.service` that follows is that first run. Other timers (wg-mesh-metrics) are not run;
* `packages` -> must already be installed on the host (the lab checks its tools).
Anything else is refused or listed in the report as not run, never silently dropped. The runcmd steps the lab
carries out run in the user data's order (`GatewaySetup.steps`).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

PRIVATE_ROOTS = tuple(PurePosixPath(p) for p in ("/etc", "/usr/local", "/run", "/var/run", "/var/lib"))
# cloud-init's write_files encodings: (gzip-compressed, base64-encoded)
ENCODINGS = {"text/plain": (False, False), "b64": (False, True), "base64": (False, True), "gz": (True, False),
             "gzip": (True, False), "gz+b64": (True, True), "gz+base64": (True, True), "gzip+b64": (True, True),
             "gzip+base64": (True, True)}  # fmt: skip
SYSCTL_DIR = PurePosixPath("/etc/sysctl.d")
PER_NETNS_SYSCTL_PREFIXES = ("net.ipv4.", "net.ipv6.")
WG_QUICK_UNIT = "wg-quick@"
UNIT_DIR = PurePosixPath("/etc/systemd/system")
AGENT_MODULE = "wgmesh_gateway.agent"
BOOTSTRAP_MODULE = "wgmesh_gateway.bootstrap"  # an AWS gateway's first step: the agent's package from its bundle
PYTHON = "/usr/bin/python3"  # Debian's / Ubuntu's, with its own packages (python3-botocore), never the lab's venv
PYTHONS = ("python3", PYTHON)
UNIT_DIRECTORY_ROOTS = {"StateDirectory": "/var/lib", "RuntimeDirectory": "/run"}  # systemd.exec(5)
TIMED_UNITS = ("wg-mesh-reresolve",)  # timers the lab runs by hand (wg_mesh.plan.reresolveunit)


class UserDataError(ValueError):
    """User data the lab cannot reproduce faithfully."""


@dataclass(frozen=True)
class WriteFile:
    path: PurePosixPath
    content: bytes = field(repr=False)  # decoded
    mode: int
    owner: str

    @property
    def text(self) -> str:
        return self.content.decode()


@dataclass(frozen=True)
class Unit:
    """The parts of a systemd service the lab carries out: how to start it and its environment."""

    name: str
    exec_start: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    environment_files: tuple[tuple[PurePosixPath, bool], ...]  # (path, optional: the `-` prefix)
    directories: tuple[PurePosixPath, ...] = ()  # StateDirectory=, RuntimeDirectory=: systemd makes them first


@dataclass(frozen=True)
class Step:
    """One runcmd (or bootcmd) the lab carries out: kind sysctl | chmod | install-dir | wg-quick | agent-once |
    service | timer (argv run every `every` seconds)."""

    kind: str
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    unit: Unit | None = None
    path: PurePosixPath | None = None
    mode: int = 0
    env_files: tuple[tuple[PurePosixPath, bool], ...] = ()  # read at run time, before `env`: (path, optional)
    before: tuple[tuple[str, ...], ...] = ()  # agent-once: commands that must succeed first (`X && agent`)
    every: int = 0  # timer: its OnUnitActiveSec


@dataclass(frozen=True)
class ShAgent:
    """What the lab runs of an agent `sh -c` runcmd (sh_agent_argv)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    env_files: tuple[tuple[PurePosixPath, bool], ...]
    before: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class GatewaySetup:
    files: tuple[WriteFile, ...]
    sysctl: tuple[tuple[str, str], ...]  # (key, value) from the sysctl files, in the order sysctl --system applies
    interfaces: tuple[str, ...]  # wg-quick interfaces to bring up
    modes: tuple[tuple[PurePosixPath, int], ...]  # chmod runcmds, in order
    packages: tuple[str, ...]
    notes: tuple[str, ...]  # what the lab did not run, for the report
    steps: tuple[Step, ...] = ()  # what the lab runs of runcmd, in order


def parse_sysctl(text: str) -> list[tuple[str, str]]:
    settings = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.lstrip("-").partition("=")
        if not sep:
            raise UserDataError(f"sysctl line {raw!r} has no '='")
        settings.append((key.strip(), value.strip()))
    return settings


def _private_path(text: str, what: str) -> PurePosixPath:
    path = PurePosixPath(text)
    if not path.is_absolute() or ".." in path.parts or not any(path.is_relative_to(r) for r in PRIVATE_ROOTS):
        raise UserDataError(f"{what} {path}: the lab can only place files under {', '.join(map(str, PRIVATE_ROOTS))}")
    return path


def decode(path: PurePosixPath, content: str, encoding: str) -> bytes:
    """A write_files entry's content as cloud-init writes it."""
    return _decode(path, content, encoding)


def _decode(path: PurePosixPath, content: str, encoding: str) -> bytes:
    if encoding not in ENCODINGS:
        raise UserDataError(f"write_files {path}: unknown encoding {encoding!r}")
    compressed, b64 = ENCODINGS[encoding]
    try:
        data = base64.b64decode(content) if b64 else content.encode()
        return gzip.decompress(data) if compressed else data
    except (binascii.Error, OSError, EOFError) as exc:
        raise UserDataError(f"write_files {path}: content is not valid {encoding} ({exc})") from None


def _write_file(entry: Any) -> WriteFile:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise UserDataError(f"write_files entry without a path: {sorted(entry) if isinstance(entry, dict) else entry}")
    path = PurePosixPath(entry["path"])
    unsupported = sorted(set(entry) - {"path", "content", "permissions", "owner", "encoding"})
    if unsupported:
        raise UserDataError(f"write_files {path}: the lab does not support {', '.join(unsupported)}")
    _private_path(entry["path"], "write_files")
    mode = int(str(entry.get("permissions", "0644")), 8)
    content = _decode(path, str(entry.get("content", "")), str(entry.get("encoding", "text/plain")))
    return WriteFile(path, content, mode, str(entry.get("owner", "root:root")))


def parse_unit(name: str, text: str) -> Unit:
    """ExecStart, Environment, EnvironmentFile and the directories of a unit's [Service] (systemd.exec(5) quoting)."""
    section, exec_start = "", tuple[str, ...]()
    env: list[tuple[str, str]] = []
    files: list[tuple[PurePosixPath, bool]] = []
    dirs: list[PurePosixPath] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        if section != "[Service]":
            continue
        if key == "ExecStart":
            exec_start = tuple(shlex.split(value.lstrip("@-:+!")))
        elif key == "Environment":
            env += [(k, v) for k, eq, v in (item.partition("=") for item in shlex.split(value)) if eq]
        elif key == "EnvironmentFile":
            files.append((PurePosixPath(value.lstrip("-")), value.startswith("-")))
        elif key in UNIT_DIRECTORY_ROOTS:
            dirs += [PurePosixPath(UNIT_DIRECTORY_ROOTS[key], d) for d in value.split()]
    if not exec_start:
        raise UserDataError(f"unit {name}: no ExecStart")
    return Unit(name, exec_start, tuple(env), tuple(files), tuple(dirs))


def agent_argv(
    argv: list[str], module: str = AGENT_MODULE
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
    """(command, env) when argv runs the gateway agent (or another `module` of its package), python3 pinned to the
    system's; else None."""
    env = []
    if argv and argv[0] == "env":
        argv = argv[1:]
        while argv and "=" in argv[0]:
            key, _, value = argv.pop(0).partition("=")
            env.append((key, value))
    if len(argv) >= 3 and argv[0] in PYTHONS and argv[1:3] == ["-m", module]:
        return (PYTHON, *argv[1:]), tuple(env)
    return None


def _assignments(words: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """A simple command's leading VAR=value words (the shell exports them to that command only) and the rest."""
    env = []
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, _, value = words.pop(0).partition("=")
        env.append((key, value))
    return words, env


def sh_agent_argv(argv: list[str]) -> ShAgent | None:
    """`sh -c "set -a; if [ -r F ]; then . F; fi; [VAR=X python3 -m wgmesh_gateway.bootstrap ... &&] VAR=X exec
    python3 -m wgmesh_gateway.agent ..."`: the agent's command and env, the environment files the script sources and
    the bootstrap commands that must succeed first, when that is all the script does; else None (not run: listed
    in the notes). A bootstrap's own VAR=X words must be the agent's too (the lab runs both with one environment)."""
    if len(argv) != 3 or argv[:2] != ["sh", "-c"]:
        return None
    *setup, last = [part.strip() for part in argv[2].split(";")]
    files, guarded = [], set()
    for part in setup:
        words = shlex.split(part)
        if words in (["set", "-a"], ["fi"]):
            continue
        if words[:3] == ["if", "[", "-r"] and words[4:] == ["]"]:
            guarded.add(words[3])
        elif words[-2:-1] == ["."] and words[:-2] in ([], ["then"]):
            files.append((PurePosixPath(words[-1]), words[-1] in guarded))
        else:
            return None
    *firsts, final = [shlex.split(part) for part in last.split("&&")]
    words, env = _assignments(final)
    found = agent_argv(words[1:] if words[:1] == ["exec"] else words)
    if found is None:
        return None
    before = []
    for first in firsts:
        words, own = _assignments(first)
        boot = agent_argv(words, BOOTSTRAP_MODULE)
        if boot is None or not set(own) <= set(env):
            return None
        before.append(boot[0])
    return ShAgent(found[0], found[1] + tuple(env), tuple(files), tuple(before))


def _script_unit(argv: list[str], units: dict[str, Unit], files: tuple[WriteFile, ...]) -> Unit | None:
    """`systemctl enable --now UNIT` of a unit the user data writes whose ExecStart is `python3 SCRIPT ...` with a
    SCRIPT the user data writes too (a dynamic site's wg-mesh-rearm): that unit, python3 pinned to the system's."""
    if argv[:3] != ["systemctl", "enable", "--now"] or len(argv) != 4:
        return None
    unit = units.get(argv[3].removesuffix(".service"))
    if unit is None or len(unit.exec_start) < 2 or unit.exec_start[0] not in PYTHONS:
        return None
    if not any(str(f.path) == unit.exec_start[1] for f in files):
        return None
    return Unit(unit.name, (PYTHON, *unit.exec_start[1:]), unit.environment, unit.environment_files, unit.directories)


def timer_every(text: str) -> int | None:
    """A timer unit's OnUnitActiveSec in whole seconds (`30s` or `30`), or None."""
    for raw in text.splitlines():
        key, _, value = raw.strip().partition("=")
        if key == "OnUnitActiveSec" and value.removesuffix("s").isdigit():
            return int(value.removesuffix("s"))
    return None


def _timed(argv: list[str], units: dict[str, Unit], files: tuple[WriteFile, ...]) -> Step | None:
    """`systemctl enable --now NAME.timer` of a TIMED_UNITS timer the user data writes: its service's script, every
    OnUnitActiveSec (a Step of kind timer); else None."""
    if argv[:3] != ["systemctl", "enable", "--now"] or len(argv) != 4 or not argv[3].endswith(".timer"):
        return None
    name = argv[3].removesuffix(".timer")
    timer = next((f for f in files if f.path == UNIT_DIR / argv[3]), None)
    script = _script_unit([*argv[:3], name], units, files) if name in TIMED_UNITS else None
    every = timer_every(timer.text) if timer is not None else None
    if script is None or every is None:
        return None
    return Step("timer", script.exec_start, script.environment, script, env_files=script.environment_files,
                every=every)  # fmt: skip


def interpret(user_data: str) -> GatewaySetup:
    if not user_data.startswith("#cloud-config"):
        raise UserDataError("user data is not a #cloud-config document")
    doc = yaml.safe_load(user_data)
    if not isinstance(doc, dict):
        raise UserDataError("user data is not a mapping")
    files = tuple(_write_file(entry) for entry in doc.get("write_files") or [])

    sysctl: list[tuple[str, str]] = []
    interfaces: list[str] = []
    modes: list[tuple[PurePosixPath, int]] = []
    notes: list[str] = []
    steps: list[Step] = []
    units = {
        f.path.name.removesuffix(".service"): parse_unit(f.path.name, f.text)
        for f in files
        if f.path.parent == UNIT_DIR and f.path.suffix == ".service"
    }
    agent_units = [u for u in units.values() if agent_argv(list(u.exec_start)) is not None]
    timed: set[str] = set()  # services whose timer the lab runs: their `systemctl start` is its first run
    for cmd in doc.get("bootcmd") or []:
        argv = [str(a) for a in cmd] if isinstance(cmd, list) else str(cmd).split()
        if argv[:3] == ["install", "-d", "-m"] and len(argv) == 5:
            modes.append((_private_path(argv[4], "bootcmd install"), int(argv[3], 8)))
            steps.append(Step("install-dir", path=modes[-1][0], mode=modes[-1][1]))
        else:
            notes.append(f"bootcmd not run in the lab: {' '.join(argv)}")
    for cmd in doc.get("runcmd") or []:
        argv = [str(a) for a in cmd] if isinstance(cmd, list) else str(cmd).split()
        if argv == ["set", "-eu"]:
            continue
        agent = agent_argv(argv)
        sh_agent = sh_agent_argv(argv)
        if argv == ["sysctl", "--system"] or (argv[:2] == ["sysctl", "-p"] and len(argv) == 3):
            found = []
            chosen = (f for f in files if f.path.parent == SYSCTL_DIR and (len(argv) == 2 or str(f.path) == argv[2]))
            for f in sorted(chosen, key=lambda f: f.path.name):
                found += parse_sysctl(f.text)
            sysctl += found
            steps.append(Step("sysctl", tuple(f"{key}={value}" for key, value in found)))
        elif argv[0] == "chmod" and len(argv) == 3:
            modes.append((_private_path(argv[2], "runcmd chmod"), int(argv[1], 8)))
            steps.append(Step("chmod", path=modes[-1][0], mode=modes[-1][1]))
        elif argv[:3] == ["systemctl", "enable", "--now"] and len(argv) == 4 and argv[3].startswith(WG_QUICK_UNIT):
            interfaces.append(argv[3].removeprefix(WG_QUICK_UNIT))
            steps.append(Step("wg-quick", (interfaces[-1],)))
        elif sh_agent is not None and "--once" in sh_agent.argv:
            steps.append(
                Step("agent-once", sh_agent.argv, sh_agent.env, env_files=sh_agent.env_files, before=sh_agent.before)
            )
        elif agent is not None and "--once" in agent[0]:
            # The unit's environment (PYTHONPATH) applies to the one-shot run as well: the same program. So do its
            # EnvironmentFiles, which cloud-init would not read: the lab's clouds are reachable only through them.
            unit = agent_units[0] if agent_units else None
            env = (unit.environment if unit else ()) + agent[1]
            steps.append(Step("agent-once", agent[0], env, unit, env_files=unit.environment_files if unit else ()))
        elif (
            argv[:3] == ["systemctl", "enable", "--now"]
            and len(argv) == 4
            and argv[3].removesuffix(".service") in units
            and units[argv[3].removesuffix(".service")] in agent_units
        ):
            unit = units[argv[3].removesuffix(".service")]
            command = agent_argv(list(unit.exec_start))
            assert command is not None
            steps.append(
                Step("service", command[0], unit.environment + command[1], unit, env_files=unit.environment_files)
            )
        elif (timer := _timed(argv, units, files)) is not None:
            assert timer.unit is not None
            timed.add(timer.unit.name.removesuffix(".service"))
            steps.append(timer)
        elif argv[:2] == ["systemctl", "start"] and len(argv) == 3 and argv[2].removesuffix(".service") in timed:
            continue
        elif (script := _script_unit(argv, units, files)) is not None:
            steps.append(
                Step("service", script.exec_start, script.environment, script, env_files=script.environment_files)
            )
        else:
            notes.append(f"runcmd not run in the lab: {' '.join(argv)}")
    for key, _ in sysctl:
        if not key.startswith(PER_NETNS_SYSCTL_PREFIXES):
            raise UserDataError(f"sysctl {key} is not per network namespace: the lab would change the host with it")
    packages = tuple(str(p) for p in doc.get("packages") or [])
    return GatewaySetup(files, tuple(sysctl), tuple(interfaces), tuple(modes), packages, tuple(notes), tuple(steps))


def parse_env_file(text: str) -> dict[str, str]:
    """A systemd EnvironmentFile: KEY=VALUE lines, # and ; comments, optional quotes."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env
