"""The tests run on the repository's own stack files only: a user's stack file beside them changes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import shipped
from tests.conftest import STACK_FILES as CONFTEST_STACK_FILES
from tests.stacks import EXAMPLE_STACKS, REPO, STACK_FILES, STACK_NAMES, example_stack_files, stack_files


def _copy_of_the_repository(tmp_path: Path) -> Path:
    for path in (*STACK_FILES, *example_stack_files()):
        target = tmp_path / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


def test_a_users_stack_file_beside_the_repositorys_is_not_a_test_case(tmp_path: Path) -> None:
    root = _copy_of_the_repository(tmp_path)
    shutil.copy(root / "Pulumi.dev.yaml", root / "Pulumi.corp.yaml")
    (root / "examples" / "underlay" / "Pulumi.mine.yaml").write_text("config: {}\n")
    assert [p.name for p in stack_files(root)] == [f"Pulumi.{name}.yaml" for name in STACK_NAMES]
    assert [str(p.relative_to(root)) for p in example_stack_files(root)] == list(EXAMPLE_STACKS)


def test_a_listed_stack_file_that_is_gone_fails_loudly(tmp_path: Path) -> None:
    root = _copy_of_the_repository(tmp_path)
    (root / "Pulumi.ha.yaml").unlink()
    with pytest.raises(FileNotFoundError, match=r"Pulumi\.ha\.yaml"):
        stack_files(root)


def test_every_stack_driven_test_uses_the_list() -> None:
    assert [p.name for p in CONFTEST_STACK_FILES] == ["Pulumi.dev.yaml", "Pulumi.ha.yaml", "Pulumi.prod.yaml"]
    assert list(shipped.STACK_FILES) == [*STACK_FILES, *example_stack_files()]
    offenders = [
        path.name
        for path in sorted((REPO / "tests").glob("*.py"))
        if path.name != "test_stacks.py" and ('glob("Pulumi' in path.read_text() or "glob('Pulumi" in path.read_text())
    ]
    assert offenders == [], f"tests globbing stack files instead of using tests/stacks.py: {offenders}"
