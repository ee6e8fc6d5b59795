"""Where each part of a document's text sits: its section path, from the units' titles (a PDF's
outline, an EPUB's table of contents) and the Markdown headings the parsers write."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

SEPARATOR = " > "
MAX_PART_CHARS = 80
MAX_PATH_CHARS = 160
"""A path is context, not content: its last parts (the nearest headings) are kept."""

_HEADING = re.compile(r"^[ \t]{0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^[ \t]{0,3}(?:`{3,}|~{3,})", re.MULTILINE)
_EMPHASIS = re.compile(r"[*_`]+")


@dataclass(frozen=True)
class SectionPaths:
    """The section path in force from each offset on."""

    offsets: tuple[int, ...]
    paths: tuple[str, ...]

    def at(self, offset: int) -> str:
        index = bisect.bisect_right(self.offsets, offset) - 1
        return self.paths[index] if index >= 0 else ""


def section_paths(
    text: str, page_offsets: Sequence[int], page_titles: Sequence[str]
) -> SectionPaths:
    """Paths through `text` (units joined, unit k starting at `page_offsets[k]`).

    A unit whose parser gave it a title (a PDF page's outline path, an EPUB chapter) starts in
    that section; the Markdown headings inside units (DOCX, HTML, Markdown, EPUB) open sections
    of their own, nested by level under it.
    """
    marks: list[tuple[int, str]] = []
    fenced = _fenced_spans(text)
    headings = [
        match
        for match in _HEADING.finditer(text)
        if not any(start <= match.start() < end for start, end in fenced)
    ]
    starts = [*page_offsets, len(text)]
    at_heading = 0
    stack: list[tuple[int, str]] = []
    outer = ""
    for k, start in enumerate(page_offsets):
        title = _clean(page_titles[k]) if k < len(page_titles) else ""
        if title and title != outer:
            # A new titled unit: its headings nest under its title, not the last unit's.
            outer, stack = title, []
        marks.append((start, _join(outer, stack)))
        while at_heading < len(headings) and headings[at_heading].start() < starts[k + 1]:
            match = headings[at_heading]
            at_heading += 1
            level, name = len(match.group(1)), _clean(_EMPHASIS.sub("", match.group(2)))
            stack = [(depth, part) for depth, part in stack if depth < level] + [(level, name)]
            marks.append((match.start(), _join(outer, stack)))
    offsets: list[int] = []
    paths: list[str] = []
    for offset, path in marks:
        if offsets and offsets[-1] == offset:
            paths[-1] = path
        elif not paths or paths[-1] != path:
            offsets.append(offset)
            paths.append(path)
    return SectionPaths(tuple(offsets), tuple(paths))


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    fences = [match.start() for match in _FENCE.finditer(text)]
    return [(fences[i], fences[i + 1]) for i in range(0, len(fences) - 1, 2)]


def _join(outer: str, stack: list[tuple[int, str]]) -> str:
    parts = outer.split(SEPARATOR) if outer else []
    for _, name in stack:
        if not name or (parts and parts[-1].casefold() == name.casefold()):
            continue  # a chapter's own heading repeats the title its unit already has
        parts.append(name)
    path = SEPARATOR.join(part[:MAX_PART_CHARS] for part in parts)
    while len(path) > MAX_PATH_CHARS and SEPARATOR in path:
        path = path.split(SEPARATOR, 1)[1]
    return path[-MAX_PATH_CHARS:]


_CONTINUED = " (continued)"


def _clean(title: str) -> str:
    # A unit cut from a long section is titled "<path> (continued)": the same section.
    return " ".join(title.split()).removesuffix(_CONTINUED)
