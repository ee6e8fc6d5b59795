"""Documents the tests build: office files with known content, and a scanned page."""

from __future__ import annotations

import io
from typing import Any

import docx
import openpyxl
import pptx
import pymupdf
from odf.draw import Frame, Page, TextBox
from odf.namespaces import PRESENTATIONNS
from odf.opendocument import OpenDocumentPresentation, OpenDocumentSpreadsheet, OpenDocumentText
from odf.presentation import Notes
from odf.style import MasterPage, PageLayout
from odf.table import CoveredTableCell, Table, TableCell, TableRow
from odf.text import H, List, ListItem, P

_mupdf: Any = pymupdf


def handbook_docx() -> bytes:
    document = docx.Document()
    document.core_properties.title = "Staff handbook"
    document.add_heading("1 Welcome", level=1)
    document.add_paragraph("We are glad you joined.")
    document.add_heading("2 Policies", level=1)
    document.add_heading("2.3 Refunds", level=2)
    document.add_paragraph("Refunds are paid within 14 days of the request.")
    document.add_paragraph("Keep the receipt", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, (("Item", "Days"), ("Laptop", "30")), strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    return _save(document)


def budget_xlsx(rows: int = 2) -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Q3"
    sheet.append(["Item", "Amount", "Owner"])
    sheet.append(["Coffee", 12.5, "Ann"])
    sheet.append(["Tea", 3, "Bob"])
    for n in range(rows - 2):  # rows after the header
        sheet.append([f"extra {n}", n, "Cy"])
    book.create_sheet("Notes").append(["Approved by the board"])
    return _save(book)


def roadmap_pptx() -> bytes:
    deck = pptx.Presentation()
    deck.core_properties.title = "Roadmap 2025"
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Goals"
    first.placeholders[1].text = "Read scanned pages"
    first.notes_slide.notes_text_frame.text = "Mention the OCR budget."
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Numbers"
    shape = second.shapes.add_table(2, 2, 0, 0, 3000000, 1000000)
    for r, values in enumerate((("Quarter", "Pages"), ("Q1", "1200"))):
        for c, value in enumerate(values):
            shape.table.cell(r, c).text = value
    return _save(deck)


def report_odt() -> bytes:
    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text="Summary"))
    document.text.addElement(P(text="The plant runs at full capacity."))
    items = List()
    item = ListItem()
    item.addElement(P(text="first point"))
    items.addElement(item)
    document.text.addElement(items)
    document.text.addElement(H(outlinelevel=2, text="Risks"))
    document.text.addElement(P(text="Supply of parts is late."))
    return _save_odf(document)


def ledger_ods() -> bytes:
    document = OpenDocumentSpreadsheet()
    table = Table(name="Ledger")
    for values in (("Account", "Balance"), ("Cash", "100"), ("Bank", "2500")):
        row = TableRow()
        for value in values:
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    # Spreadsheets pad rows with huge repeats of empty cells: must not be expanded.
    padding = TableRow(numberrowsrepeated=1048000)
    padding.addElement(TableCell(numbercolumnsrepeated=16384))
    table.addElement(padding)
    document.spreadsheet.addElement(table)
    return _save_odf(document)


def talk_odp() -> bytes:
    document = OpenDocumentPresentation()
    layout = PageLayout(name="L")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="M", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    page = Page(masterpagename=master)
    title = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
    title.setAttrNS(PRESENTATIONNS, "class", "title")
    box = TextBox()
    box.addElement(P(text="Why OCR"))
    title.addElement(box)
    page.addElement(title)
    body = Frame(width="20cm", height="10cm", x="1cm", y="5cm")
    text = TextBox()
    text.addElement(P(text="Scans are common"))
    body.addElement(text)
    page.addElement(body)
    notes = Notes()
    frame = Frame(width="20cm", height="10cm", x="1cm", y="1cm")
    note_box = TextBox()
    note_box.addElement(P(text="Pause for questions."))
    frame.addElement(note_box)
    notes.addElement(frame)
    page.addElement(notes)
    document.presentation.addElement(page)
    return _save_odf(document)


