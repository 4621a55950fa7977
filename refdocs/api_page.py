"""docs/reference/python-api.md: the names `from wg_mesh import ...` offers (`wg_mesh.__all__`), from their
docstrings and their source: each class's docstring, constructor, attributes (with the docstring or comment beside
each), a TypedDict's keys, and a site component's Args; then the test helpers (`wg_mesh.testing.__all__`): each
name's signature and docstring, and the command that runs the example's test."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
import typing
from typing import Any

from pydantic import BaseModel

import wg_mesh
import wg_mesh.testing
from refdocs import md
from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite
from wg_mesh.config.underlay import PrivatePath

SOURCE = "the docstrings and source of `wg_mesh.__all__` and `wg_mesh.testing.__all__`"
EXAMPLE_TEST = "cd examples/existing-vpc && python -m unittest -v test_example   # or: python -m pytest test_example.py"
# The TypedDicts that carry the config's keys: a key without a note of its own gets its config field's description.
CONFIG_MODELS: dict[str, tuple[type[BaseModel], ...]] = {
    "MeshArgs": (MeshConfig,),
    "SiteArgs": (AwsSite, GcpSite, StaticSite),
    "PrivatePathArgs": (PrivatePath,),
}


def _config_note(typed_dict: str, key: str) -> str:
    """The config field's description; where the clouds' fields differ, each cloud's (`cloud` itself: none)."""
    found: dict[str, list[str]] = {}
    for model in CONFIG_MODELS.get(typed_dict, ()):
        info = model.model_fields.get(key)
        if info is not None and info.description and key != "cloud":
            found.setdefault(info.description, []).append(model.__name__.removesuffix("Site").lower())
    if not found:
        return ""
    if len(found) == 1:
        return f"{next(iter(found))} ([config](config.md))"
    return " ".join(f"{', '.join(clouds)}: {text}" for text, clouds in found.items()) + " ([config](config.md))"


def _doc(obj: Any) -> str:
    """The object's own docstring (not a base class's, not the signature a dataclass makes up)."""
    doc = obj.__dict__.get("__doc__") or ""
    return "" if not doc or doc.startswith(f"{getattr(obj, '__name__', '')}(") else inspect.cleandoc(doc)


def _summary(cls: type) -> str:
    """The first paragraph of the class's docstring, else of its module's (a component that its module describes)."""
    return (_doc(cls) or _doc(inspect.getmodule(cls))).split("\n\n")[0]


def _class_node(cls: type) -> tuple[ast.ClassDef, list[str]]:
    source = textwrap.dedent(inspect.getsource(cls))
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef), cls
    return node, source.splitlines()


def _attributes(cls: type) -> list[tuple[str, str, str, str]]:
    """(name, annotation, group, note) of each annotated attribute in the class body, in order. The note: the
    docstring under it, else its trailing comment, else (outside a TypedDict) the comment lines just above it; the
    group (a TypedDict only): the comment line that heads its group of keys."""
    node, lines = _class_node(cls)
    typed_dict = typing.is_typeddict(cls)
    out: list[tuple[str, str, str, str]] = []
    group, body = "", node.body
    for index, item in enumerate(body):
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            continue
        name = item.target.id
        if name.startswith("_"):
            continue
        above: list[str] = []
        row = item.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            above.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        if typed_dict and above:
            group = " ".join(above)
        note = ""
        after = body[index + 1] if index + 1 < len(body) else None
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            note = inspect.cleandoc(after.value.value)
        elif "#" in lines[item.end_lineno - 1][item.end_col_offset :]:  # type: ignore[operator]
            note = lines[item.end_lineno - 1][item.end_col_offset :].split("#", 1)[1].strip()  # type: ignore[operator]
        elif above and not typed_dict:
            note = " ".join(above)
        annotation = ast.unparse(item.annotation)
        out.append((name, annotation, group, note))
    return out


def _signature(cls: type) -> str | None:
    node, _ = _class_node(cls)
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            params = item.args.args[1:]
            defaults = [None] * (len(params) - len(item.args.defaults)) + list(item.args.defaults)
            parts = []
            for param, default in zip(params, defaults, strict=True):
                text = param.arg + (f": {ast.unparse(param.annotation)}" if param.annotation else "")
                parts.append(text + (f" = {ast.unparse(default)}" if default is not None else ""))
            return f"{cls.__name__}({', '.join(parts)})"
    return None


def _kind(cls: type) -> str:
    if typing.is_typeddict(cls):
        return "TypedDict"
    if issubclass(cls, BaseException):
        return "exception"
    return "component" if any(base.__name__ == "ComponentResource" for base in cls.__mro__) else "class"


def _typed_dict(cls: type) -> list[str]:
    required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    attributes = _attributes(cls)
    grouped = any(group for _, _, group, _ in attributes)
    columns = ("key", "type", "required", *(["for"] if grouped else []), "notes")
    rows = []
    for name, annotation, group, note in attributes:
        shown = (
            annotation.removeprefix("NotRequired[").removesuffix("]")
            if annotation.startswith("NotRequired[")
            else annotation
        )
        rows.append(
            [
                md.code(name),
                md.code(shown),
                "yes" if name in required else "",
                *([group] if grouped else []),
                note or _config_note(cls.__name__, name),
            ]
        )
    return md.table(columns, rows)


