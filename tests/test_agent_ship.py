"""What the user data ships for the agent (wg_mesh/gateway/ship.py): the module closure, compaction that keeps the code,
the files run as the renamed package by Debian's own python3 (3.11, as the lab's gateways), the unit, the config."""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from tests.agent_fake import SITE, TRUST_JSON, Keys, base_plan, doc_text
from wg_mesh.gateway import agent, bootstrap, ship

GATEWAY = Path(ship.__file__).parent
SYSTEM_PYTHON = "/usr/bin/python3"
AWS = ship.aws_source("us-east-1", "wg-mesh/proj/prod/aws-use1/peers", "/wg-mesh/proj/prod/aws-use1/private-key")
GCP = ship.gcp_source(
    "projects/proj/secrets/wg-mesh-0123abcd-gcp-euw3-peers/versions/latest",
    "projects/proj/secrets/wg-mesh-0123abcd-gcp-euw3-key/versions/latest",
)
SOURCES = {"aws": AWS, "gcp": GCP, "file": ship.file_source()}


def imports(module: str) -> tuple[set[str], set[str]]:
    """(relative module files, absolute top-level packages) a shipped module imports."""
    relative, absolute = set(), set()
    for node in ast.walk(ast.parse((GATEWAY / module).read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:  # from .x import y, or from . import x
            relative.update([f"{node.module}.py"] if node.module else [f"{a.name}.py" for a in node.names])
        elif isinstance(node, ast.ImportFrom) and node.module:
            absolute.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            absolute.update(alias.name.split(".")[0] for alias in node.names)
    return relative, absolute


def closure_of(start: list[str], others: set[str]) -> set[str]:
    closure, todo = {"__init__.py"}, list(start)
    while todo:
        module = todo.pop()
        if module not in closure | others:
            closure.add(module)
            relative, absolute = imports(module)
            todo += relative
            # Ubuntu 24.04's python3-botocore (AWS) and python3-nacl (the signature: wg_mesh.gateway.signed)
            assert absolute <= set(sys.stdlib_module_names) | {"__future__", "botocore", "nacl"}, module
    return closure


@pytest.mark.parametrize("kind", ship.SOURCE_MODULES)
def test_the_shipped_modules_are_the_agents_import_closure(kind: str) -> None:
    """Following every import, except make_source's of another kind's source module (imported only for that kind)."""
    shipped = set(ship.modules(kind))
    others = {m for k, ms in ship.SOURCE_MODULES.items() if k != kind for m in ms}
    assert closure_of(["agent.py", *ship.SOURCE_MODULES[kind]], others) == shipped
    assert "ship.py" not in shipped and "bootstrap.py" not in shipped


def test_the_boot_modules_are_the_bootstraps_import_closure() -> None:
    """A user data with a bundle ships only these: the bootstrap runs with nothing else installed. AWS's reads a
    secret (source_aws, imported in main); GCP's reads a file, and needs no source module at all."""
    others = {m for k, ms in ship.SOURCE_MODULES.items() if k != "aws" for m in ms}
    assert closure_of(["bootstrap.py", "source_aws.py"], others) == set(ship.BOOT_MODULES)
    every_source = {m for ms in ship.SOURCE_MODULES.values() for m in ms}
    assert closure_of(["bootstrap.py"], every_source) == set(ship.FILE_BOOT_MODULES)


# The gateway package and the two scripts delivery: live ships compacted (wg_mesh.plan.metrics, wg_mesh.plan.userdata).
COMPACTED = sorted(GATEWAY.glob("*.py"))


@pytest.mark.parametrize("path", COMPACTED, ids=lambda p: p.name)
def test_compaction_keeps_the_code(path: Path) -> None:
    source = path.read_text()
    compacted = ship.compact(source)

    def tree(text: str) -> str:
        parsed = ast.parse(text)
        for node in ast.walk(parsed):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                    node.body = body[1:] or [ast.Pass()]
        return ast.dump(parsed)

    assert tree(compacted) == tree(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(compacted).readline))
    assert [t.string for t in tokens if t.type == tokenize.COMMENT] == (
        ["#!/usr/bin/env python3"] if source.startswith("#!") else []
    )
    assert compacted.startswith("#!") == source.startswith("#!")  # a script keeps its interpreter line
    assert len(compacted) < len(source) or not source


def install(tmp_path: Path, kind: str, names: tuple[str, ...] | None = None) -> Path:
    lib = tmp_path / "lib"
    for path, text, mode in ship.package_files(kind, names):
        target = lib / path.removeprefix(ship.LIB_DIR + "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        assert mode == "0644"
    return lib


@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists() or shutil.which("wg") is None, reason="needs python3 and wg")
def test_the_shipped_package_runs_once_under_the_system_python(tmp_path: Path) -> None:
    """The real first-boot path without root: Debian's python3, real `wg pubkey`, `ip link` (no such interface)."""
    keys = Keys()
    lib = install(tmp_path, "file")
    (tmp_path / "document.json").write_text(doc_text(base_plan(), keys))
    (tmp_path / "private.key").write_text(keys.private)
    config = tmp_path / "agent.json"
    source = ship.file_source(str(tmp_path / "document.json"), str(tmp_path / "private.key"))
    text = ship.agent_config(SITE, source, trust=TRUST_JSON)
    config.write_text(text.replace('"wg0"', '"wgmesh-absent"'))  # an interface this host surely lacks
    root = tmp_path / "root"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(lib)}
    argv = [SYSTEM_PYTHON, "-m", f"{ship.PACKAGE}.agent", "--config", str(config), "--once", "--root", str(root)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert (root / "etc/wireguard/wg0.conf").read_text().count("[Peer]") == len(base_plan().peers)
    assert keys.private not in done.stderr + done.stdout
    prom = (root / "var/lib/prometheus/node-exporter/wg_mesh_agent.prom").read_text()
    assert f'wgmesh_agent_last_apply_success{{site="{SITE}"}} 1' in prom


def test_the_once_command_reads_the_environment_file_and_runs_the_agent(tmp_path: Path) -> None:
    (script,) = [a for a in ship.once_command(42) if "--once" in a]
    assert ship.once_command(42)[:2] == ["sh", "-c"]
    assert f"-m {ship.PACKAGE}.agent --config {ship.CONFIG_PATH} --once --timeout 42" in script
    env_file = tmp_path / "env"
    env_file.write_text("WG_MESH_PROBE=from-the-environment-file\n")
    echo = """exec sh -c 'echo "$WG_MESH_PROBE $PYTHONPATH"' python3"""
    probe = script.replace(ship.ENVIRONMENT_FILE, str(env_file)).replace("exec python3", echo)
    done = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["from-the-environment-file", ship.LIB_DIR]
    missing = script.replace(ship.ENVIRONMENT_FILE, str(tmp_path / "none")).replace("exec python3", echo)
    done = subprocess.run(["sh", "-c", missing], capture_output=True, text=True, check=True)
    assert done.stdout == f" {ship.LIB_DIR}\n"


def test_the_unit() -> None:
    unit = ship.unit_text()
    for line in (
        "After=network-online.target wg-quick@wg0.service",
        "Restart=always",
        "RestartSec=5",
        f"EnvironmentFile=-{ship.ENVIRONMENT_FILE}",
        f"Environment=PYTHONPATH={ship.LIB_DIR}",
        f"ExecStart=/usr/bin/python3 -m {ship.PACKAGE}.agent --config {ship.CONFIG_PATH}",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "WantedBy=multi-user.target",
    ):
        assert line in unit.splitlines()
    caps = next(line for line in unit.splitlines() if line.startswith("CapabilityBoundingSet="))
    assert {"CAP_NET_ADMIN", "CAP_NET_RAW"} <= set(caps.split("=", 1)[1].split())
    writable = next(line for line in unit.splitlines() if line.startswith("ReadWritePaths=")).split("=", 1)[1].split()
    paths = agent.Paths()
    for path in (paths.wg_conf, paths.mapping, paths.metrics):
        assert any(os.path.dirname(path) == w.lstrip("-") for w in writable), path
    assert "StateDirectory=wg-mesh" in unit and paths.state.startswith("/var/lib/wg-mesh/")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / ship.UNIT_NAME
    unit.write_text(ship.unit_text())
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    problems = [line for line in done.stderr.splitlines() if ship.UNIT_NAME in line and "wg-quick@" not in line]
    assert not problems, done.stderr


@pytest.mark.parametrize("kind", SOURCES)
def test_the_config_is_what_the_agent_reads(kind: str) -> None:
    trust = {**TRUST_JSON, "site": "gcp-euw3", "cloud": {"aws": "aws", "gcp": "gcp", "file": "static"}[kind]}
    path, text, mode = ship.config_file("gcp-euw3", SOURCES[kind], 7, trust=trust)
    assert (path, mode) == ("/etc/wg-mesh/agent.json", "0644")
    config = agent.load_config(text)
    assert (config.site, config.interface, config.poll_seconds, config.source) == ("gcp-euw3", "wg0", 7, SOURCES[kind])
    assert config.trust is not None and config.trust.site == "gcp-euw3" and json.loads(text)["trust"] == trust
    without = {k: v for k, v in json.loads(text).items() if k != "trust"}
    with pytest.raises(ValueError, match="trust: missing"):  # the agent exits 2 (test_agent.py)
        agent.load_config(json.dumps(without))
    with pytest.raises(ValueError, match=r"trust\.site"):
        ship.config_file("aws-use1", SOURCES[kind], 7, trust=trust)
    agent.make_source(config.source)
    assert json.loads(text)["source"]["kind"] == kind


def test_every_file_and_the_size(capsys: pytest.CaptureFixture[str]) -> None:
    """What each cloud's user data carries for the agent, and the sizes that bind (bench/agent_size.py)."""
    from bench import agent_size
    from wg_mesh.plan import live, userdata

    for source in SOURCES.values():
        files = ship.files("aws-use1", source)
        assert [p for p, _, _ in files][-2:] == [ship.CONFIG_PATH, ship.UNIT_PATH]
    bundled = ship.files("aws-use1", {**AWS, "bundle_secret": "wg-mesh/proj/prod/aws-use1/agent"})
    assert [p.rsplit("/", 1)[1] for p, _, _ in bundled[:-2]] == list(ship.BOOT_MODULES)
    bundled = ship.files("gcp-euw3", {**GCP, "bundle_file": ship.BUNDLE_FILE})
    assert [p.rsplit("/", 1)[1] for p, _, _ in bundled[:-2]] == list(ship.FILE_BOOT_MODULES)
    sizes = agent_size.live_sizes()
    with capsys.disabled():
        print(f"\n  agent package gzip'd: {agent_size.package_sizes()}, AWS boot part {agent_size.boot_size()}")
        print(f"  live user data: {sizes}")
    # The whole package no longer fits an AWS user data (next to the metrics script and the readiness mark): the
    # reason for the bundle. With it, the AWS user data kept about half of EC2's 16 KB free until the INPUT policy
    # (wg_mesh.plan.inputpolicy: its two rule files and unit, ~550 bytes gzip'd), over a third until 2026-12-04: the
    # bundle's bzip2 bootstrap (+310 B) and the roaming peers' metrics script (+1.2 KB) took it to 10,984 B (67 %).
    # A quarter is kept free now; the metrics script could travel in the bundle (25 KB free) if it grows again.
    assert sizes["aws-whole"] > userdata.AWS_USER_DATA_LIMIT
    assert sizes["aws"] < userdata.AWS_USER_DATA_LIMIT * 3 // 4
    # Secrets Manager's 65536 bytes (wg_mesh.gateway.bootstrap). As a SecretString of base64 gzip the bundle went
    # 33.9 KB (the private-path fallback), 54.6 KB (issue 20), 59.4 KB (relays, 2026-12-04), and 64.0 KB with the
    # DNS re-resolver (branch dns, measured merged): too near the limit. Since 2026-12-04 it is a SecretBinary of
    # bzip2 (measured on this text: gzip 44.6 KB, xz 40.3 KB, bzip2 38.2 KB of bytes; 40.7 KB with the re-resolver).
    # The bound is three quarters of the limit: below it even the base64 of the value would fit a secret, however
    # the limit is counted, and it leaves ~8.5 KB to grow after the re-resolver (~25 KB to the limit itself).
    assert len(ship.bundle_value("aws")) < bootstrap.VALUE_LIMIT * 3 // 4
    assert len(ship.bundle_base64("aws")) <= live.DOCUMENT_LIMITS["aws"]  # the base64 input, so
    # GCE's 262144 bytes for a metadata value: the package as plain text crossed it in 2026-12 (269,078 B with the
    # freshness and hardening branches merged); as a bundle file (the same bzip2, base64) the GCP user data took 105 KB
    # (40 %). The bundle's own bound (VALUE_LIMIT, both clouds) binds first now; a half of GCE's limit is kept free.
    assert sizes["gcp-whole"] > userdata.GCP_METADATA_VALUE_LIMIT
    assert sizes["gcp"] < userdata.GCP_METADATA_VALUE_LIMIT // 2
    assert len(ship.bundle_value("gcp")) < bootstrap.VALUE_LIMIT * 3 // 4


def test_every_module_a_shipped_module_imports_is_shipped_too() -> None:
    """A gateway runs only what the package carries: a relative import of a module left out of ship.MODULES fails
    at the first `--once` (it did, for fallback.py, in the lab)."""
    gateway = Path(ship.__file__).parent
    # agent.py and ha_run.py import one cloud's modules, by agent.json's kind, inside a function: each kind ships
    # its own (SOURCE_MODULES); everything else must be in the package of every kind
    per_kind = {name.removesuffix(".py") for names in ship.SOURCE_MODULES.values() for name in names}
    for kind in ship.SOURCE_MODULES:
        shipped = {name.removesuffix(".py") for name in ship.modules(kind)}
        for name in ship.modules(kind):
            for node in ast.walk(ast.parse((gateway / name).read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 1:
                    wanted = [node.module] if node.module else [alias.name for alias in node.names]
                    missing = [m for m in wanted if m not in shipped and m not in per_kind]
                    assert not missing, f"{kind}: {name} imports {missing}, which ship.MODULES does not carry"
