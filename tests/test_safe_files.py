"""Every file wg-mesh writes on a gateway goes through one helper, wg_mesh.gateway.files.atomic_write (issue 33 item 5:
the re-resolver's textfile was written through a fixed `.tmp` name that followed a planted link, truncating its target
and leaving it 0644).

The writers and the paths they write are enumerated from the code (the agent's `Paths`, the re-resolver's, the metrics
script's and the bootstrap's own paths), each run for real (the agent on the pretend gateway, the scripts' `main`),
and every rename they make is recorded: a write to a path this file does not know fails
`test_the_writers_write_exactly_the_enumerated_paths`. At each path a symlink to a victim file is planted (and a hard
link to it at the old fixed temporary name): the victim keeps its bytes and mode, and the path is then either the
writer's own regular file with its own mode, or (the three files the agent reads before an apply) refused untouched.
`test_no_gateway_module_writes_a_file_any_other_way` fails when a module of wg_mesh/gateway writes a file without the
helper (open for writing, os.replace, tempfile, shutil, pathlib's writers).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.agent_fake import FakeHost, Keys, base_plan, doc_text
from tests.test_agent import Store, make
from wg_mesh.gateway import bootstrap, files, reresolve, ship, wgmetrics
from wg_mesh.gateway.apply import Paths
from wg_mesh.plan import metrics

REPO = Path(__file__).resolve().parent.parent
GATEWAY = REPO / "wg_mesh" / "gateway"
SECRET = b"the target of a planted link: never written\n"
Writer = Callable[[Path, pytest.MonkeyPatch], None]


# --- the writers and their paths, from the code ----------------------------------------------------------------


def agent_paths(root: Path) -> dict[str, str]:
    """Every path of the agent's Paths (a new field is a new path here), and the re-resolver's live textfile."""
    paths = Paths.under(str(root))
    out = {f.name: getattr(paths, f.name) for f in dataclasses.fields(Paths)}
    return out | {"reresolve_live": reresolve.live_metrics_path(paths.path_metrics)}


def run_agent(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One document cycle on a first boot (wg0.conf, the mapping, the record, the state, the metrics), then each
    textfile writer of the agent's threads: the path-MTU monitor's, the HA controller's, the re-resolver's."""
    keys, logs = Keys(), []
    agent = make(Store(doc_text(base_plan(), keys), keys.private), FakeHost(), Paths.under(str(root)), logs)
    agent.cycle()
    agent.path_watch().write("wgmesh_path_probe_ok 1\n")
    agent.write_ha_metrics("wgmesh_ha_role 1\n")
    reresolve.write(reresolve.live_metrics_path(agent.paths.path_metrics), "wgmesh_reresolve_changes_total 0\n")


def reresolve_paths(root: Path) -> dict[str, str]:
    return {"state": str(root / "var/lib/wg-mesh/reresolve.json"), "metrics": str(root / "wg_mesh_reresolve.prom")}


