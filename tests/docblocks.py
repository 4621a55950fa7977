"""The docs' fenced blocks and the shell commands in them, for tests/test_doc_examples.py (every block checked,
pure) and tests/test_readme_quickstart.py (the README's quick starts run in a fresh clone).

`blocks(page)`: every fenced block with its line, language and section (the nearest heading above it).
`commands(text)`: a bash block's simple commands, split on `&&`, `||`, `;`, `|`, newlines, with `\\` continuations
joined, quotes removed, comments and redirections dropped, `for ... do`/`done` unwrapped.
`PULUMI`: the Pulumi CLI subcommands and flags the docs use, from the Pulumi CLI reference (cited per entry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")

# Sections whose blocks start in the directory that holds the repository cloned as `wg-mesh` (the page says so);
# every other block starts in the repository.
OUTSIDE_THE_CLONE = {
    ("README.md", "Quick start: the component in your own program"),
    ("docs/getting-started/program.md", "Install"),
    ("docs/getting-started/install.md", "Into your own project (the component, and the `wg-mesh` command)"),
}

# The Pulumi CLI as the docs use it: subcommand -> (flags taking no value, flags taking a value, positionals at
# most). Sources: the Pulumi CLI reference, https://www.pulumi.com/docs/iac/cli/commands/ (pulumi_login: `--local`,
# a backend URL; pulumi_stack_init: `--secrets-provider`; pulumi_stack_select; pulumi_stack_output: `--json`,
# `--show-secrets`, `--stack`, [property-name]; pulumi_stack_rm: `--yes`, `--force`; pulumi_preview and pulumi_up:
# `--stack`, `--diff`, `--yes`; pulumi_destroy: `--stack`, `--yes`; pulumi_version). A flag or subcommand not listed
# fails the docs test: check it in that reference, then add it here.
_STACK = {"--stack", "-s"}
PULUMI: dict[str, tuple[frozenset[str], frozenset[str], int]] = {
    "login": (frozenset({"--local", "-l"}), frozenset({"--cloud-url", "-c"}), 1),
    "stack init": (frozenset(), frozenset({"--secrets-provider", *_STACK}), 1),
    "stack select": (frozenset(), frozenset(_STACK), 1),
    "stack output": (frozenset({"--json", "-j", "--show-secrets", "--shell"}), frozenset(_STACK), 1),
    "stack rm": (frozenset({"--yes", "-y", "--force", "-f", "--preserve-config"}), frozenset(_STACK), 1),
    "preview": (frozenset({"--diff", "--json", "-j", "--expect-no-changes"}), frozenset(_STACK), 0),
    "up": (frozenset({"--diff", "--yes", "-y", "--skip-preview"}), frozenset(_STACK), 0),
    "destroy": (frozenset({"--yes", "-y", "--skip-preview", "--remove"}), frozenset(_STACK), 0),
    "version": (frozenset(), frozenset(), 0),
}


def pulumi_problem(argv: list[str]) -> str | None:
    """Why `pulumi ARGV` is not a command the table knows (None: it is): subcommand, flags, positionals."""
    sub = " ".join(argv[:2]) if " ".join(argv[:2]) in PULUMI else (argv[0] if argv else "")
    if sub not in PULUMI:
        return f"unknown pulumi subcommand: {' '.join(argv[:2]) or '(none)'}"
    switches, valued, most = PULUMI[sub]
    rest, positionals = argv[len(sub.split()) :], []
    while rest:
        word = rest.pop(0)
        flag = word.split("=", 1)[0]
        if flag in switches and "=" not in word:
            continue
        if flag in valued:
            if "=" not in word and (not rest or rest.pop(0).startswith("-")):
                return f"pulumi {sub}: {flag} needs a value"
            continue
        if word.startswith("-"):
            return f"pulumi {sub}: unknown flag {flag}"
        positionals.append(word)
    if len(positionals) > most:
        return f"pulumi {sub}: at most {most} argument(s), got {positionals}"
    return None


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str  # dedented by the fence's indentation
    section: str

    @property
    def name(self) -> str:
        return self.page.relative_to(REPO).as_posix() if self.page.is_relative_to(REPO) else self.page.name

    @property
    def where(self) -> str:
        return f"{self.name}:{self.line}"

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.section)


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    found, section, i = [], "", 0
    while i < len(lines):
        if heading := HEADING.match(lines[i]):
            section = heading.group(1)
        fence = FENCE.match(lines[i])
        if fence:
            indent, mark = fence.group("indent"), fence.group("fence")
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(mark):
                end += 1
            body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]]
            found.append(Block(page, i + 1, fence.group("lang"), "\n".join(body) + "\n", section))
            i = end
        i += 1
    return found


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    line: int  # within the block, 0-based
    comment: str  # the comment on its last line, if any
    stdout: str | None = None  # the file a `>` sends its output to


OPERATORS = ("&&", "||", ";;", ";", "|", "&", "\n", "(", ")")
# The one command substitution the docs use, in the README's and the quick start's blocks that need root: `$SUDO` is
# empty as root (a container, where `sudo` is often not installed) and `sudo` for anyone else. tests/doccommands.py
# reads `$SUDO CMD` as `CMD`; tests/test_doc_examples.py refuses a bare `sudo` on those pages.
SUDO_LINE = 'SUDO=$([ "$(id -u)" = 0 ] || echo sudo)'


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, value, line): kind "word", "op", "redirect" or "comment"."""
    out: list[tuple[str, str, int]] = []
    word: list[str] | None = None
    i, line = 0, 0

    def end_word() -> None:
        nonlocal word
        if word is not None:
            out.append(("word", "".join(word), line))
            word = None

    while i < len(text):
        c = text[i]
        if c == "\\" and text[i + 1 : i + 2] == "\n":
            i, line = i + 2, line + 1
            continue
        if c in " \t":
            end_word()
        elif c == "\\":
            word = (word or []) + [text[i + 1]]
            i += 1
        elif c == "'":
            close = text.index("'", i + 1)
            word = (word or []) + [text[i + 1 : close]]
            line += text.count("\n", i, close)
            i = close
        elif c == '"':
            j, part = i + 1, []
            while text[j] != '"':
                if text[j] == "\\" and text[j + 1] in '"\\$`':
                    j += 1
                elif text[j : j + 2] == "$(" or text[j] == "`":
                    raise ValueError(f"line {line + 1}: command substitution: not supported by this test")
                part.append(text[j])
                j += 1
            word = (word or []) + ["".join(part)]
            line += text.count("\n", i, j)
            i = j
        elif c == "#" and word is None:
            close = text.find("\n", i)
            close = len(text) if close < 0 else close
            out.append(("comment", text[i + 1 : close].strip(), line))
            i = close
            continue
        elif c in "<>" and (word is None or "".join(word).isdigit()):
            word = None
            j = i + 1 + (text[i + 1 : i + 2] in (">", "&"))
            out.append(("redirect", text[i:j], line))
            i = j
            continue
        elif text[i : i + 2] == "$(" or c == "`":
            raise ValueError(f"line {line + 1}: command substitution: not supported by this test")
        elif op := next((o for o in OPERATORS if text.startswith(o, i)), None):
            end_word()
            out.append(("op", op, line))
            line += op == "\n"
            i += len(op)
            continue
        else:
            word = (word or []) + [c]
        i += 1
    end_word()
    return out


def commands(text: str) -> list[Command]:
    text = text.replace(SUDO_LINE, "SUDO=sudo-unless-root")  # an assignment, as far as the checks go
    found: list[Command] = []
    words: list[str] = []
    first, skip_target, comment, stdout = 0, "", "", None

    def flush() -> None:
        nonlocal words, comment, stdout
        while words and words[0] in ("do", "then", "else", "!"):
            words = words[1:]
        if words and words[0] not in ("done", "fi") and not (words[0] == "for" and "in" in words):
            found.append(Command(tuple(words), first, comment, stdout))
        words, comment, stdout = [], "", None

    for kind, value, line in _tokens(text):
        if kind == "redirect":
            skip_target = value
        elif kind == "word":
            if skip_target:
                stdout = value if skip_target in (">", "1>") else stdout
                skip_target = ""
            elif value:
                first = line if not words else first
                words.append(value)
        elif kind == "op":
            flush()
        elif kind == "comment" and words:
            comment = value
    flush()
    return found
