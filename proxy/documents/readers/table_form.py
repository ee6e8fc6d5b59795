"""Tables in parsed text: the one Markdown form every parser writes and the passage cutter reads.

Every format's tables (DOCX, ODT, HTML, EPUB, PDF, XLSX, XLS, ODS, CSV, PPTX, ODP) come out as:

    Table: Смета на этап 2            <- the caption line, right before the table (optional)
    | Статья | Кол-во | Сумма |      <- the header row: the table's first row
    |---|---|---|                     <- the separator
    | Кабель | 4 | 4 800 |            <- one line per row

- A table is a paragraph of its own: a blank line (or the start of the text) before its caption
  or header row, a blank line (or the end of the text) after its last row.
- Each row is one line that starts with `| ` and ends with ` |`, cells separated by ` | `; a
  `|` inside a cell is written `\\|`; a cell holds no line break (its whitespace is collapsed)
  and at most MAX_CELL_CHARS characters (a longer one is cut with `…` and the document warns).
- Every row has as many cells as the header. A horizontally merged cell keeps its text in its
  first column and leaves the columns it spans empty; a vertically merged cell's text is
  repeated in each row it spans, so every row reads on its own. A table nested in a cell is
  flattened into that cell (`a / b; c / d`).
- The caption is one line, `Table: <text>` (pandoc's caption syntax, so the text stays plain
  Markdown): a DOCX paragraph in the Caption style or starting "Table N"/"Таблица N" right
  before the table (else right after it), an ODT caption or such a paragraph, HTML's
  `<caption>` or `<figcaption>` (else such a paragraph), PDF text right above a found table
  starting with "Table"/"Tab."/"Таблица"; a spreadsheet's tables take the sheet's name (and the
  title row above a table, when it has one: `Table: Q3 — Travel costs`), a slide's tables its
  title, a CSV file's table the file name.
- Spreadsheets: each block of rows between empty rows is a table of its own, its header the
  block's first non-empty row (after a title row).
- A table cut into parts (a sheet over ~4,000 characters, a table longer than a unit) starts
  each part with its caption and header row again; a row is never cut, even when it alone is
  over the size.

`table_blocks(text)` finds these tables in a unit's text, for the passage cutter; it also reads
the pipe tables of Markdown files as their authors wrote them (outer pipes optional, alignment
colons in the separator).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

CAPTION_PREFIX = "Table: "
MAX_CELL_CHARS = 2000
"""A cell longer than this is cut (and the document warned about): a table row is not a book."""

_SPACES = re.compile(r"\s+")
_SEPARATOR = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_CAPTIONED = re.compile(
    r"^(?:table|tab\.|tabelle|tableau|таблица|табл\.)[ \t\u00a0]*"
    r"(?:\d|[ivxlc]+\b|[a-zа-я]\.?\d|[:.—–-])",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_FIGURE = re.compile(r"^(?:figure|fig\.|abbildung|abb\.|рисунок|рис\.)", re.IGNORECASE)


def cell(value: object) -> tuple[str, bool]:
    """A value as one table cell (whitespace collapsed, pipes escaped), and whether it was cut."""
    text = "" if value is None else str(value)
    # Most cells are short single-spaced values: the regex only runs where it changes something.
    if "  " in text or "\n" in text or "\t" in text or "\r" in text or not text.isprintable():
        text = _SPACES.sub(" ", text)
    text = text.strip()
    cut = len(text) > MAX_CELL_CHARS
    if cut:
        text = text[:MAX_CELL_CHARS] + "…"
    return text.replace("|", "\\|"), cut


def caption_line(caption: str) -> str:
    """`Table: <caption>` on one line; "" for no caption."""
    text = _SPACES.sub(" ", caption).strip()
    return CAPTION_PREFIX + text if text else ""


def table(rows: Sequence[Sequence[str]], caption: str = "") -> str:
    """A Markdown table of already-escaped cells, its first row the header, under its caption."""
    width = max((len(row) for row in rows), default=0)
    if width == 0:
        return ""
    lines = [caption_line(caption)] if caption.strip() else []
    for index, row in enumerate(rows):
        lines.append(_row(row, width))
        if index == 0:
            lines.append("|" + "---|" * width)
    return "\n".join(lines)


def _row(row: Sequence[str], width: int) -> str:
    return "| " + " | ".join([*row, *([""] * (width - len(row)))]) + " |"


def table_parts(
    rows: Sequence[Sequence[str]], caption: str = "", size: int = 4000
) -> list[tuple[str, int, int]]:
    """A table as parts of about `size` characters at most, each starting with the caption and
    the header row; a row is never cut (one longer than `size` is a part of its own). Each part
    comes with the range of body rows it holds (`rows[1 + start : 1 + end]`)."""
    width = max((len(row) for row in rows), default=0)
    if width == 0:
        return []
    head = table(rows[:1], caption)
    body = [_row(row, width) for row in rows[1:]]
    parts: list[tuple[str, int, int]] = []
    start = 0
    used = len(head)
    for index, line in enumerate(body):
        if index > start and used + 1 + len(line) > size:
            parts.append(("\n".join([head, *body[start:index]]), start, index))
            start, used = index, len(head)
        used += 1 + len(line)
    parts.append(("\n".join([head, *body[start:]]), start, len(body)))
    return parts


def is_caption(text: str) -> bool:
    """A paragraph that names a table: "Table 3 ...", "Tab. 2:", "Таблица 1 — ...", "Tabelle 4"."""
    line = text.strip()
    return "\n" not in line and 0 < len(line) <= 300 and bool(_CAPTIONED.match(line))


def is_figure_caption(text: str) -> bool:
    return bool(_FIGURE.match(text.strip()))


@dataclass(frozen=True)
class TableBlock:
    """A table found in a text: `text[start:end]` is its caption line (if any) to its last row.

    `head` is what each part of the table repeats (caption line, header row, separator), and
    `rows` the spans of its body rows, so a passage can end only between rows.
    """

    start: int
    end: int
    caption: str
    header_lines: tuple[str, ...]
    rows: tuple[tuple[int, int], ...]

    @property
    def head(self) -> str:
        return "\n".join(
            ([caption_line(self.caption)] if self.caption else []) + [*self.header_lines]
        )


def _is_row(line: str) -> bool:
    stripped = line.strip()
    return "|" in stripped and not stripped.startswith(("```", "~~~"))


def table_blocks(text: str) -> list[TableBlock]:
    """Every table in `text` (see the module's contract), in order; a pure function."""
    lines: list[tuple[int, int]] = []  # (start, end) of each line
    position = 0
    for line in text.split("\n"):
        lines.append((position, position + len(line)))
        position += len(line) + 1
    found: list[TableBlock] = []
    index = 0
    count = len(lines)
    fence = ""
    while index + 1 < count:
        header = text[lines[index][0] : lines[index][1]]
        opened = _FENCE.match(header)
        if opened:  # pipes in fenced code are code
            marks = opened.group(1)
            if not fence:
                fence = marks
            elif marks[0] == fence[0] and len(marks) >= len(fence):
                fence = ""
        if fence or opened:
            index += 1
            continue
        separator = text[lines[index + 1][0] : lines[index + 1][1]]
        if not (_is_row(header) and _SEPARATOR.match(separator) and "-" in separator):
            index += 1
            continue
        if "|" not in separator and not header.strip().startswith("|"):
            index += 1
            continue
        start = lines[index][0]
        caption = ""
        if index > 0:
            above = text[lines[index - 1][0] : lines[index - 1][1]]
            if above.startswith(CAPTION_PREFIX):
                caption = above[len(CAPTION_PREFIX) :].strip()
                start = lines[index - 1][0]
        end_index = index + 2
        while end_index < count and _is_row(text[lines[end_index][0] : lines[end_index][1]]):
            end_index += 1
        rows = tuple(lines[index + 2 : end_index])
        end = rows[-1][1] if rows else lines[index + 1][1]
        found.append(TableBlock(start, end, caption, (header.strip(), separator.strip()), rows))
        index = end_index
    return found


@dataclass
class Table:
    """A table read by a parser: rows of escaped cells (the first the header), its caption."""

    rows: list[list[str]]
    caption: str = ""


@dataclass(frozen=True)
class Caption:
    """A paragraph its document marks as a caption (Word's Caption style, ODF's caption
    paragraphs): it names the table next to it, if there is one."""

    text: str


Block = str | Table | Caption


def join_blocks(blocks: Sequence[Block]) -> str:
    """Paragraphs and tables as Markdown, one blank line apart, each table under its caption.

    A table without a caption of its own takes the caption paragraph right before it (a
    `Caption`, or a paragraph `is_caption` accepts), else the one right after it unless that
    one introduces the next table. A caption paragraph no table takes stays a paragraph.
    """
    items: list[Block] = []
    for block in blocks:
        if isinstance(block, str):
            items.extend(part.strip("\n") for part in block.split("\n\n") if part.strip())
        elif isinstance(block, Caption):
            if block.text.strip():
                items.append(block)
        elif any(any(text for text in row) for row in block.rows):
            items.append(block)
    used: set[int] = set()

    def names_table(index: int) -> bool:
        if index < 0 or index >= len(items) or index in used:
            return False
        item = items[index]
        if isinstance(item, Caption):
            return not is_figure_caption(item.text)
        return isinstance(item, str) and is_caption(item)

    captions: dict[int, str] = {}
    for index, item in enumerate(items):
        if not isinstance(item, Table):
            continue
        if item.caption.strip():
            captions[index] = item.caption
            continue
        before, after = index - 1, index + 1
        follows = after + 1 < len(items) and isinstance(items[after + 1], Table)
        if names_table(before):
            chosen = before
        elif names_table(after) and not (follows and not _has_caption(items[after + 1])):
            chosen = after
        else:
            continue
        used.add(chosen)
        text = items[chosen]
        captions[index] = text.text if isinstance(text, Caption) else str(text)
    out: list[str] = []
    for index, item in enumerate(items):
        if index in used:
            continue
        if isinstance(item, Table):
            out.append(table(item.rows, captions.get(index, "")))
        elif isinstance(item, Caption):
            out.append(item.text)
        else:
            out.append(item)
    return "\n\n".join(part for part in out if part)


def _has_caption(item: Block) -> bool:
    return isinstance(item, Table) and bool(item.caption.strip())


def block_parts(text: str, block: TableBlock, size: int = 4000) -> list[tuple[int, str]]:
    """A table found in `text` cut between its rows into parts of about `size` characters at
    most, each starting with the table's head; each part with the offset of its first own line
    (the table's start, then each part's first row)."""
    head = block.head
    parts: list[tuple[int, str]] = []
    start_row = 0
    used = len(head)
    for index, (row_start, row_end) in enumerate(block.rows):
        if index > start_row and used + 1 + row_end - row_start > size:
            parts.append(_block_part(text, block, head, start_row, index))
            start_row, used = index, len(head)
        used += 1 + row_end - row_start
    parts.append(_block_part(text, block, head, start_row, len(block.rows)))
    return parts


def _block_part(text: str, block: TableBlock, head: str, first: int, end: int) -> tuple[int, str]:
    rows = [text[s:e].strip() for s, e in block.rows[first:end]]
    offset = block.start if first == 0 else block.rows[first][0]
    return offset, "\n".join([head, *rows])
