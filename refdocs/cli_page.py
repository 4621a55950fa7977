"""docs/reference/cli.md: the `wg-mesh` command and every subcommand, from its argparse parsers."""

from __future__ import annotations

import argparse
from importlib import import_module
from pathlib import Path
from typing import Any

from refdocs import md

SOURCE = "the CLI's argparse parsers (`build_parser`)"
WIDTH = 100  # usage lines wrap here, whatever the terminal
# Where the parser is built: the CLI's own module once it has one, the package's __main__ before that.
MODULES = ("wg_mesh.cli", "wg_mesh.__main__")
REPO = Path(__file__).resolve().parent.parent


def build_parser() -> argparse.ArgumentParser:
    for name in MODULES:
        try:
            module = import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        if hasattr(module, "build_parser"):
            parser: argparse.ArgumentParser = module.build_parser()
            return parser
    raise LookupError(f"no build_parser in {', '.join(MODULES)}")


def _fixed_width(parser: argparse.ArgumentParser) -> None:
    formatter: Any = parser.formatter_class

    def fixed(prog: str) -> Any:
        return formatter(prog, width=WIDTH)

    parser.formatter_class = fixed


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order they were added."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _option_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            flags = ", ".join(action.option_strings)
            if action.nargs != 0:
                metavar = action.metavar or (
                    "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
                )
                flags += f" {metavar}"
        else:
            flags = str(action.metavar or action.dest)
        default = action.default
        shown = (
            ""
            if default is None or default is argparse.SUPPRESS or isinstance(default, bool) or action.required
            else md.code(str(default).replace(f"{REPO}/", ""))  # a file of the package: its path in the repository
        )
        optional = action.nargs in ("?", "*") or (action.option_strings and not action.required)
        required = "" if optional else "required"
        help_text = (action.help or "").replace("%(default)s", str(default)).replace("%(prog)s", parser.prog)
        rows.append([md.code(flags), required, shown, help_text])
    return rows


def _section(level: int, title: str, help_text: str, parser: argparse.ArgumentParser) -> list[str]:
    _fixed_width(parser)
    lines = [f"{'#' * level} {title}", ""]
    description = parser.description or help_text
    if description:
        lines += [description.strip(), ""]
    lines += md.fenced(parser.format_usage(), "text")
    rows = _option_rows(parser)
    if rows:
        lines += md.table(("option", "required", "default", "what"), rows)
    if parser.epilog:
        lines += md.fenced(parser.epilog, "text")
    for name, sub_help, sub in _subcommands(parser):
        lines += _section(level + 1, f"`{title.strip('`')} {name}`", sub_help, sub)
    return lines


def render() -> str:
    parser = build_parser()
    lines = md.header("Command line", SOURCE)
    commands = _subcommands(parser)
    lines += [
        f"`{parser.prog}` runs offline: it needs no cloud account and no Pulumi CLI.",
        "",
        *md.table(("command", "what"), [[md.code(f"{parser.prog} {name}"), text] for name, text, _ in commands]),
    ]
    _fixed_width(parser)
    lines += md.fenced(parser.format_usage(), "text")
    for name, help_text, sub in commands:
        lines += _section(2, f"`{parser.prog} {name}`", help_text, sub)
    return md.page(lines)
