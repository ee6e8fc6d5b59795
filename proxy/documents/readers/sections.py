"""Reflowable text (Markdown) cut on its own structure: one unit per heading, else by paragraphs.

Each unit carries a location a person can find: `section=<heading>` under a heading,
`paragraph=N` or `line=N` where the text has no headings.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass
from typing import Literal

from proxy.documents.readers.table_form import block_parts, table_blocks
from proxy.documents.readers.text import PAGE_CHARS, split_pages

Anchor = Literal["line", "paragraph"]

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_EMPHASIS = re.compile(r"[*_`]+")
MAX_LABEL_CHARS = 100

_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    "|sixteen|seventeen|eighteen|nineteen|twenty|first|second|third|fourth|fifth|sixth"
    "|seventh|eighth|ninth|tenth|last"
)
_ROMAN = r"(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})"
_CHAPTER = re.compile(
    r"^\s*(?:chapter|book|part|volume|act|kapitel|teil|buch|chapitre|livre|partie|tome"
    r"|cap[ií]tulo|parte|libro|capitolo|hoofdstuk|deel|глава|часть|книга|том)"
    rf"\s+(?:\d{{1,3}}|{_ROMAN}|{_NUMBER_WORDS})\b[.:]?(?:\s+\S.*)?$",
    re.IGNORECASE,
)
MAX_CHAPTER_CHARS = 80
LEAST_CHAPTERS = 2
"""A plain-text book's chapters are told from their heading lines ("CHAPTER I.", "Chapter 3.
The Storm", "Глава 2"), standing alone between blank lines; a lone "Part 2" is no book."""


@dataclass(frozen=True)
class Section:
    """A unit of a reflowable document."""

    text: str
    location: str
    title: str = ""


@dataclass
class _Raw:
    level: int  # 0 for text before the first heading
    title: str
    path: str
    lines: list[tuple[int, int, str]]  # (line number, paragraph number, line)


def split_sections(
    text: str,
    *,
    anchor: Anchor = "paragraph",
    headings: bool = True,
    chapters: bool = False,
    part_chars: int = PAGE_CHARS,
    max_units: int = 2000,
) -> list[Section]:
    """Units of `text` in order; every non-blank line of the input is in exactly one of them,
    but the caption and header rows of a table cut into parts, which head each part. With
    `chapters` (plain text), a book's chapter heading lines open sections too."""
    raws = _by_heading(text, headings, chapter_lines(text) if chapters else frozenset())
    units: list[Section] = []
    carried: list[tuple[int, int, str]] = []  # heading lines of sections with no body
    seen_titles: set[str] = set()
    for raw in raws:
        lines = carried + raw.lines
        body = [line for _, _, line in raw.lines[1 if raw.level else 0 :] if line.strip()]
        if raw.level and not body:
            carried = lines
            continue
        carried = []
        if raw.level:
            label = raw.title if raw.title not in seen_titles else raw.path
            seen_titles.add(raw.title)
            location = "section=" + _label(label)
            parts = _parts(lines, part_chars)
            for index, (_, _, part) in enumerate(parts):
                title = raw.path if index == 0 else f"{raw.path} (continued)"
                units.append(Section(part, location, title))
        else:
            for line_no, paragraph_no, part in _parts(lines, part_chars):
                number = line_no if anchor == "line" else paragraph_no
                units.append(Section(part, f"{anchor}={number}"))
    if carried:
        units.extend(Section(part, f"{anchor}=1") for _, _, part in _parts(carried, part_chars))
    return merge_units(units, max_units)


def chapter_lines(text: str) -> frozenset[int]:
    """The numbers of the lines that head a plain-text book's chapters: short, standing alone
    between blank lines (or the text's edges), named like a chapter; none unless there are at
    least LEAST_CHAPTERS of them."""
    lines = text.split("\n")
    found = frozenset(
        number
        for number, line in enumerate(lines, start=1)
        if len(line) <= MAX_CHAPTER_CHARS
        and _CHAPTER.match(line)
        and (number == 1 or not lines[number - 2].strip())
        and (number == len(lines) or not lines[number].strip())
    )
    return found if len(found) >= LEAST_CHAPTERS else frozenset()


