"""Text decoding, page splitting, HTML and DOCX extraction, without worker processes."""

from __future__ import annotations

import codecs
import io

import docx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.documents.failure import ExtractError
from proxy.documents.readers.docx import docx_to_text
from proxy.documents.readers.html import html_to_text
from proxy.documents.readers.text import PAGE_CHARS, decode_text, split_pages


@pytest.mark.parametrize(
    "data",
    [
        codecs.BOM_UTF8 + "Grüße".encode(),
        "Grüße".encode("utf-16"),
        "Grüße".encode("utf-32"),
        "Grüße".encode(),
    ],
)
def test_decodes_boms_and_utf8(data: bytes) -> None:
    assert decode_text(data) == "Grüße"


def test_decodes_legacy_encoding() -> None:
    text = (
        "Le rapport annuel présente les résultats de l'exercice écoulé. La société a réalisé"
        " un chiffre d'affaires en hausse, grâce à la croissance des ventes à l'étranger. Les"
        " dépenses ont été maîtrisées, et la trésorerie reste élevée. Où en sommes-nous ?\n"
    ) * 4
    assert decode_text(text.encode("cp1252")) == text


def test_normalises_newlines() -> None:
    assert decode_text(b"a\r\nb\rc\n") == "a\nb\nc\n"


def test_undecodable_is_an_extract_error() -> None:
    with pytest.raises(ExtractError):
        decode_text(bytes(range(256)) * 4)


def test_splits_long_text_at_paragraphs() -> None:
    paragraph = "word " * 150
    text = "\n\n".join(f"{n} {paragraph}" for n in range(40))
    pages = split_pages(text)
    assert len(pages) > 1
    assert all(len(page) <= PAGE_CHARS for page in pages)
    assert all(page[0].isdigit() for page in pages)


@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=20_000))
def test_split_keeps_every_word(text: str) -> None:
    pages = split_pages(text, size=500)
    assert all(len(page) <= 500 for page in pages)
    assert "".join(pages).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace(
        "\n", ""
    )


def test_html_keeps_structure_and_drops_chrome() -> None:
    html = b"""<!doctype html><html><head><title>T</title><style>p{}</style></head><body>
    <nav><a href="/">Home</a> <a href="/x">Menu</a></nav>
    <main><h1>Heading   one</h1><p>First   paragraph.</p><p>Second<br>line.</p>
    <ul><li>alpha</li><li>beta</li></ul><pre>  keep   spacing</pre>
    <script>alert("no")</script></main><footer>Copyright</footer></body></html>"""
    text = html_to_text(html)
    assert "# Heading one" in text
    assert "First paragraph.\n\nSecond\nline." in text
    assert "- alpha\n- beta" in text
    assert "  keep   spacing" in text
    for chrome in ("Menu", "alert", "Copyright", "p{}"):
        assert chrome not in text


def test_html_honours_declared_charset() -> None:
    html = '<html><head><meta charset="windows-1251"></head><body><p>Привет, мир</p>'
    assert "Привет, мир" in html_to_text(html.encode("cp1251"))


def test_html_survives_deep_nesting() -> None:
    # Rendering uses no recursion; far deeper pages are refused before parsing (below).
    html = b"<div>" * 3000 + b"deep" + b"</div>" * 3000
    assert html_to_text(html) == "deep"


def test_docx_paragraphs_headings_and_tables_in_order() -> None:
    document = docx.Document()
    document.add_heading("Report", level=1)
    document.add_paragraph("Before the table.")
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, (("a", "b"), ("c", "d")), strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.add_paragraph("After the table.")
    buffer = io.BytesIO()
    document.save(buffer)
    assert docx_to_text(buffer.getvalue()) == (
        "# Report\n\nBefore the table.\n\n| a | b |\n|---|---|\n| c | d |\n\nAfter the table."
    )


def test_corrupt_docx_is_an_extract_error() -> None:
    with pytest.raises(ExtractError, match="corrupt DOCX"):
        docx_to_text(b"PK\x03\x04 not really a zip")


def test_nesting_depth_is_counted_from_tags() -> None:
    from proxy.documents.readers.html import MAX_DEPTH, nesting_depth

    assert nesting_depth("<html><body><div><p>a<p>b</div><br><img src=x></body></html>") == 3
    assert nesting_depth("<div>" * (MAX_DEPTH + 1)) == MAX_DEPTH + 1
    assert nesting_depth("<div/>" * 100) == 0
