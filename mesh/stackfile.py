"""Reading `wg-mesh:mesh` out of a Pulumi stack file, for the offline commands (validate, lab)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mesh.config import ConfigError, MeshConfig, load_mesh

CONFIG_KEY = "wg-mesh:mesh"


def stack_file(stack: str, directory: Path | None = None) -> Path:
    return (directory or Path.cwd()) / f"Pulumi.{stack}.yaml"


def read_raw(path: Path) -> Any:
    """The raw `wg-mesh:mesh` value of a stack file; ConfigError if the file cannot give one."""
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such stack file"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read ({exc.strerror})"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML ({str(exc).splitlines()[0]})"]) from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict) or CONFIG_KEY not in config:
        raise ConfigError([f"{path}: has no config.{CONFIG_KEY} key"])
    return config[CONFIG_KEY]


def load(path: Path) -> MeshConfig:
    return load_mesh(read_raw(path))
