"""Tables as tables: the one form of table_form, found by table_blocks, written by every parser."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from proxy.documents.model import ParsedDocument
from proxy.documents.parser import DocumentParser
from proxy.documents.readers.sections import split_sections
from proxy.documents.readers.sheets import sheet_sections
from proxy.documents.readers.table_form import (
    Caption,
    Table,
    TableBlock,
    cell,
    is_caption,
    join_blocks,
    table,
    table_blocks,
    table_parts,
)
from tests.documents import makers

_CELL_BORDER = re.compile(r"(?<!\\)\|")


def _width(line: str) -> int:
    return len(_CELL_BORDER.findall(line)) - 1


def contract(text: str) -> list[TableBlock]:
    """The tables of `text`, each checked against the form table_form promises."""
    found = table_blocks(text)
    for block in found:
        header, separator = block.header_lines
        width = _width(header)
        assert header.startswith("| ") and header.endswith(" |"), header
        assert separator == "|" + "---|" * width
        for start, end in block.rows:
            line = text[start:end]
            assert line.startswith("| ") and line.endswith(" |") and _width(line) == width, line
        assert block.start == 0 or text[block.start - 2 : block.start] == "\n\n"
        assert block.end == len(text) or text[block.end : block.end + 2] == "\n\n"
        if block.caption:
            assert text[block.start :].startswith(f"Table: {block.caption}\n{header}\n")
    return found


def test_table_blocks_find_captions_headers_and_rows() -> None:
    text = (
        "Intro.\n\nTable: Costs of stage 2\n| Item | Sum |\n|---|---|\n| Cable | 480 |\n"
        "| Plug \\| socket | 20 |\n\nAfter.\n\n| a | b |\n|---|---|"
    )
    first, second = contract(text)
    assert first.caption == "Costs of stage 2"
    assert text[first.start : first.end] == (
        "Table: Costs of stage 2\n| Item | Sum |\n|---|---|\n| Cable | 480 |\n"
        "| Plug \\| socket | 20 |"
    )
    assert first.header_lines == ("| Item | Sum |", "|---|---|")
    assert [text[s:e] for s, e in first.rows] == ["| Cable | 480 |", "| Plug \\| socket | 20 |"]
    assert first.head == "Table: Costs of stage 2\n| Item | Sum |\n|---|---|"
    assert (second.caption, second.rows, text[second.start : second.end]) == (
        "",
        (),
        "| a | b |\n|---|---|",
    )


def test_table_blocks_read_markdown_files_as_written() -> None:
    text = (
        "Name | Size\n:--- | ---:\nalpha | 1\nbeta | 2\n\n```\n| not | a table |\n|---|---|\n```\n"
    )
    [block] = table_blocks(text)
    assert block.header_lines == ("Name | Size", ":--- | ---:")
    assert [text[s:e] for s, e in block.rows] == ["alpha | 1", "beta | 2"]
    assert table_blocks("a | b\nno separator\n") == []
    assert table_blocks("| a |\n| b |\n") == []


def test_parts_repeat_caption_and_header_and_never_cut_a_row() -> None:
    rows = [["Item", "Note"], *[[f"row {n}", "x" * 40] for n in range(10)], ["big", "y" * 500]]
    parts = table_parts(rows, "Costs", size=200)
    head = "Table: Costs\n| Item | Note |\n|---|---|"
    assert all(text.startswith(head + "\n") for text, _, _ in parts)
    ranges = [(start, end) for _, start, end in parts]
    assert ranges[0][0] == 0 and ranges[-1] == (10, 11)
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(ranges))
    assert all(len(text) <= 200 for text, _, _ in parts[:-1])
    assert all(len(text) + 53 > 200 for text, _, _ in parts[:-2])  # full: one more row is over
    assert parts[-1][0] == head + "\n| big | " + "y" * 500 + " |"  # over the size, but whole
    body = [line for text, _, _ in parts for line in text.split("\n")[3:]]
    assert body == table(rows).split("\n")[2:]


def test_a_long_table_in_reflowable_text_is_cut_between_rows_under_its_head() -> None:
    rows = "\n".join(f"| {n} | {'word ' * 30}|" for n in range(40))
    text = f"# Costs\n\nIntro.\n\nTable: Stage 2\n| No | Words |\n|---|---|\n{rows}\n\nAfter."
    units = split_sections(text, part_chars=1000)
    assert units[0].text == "# Costs\n\nIntro."
    assert len(units) > 3
    seen = []
    for unit in units[1:]:
        [block] = contract(unit.text)
        assert block.head == "Table: Stage 2\n| No | Words |\n|---|---|"
        seen.extend(unit.text[s:e] for s, e in block.rows)
    assert seen == rows.split("\n")
    assert all(len(unit.text) <= 1000 for unit in units)
    assert units[-1].text.endswith("\n\nAfter.")


def test_captions_are_recognised_in_several_languages() -> None:
    for text in ("Table 3: Costs", "Tab. 2 Results", "Таблица 1 — Смета", "Tabelle 4", "TABLE IV"):
        assert is_caption(text), text
    for text in ("Tables are useful.", "Table of contents", "Tablet sizes", "Table 1\nsecond line"):
        assert not is_caption(text), text


def test_cells_are_one_line_with_pipes_escaped() -> None:
    assert cell("  Plug |\n socket\t 20 ") == ("Plug \\| socket 20", False)
    assert cell(None) == ("", False)
    assert table([["a", "b"], ["1"]]) == "| a | b |\n|---|---|\n| 1 |  |"


def test_a_caption_style_names_a_table_but_a_figure_caption_does_not() -> None:
    grid = Table([["a"], ["1"]])
    assert join_blocks([Caption("Рисунок 2 — схема"), grid]).startswith("Рисунок 2 — схема\n\n|")
    assert (
        join_blocks([Caption("Figure 2: photo"), grid]) == "Figure 2: photo\n\n| a |\n|---|\n| 1 |"
    )
    assert join_blocks([Caption("Stage costs"), grid]) == "Table: Stage costs\n| a |\n|---|\n| 1 |"
    assert join_blocks([grid, "Table 5 - Totals"]) == "Table: Table 5 - Totals\n| a |\n|---|\n| 1 |"
    own = Table([["a"]], "Own")
    assert join_blocks(["Table 1: other", own]) == "Table 1: other\n\nTable: Own\n| a |\n|---|"


def test_a_sheet_unit_holds_whole_tables_or_parts_under_their_head() -> None:
    grid = [(1, ["Item", "Sum"]), *[(n, [f"item {n}", str(n)]) for n in range(2, 302)]]
    units = sheet_sections([("Q3", grid)], part_chars=500)
    assert [u.location for u in units] == ["sheet=Q3"] * len(units)
    assert units[0].text.startswith("## Sheet: Q3 (rows 2-")
    numbers = []
    for unit in units:
        [block] = contract(unit.text)
        assert block.head == "Table: Q3\n| Item | Sum |\n|---|---|"
        numbers.extend(int(unit.text[s:e].split(" | ")[1].strip(" |")) for s, e in block.rows)
        first, last = re.findall(r"rows (\d+)-(\d+)", unit.text)[0]
        assert (int(first), int(last)) == (min(numbers[-len(block.rows) :]), numbers[-1])
    assert numbers == list(range(2, 302))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def parser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DocumentParser]:
    parser = DocumentParser(tmp_path_factory.mktemp("cache"), workers=1)
    await parser.start()
    yield parser
    await parser.close()


def _tables(document: ParsedDocument) -> list[tuple[str, str, list[str]]]:
    """(caption, header, body rows) of every table of every unit, each checked."""
    out = []
    for page in document.pages:
        for block in contract(page.text):
            rows = [page.text[s:e] for s, e in block.rows]
            out.append((block.caption, block.header_lines[0], rows))
    return out


@pytest.mark.asyncio(loop_scope="module")
async def test_every_format_writes_the_same_form(parser: DocumentParser) -> None:
    merged = [
        (
            "| Group | Item | Sum |",
            ["| A | Cable | 480 |", "| A | Plug | 20 |", "| Total |  | 500 |"],
        )
    ]
    odt = await parser.parse("costs.odt", makers.costs_odt())
    assert [(c, h, r) for c, h, r in _tables(odt)] == [("Costs of stage 1", *merged[0])]
    slides = await parser.parse("budget.pptx", makers.merged_pptx())
    assert _tables(slides) == [("Budget", *merged[0])]
    sheets = await parser.parse("costs.xlsx", makers.blocks_xlsx())
    found = _tables(sheets)
    assert found[:2] == [
        ("Costs — Travel costs", "| Trip | Cost |", ["| Berlin | 420 |", "| Oslo | 610 |"]),
        ("Costs", "| Month | Total |", ["| May | 1030 |", "| June | 980 |"]),
    ]
    assert sheets.pages[0].text.startswith("## Sheet: Costs (rows 3-9)\n\nTable: Costs — Travel")
    ledger = [rows for caption, header, rows in found[2:]]
    assert len(ledger) > 1 and all(h == "| Entry | Description |" for _, h, _ in found[2:])
    assert [row.split(" | ")[0] for rows in ledger for row in rows] == [
        f"| {n}" for n in range(1, 61)
    ]
    csv = await parser.parse("people.csv", b"name,city\nAnn,Oslo\n")
    assert _tables(csv) == [("people.csv", "| name | city |", ["| Ann | Oslo |"])]
    html = await parser.parse(
        "prices.html",
        b"<html><body><h1>Prices</h1><table><caption>Fruit prices</caption><tr><th>Fruit</th>"
        b"<th>Price</th></tr><tr><td>Apple</td><td>1.20</td></tr></table><figure><table><tr>"
        b"<td>Nut</td><td>3</td></tr><tr><td>Fig</td><td>4</td></tr></table><figcaption>Nuts"
        b"</figcaption></figure><p>Table 3: Leeks</p><table><tr><td>Leek</td><td>2</td></tr>"
        b"</table></body></html>",
    )
    assert _tables(html) == [
        ("Fruit prices", "| Fruit | Price |", ["| Apple | 1.20 |"]),
        ("Nuts", "| Nut | 3 |", ["| Fig | 4 |"]),
        ("Table 3: Leeks", "| Leek | 2 |", []),
    ]
    assert "Nuts\n\n" not in html.text  # the figure's caption is not said twice
    pdf = await parser.parse("results.pdf", makers.ruled_table_pdf("Table 1: Regional results"))
    assert _tables(pdf) == [
        (
            "Table 1: Regional results",
            "| Region | Q1 | Q2 |",
            ["| North | 10 | 12 |", "| South | 7 | 9 |"],
        )
    ]
    assert pdf.text.count("Regional results") == 1
    plain = await parser.parse("plain.pdf", makers.ruled_table_pdf("Regional results"))
    assert [caption for caption, _, _ in _tables(plain)] == [""]  # not a caption: text stays
    assert "Regional results\n\n| Region" in plain.text
    docx = await parser.parse("handbook.docx", makers.handbook_docx())
    assert _tables(docx) == [("", "| Item | Days |", ["| Laptop | 30 |"])]
