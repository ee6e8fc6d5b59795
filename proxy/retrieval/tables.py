"""Markdown tables inside a document's text: where each one is, its caption and its header rows."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The parsers write every table (PDF, DOCX, HTML, sheets, slides, ODF) as a Markdown pipe table:
# a header row, a `|---|` separator, one line per row (proxy/documents/markdown.py).
_ROW = re.compile(r"[ \t]*\|.*\|[ \t]*")
_SEPARATOR = re.compile(r"[ \t]*\|(?:[ \t]*:?-{3,}:?[ \t]*\|)+[ \t]*")
# A line that names the table after it: a heading, or "Table 3: ...", "Tab. 2", "Таблица 1", ...
_CAPTION = re.compile(
    r"(?:#{1,6}[ \t]+\S|(?:table|tab\.|tabelle|tableau|tabla|tabella|tabel|таблица|табл\.)"
    r"(?:[ \t]*[:.\d]|[ \t]+\S)|表)",
    re.IGNORECASE,
)
MAX_CAPTION_CHARS = 200


@dataclass(frozen=True)
class TableBlock:
    """One Markdown table: `start`/`end` span its lines (header to last row, no final newline),
    `rows` the offsets where each body row's line starts; `header` is the header row and its
    separator; `caption` the line naming it right above it, if any, and `caption_start` where
    that line starts (the table's own start when it has none)."""

    start: int
    end: int
    header: str
    rows: tuple[int, ...]
    caption: str = ""
    caption_start: int = -1

    @property
    def context(self) -> str:
        """What a passage starting inside the table's rows needs to be read: caption, header."""
        return f"{self.caption}\n{self.header}" if self.caption else self.header


def table_blocks(text: str) -> list[TableBlock]:
    """Every Markdown table of `text`, in order."""
    blocks: list[TableBlock] = []
    lines = text.splitlines(keepends=True)
    offsets: list[int] = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line)
    k = 0
    while k + 1 < len(lines):
        header, separator = lines[k].rstrip("\r\n"), lines[k + 1].rstrip("\r\n")
        if not (_ROW.fullmatch(header) and _SEPARATOR.fullmatch(separator)):
            k += 1
            continue
        last = k + 1
        while last + 1 < len(lines) and _ROW.fullmatch(lines[last + 1].rstrip("\r\n")):
            last += 1
        caption, caption_start = _caption_before(lines, offsets, k)
        blocks.append(
            TableBlock(
                start=offsets[k],
                end=offsets[last] + len(lines[last].rstrip("\r\n")),
                header=f"{header.strip()}\n{separator.strip()}",
                rows=tuple(offsets[row] for row in range(k + 2, last + 1)),
                caption=caption,
                caption_start=caption_start if caption else offsets[k],
            )
        )
        k = last + 1
    return blocks


def _caption_before(lines: list[str], offsets: list[int], k: int) -> tuple[str, int]:
    """The nearest non-blank line above line `k` (at most one blank line between), when it
    names a table."""
    above = k - 1
    if above >= 0 and not lines[above].strip():
        above -= 1
    if above < 0:
        return "", -1
    line = lines[above].strip()
    if not line or len(line) > MAX_CAPTION_CHARS or not _CAPTION.match(line):
        return "", -1
    return line, offsets[above] + len(lines[above]) - len(lines[above].lstrip())
