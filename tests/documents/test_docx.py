"""DOCX read from its XML: styles resolved once, merged cells on the grid, captions, content
controls, tracked changes and text boxes."""

from __future__ import annotations

import io

import docx
from docx.enum.style import WD_STYLE_TYPE
from lxml import etree

from proxy.documents.job import Job
from proxy.documents.readers.docx import W, docx_to_text


def _with_body(xml: str, setup: object = None) -> bytes:
    """A Word document whose body is `xml` (w: elements), made from python-docx's template."""
    document = docx.Document()
    if callable(setup):
        setup(document)
    body = document.element.body
    for child in list(body):
        if not child.tag.endswith("sectPr"):
            body.remove(child)
    fragment = etree.fromstring(f'<w:body xmlns:w="{W}">{xml}</w:body>')
    for index, child in enumerate(fragment):
        body.insert(index, child)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _p(text: str, style: str = "") -> str:
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{props}<w:r><w:t xml:space='preserve'>{text}</w:t></w:r></w:p>"


def _tc(text: str, props: str = "") -> str:
    return f"<w:tc><w:tcPr>{props}</w:tcPr>{_p(text)}</w:tc>"


def _tbl(*rows: str) -> str:
    return "<w:tbl>" + "".join(f"<w:tr>{row}</w:tr>" for row in rows) + "</w:tbl>"


def test_merged_cells_stay_on_the_grid() -> None:
    data = _with_body(
        _tbl(
            _tc("Group") + _tc("Item") + _tc("Qty") + _tc("Sum"),
            _tc("A", '<w:vMerge w:val="restart"/>') + _tc("Cable") + _tc("4") + _tc("480"),
            _tc("", "<w:vMerge/>") + _tc("Plug") + _tc("2") + _tc("20"),
            _tc("Total", '<w:gridSpan w:val="3"/>') + _tc("500"),
            '<w:trPr><w:gridBefore w:val="2"/></w:trPr>' + _tc("late") + _tc("start"),
        )
    )
    assert docx_to_text(data) == (
        "| Group | Item | Qty | Sum |\n|---|---|---|---|\n"
        "| A | Cable | 4 | 480 |\n"
        "| A | Plug | 2 | 20 |\n"  # a vertical merge is read in each of its rows
        "| Total |  |  | 500 |\n"  # a horizontal one once, the columns it spans empty
        "|  |  | late | start |"
    )


def test_a_nested_table_is_flattened_into_its_cell() -> None:
    nested = _tbl(_tc("Stage") + _tc("Days"), _tc("One") + _tc("5"))
    data = _with_body(
        _tbl(_tc("Item") + _tc("Plan"), _tc("Build") + f"<w:tc>{_p('see:')}{nested}</w:tc>")
    )
    assert "| Build | see: Stage / Days; One / 5 |" in docx_to_text(data)


def test_captions_before_or_after_a_table() -> None:
    table = _tbl(_tc("a") + _tc("b"), _tc("1") + _tc("2"))
    data = _with_body(
        _p("Costs of stage 1", "Caption")
        + table
        + _p("Between the tables.")
        + table
        + _p("Таблица 2 — Сроки работ")
        + _p("Figure 3: a photo", "Caption")
        + table
        + _p("After the last table.")
    )
    text = docx_to_text(data)
    assert text == (
        "Table: Costs of stage 1\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "Between the tables.\n\n"
        "Table: Таблица 2 — Сроки работ\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "Figure 3: a photo\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "After the last table."
    )


def test_a_caption_between_two_tables_names_the_next_one() -> None:
    table = _tbl(_tc("a") + _tc("b"), _tc("1") + _tc("2"))
    data = _with_body(table + _p("Table 2. Second") + table)
    assert docx_to_text(data) == (
        "| a | b |\n|---|---|\n| 1 | 2 |\n\nTable: Table 2. Second\n| a | b |\n|---|---|\n| 1 | 2 |"
    )


def _custom_styles(document: object) -> None:
    assert isinstance(document, docx.document.Document)
    custom = document.styles.add_style("Contract Clause", WD_STYLE_TYPE.PARAGRAPH)
    custom.base_style = document.styles["Heading 2"]
    plain = document.styles.add_style("Body Plain", WD_STYLE_TYPE.PARAGRAPH)
    plain.base_style = document.styles["Normal"]


def test_headings_and_lists_from_styles_and_numbering() -> None:
    data = _with_body(
        _p("Agreement", "Title")
        + _p("Terms", "ContractClause")
        + _p("plain words", "BodyPlain")
        + '<w:p><w:pPr><w:outlineLvl w:val="2"/></w:pPr><w:r><w:t>Outlined</w:t></w:r></w:p>'
        + _p("first", "ListBullet")
        + _p("deeper", "ListBullet2")
        + '<w:p><w:pPr><w:numPr><w:ilvl w:val="1"/><w:numId w:val="3"/></w:numPr></w:pPr>'
        "<w:r><w:t>numbered by hand</w:t></w:r></w:p>"
        '<w:p><w:pPr><w:numPr><w:ilvl w:val="0"/><w:numId w:val="0"/></w:numPr></w:pPr>'
        "<w:r><w:t>numbering removed</w:t></w:r></w:p>",
        _custom_styles,
    )
    assert docx_to_text(data) == (
        "# Agreement\n\n## Terms\n\nplain words\n\n### Outlined\n\n- first\n\n  - deeper\n\n"
        "  - numbered by hand\n\nnumbering removed"
    )


def test_text_in_controls_insertions_and_breaks_but_not_deletions_or_text_boxes() -> None:
    box = (
        "<w:r><w:drawing><w:txbxContent><w:p><w:r><w:t>boxed</w:t></w:r></w:p>"
        "</w:txbxContent></w:drawing></w:r>"
    )
    data = _with_body(
        "<w:sdt><w:sdtContent>"
        + _p("Inside a content control")
        + "</w:sdtContent></w:sdt>"
        + "<w:p><w:r><w:t>kept </w:t></w:r><w:del><w:r><w:delText>gone</w:delText></w:r></w:del>"
        "<w:ins><w:r><w:t>added</w:t></w:r></w:ins>"
        '<w:hyperlink><w:r><w:t xml:space="preserve"> linked</w:t></w:r></w:hyperlink>'
        "<w:r><w:br/><w:t>next line</w:t><w:br w:type='page'/><w:tab/><w:t>tabbed</w:t></w:r>"
        + box
        + "</w:p>"
    )
    assert docx_to_text(data) == (
        "Inside a content control\n\nkept added linked\nnext line\ttabbed"
    )


def test_long_cells_are_cut_with_one_warning() -> None:
    long = "x" * 2500
    data = _with_body(_tbl(_tc("a") + _tc("b"), _tc(long) + _tc(long)))
    warnings: list[tuple[str, str]] = []
    job = Job("docx", on_warning=lambda code, message: warnings.append((code, message)))
    text = docx_to_text(data, job)
    assert "| " + "x" * 2000 + "… | " + "x" * 2000 + "… |" in text
    assert warnings == [("cell_cut", "table cells longer than 2000 characters were cut")]
