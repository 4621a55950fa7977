"""Problem lines of the config: one problem, one line, bounded, whatever the input quoted in it.

Values from the user's config end up in messages. A name with a newline must not print as a second problem,
and an alias-expanded list must not print at all: every quoted value goes through `quote`, every line through
`one_line`, every report through `bounded`.
"""

from __future__ import annotations

from reprlib import Repr
from typing import Any

MAX_PROBLEMS = 50  # lines of one report; the rest is counted, not printed
MAX_PROBLEM_LENGTH = 400  # characters of one line
_QUOTE = Repr()  # attributes, not keywords: Python 3.11 has no Repr(**limits)
_QUOTE.maxlevel, _QUOTE.maxstring, _QUOTE.maxother, _QUOTE.maxlist, _QUOTE.maxdict = 2, 60, 60, 4, 4


def one_line(problem: str) -> str:
    """One problem, one line: control characters (newlines above all) escaped, length capped.

    Values from the config end up in messages; a name with a newline must not print as a second problem."""
    head = problem[:MAX_PROBLEM_LENGTH]  # escaping only makes it longer: cut first, then again after
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in head)
    text += "…" if len(problem) > MAX_PROBLEM_LENGTH else ""
    return text if len(text) <= MAX_PROBLEM_LENGTH else text[: MAX_PROBLEM_LENGTH - 1] + "…"


def bounded(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], f"(more): {len(problems) - MAX_PROBLEMS} further problems not shown"]


def quote(value: Any) -> str:
    """A value as it may appear in a message: repr, bounded in size and depth whatever the input."""
    return _QUOTE.repr(value)


EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()} (YAML reads yes/no/on/off/true/false as booleans)"
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {quote(value)}"
