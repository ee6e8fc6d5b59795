"""Markdown building blocks shared by the parsers: fenced code and headings (tables: table_form)."""

from __future__ import annotations

import re

_SPACES = re.compile(r"\s+")
_BACKTICKS = re.compile(r"`{3,}")


def fence(text: str, language: str = "") -> str:
    """`text` verbatim in a fenced code block longer than any backtick run inside it."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=2)
    marks = "`" * (longest + 1)
    return f"{marks}{language}\n{text.rstrip()}\n{marks}"


def heading(level: int, text: str) -> str:
    return "#" * max(1, min(level, 6)) + " " + _SPACES.sub(" ", text).strip()