def scanned_pdf(lines: list[str], dpi: int = 200) -> tuple[bytes, bytes]:
    """A PDF whose only page is a picture of `lines` (no text layer), and that picture as PNG."""
    source = _mupdf.open()
    page = source.new_page()
    for n, line in enumerate(lines):
        page.insert_text((72, 100 + 30 * n), line, fontsize=16)
    picture = page.get_pixmap(dpi=dpi)
    scan = _mupdf.open()
    scanned = scan.new_page(width=page.rect.width, height=page.rect.height)
    scanned.insert_image(scanned.rect, pixmap=picture)
    return scan.tobytes(), picture.tobytes("png")


def ruled_table_pdf(caption: str = "") -> bytes:
    """A page with a heading, a ruled 3 x 3 table (with `caption` right above it) and a line."""
    document = _mupdf.open()
    page = document.new_page()
    page.insert_text((72, 60), "Results by region", fontsize=14)
    if caption:
        page.insert_text((72, 92), caption)
    rows = [["Region", "Q1", "Q2"], ["North", "10", "12"], ["South", "7", "9"]]
    x0, y0, width, height = 72, 100, 120, 20
    for r in range(len(rows) + 1):
        page.draw_line((x0, y0 + r * height), (x0 + 3 * width, y0 + r * height))
    for c in range(4):
        page.draw_line((x0 + c * width, y0), (x0 + c * width, y0 + 3 * height))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            page.insert_text((x0 + c * width + 4, y0 + r * height + 14), value)
    page.insert_text((72, 200), "Text after the table.")
    data: bytes = document.tobytes()
    return data


def _save(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _save_odf(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.write(buffer)
    return buffer.getvalue()


def costs_odt() -> bytes:
    """An ODT with a LibreOffice-style caption (a Table sequence) over a table whose cells are
    merged across (Total) and down (Group A)."""
    from odf.text import Sequence

    document = OpenDocumentText()
    # Numbered by LibreOffice's Table sequence, worded without "Table": only the sequence
    # says it is a caption.
    caption = P(text="Costs of stage ")
    sequence = Sequence(name="Table", formula="ooow:Table+1")
    sequence.addText("1")
    caption.addElement(sequence)
    document.text.addElement(caption)
    table = Table(name="Costs")

    def row(*cells: TableCell) -> TableRow:
        element = TableRow()
        for item in cells:
            element.addElement(item)
        return element

    def text_cell(value: str, **spans: int) -> TableCell:
        item = TableCell(**spans)
        item.addElement(P(text=value))
        return item

    table.addElement(row(text_cell("Group"), text_cell("Item"), text_cell("Sum")))
    table.addElement(row(text_cell("A", numberrowsspanned=2), text_cell("Cable"), text_cell("480")))
    table.addElement(row(CoveredTableCell(), text_cell("Plug"), text_cell("20")))
    table.addElement(
        row(text_cell("Total", numbercolumnsspanned=2), CoveredTableCell(), text_cell("500"))
    )
    document.text.addElement(table)
    document.text.addElement(P(text="Prices include tax."))
    return _save_odf(document)


def blocks_xlsx() -> bytes:
    """A sheet with two tables: one under a title row, one starting in column C after two
    empty rows; and a sheet long enough to be cut into parts."""
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Costs"
    sheet["A1"] = "Travel costs"
    for row in (["Trip", "Cost"], ["Berlin", 420], ["Oslo", 610]):
        sheet.append(row)
    sheet.append([])
    sheet.append([])
    for row in (["Month", "Total"], ["May", 1030], ["June", 980]):
        sheet.append([None, None, *row])
    long = book.create_sheet("Ledger")
    long.append(["Entry", "Description"])
    for n in range(1, 61):
        long.append([n, f"payment number {n} " + "for services rendered " * 4])
    return _save(book)


def merged_pptx() -> bytes:
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Budget"
    grid = slide.shapes.add_table(4, 3, 0, 0, 6000000, 2000000).table
    values = [
        ["Group", "Item", "Sum"],
        ["A", "Cable", "480"],
        ["", "Plug", "20"],
        ["Total", "", "500"],
    ]
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            if value:
                grid.cell(r, c).text = value
    grid.cell(1, 0).merge(grid.cell(2, 0))
    grid.cell(3, 0).merge(grid.cell(3, 1))
    return _save(deck)
