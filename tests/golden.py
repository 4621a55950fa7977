"""Golden files: rendered text compared with tests/golden/. Regenerate only on purpose:

WG_MESH_UPDATE_GOLDEN=1 python -m pytest tests/
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("WG_MESH_UPDATE_GOLDEN") == "1"


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing: run with WG_MESH_UPDATE_GOLDEN=1 once and review the file"
    assert text == path.read_text(), f"{name} differs from its golden file; if intended, regenerate and review the diff"