def _by_heading(text: str, headings: bool, chapters: frozenset[int] = frozenset()) -> list[_Raw]:
    raws = [_Raw(0, "", "", [])]
    path: list[tuple[int, str]] = []
    fence: str | None = None
    paragraph = 0
    blank = True
    for number, line in enumerate(text.split("\n"), start=1):
        # Trailing spaces go here, once (units are tidy text); the regexes run only on lines
        # that can be a fence or a heading.
        line = line.rstrip()
        if line and blank:
            paragraph += 1
        blank = not line
        opened = _FENCE.match(line) if "`" in line or "~" in line else None
        if opened:
            marks = opened.group(1)
            if fence is None:
                fence = marks
            elif marks[0] == fence[0] and len(marks) >= len(fence):
                fence = None
        can_head = headings and fence is None and not opened and line.startswith("#")
        match = _HEADING.match(line) if can_head else None
        if number in chapters:
            title = " ".join(line.split())
            path = [(1, title)]
            raws.append(_Raw(1, title, title, []))
        elif match:
            level, title = len(match.group(1)), _EMPHASIS.sub("", match.group(2)).strip()
            path = [(lvl, name) for lvl, name in path if lvl < level] + [(level, title)]
            raws.append(_Raw(level, title, " > ".join(name for _, name in path), []))
        raws[-1].lines.append((number, paragraph, line))
    return raws


def _parts(lines: list[tuple[int, int, str]], part_chars: int) -> list[tuple[int, int, str]]:
    """Lines grouped into parts of at most `part_chars`, cut between paragraphs if possible,
    else between lines; each part with the line and paragraph number it starts at."""
    paragraphs: list[list[tuple[int, int, str]]] = []
    for line_no, paragraph_no, line in lines:
        if not line.strip():
            continue
        if paragraphs and paragraphs[-1][0][1] == paragraph_no:
            paragraphs[-1].append((line_no, paragraph_no, line))
        else:
            paragraphs.append([(line_no, paragraph_no, line)])
    pieces: list[tuple[int, int, str]] = []
    for paragraph in paragraphs:
        text = "\n".join(line for _, _, line in paragraph)
        if len(text) <= part_chars:
            pieces.append((paragraph[0][0], paragraph[0][1], text))
            continue
        # A table longer than a part: cut between rows, each part under its caption and
        # header again; the lines around it (hard-wrapped text, logs): cut by lines.
        offsets = list(itertools.accumulate((len(line) + 1 for _, _, line in paragraph), initial=0))
        done = 0
        for block in table_blocks(text):
            first = bisect.bisect_right(offsets, block.start) - 1
            pieces.extend(_by_lines(paragraph[done:first], part_chars))
            for offset, piece in block_parts(text, block, part_chars):
                at = paragraph[bisect.bisect_right(offsets, offset) - 1]
                pieces.append((at[0], at[1], piece))
            done = bisect.bisect_right(offsets, block.end)
        pieces.extend(_by_lines(paragraph[done:], part_chars))
    parts: list[tuple[int, int, str]] = []
    current: list[str] = []
    start: tuple[int, int] = (0, 0)
    size = 0
    for line_no, paragraph_no, piece in pieces:
        if current and size + len(piece) + 2 > part_chars:
            parts.append((*start, _joined(current)))
            current, size = [], 0
        if not current:
            start = (line_no, paragraph_no)
        current.append(piece)
        size += len(piece) + 2
    if current:
        parts.append((*start, _joined(current)))
    return [part for part in parts if part[2]]


def _joined(pieces: list[str]) -> str:
    # Pieces are runs of non-blank, right-stripped lines: joined, they are tidy already.
    return "\n\n".join(pieces).strip()


def _by_lines(lines: list[tuple[int, int, str]], part_chars: int) -> list[tuple[int, int, str]]:
    """Lines cut into pieces of at most `part_chars`, between lines where possible."""
    pieces: list[tuple[int, int, str]] = []
    group: list[tuple[int, int, str]] = []
    size = 0
    for line_no, paragraph_no, line in [*lines, (0, 0, "")]:
        if group and (not line or size + len(line) + 1 > part_chars):
            joined = "\n".join(item for _, _, item in group)
            pieces.extend(
                (group[0][0], group[0][1], piece) for piece in split_pages(joined, part_chars)
            )
            group, size = [], 0
        if line:
            group.append((line_no, paragraph_no, line))
            size += len(line) + 1
    return pieces


def _label(title: str) -> str:
    title = " ".join(title.split())
    return title if len(title) <= MAX_LABEL_CHARS else title[: MAX_LABEL_CHARS - 1] + "…"


def merge_units(units: list[Section], max_units: int) -> list[Section]:
    """Over `max_units`, neighbours share a unit (named by the first): bounded, nothing lost."""
    if len(units) <= max_units:
        return units
    size = -(-len(units) // max_units)
    merged = []
    for start in range(0, len(units), size):
        group = units[start : start + size]
        merged.append(
            Section("\n\n".join(unit.text for unit in group), group[0].location, group[0].title)
        )
    return merged
