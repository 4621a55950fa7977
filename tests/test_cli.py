"""`python -m wg_mesh validate`: exit 0 + one line when valid; exit 1 + one line per problem; never a traceback.

Usage errors (a flag, a stack or a file that is not there) exit 2: tests/test_cli_guide.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def run_mesh(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wg_mesh", *args], cwd=cwd, capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


@pytest.mark.parametrize(("stack", "delivery"), [("dev", "user-data"), ("prod", "live")])
def test_validate_shipped_stacks(stack: str, delivery: str) -> None:
    result = run_mesh("validate", "--stack", stack)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1
    assert result.stdout.startswith("ok: ") and "tunnel MTU 1400" in result.stdout
    assert result.stdout.endswith(f", delivery {delivery}\n")


def write_stack(tmp_path: Path, mesh: object) -> Path:
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": mesh}}))
    return path


def test_validate_lists_every_problem_and_exits_1(tmp_path: Path) -> None:
    mesh = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    mesh["listen_port"] = 99999
    mesh["sites"][1]["overlay_ip"] = "10.201.0.2"
    mesh["sites"][2]["cidrs"] = ["10.10.0.1/16"]
    result = run_mesh("validate", "--file", str(write_stack(tmp_path, mesh)))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "listen_port: 99999 is above the maximum 65535",
        "sites[2].cidrs[0]: 10.10.0.1/16 has host bits set (did you mean 10.10.0.0/16?)",
        "sites[1].overlay_ip: 10.201.0.2 is outside overlay_cidr 10.200.0.0/24",
    ]
    assert "Traceback" not in result.stderr


def test_an_unknown_delivery_exits_1_naming_the_field(tmp_path: Path) -> None:
    mesh = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    mesh["delivery"] = "push"
    result = run_mesh("validate", "--file", str(write_stack(tmp_path, mesh)))
    assert (result.returncode, result.stderr) == (1, "delivery: Input should be 'user-data' or 'live'\n")


def test_validate_stack_name_reads_the_file_in_the_current_directory(tmp_path: Path) -> None:
    write_stack(tmp_path, {"overlay_cidr": "10.200.0.0/24", "sites": []})
    result = run_mesh("validate", "--stack", "broken", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (1, "sites: a mesh needs at least two sites, got 0\n")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such stack file"),  # a usage error: exit 2
        ("config: [unclosed", "not valid YAML"),
        ("config:\n  aws:region: us-east-1\n", "has no config.wg-mesh:mesh key"),
        ("just a string", "has no config.wg-mesh:mesh key"),
    ],
)
def test_unreadable_stack_files_exit_1_without_traceback(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    if content is not None:
        path.write_text(content)
    result = run_mesh("validate", "--file", str(path))
    assert result.returncode == (2 if content is None else 1)
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
