"""Large documents of every format for bench/parse.py, written from real Russian prose.

The prose is Debian's Russian documentation (`apt-get install developers-reference-ru
debian-faq-ru`: the Developer's Reference and the Debian FAQ, about 750,000 characters); without
it, the corpus's plain-text Shakespeare. Office files are written with the libraries the parsers
read them with, deterministically (a seeded generator), with what real contracts and reports
have: headings, lists, captioned cost tables with merged cells, a nested table now and then,
spreadsheets of many sheets with several tables each, slides with tables and notes.
"""

from __future__ import annotations

import gzip
import io
import random
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.corpus import default_corpus

ROOT = Path(__file__).resolve().parents[1]
# Where the corpus files come from; bench/parse.py sets it from its --corpus.
CORPUS = default_corpus() or Path("shared-corpus-not-found")
RUSSIAN = (
    Path("/usr/share/developers-reference/ru/developers-reference.txt.gz"),
    Path("/usr/share/doc/debian/FAQ/debian-faq.ru.txt.gz"),
)
RUSSIAN_HTML = Path("/usr/share/developers-reference/ru/developers-reference.html")
RUSSIAN_EPUB = Path("/usr/share/developers-reference/ru/developers-reference.epub")
RUSSIAN_PDF = Path("/usr/share/doc/debian/FAQ/debian-faq.ru.pdf.gz")

_UNDERLINE = re.compile(r"^([=*~^\"-])\1{4,}$")
_LEVELS = {"*": 1, "=": 2, "-": 3, "~": 4, "^": 4, '"': 5}
_NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.\s+\S")
_ITEM = re.compile(r"^\s*[*-]\s+(.*)")
_WORD = re.compile(r"\w{4,}")


@dataclass(frozen=True)
class Block:
    kind: str  # heading | paragraph | item
    text: str
    level: int = 0


def source_text() -> tuple[str, str]:
    """The prose, and where it came from."""
    present = [path for path in RUSSIAN if path.exists()]
    if present:
        texts = [gzip.decompress(path.read_bytes()).decode("utf-8") for path in present]
        return "\n\n".join(texts), "Debian's Russian documentation"
    shakespeare = CORPUS / "text" / "tinyshakespeare.txt"
    return shakespeare.read_text("utf-8")[:750_000], "the corpus's Shakespeare (English)"


def blocks(text: str) -> list[Block]:
    """Headings (underlined or numbered), paragraphs (wrapped lines joined) and list items."""
    out: list[Block] = []
    lines = text.replace("\r", "").split("\n")
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            joined = " ".join(part.strip() for part in paragraph).strip()
            match = _ITEM.match(paragraph[0])
            if match:
                out.append(Block("item", " ".join([match.group(1), *paragraph[1:]]).strip()))
            elif joined:
                out.append(Block("paragraph", joined))
            paragraph.clear()

    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        underline = _UNDERLINE.match(following.strip())
        if underline and line.strip() and len(following.strip()) >= len(line.strip()) - 2:
            flush()
            out.append(Block("heading", line.strip(), _LEVELS[underline.group(1)]))
            continue
        if _UNDERLINE.match(line.strip()):
            continue
        numbered = _NUMBERED.match(line)
        if numbered and not paragraph and len(line) < 90:
            flush()
            out.append(Block("heading", line.strip(), min(4, numbered.group(1).count(".") + 1)))
            continue
        if not line.strip():
            flush()
        else:
            if paragraph and _ITEM.match(line):
                flush()
            paragraph.append(line)
    flush()
    return out


@dataclass(frozen=True)
class CostTable:
    """A table as contracts have them: a caption, a header, groups merged down the first
    column, a total row merged across, and now and then a table nested in a cell."""

    caption: str
    header: list[str]
    rows: list[list[str]]
    group_size: int
    nested: list[list[str]] | None


def cost_tables(prose: list[Block], count: int, seed: int = 27) -> Iterator[CostTable]:
    rng = random.Random(seed)
    words = [word for block in prose[:4000] for word in _WORD.findall(block.text)]
    for number in range(1, count + 1):
        subject = " ".join(rng.sample(words, 3))
        header = ["Раздел", "Статья расходов", "Кол-во", "Цена, руб.", "Сумма, руб."]
        rows = []
        for line in range(rng.randint(6, 14)):
            quantity, price = rng.randint(1, 40), rng.randint(100, 90_000)
            item = " ".join(rng.sample(words, rng.randint(2, 9)))
            total = f"{quantity * price:,}".replace(",", " ")
            price_text = f"{price:,}".replace(",", " ")
            rows.append([f"{line // 3 + 1}", item.capitalize(), str(quantity), price_text, total])
        nested = None
        if number % 10 == 0:
            nested = [
                ["Этап", "Срок"],
                *[[f"Этап {n}", f"{rng.randint(5, 60)} дней"] for n in range(1, 4)],
            ]
        yield CostTable(f"Таблица {number} — Смета: {subject}", header, rows, 3, nested)


