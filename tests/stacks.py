"""The repository's own stack files, listed by name: the tests run on these and nothing else.

A user's stack file next to them (`Pulumi.corp.yaml`, as the quick start suggests) is the user's, not the
repository's: globbing `Pulumi.*.yaml` would turn it into failing golden, lab and monitoring tests (issue 23).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STACK_NAMES = ("dev", "ha", "prod")  # Pulumi.<name>.yaml at the repository's root
EXAMPLE_STACKS = (
    "examples/underlay/Pulumi.underlay.yaml",
    "examples/edge/Pulumi.edge.yaml",
    "examples/edge/Pulumi.edge-ha.yaml",
)


def stack_files(root: Path = REPO) -> list[Path]:
    """The repository's root stack files under `root`; a listed file that is missing is an error, not a skip."""
    paths = [root / f"Pulumi.{name}.yaml" for name in STACK_NAMES]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"stack files listed in tests/stacks.py are missing: {', '.join(missing)}")
    return paths


def example_stack_files(root: Path = REPO) -> list[Path]:
    paths = [root / rel for rel in EXAMPLE_STACKS]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"example stack files listed in tests/stacks.py are missing: {', '.join(missing)}")
    return paths


STACK_FILES = stack_files()
