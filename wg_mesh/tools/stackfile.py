"""Reading `wg-mesh:mesh` out of a Pulumi stack file, for the offline commands (validate, lab)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from wg_mesh.config import ConfigError, MeshConfig
from wg_mesh.plan.validate import load_mesh

CONFIG_KEY = "wg-mesh:mesh"
MAX_DEPTH = 64  # nesting levels; a stack file needs about 6
MAX_NODES = 100_000  # values after expanding aliases; the largest bench mesh (64 sites) has about 1,500


class _StackLoader(yaml.SafeLoader):
    """SafeLoader that tracks where it is, so that every problem can name its field.

    Refuses what YAML allows but a config must not have: nesting deeper than MAX_DEPTH (PyYAML recurses), and,
    checked on the composed tree before anything is built, duplicate keys and aliases that expand past MAX_NODES
    (an "alias bomb": a few lines that expand to billions of values)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.path: list[str] = []

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        part = (
            f".{index.value}" if isinstance(index, yaml.ScalarNode) else f"[{index}]" if isinstance(index, int) else ""
        )
        self.path.append(part)
        try:
            if len(self.path) > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Refused(self.path, f"nested deeper than {MAX_DEPTH} levels (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self.path.pop()


class _Refused(Exception):
    def __init__(self, path: list[str], message: str) -> None:
        super().__init__(message)
        self.field = "".join(path).lstrip(".")
        self.message = message


def _check_tree(root: yaml.Node) -> None:
    """Duplicate keys and the expanded size, walking each distinct node once (aliases share nodes)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def walk(node: yaml.Node, path: str) -> int:
        if id(node) in active:
            raise _Refused([path], "refers to itself through an alias (a value that contains itself)")
        if id(node) in sizes:
            return sizes[id(node)]
        active.add(id(node))
        size = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if name is not None and key.tag != "tag:yaml.org,2002:merge":
                    if name in seen:
                        where = f"{path}.{name}".lstrip(".")
                        raise _Refused(
                            [where],
                            f"duplicate key (lines {seen[name]} and {key.start_mark.line + 1}; YAML would keep "
                            "the last one silently)",
                        )
                    seen[name] = key.start_mark.line + 1
                size += walk(key, path) + walk(value, f"{path}.{name}" if name is not None else path)
        elif isinstance(node, yaml.SequenceNode):
            size += sum(walk(item, f"{path}[{i}]") for i, item in enumerate(node.value))
        active.discard(id(node))
        sizes[id(node)] = size
        if size > MAX_NODES:
            raise _Refused(
                [path], f"expands to more than {MAX_NODES} values (aliases that multiply: refused, not expanded)"
            )
        return size

    walk(root, "")


def _field(where: str) -> str:
    """A path inside the file, said the way validate's other problems say it (relative to wg-mesh:mesh)."""
    prefix = f"config.{CONFIG_KEY}"
    if where == prefix:
        return "(top level)"
    if where.startswith(prefix + ".") or where.startswith(prefix + "["):
        return where[len(prefix) :].lstrip(".")
    return where or "(document)"


def parse(text: str, path: Path) -> Any:
    """The document in `text`, or ConfigError naming the field and the line."""
    try:
        loader = _StackLoader(text)
    except yaml.YAMLError as exc:  # the reader refuses some characters (NUL, other control characters) at once
        raise ConfigError([f"(document): not valid YAML in {path.name}: {str(exc).splitlines()[0]}"]) from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_tree(root)
        return loader.construct_document(root)
    except _Refused as exc:
        raise ConfigError([f"{_field(exc.field)}: {exc.message} in {path.name}"]) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
        first = str(problem) if problem else type(exc).__name__
        field = _field("".join(loader.path).lstrip("."))
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError([f"{field}: not valid YAML in {path.name}{line}: {first}"]) from None
    finally:
        loader.dispose()


def stack_file(stack: str, directory: Path | None = None) -> Path:
    return (directory or Path.cwd()) / f"Pulumi.{stack}.yaml"


def read_document(path: Path, kind: str = "stack file") -> Any:
    """The YAML document in `path` (a stack file, or another file read as strictly: `cost`'s price file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such {kind}"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read ({exc.strerror})"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            [f"{path}: not UTF-8 (byte 0x{data[exc.start]:02x} on line {line}); {kind}s are UTF-8"]
        ) from None
    return parse(text, path)


def read_raw(path: Path) -> Any:
    """The raw `wg-mesh:mesh` value of a stack file; ConfigError if the file cannot give one."""
    document = read_document(path)
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict) or CONFIG_KEY not in config:
        raise ConfigError([f"{path}: has no config.{CONFIG_KEY} key"])
    return config[CONFIG_KEY]


def load(path: Path) -> MeshConfig:
    return load_mesh(read_raw(path))
