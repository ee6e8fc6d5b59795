"""Markdown building blocks shared by the parsers: tables, fenced code, headings."""

from __future__ import annotations

import re
from collections.abc import Sequence

_SPACES = re.compile(r"\s+")
_BACKTICKS = re.compile(r"`{3,}")
MAX_CELL_CHARS = 2000
"""A cell longer than this is cut (and the document warned about): a table row is not a book."""


def cell(value: object) -> tuple[str, bool]:
    """A value as one table cell (whitespace collapsed, pipes escaped), and whether it was cut."""
    text = _SPACES.sub(" ", "" if value is None else str(value)).strip()
    cut = len(text) > MAX_CELL_CHARS
    if cut:
        text = text[:MAX_CELL_CHARS] + "…"
    return text.replace("|", "\\|"), cut


def table(rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table of already-escaped cells; the first row is the header."""
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    if width == 0:
        return ""
    lines = []
    for index, row in enumerate(rows):
        padded = [*row, *([""] * (width - len(row)))]
        lines.append("| " + " | ".join(padded) + " |")
        if index == 0:
            lines.append("|" + "---|" * width)
    return "\n".join(lines)


def fence(text: str, language: str = "") -> str:
    """`text` verbatim in a fenced code block longer than any backtick run inside it."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=2)
    marks = "`" * (longest + 1)
    return f"{marks}{language}\n{text.rstrip()}\n{marks}"


def heading(level: int, text: str) -> str:
    return "#" * max(1, min(level, 6)) + " " + _SPACES.sub(" ", text).strip()
