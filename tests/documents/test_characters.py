"""Characters no prompt should hold (U+2028/U+2029, odd spaces, ligatures, soft hyphens) are
normalised while documents are read, whatever their format."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from proxy.documents.limits import ParseLimits
from proxy.documents.parser import DocumentParser
from proxy.documents.readers.text import normalise_characters

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

ODD = (
    "Trunk\u2029Trace\u2028Tree\u00a0Anchor\u202fx hyphen\u00adated exam\u00ad\nple "
    "\ufb01rst \ufb02ow"
)
PLAIN = "Trunk\nTrace\nTree Anchor x hyphenated example first flow"
UNWANTED = "\u2028\u2029\u00a0\u202f\u00ad\ufb01\ufb02"


def test_each_kind_of_character() -> None:
    assert normalise_characters(ODD) == PLAIN
    assert normalise_characters("a\u0085b\x0bc\x0cd") == "a\nb\nc\nd"
    assert normalise_characters("\u2003em\u2009thin\u205fmath") == " em thin math"
    assert normalise_characters("\ufb00 \ufb03 \ufb04 \ufb05 \ufb06") == "ff ffi ffl st st"
    assert normalise_characters("soft\u00ad \n  break") == "softbreak"  # split at a line's end
    # What stays: ordinary text in any script, and the characters the guard reports on.
    kept = "Ünïcödé, 中文　全角, العربية, zero\u200bwidth, tab\tline\n"
    assert normalise_characters(kept) == kept
    assert normalise_characters("plain ascii") == "plain ascii"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def parser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DocumentParser]:
    parser = DocumentParser(tmp_path_factory.mktemp("cache"), ParseLimits(), workers=1)
    yield parser
    await parser.close()


def docx_with(text: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@MODULE_LOOP
async def test_text_files_and_worker_formats_alike(parser: DocumentParser) -> None:
    # A text file is read in the proxy's process, a DOCX in a worker process: both are tidied.
    for name, data in (
        ("notes.txt", ODD.encode()),
        ("notes.md", ("# Notes\n\n" + ODD).encode()),
        ("notes.docx", docx_with(ODD.replace("\u00ad\n", "\u00ad"))),
    ):
        document = await parser.parse(name, data)
        assert not set(UNWANTED) & set(document.text), name
        assert "first flow" in document.text and "hyphenated" in document.text, name


@MODULE_LOOP
async def test_a_real_pdf_with_paragraph_separators_and_ligatures(
    parser: DocumentParser, corpus_dir: Path
) -> None:
    data = (corpus_dir / "pdf" / "tracemonkey.pdf").read_bytes()
    assert "\u2029".encode() not in data  # in the PDF, they are glyph positions, not text
    document = await parser.parse("tracemonkey.pdf", data)
    assert not set(UNWANTED) & set(document.text)
    assert "first" in document.text and "Trunk\nTrace" in document.text