def _component(cls: type) -> list[str]:
    lines: list[str] = []
    signature = _signature(cls)
    if signature:
        lines += md.fenced(signature, "python")
    attributes = [
        a for klass in reversed(cls.__mro__) if klass.__module__.startswith("wg_mesh") for a in _attributes(klass)
    ]
    if attributes:
        lines += ["Attributes:", ""]
        lines += md.table(("name", "type", "notes"), [[md.code(n), md.code(a), note] for n, a, _, note in attributes])
    args_class = _args_class(cls)
    if args_class is not None:
        lines += [f"**{args_class.__name__}** (`{args_class.__module__}`): {_doc(args_class) or 'its arguments.'}", ""]
        fields = [a for klass in reversed(args_class.__mro__) if klass.__module__.startswith("wg_mesh")
                  for a in _attributes(klass)]  # fmt: skip
        bound = _type_arguments(args_class)
        lines += md.table(
            ("field", "type", "notes"), [[md.code(n), md.code(bound.get(a, a)), note] for n, a, _, note in fields]
        )
    return lines


def _type_arguments(cls: type) -> dict[str, str]:
    """A generic base's type variables as the subclass binds them (`SiteComponentArgs[AwsSite]`: SiteT -> AwsSite)."""
    bound: dict[str, str] = {}
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        for var, arg in zip(getattr(origin, "__parameters__", ()), typing.get_args(base), strict=False):
            bound[var.__name__] = getattr(arg, "__name__", str(arg))
    return bound


def _args_class(cls: type) -> type | None:
    """The class named by the constructor's `args` annotation, when it is defined beside the component."""
    node, _ = _class_node(cls)
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            for arg in item.args.args:
                if arg.arg == "args" and arg.annotation is not None:
                    found = getattr(inspect.getmodule(cls), ast.unparse(arg.annotation), None)
                    return found if isinstance(found, type) and not typing.is_typeddict(found) else None
    return None


def _order(name: str) -> tuple[int, str]:
    cls = getattr(wg_mesh, name)
    return ({"component": 0, "TypedDict": 1, "exception": 3}.get(_kind(cls), 2), name)


def render() -> str:
    names = sorted(wg_mesh.__all__, key=_order)
    lines = md.header("Python API", SOURCE)
    lines += [
        (_doc(wg_mesh).split("\n\n")[0]),
        "",
        *md.fenced("from wg_mesh import (\n" + "".join(f"    {n},\n" for n in sorted(wg_mesh.__all__)) + ")", "python"),
        *md.table(
            ("name", "kind", "what"),
            [
                [
                    f"[{name}](#{name.lower()})",
                    _kind(getattr(wg_mesh, name)),
                    _summary(getattr(wg_mesh, name)),
                ]
                for name in names
            ],
        ),
    ]
    for name in names:
        cls = getattr(wg_mesh, name)
        lines += [f"## {name}", "", f"`{cls.__module__}.{cls.__qualname__}` ({_kind(cls)})", ""]
        if _doc(cls) or _summary(cls):
            lines += [_doc(cls) or _summary(cls), ""]
        if typing.is_typeddict(cls):
            lines += _typed_dict(cls)
        elif _kind(cls) in ("component", "class"):
            lines += _component(cls)
    return md.page([*lines, *_testing()])


def _signature(obj: Any) -> str:
    return f"{obj.__name__}{inspect.signature(obj)}".replace("'", "")


def _constant_note(module_name: str, name: str) -> str:
    """The trailing comment of the module-level assignment of `name` in the module that defines it."""
    for line in inspect.getsource(importlib.import_module(module_name)).splitlines():
        if line.startswith(f"{name} =") and "#" in line:
            return line.split("#", 1)[1].strip()
    return ""


def _testing() -> list[str]:
    """The test helpers: what `from wg_mesh.testing import ...` offers, and the example's test that uses them."""
    module = wg_mesh.testing
    lines = [
        "## Test helpers: `wg_mesh.testing`",
        "",
        _doc(module).split("\n\n")[0],
        "",
        "The repository's example program is tested with them: from a clone, with the package installed,",
        "",
        *md.fenced(EXAMPLE_TEST, "bash"),
    ]
    for name in module.__all__:
        obj = getattr(module, name)
        lines += [f"### {name}", ""]
        if inspect.isclass(obj):
            lines += [f"`{obj.__module__}.{obj.__qualname__}` (class)", ""]
            if _doc(obj):
                lines += [_doc(obj).split("\n\n")[0], ""]
            fields = [f"- `{n}: {a}`" + (f": {note}" if note else "") for n, a, _, note in _attributes(obj)]
            methods = [
                f"- `{m}` (property): {inspect.getdoc(f).splitlines()[0]}"  # type: ignore[union-attr]
                if isinstance(f, property)
                else f"- `{_signature(f)}`: {inspect.getdoc(f).splitlines()[0]}"  # type: ignore[union-attr]
                for m, f in vars(obj).items()
                if not m.startswith("_") and (inspect.isfunction(f) or isinstance(f, property)) and inspect.getdoc(f)
            ]
            lines += [*fields, *methods, ""] if fields or methods else []
        elif inspect.isfunction(obj):
            lines += [f"`{_signature(obj)}` (function)", "", (inspect.getdoc(obj) or "").split("\n\n")[0], ""]
        else:
            homes = (module.__name__, f"{module.__name__}.mocks")
            home = next(m for m in homes if name in vars(importlib.import_module(m)) and _constant_note(m, name))
            lines += [f"`{name} = {obj!r}` (constant): {_constant_note(home, name)}", ""]
    return lines