def run_reresolve(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """user-data mode's one run (`main`): its state and its textfile (METRICS_PATH, here under root)."""
    paths = reresolve_paths(root)
    monkeypatch.setattr(reresolve, "METRICS_PATH", paths["metrics"])
    config = root / "reresolve-peers.json"
    config.write_text(json.dumps({"interface": "wg0", "peers": []}))
    assert reresolve.main([str(config), paths["state"]], run=lambda argv: (0, "")) == 0


def metrics_paths(root: Path) -> dict[str, str]:
    return {"out": str(root / "wg_mesh.prom"), "state": str(root / "wg-mesh-metrics/endpoints")}


def run_metrics(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics script's run (`main`: its textfile; the roam state only changes with a peer seen: roam_state)."""
    paths = metrics_paths(root)
    mapping = root / "peers.json"
    mapping.write_text(json.dumps({"site": "aws-use1", "interface": "wg0", "peers": []}))
    monkeypatch.setattr(wgmetrics, "collect", lambda m: wgmetrics.Snapshot(1.0, (), None, None, ()))
    assert wgmetrics.main(["--mapping", str(mapping), "--out", paths["out"], "--state", paths["state"]]) == 0
    assert wgmetrics.roam_state(paths["state"], {"key": "198.51.100.7:51820"}, 2.0) is not None


def bootstrap_paths(root: Path) -> dict[str, str]:
    return {"module": str(root / "lib" / bootstrap.PACKAGE / "agent.py")}


def run_bootstrap(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap.install({"agent.py": "AGENT = 1\n"}, str(root / "lib"))


WRITERS: dict[str, tuple[Callable[[Path], dict[str, str]], Writer]] = {
    "agent": (agent_paths, run_agent),
    "reresolve": (reresolve_paths, run_reresolve),
    "metrics": (metrics_paths, run_metrics),
    "bootstrap": (bootstrap_paths, run_bootstrap),
}
MODES = {("agent", "wg_conf"): 0o600}  # the rest 0644 (textfiles node-exporter reads; nothing secret)
# What the agent reads (files.read_bytes: a link is refused) before an apply: a link there refuses the whole apply.
# The replay floor's state: a link there is a damaged state, so the agent fails closed (wg_mesh.gateway.floor: every
# document refused, the state left as it is) and writes nothing there either.
REFUSED = {("agent", "wg_conf"), ("agent", "mapping"), ("agent", "applied"), ("agent", "state")}
CASES = [(writer, key) for writer, (paths, _) in WRITERS.items() for key in paths(Path("/"))]


@pytest.fixture
def renames(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every rename target in this process (atomic_write renames relative to a directory descriptor)."""
    seen: list[str] = []
    real = os.replace

    def spy(src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        where = "" if dst_dir_fd is None else os.readlink(f"/proc/self/fd/{dst_dir_fd}")
        seen.append(os.path.join(where, dst))
        real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", spy)
    yield seen


def test_the_writers_write_exactly_the_enumerated_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, renames: list[str]
) -> None:
    expected: set[str] = set()
    for name, (paths, run) in WRITERS.items():
        root = tmp_path / name
        root.mkdir()
        run(root, monkeypatch)
        expected |= set(paths(root).values())
    assert set(renames) == expected, "a writer writes a path not enumerated here (or no longer writes one)"


def plant(path: Path, victim: Path) -> None:
    """A symlink to `victim` at `path`, and a hard link to it at the old fixed temporary name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(victim)
    os.link(victim, f"{path}.tmp")


@pytest.mark.parametrize(("writer", "key"), CASES, ids=[f"{w}-{k}" for w, k in CASES])
def test_a_link_planted_at_a_written_path_is_never_written_through(
    writer: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    victim.chmod(0o600)
    root = tmp_path / "root"
    paths, run = WRITERS[writer]
    target = Path(paths(root)[key])
    plant(target, victim)
    run(root, monkeypatch)
    assert victim.read_bytes() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert os.stat(f"{target}.tmp").st_ino == victim.stat().st_ino  # the planted temporary name: left alone
    if (writer, key) in REFUSED:
        assert target.is_symlink()  # the apply refused: `... is not the agent's regular file`
        return
    assert not target.is_symlink() and target.is_file(), f"{writer} did not write {key}"
    assert stat.S_IMODE(target.stat().st_mode) == MODES.get((writer, key), 0o644)
    left = [p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.")]
    assert left == [], f"temporary files left: {left}"


def test_the_shipped_metrics_script_does_not_follow_a_link_either(tmp_path: Path) -> None:
    """The standalone script (files.py inlined, ship.standalone) with a bare python3, its textfile a planted link."""
    victim, out, script = tmp_path / "victim", tmp_path / "wg_mesh.prom", tmp_path / "wg-mesh-metrics"
    victim.write_bytes(SECRET)
    victim.chmod(0o600)
    plant(out, victim)
    script.write_text(metrics.shipped_source())
    mapping = tmp_path / "peers.json"
    mapping.write_text(json.dumps({"site": "aws-use1", "interface": "wgtest0", "peers": []}))
    done = subprocess.run(
        ["/usr/bin/python3", "-I", str(script), "--mapping", str(mapping), "--out", str(out)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert victim.read_bytes() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not out.is_symlink() and "wgmesh_metrics_last_run_timestamp_seconds" in out.read_text()


def top_level_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


@pytest.mark.parametrize("script", ["wgmetrics.py", "reresolve.py"])
def test_the_standalone_scripts_carry_the_helper_whole(script: str) -> None:
    """ship.standalone puts files.py's code where the import was: all of it, nothing else of the package, and no
    name of the script shadows one of the helper's."""
    shipped = ship.standalone(script)
    helper = ship.compact(ship.module_source("files.py")).replace(ship.FUTURE + "\n", "")
    assert helper in shipped and "from ." not in shipped
    assert shipped.startswith("#!/usr/bin/env python3\n" if script == "wgmetrics.py" else ship.FUTURE)
    own = ship.module_source(script)
    assert "from .files import " in own
    assert top_level_names(own) & top_level_names(ship.module_source("files.py")) == set()
    compile(shipped, script, "exec")


def test_the_helper_refuses_a_linked_directory_a_fifo_and_a_huge_file(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real)
    with pytest.raises(OSError):
        files.atomic_write(str(tmp_path / "linked" / "wg_mesh.prom"), "x 1\n", 0o644)
    assert list(real.iterdir()) == []
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):  # never blocks on a FIFO planted at a state file
        files.read_text(str(tmp_path / "fifo"))
    (tmp_path / "big").write_bytes(b"x" * 2048)
    with pytest.raises(OSError, match="larger than"):
        files.read_bytes(str(tmp_path / "big"), limit=1024)
    assert files.read_bytes(str(tmp_path / "missing")) is None


# --- nothing writes around the helper ----------------------------------------------------------------------------

OS_WRITERS = {"open", "fdopen", "replace", "rename", "renames", "link", "symlink", "chmod", "fchmod", "chown",
              "lchown", "makedirs", "mkdir", "truncate", "ftruncate", "write", "mkfifo", "mknod", "utime"}  # fmt: skip
PATH_WRITERS = {"write_text", "write_bytes", "touch", "symlink_to", "hardlink_to"}
FORBIDDEN_MODULES = {"tempfile", "shutil"}
# (module, call) that may: files.py is the helper; txn's rollback unlinks a file the failed apply created (unlink
# removes a planted link itself, never its target).
ALLOWED = {("files.py", "*"), ("txn.py", "os.unlink")}


def raw_writes(path: Path) -> list[str]:
    """The calls in a module that write a file other than through wg_mesh.gateway.files."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [f"import {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                found += [f"from os import {a.name}" for a in node.names if a.name in OS_WRITERS]
        if not isinstance(node, ast.Call):
            continue
        func, call = node.func, ast.unparse(node.func)
        if isinstance(func, ast.Name) and func.id == "open":
            modes = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "mode")]
            mode = modes[0] if modes else None
            if mode is not None and not (isinstance(mode, ast.Constant) and set(str(mode.value)) <= set("rbt")):
                found.append(f"open(..., {ast.unparse(mode)})")
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "os":
            if func.attr in OS_WRITERS | {"unlink", "remove"}:
                found.append(call)
        elif isinstance(func, ast.Attribute) and func.attr in PATH_WRITERS:
            found.append(call)
    return [f for f in found if (path.name, "*") not in ALLOWED and (path.name, f) not in ALLOWED]


def test_no_gateway_module_writes_a_file_any_other_way() -> None:
    modules = sorted(GATEWAY.rglob("*.py"))
    assert len(modules) > 30 and GATEWAY / "files.py" in modules
    found = {str(p.relative_to(GATEWAY)): raw_writes(p) for p in modules}
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_the_guard_sees_each_way_around_the_helper(tmp_path: Path) -> None:
    """The check itself: each of these is found."""
    module = tmp_path / "writer.py"
    module.write_text(
        "import os, tempfile\nfrom pathlib import Path\nfrom os import replace\n"
        "open(p, 'w')\nopen(p, mode='a')\nopen(p, 'r+')\nos.replace(a, b)\nos.open(p, os.O_WRONLY)\n"
        "Path(p).write_text('x')\nos.chmod(p, 0o644)\nopen(p)\nopen(p, 'rb')\n"
    )
    assert sorted(raw_writes(module)) == sorted([
        "import tempfile", "from os import replace", "open(..., 'w')", "open(..., 'a')", "open(..., 'r+')",
        "os.replace", "os.open", "Path(p).write_text", "os.chmod",
    ])  # fmt: skip