def docx_bytes(prose: list[Block], tables_every: int = 12) -> bytes:
    """A Word document of the prose, with a captioned cost table every `tables_every` blocks."""
    import docx

    document = docx.Document()
    document.core_properties.title = "Справочник разработчика Debian: договор и сметы"
    count = len(prose) // tables_every + 1
    tables = cost_tables(prose, count)
    for index, block in enumerate(prose):
        if block.kind == "heading":
            document.add_heading(block.text, level=min(block.level, 9))
        elif block.kind == "item":
            document.add_paragraph(block.text, style="List Bullet")
        else:
            document.add_paragraph(block.text)
        if index % tables_every == tables_every - 1:
            _docx_table(document, next(tables))
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _docx_table(document: object, spec: CostTable) -> None:
    from docx.document import Document

    assert isinstance(document, Document)
    document.add_paragraph(spec.caption, style="Caption")
    width = len(spec.header)
    grid = document.add_table(rows=len(spec.rows) + 2, cols=width)
    grid.style = "Table Grid"
    cells = [row.cells for row in grid.rows]  # once: row.cells rebuilds the grid per call
    for column, value in enumerate(spec.header):
        cells[0][column].text = value
    for r, values in enumerate(spec.rows, start=1):
        for column, value in enumerate(values):
            if column == 0 and (r - 1) % spec.group_size:
                continue  # covered by the merged group cell above
            cells[r][column].text = value
    for start in range(1, len(spec.rows) + 1, spec.group_size):
        end = min(start + spec.group_size - 1, len(spec.rows))
        if end > start:
            cells[start][0].merge(cells[end][0])
    total_row = len(spec.rows) + 1
    merged = cells[total_row][0].merge(cells[total_row][width - 2])
    merged.text = "Итого"
    total = sum(int(values[-1].replace(" ", "")) for values in spec.rows)
    cells[total_row][width - 1].text = f"{total:,}".replace(",", " ")
    if spec.nested is not None:
        inner = cells[1][1].add_table(rows=len(spec.nested), cols=2)
        for row, values in zip(inner.rows, spec.nested, strict=True):
            for target, value in zip(row.cells, values, strict=True):
                target.text = value


def sheet_rows(
    prose: list[Block], sheets: int, rows: int, seed: int = 27
) -> list[tuple[str, list[list[object]]]]:
    """Sheets of cost ledgers: each has a title row, several tables separated by empty rows."""
    rng = random.Random(seed)
    words = [word for block in prose[:4000] for word in _WORD.findall(block.text)]
    out = []
    for number in range(1, sheets + 1):
        grid: list[list[object]] = []
        while len(grid) < rows:
            grid.append([f"Ведомость {number}.{len(grid) + 1}: " + " ".join(rng.sample(words, 3))])
            grid.append(["Дата", "Статья", "Описание", "Кол-во", "Цена", "Сумма"])
            for _ in range(rng.randint(20, 200)):
                quantity, price = rng.randint(1, 50), round(rng.uniform(10, 9000), 2)
                grid.append(
                    [
                        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                        " ".join(rng.sample(words, 2)),
                        " ".join(rng.sample(words, rng.randint(3, 12))),
                        quantity,
                        price,
                        round(quantity * price, 2),
                    ]
                )
            grid.extend([[], []])
        out.append((f"Лист {number}", grid[:rows]))
    return out


