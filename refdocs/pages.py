"""The generated pages and the command that writes or checks them (`python -m refdocs [--check]`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from refdocs import api_page, cli_page, config_page, iam_page, md, metrics_page, resources_page

REPO = Path(__file__).resolve().parent.parent
DIRECTORY = "docs/reference"
# file name -> renderer, in the order of the site's navigation
PAGES: dict[str, Callable[[], str]] = {
    "config.md": config_page.render,
    "cli.md": cli_page.render,
    "python-api.md": api_page.render,
    "metrics.md": metrics_page.render,
    "iam.md": iam_page.render,
    "resources.md": resources_page.render,
}


def render_all() -> dict[str, str]:
    """file name -> the page's text, rendered now."""
    return {name: render() for name, render in PAGES.items()}


def stale(root: Path = REPO) -> list[str]:
    """The pages under root/docs/reference whose committed text differs from what the code renders now."""
    directory = root / DIRECTORY
    return [
        name
        for name, text in render_all().items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=md.COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed page differs; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{DIRECTORY}/{name} is stale: run `{md.COMMAND}`", file=sys.stderr)
        return 1 if names else 0
    directory = REPO / DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (directory / name).write_text(text)
        print(f"wrote {DIRECTORY}/{name}")
    return 0
