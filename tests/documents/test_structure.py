"""Every format through the real parser workers: Markdown structure, locations, titles, caps."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from proxy.documents.limits import ParseLimits
from proxy.documents.model import ParsedDocument
from proxy.documents.parser import DocumentParser
from tests.documents import makers

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def parser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DocumentParser]:
    parser = DocumentParser(
        tmp_path_factory.mktemp("cache"), ParseLimits(max_rows=50, max_columns=5), workers=2
    )
    await parser.start()
    yield parser
    await parser.close()


def _unit(document: ParsedDocument, location: str) -> str:
    return next(page.text for page in document.pages if page.location == location)


async def test_docx_sections_are_located_by_heading(parser: DocumentParser) -> None:
    document = await parser.parse("handbook.docx", makers.handbook_docx())
    assert document.title == "Staff handbook"
    assert [page.location for page in document.pages] == [
        "section=1 Welcome",
        "section=2.3 Refunds",
    ]
    refunds = _unit(document, "section=2.3 Refunds")
    assert refunds.startswith("# 2 Policies\n\n## 2.3 Refunds\n\nRefunds are paid")
    assert "- Keep the receipt" in refunds
    assert "| Item | Days |\n|---|---|\n| Laptop | 30 |" in refunds
    assert document.pages[1].title == "2 Policies > 2.3 Refunds"


async def test_xlsx_sheets_are_markdown_tables(parser: DocumentParser) -> None:
    document = await parser.parse("budget.xlsx", makers.budget_xlsx())
    q3 = _unit(document, "sheet=Q3")
    assert q3.startswith("## Sheet: Q3 (rows 2-")
    assert (
        "| Item | Amount | Owner |\n|---|---|---|\n| Coffee | 12.5 | Ann |\n| Tea | 3 | Bob |" in q3
    )
    assert "Approved by the board" in _unit(document, "sheet=Notes")
    assert document.warnings == ()


async def test_rows_over_the_cap_are_cut_with_a_warning(parser: DocumentParser) -> None:
    document = await parser.parse("big.xlsx", makers.budget_xlsx(rows=120))
    # 50 rows kept: the header, Coffee, Tea and extra 0-46.
    assert "| extra 46 | 46 | Cy |" in document.text
    assert "extra 47" not in document.text
    [warning] = document.warnings
    assert warning.code == "rows_cut"
    assert warning.message == "sheet Q3 has more than 50 rows; only the first 50 were read"


async def test_csv_is_a_table_located_by_row(parser: DocumentParser) -> None:
    rows = "name;city\n" + "".join(f"person {n};town {n}\n" for n in range(30))
    document = await parser.parse("people.csv", rows.encode())
    assert document.kind == "csv"
    assert document.pages[0].location == "row=2"
    assert "| name | city |\n|---|---|\n| person 0 | town 0 |" in document.text
    wide = ",".join(f"c{n}" for n in range(9)) + "\n" + ",".join("v" * 9) + "\n"
    cut = await parser.parse("wide.csv", wide.encode())
    assert "c5" not in cut.text and "| c0 | c1 | c2 | c3 | c4 |" in cut.text
    assert [w.code for w in cut.warnings] == ["columns_cut"]


async def test_pptx_slides_with_notes(parser: DocumentParser) -> None:
    document = await parser.parse("roadmap.pptx", makers.roadmap_pptx())
    assert document.title == "Roadmap 2025"
    assert [page.location for page in document.pages] == ["slide=1", "slide=2"]
    first = _unit(document, "slide=1")
    assert first.startswith("## Slide 1: Goals")
    assert "- Read scanned pages" in first
    assert "Speaker notes:\nMention the OCR budget." in first
    assert "| Quarter | Pages |\n|---|---|\n| Q1 | 1200 |" in _unit(document, "slide=2")


async def test_opendocument_text_sheets_and_slides(parser: DocumentParser) -> None:
    text = await parser.parse("report.odt", makers.report_odt())
    assert [page.location for page in text.pages] == ["section=Summary", "section=Risks"]
    assert "# Summary\n\nThe plant runs at full capacity.\n\n- first point" in text.text
    ledger = await parser.parse("ledger.ods", makers.ledger_ods())
    assert ledger.pages[0].location == "sheet=Ledger"
    assert "| Account | Balance |\n|---|---|\n| Cash | 100 |\n| Bank | 2500 |" in ledger.text
    assert len(ledger.text) < 500  # a million padded rows were not expanded
    talk = await parser.parse("talk.odp", makers.talk_odp())
    assert talk.pages[0].location == "slide=1"
    assert talk.pages[0].text.startswith("## Slide 1: Why OCR")
    assert "Scans are common" in talk.text and "Speaker notes:\nPause for questions." in talk.text


async def test_rtf_json_and_code(parser: DocumentParser) -> None:
    rtf = await parser.parse(
        "letter.rtf", rb"{\rtf1\ansi Dear Ann,\par the {\b invoice} is paid.\par}"
    )
    assert "Dear Ann,\nthe invoice is paid." in rtf.text
    payload = json.dumps({"order": 4711, "items": ["```", "tea"]}, indent=2)
    data = await parser.parse("order.json", payload.encode())
    assert data.text == f"````json\n{payload}\n````"
    code = await parser.parse("tool.py", b"def main():\n    return 42\n")
    assert code.text == "```python\ndef main():\n    return 42\n```"
    assert code.pages[0].location == "line=1"


async def test_html_title_tables_and_sections(parser: DocumentParser) -> None:
    html = (
        b"<html><head><title>Price list</title></head><body><h1>Prices</h1>"
        b"<table><tr><th>Fruit</th><th>Price</th></tr><tr><td>Apple</td><td>1.20</td></tr>"
        b"</table><h2>Terms</h2><p>Prices include tax.</p></body></html>"
    )
    document = await parser.parse("prices.html", html)
    assert document.title == "Price list"
    assert "| Fruit | Price |\n|---|---|\n| Apple | 1.20 |" in _unit(document, "section=Prices")
    assert "Prices include tax." in _unit(document, "section=Terms")


async def test_content_decides_over_the_declared_type(parser: DocumentParser) -> None:
    html = b"<!DOCTYPE html><html><head><title>Notes</title></head><body><p>Meet at 10.</p>"
    document = await parser.parse("notes.pdf", html)
    assert document.kind == "html"
    assert document.title == "Notes"
    assert "Meet at 10." in document.text


async def test_pdf_tables_become_markdown_in_reading_position(parser: DocumentParser) -> None:
    document = await parser.parse("results.pdf", makers.ruled_table_pdf())
    assert document.pages[0].location == "page=1"
    assert document.pages[0].text == (
        "Results by region\n\n| Region | Q1 | Q2 |\n|---|---|---|\n| North | 10 | 12 |\n"
        "| South | 7 | 9 |\n\nText after the table."
    )


async def test_a_damaged_pdf_is_used_and_said_to_be_repaired(
    parser: DocumentParser, make_pdf: Callable[[list[str]], bytes]
) -> None:
    data = make_pdf(["first page text", "second page text"])
    broken = data[: data.rindex(b"xref")]  # the cross-reference table and trailer are gone
    document = await parser.parse("damaged.pdf", broken)
    assert "second page text" in document.text
    [warning] = document.warnings
    assert warning.code == "repaired"
    assert warning.message == "was damaged and has been repaired; 2 of 2 pages could be read"


async def test_corpus_tables_line_up_in_rows(corpus_dir: Path, parser: DocumentParser) -> None:
    data = (corpus_dir / "pdf/chinese-tables.pdf").read_bytes()
    document = await parser.parse("chinese-tables.pdf", data)
    text = document.text
    assert "| 年份 | 主体信用 评级 | 涵义 | 评级机构 | 评级展望 |" in text
    assert "| 2 | 徽商银行南京中山北路支行 | 330,435.30 | 256,735.30 | 73,700.00 |" in text
    # The heading above the table stays above it.
    assert text.index("一、发行人历史信用评级情况") < text.index("| 年份 |")


async def test_corpus_reflowable_formats_name_sections(
    corpus_dir: Path, parser: DocumentParser
) -> None:
    alice = await parser.parse("alice.epub", (corpus_dir / "epub/alice.epub").read_bytes())
    assert alice.title and "Alice" in alice.title
    assert any("Rabbit-Hole" in page.location for page in alice.pages)
    wiki = (corpus_dir / "html/wikipedia-mozilla.html").read_bytes()
    mozilla = await parser.parse("mozilla.html", wiki)
    assert mozilla.title and "Mozilla" in mozilla.title
    assert "section=History" in [page.location for page in mozilla.pages]
    readme = (corpus_dir / "text/readability-README.md").read_bytes()
    markdown = await parser.parse("README.md", readme)
    assert markdown.title == "Readability.js"
    assert "section=Basic usage" in [page.location for page in markdown.pages]


async def test_titles_locations_and_warnings_survive_the_disk_cache(tmp_path: Path) -> None:
    data, handbook = makers.budget_xlsx(rows=6000), makers.handbook_docx()
    writer = DocumentParser(tmp_path, workers=1)
    reader = DocumentParser(tmp_path, workers=1)
    try:
        first = await writer.parse("big.xlsx", data)
        await writer.parse("h.docx", handbook)
        again = await reader.parse("renamed.xlsx", data)
        assert reader.pool.jobs == 0
        assert again.pages == first.pages and again.warnings == first.warnings
        assert [w.code for w in again.warnings] == ["rows_cut"]
        assert (await reader.parse("h.docx", handbook)).title == "Staff handbook"
    finally:
        await writer.close()
        await reader.close()


async def test_pdf_tables_can_be_turned_off(tmp_path: Path) -> None:
    plain = DocumentParser(tmp_path, ParseLimits(pdf_tables=False), workers=1)
    try:
        document = await plain.parse("results.pdf", makers.ruled_table_pdf())
        assert "|" not in document.text and "North" in document.text
    finally:
        await plain.close()
