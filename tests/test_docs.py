"""The documentation: the README stays a landing page, every relative link lands on a file (and heading), every
page under docs/ is in the site's nav (mkdocs.yml). Pure: no mkdocs import (scripts/check builds the site)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README_MAX_LINES = 200

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
ATTR_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def prose(text: str) -> str:
    """The text without fenced blocks and inline code, where `[x](y)` is not a link."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """Python-Markdown's toc slugify (mkdocs' default): what `#anchor` a heading gets."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", ATTR_ID.sub("", heading)).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    found = {slug(h) for h in HEADING.findall(text)} | set(ATTR_ID.findall(text))
    return found | {f"{a}_{n}" for a in found for n in range(1, 10)}  # repeated headings: slug_1, slug_2, ...


def links(path: Path) -> Iterator[str]:
    for target in LINK.findall(prose(path.read_text())):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not ours to check
            yield target


def broken(path: Path, root: Path = REPO) -> list[str]:
    problems = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.exists():
            problems.append(f"{path.relative_to(root)}: {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            problems.append(f"{path.relative_to(root)}: {target}: no heading #{anchor} in {where.name}")
    return problems


def nav_pages(nav: object) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


def test_the_readme_is_a_landing_page() -> None:
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}: the rest in docs/)"


def test_every_relative_link_resolves() -> None:
    problems = [p for path in [REPO / "README.md", *pages()] for p in broken(path)]
    assert not problems, "\n".join(problems)


def test_the_link_check_sees_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A page\n\n## Rolling the image (GCP)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#rolling-the-image-gcp) [gone](missing.md) [no heading](there.md#nowhere)\n"
        "`[not a link](missing.md)`\n```\n[not a link](missing.md)\n```\n[web](https://example.com/x.md)\n"
    )
    assert broken(page, tmp_path) == [
        "page.md: missing.md: no such file",
        "page.md: there.md#nowhere: no heading #nowhere in there.md",
    ]


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    listed = set(nav_pages(config["nav"]))
    present = {path.relative_to(DOCS).as_posix() for path in pages()}
    assert not present - listed, f"pages under docs/ missing from mkdocs.yml's nav: {sorted(present - listed)}"
    assert not listed - present, f"mkdocs.yml's nav names pages that do not exist: {sorted(listed - present)}"
