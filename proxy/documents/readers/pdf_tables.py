"""PDF tables as Markdown tables, in reading position; the table finder runs only where a page
has ruling lines, which keeps plain pages at plain-extraction speed."""

from __future__ import annotations

from typing import Any

from proxy.documents.readers.table_form import cell, is_caption, table

MIN_RULE_POINTS = 8.0
"""A stroke shorter than this is a glyph detail or a tick, not a table rule."""
MIN_RULES = 3
"""A ruled grid of 2 x 2 cells has 3 horizontal and 3 vertical rules."""


def ruled(page: Any) -> bool:
    """True when the page draws at least 3 horizontal and 3 vertical rules inside itself."""
    area = page.rect
    horizontal = vertical = 0
    for path in page.get_cdrawings():
        for item in path["items"]:
            if item[0] == "l":
                (x0, y0), (x1, y1) = item[1], item[2]
                if not _inside(area, min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)):
                    continue
                if abs(y1 - y0) < 1 and abs(x1 - x0) >= MIN_RULE_POINTS:
                    horizontal += 1
                elif abs(x1 - x0) < 1 and abs(y1 - y0) >= MIN_RULE_POINTS:
                    vertical += 1
            elif item[0] == "re":
                x0, y0, x1, y1 = item[1]
                if not _inside(area, x0, y0, x1, y1):
                    continue
                wide, tall = x1 - x0 >= MIN_RULE_POINTS, y1 - y0 >= MIN_RULE_POINTS
                horizontal += 2 * wide
                vertical += 2 * tall
        if horizontal >= MIN_RULES and vertical >= MIN_RULES:
            return True
    return False


def _inside(area: Any, x0: float, y0: float, x1: float, y1: float) -> bool:
    # Crop and registration marks sit outside the page's box.
    return bool(x1 >= area.x0 and y1 >= area.y0 and x0 <= area.x1 and y0 <= area.y1)


def text_with_tables(page: Any) -> tuple[str, int, bool] | None:
    """The page's text with each table as Markdown where its cells were (under the text right
    above it, when that names it: "Table 3 ..."), the number of tables and whether a cell was
    cut; None when the page has no table."""
    try:
        found = [t for t in page.find_tables().tables if t.row_count >= 2 and t.col_count >= 2]
    except Exception:
        return None  # the finder failing is not the document's fault: plain text stays
    if not found:
        return None
    cut = False
    rendered: list[tuple[Any, list[list[str]]]] = []
    for found_table in found:
        rows = []
        for row in found_table.extract():
            cells = [cell(value) for value in row]
            cut = cut or any(was_cut for _, was_cut in cells)
            rows.append([text for text, _ in cells])
        if tabular(rows):
            rendered.append((found_table.bbox, rows))
    if not rendered:
        return None
    blocks = [block for block in page.get_text("blocks") if block[6] == 0]
    where = [_table_of(block, rendered) for block in blocks]
    captions = _captions(blocks, where, rendered)
    out: list[str] = []
    placed: set[int] = set()
    for number, block in enumerate(blocks):
        index = where[number]
        if index is None:
            if number not in captions.values():
                out.append(str(block[4]).rstrip())
        elif index not in placed:
            placed.add(index)
            out.append(_markdown(rendered[index][1], blocks, captions.get(index)))
    out.extend(
        _markdown(rows, blocks, captions.get(index))
        for index, (_, rows) in enumerate(rendered)
        if index not in placed
    )
    return "\n\n".join(part for part in out if part), len(found), cut


CAPTION_GAP_POINTS = 30.0
"""A caption sits at most this far above its table (about two lines of text)."""


def _captions(
    blocks: list[Any], where: list[int | None], rendered: list[tuple[Any, list[list[str]]]]
) -> dict[int, int]:
    """Table index -> the text block right above it that names it ("Table 3 ...")."""
    captions: dict[int, int] = {}
    for index, (bbox, _) in enumerate(rendered):
        best: int | None = None
        for number, block in enumerate(blocks):
            x0, _, x1, y1 = block[:4]
            above = bbox[1] - CAPTION_GAP_POINTS <= y1 <= bbox[1] + 2
            beside = where[number] is None and above and x0 < bbox[2] and x1 > bbox[0]
            if beside and (best is None or y1 > blocks[best][3]):
                best = number
        if best is None or best in captions.values():
            continue
        if is_caption(" ".join(str(blocks[best][4]).split())):
            captions[index] = best
    return captions


def _markdown(rows: list[list[str]], blocks: list[Any], caption: int | None) -> str:
    return table(rows, "" if caption is None else str(blocks[caption][4]))


def tabular(rows: list[list[str]]) -> bool:
    """Rules around a figure (axes, a diagram's frame) also make a grid: a table has most of
    its cells filled and at least two rows of two values."""
    cells = [text for row in rows for text in row]
    filled = sum(1 for text in cells if text)
    full_rows = sum(1 for row in rows if sum(1 for text in row if text) >= 2)
    return bool(cells) and filled * 2 >= len(cells) and full_rows >= 2


def _table_of(block: Any, rendered: list[tuple[Any, list[list[str]]]]) -> int | None:
    x = (block[0] + block[2]) / 2
    y = (block[1] + block[3]) / 2
    for index, (bbox, _) in enumerate(rendered):
        if bbox[0] <= x <= bbox[2] and bbox[1] <= y <= bbox[3]:
            return index
    return None