def xlsx_bytes(sheets: list[tuple[str, list[list[object]]]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook(write_only=True)
    book.properties.title = "Ведомости расходов"
    for name, grid in sheets:
        sheet = book.create_sheet(name)
        for row in grid:
            sheet.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def ods_bytes(sheets: list[tuple[str, list[list[object]]]]) -> bytes:
    """The same sheets as an OpenDocument spreadsheet, its XML written directly (odfpy takes a
    minute to write this many cells)."""
    from xml.sax.saxutils import escape, quoteattr

    rows_xml = []
    for name, grid in sheets:
        rows_xml.append(f"<table:table table:name={quoteattr(name)}>")
        for values in grid:
            cells = []
            for value in values:
                if isinstance(value, int | float):
                    cells.append(
                        f'<table:table-cell office:value-type="float" office:value="{value}">'
                        f"<text:p>{value}</text:p></table:table-cell>"
                    )
                else:
                    cells.append(
                        '<table:table-cell office:value-type="string">'
                        f"<text:p>{escape(str(value))}</text:p></table:table-cell>"
                    )
            rows_xml.append("<table:table-row>" + "".join(cells) + "</table:table-row>")
        rows_xml.append("</table:table>")
    content = (
        '<?xml version="1.0" encoding="UTF-8"?><office:document-content'
        ' xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.3">'
        "<office:body><office:spreadsheet>" + "".join(rows_xml) + "</office:spreadsheet>"
        "</office:body></office:document-content>"
    )
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest'
        ' xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"'
        ' manifest:version="1.3"><manifest:file-entry manifest:full-path="/"'
        ' manifest:media-type="application/vnd.oasis.opendocument.spreadsheet"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        archive.writestr("META-INF/manifest.xml", manifest, zipfile.ZIP_DEFLATED)
        archive.writestr("content.xml", content, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def odt_bytes(prose: list[Block], tables_every: int = 12) -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, List, ListItem, P

    document = OpenDocumentText()
    tables = cost_tables(prose, len(prose) // tables_every + 1)
    for index, block in enumerate(prose):
        if block.kind == "heading":
            document.text.addElement(H(outlinelevel=block.level, text=block.text))
        elif block.kind == "item":
            items = List()
            item = ListItem()
            item.addElement(P(text=block.text))
            items.addElement(item)
            document.text.addElement(items)
        else:
            document.text.addElement(P(text=block.text))
        if index % tables_every == tables_every - 1:
            spec = next(tables)
            document.text.addElement(P(text=spec.caption))
            table = Table(name=f"Table{index}")
            table.addElement(TableColumn(numbercolumnsrepeated=len(spec.header)))
            for values in [spec.header, *spec.rows]:
                row = TableRow()
                for value in values:
                    item = TableCell()
                    item.addElement(P(text=value))
                    row.addElement(item)
                table.addElement(row)
            document.text.addElement(table)
    buffer = io.BytesIO()
    document.write(buffer)
    return buffer.getvalue()


def pptx_bytes(prose: list[Block], slides: int = 300) -> bytes:
    import pptx
    from pptx.util import Emu

    deck = pptx.Presentation()
    deck.core_properties.title = "Справочник разработчика Debian"
    paragraphs = [block.text for block in prose if block.kind != "heading"]
    headings = [block.text for block in prose if block.kind == "heading"]
    tables = cost_tables(prose, slides)
    for number in range(slides):
        slide = deck.slides.add_slide(deck.slide_layouts[1 if number % 3 else 5])
        slide.shapes.title.text = headings[number % len(headings)]
        if number % 3:
            frame = slide.placeholders[1].text_frame
            frame.text = paragraphs[(3 * number) % len(paragraphs)]
            for offset in (1, 2):
                frame.add_paragraph().text = paragraphs[(3 * number + offset) % len(paragraphs)]
        else:
            spec = next(tables)
            rows = [spec.header, *spec.rows]
            shape = slide.shapes.add_table(
                len(rows), len(spec.header), 0, 0, Emu(9000000), Emu(5000000)
            )
            for r, values in enumerate(rows):
                for c, value in enumerate(values):
                    shape.table.cell(r, c).text = value
        slide.notes_slide.notes_text_frame.text = paragraphs[(5 * number) % len(paragraphs)]
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def markdown_text(prose: list[Block], tables_every: int = 12) -> str:
    parts = []
    tables = cost_tables(prose, len(prose) // tables_every + 1)
    for index, block in enumerate(prose):
        if block.kind == "heading":
            parts.append("#" * block.level + " " + block.text)
        elif block.kind == "item":
            parts.append("- " + block.text)
        else:
            parts.append(block.text)
        if index % tables_every == tables_every - 1:
            spec = next(tables)
            lines = ["| " + " | ".join(row) + " |" for row in [spec.header, *spec.rows]]
            lines.insert(1, "|" + "---|" * len(spec.header))
            parts.append(f"Table: {spec.caption}\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class Sample:
    """One large document of a kind, and the library's plain pass over it."""

    kind: str
    name: str
    data: bytes
    plain: str  # what the plain pass does


def samples(scratch: Path) -> Iterator[Sample]:
    """The large documents, built (or read) one at a time; cached in `scratch`."""
    text, _ = source_text()
    prose = blocks(text)
    sheets = sheet_rows(prose, 16, 2000)
    built = {
        "contract.docx": lambda: docx_bytes(prose),
        "ledgers.xlsx": lambda: xlsx_bytes(sheets),
        "ledgers.ods": lambda: ods_bytes(sheets),
        "contract.odt": lambda: odt_bytes(prose),
        "handbook.pptx": lambda: pptx_bytes(prose),
        "handbook.md": lambda: markdown_text(prose).encode("utf-8"),
        "handbook.txt": lambda: text.encode("utf-8"),
    }
    kinds = {
        "docx": "python-docx: every paragraph's and table cell's text",
        "xlsx": "openpyxl read-only: every row's values",
        "ods": "lxml: content.xml parsed, all its text",
        "odt": "lxml: content.xml parsed, all its text",
        "pptx": "python-pptx: every shape's text, table cell and note",
        "markdown": "str: decoded and split into lines",
        "text": "str: decoded and split into lines",
        "html": "selectolax: parsed, the body's text",
        "epub": "zipfile + selectolax: each (X)HTML member parsed, its body's text",
        "pdf": "PyMuPDF: every page's get_text()",
    }
    for name, make in built.items():
        path = scratch / name
        if not path.exists():
            path.write_bytes(make())
        kind = {"md": "markdown", "txt": "text"}.get(name.rsplit(".", 1)[1], name.rsplit(".", 1)[1])
        yield Sample(kind, name, path.read_bytes(), kinds[kind])
    found = [
        ("html", RUSSIAN_HTML, False),
        ("epub", RUSSIAN_EPUB, False),
        ("epub", CORPUS / "epub" / "moby-dick.epub", False),
        ("pdf", RUSSIAN_PDF, True),
        ("pdf", CORPUS / "pdf" / "freeculture.pdf", False),
        ("text", CORPUS / "text" / "tinyshakespeare.txt", False),
    ]
    for kind, path, packed in found:
        if path.exists():
            data = gzip.decompress(path.read_bytes()) if packed else path.read_bytes()
            yield Sample(kind, path.name.removesuffix(".gz"), data, kinds[kind])


def plain_pass(kind: str, data: bytes) -> int:
    """The library's own plain reading of the document: characters of text it gave."""
    if kind == "docx":
        import docx

        document = docx.Document(io.BytesIO(data))
        total = sum(len(paragraph.text) for paragraph in document.paragraphs)
        for grid in document.tables:
            for row in grid.rows:
                total += sum(len(item.text) for item in row.cells)
        return total
    if kind == "xlsx":
        import openpyxl

        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        total = 0
        for sheet in book.worksheets:
            for values in sheet.iter_rows(values_only=True):
                total += sum(len(str(value)) for value in values if value is not None)
        book.close()
        return total
    if kind in ("ods", "odt"):
        from lxml import etree

        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            root = etree.fromstring(archive.read("content.xml"))
        return sum(len(text) for text in root.itertext())
    if kind == "pptx":
        import pptx

        deck = pptx.Presentation(io.BytesIO(data))
        total = 0
        for slide in deck.slides:
            for shape in slide.shapes:
                if shape.has_text_frame:
                    total += len(shape.text_frame.text)
                if getattr(shape, "has_table", False) and shape.has_table:
                    for row in shape.table.rows:
                        total += sum(len(item.text) for item in row.cells)
            if slide.has_notes_slide:
                total += len(slide.notes_slide.notes_text_frame.text)
        return total
    if kind in ("text", "markdown"):
        return sum(len(line) for line in data.decode("utf-8").splitlines())
    if kind == "html":
        from selectolax.lexbor import LexborHTMLParser

        body = LexborHTMLParser(data.decode("utf-8")).body
        return len(body.text()) if body is not None else 0
    if kind == "epub":
        from selectolax.lexbor import LexborHTMLParser

        total = 0
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for name in archive.namelist():
                if name.endswith((".xhtml", ".html", ".htm")):
                    body = LexborHTMLParser(archive.read(name).decode("utf-8")).body
                    total += len(body.text()) if body is not None else 0
        return total
    if kind == "pdf":
        import pymupdf

        with pymupdf.open(stream=data, filetype="pdf") as document:
            return sum(len(page.get_text()) for page in document)
    raise ValueError(kind)


def odfpy_pass(data: bytes) -> int:
    """What reading an OpenDocument file with odfpy costs (the parser used it before)."""
    from odf import teletype
    from odf.opendocument import load
    from odf.text import H, P

    document = load(io.BytesIO(data))
    return sum(
        len(teletype.extractText(element))
        for kind in (P, H)
        for element in document.getElementsByType(kind)
    )
