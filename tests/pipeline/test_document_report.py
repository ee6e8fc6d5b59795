"""What users are told about documents: the warnings header, citation fragments."""

from __future__ import annotations

from proxy.documents.model import DocumentWarning, Page, ParsedDocument
from proxy.pipeline.document_report import (
    document_record,
    location_fragment,
    warning_lines,
    warnings_header,
)


def test_locations_become_url_fragments() -> None:
    assert location_fragment("page=4") == "page=4"
    assert location_fragment("section=2.3 Refunds") == "section=2.3%20Refunds"
    assert location_fragment("section=A & B/C=D") == "section=A%20%26%20B%2FC%3DD"
    assert location_fragment("sheet=Café") == "sheet=Caf%C3%A9"


def test_the_warnings_header_is_ascii_separated_and_bounded() -> None:
    document = ParsedDocument(
        "Übersicht.pdf",
        "0" * 64,
        "pdf",
        "PyMuPDF",
        (Page(1, "x", "page=1", ocr=True),),
        warnings=(
            DocumentWarning("repaired", "was damaged and has been repaired; 1 of 2 pages"),
            DocumentWarning("ocr", "page 1 has no text | layer"),
        ),
    )
    lines = warning_lines([document])
    assert lines[0] == "Übersicht.pdf: was damaged and has been repaired; 1 of 2 pages"
    header = warnings_header(lines)
    assert header == (
        "%C3%9Cbersicht.pdf: was damaged and has been repaired; 1 of 2 pages"
        " | %C3%9Cbersicht.pdf: page 1 has no text / layer"
    )
    assert header.isascii()
    assert len(warnings_header(lines * 100)) == 1024
    record = document_record(document)
    assert record["ocr_pages"] == [1] and record["locations"] == ["page=1"]
