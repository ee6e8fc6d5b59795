"""Every file of the shared corpus: real documents parse, broken ones fail with a clear reason."""

from __future__ import annotations

import csv
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from proxy.documents.limits import ParseLimits
from proxy.documents.parser import DocumentParser
from proxy.errors import DocumentError

pytestmark = pytest.mark.asyncio(loop_scope="module")

# file -> (kind, page numbers or None for "any", a phrase of the text)
PARSES: dict[str, tuple[str, list[int] | None, str]] = {
    "pdf/GeoTopo-komprimiert.pdf": ("pdf", list(range(1, 118)), "Topologie"),
    "pdf/freeculture.pdf": ("pdf", list(range(1, 353)), "Free Culture"),
    "pdf/pdkids.pdf": ("pdf", list(range(1, 56)), "The Buried Moon"),
    "pdf/tracemonkey.pdf": ("pdf", list(range(1, 15)), "Trace-based Just-in-Time"),
    "pdf/multicolumn.pdf": ("pdf", [1, 2, 3], "Two-Column Document"),
    "pdf/chinese-tables.pdf": ("pdf", [1], "发行人"),
    "pdf/small-table.pdf": ("pdf", [1], "Boiling Points"),
    "pdf/issue16538.pdf": ("pdf", [1], "マーケット"),
    "pdf/issue20232.pdf": ("pdf", [1], "Масса"),
    "pdf/habibi.pdf": ("pdf", [1], "habibi"),
    "pdf/has-bad-fonts.pdf": ("pdf", [1], "TORONTO"),
    "pdf/issue12963.pdf": ("pdf", list(range(1, 9)), "2017"),
    "pdf/libreoffice-form.pdf": ("pdf", [1], "Example for a Form"),
    # The page tree loops back on itself: page 2 cannot be loaded and is skipped.
    "pdf_broken/Pages-tree-refs.pdf": ("pdf", [1], "Pages loop"),
    "pdf_broken/circular-toc.pdf": ("pdf", [1, 2], "Page2"),
    "epub/alice.epub": ("epub", None, "Rabbit-Hole"),
    "epub/moby-dick.epub": ("epub", None, "Call me Ishmael"),
    "epub/alice_without_cover.epub": ("epub", None, "Alice's Adventures"),
    "docx/blk-paras-and-tables.docx": ("docx", [1], "Lorem ipsum dolor sit amet"),
    "html/wikipedia-mozilla.html": ("html", None, "Mozilla is a free-software community"),
    "html/ietf-remotestorage.html": ("html", None, "remoteStorage"),
    "html/hukumusume-ja.html": ("html", [1], "イソップ"),
    "text/tinyshakespeare.txt": ("text", None, "First Citizen:"),
    "text/readability-README.md": ("markdown", None, "# Readability.js"),
    "text/test_markdown_bad_unicode.md": ("markdown", None, "Boiling Points °C"),
}

# file -> (error code, a phrase of the message)
FAILS: dict[str, tuple[str, str]] = {
    "pdf/recursiveCompositGlyf.pdf": ("no_text", "no extractable text"),
    "pdf/test_3863.pdf": ("no_text", "scanned document without a text layer. Reading scans"),
    "pdf/libreoffice-writer-password.pdf": ("encrypted_document", "needs a password"),
    "pdf/saslprep-r6.pdf": ("encrypted_document", "needs a password"),
    "pdf/empty_protected.pdf": ("no_text", "no extractable text"),
    "pdf/unreadablemetadata.pdf": ("corrupt_document", "no pages could be read"),
    "pdf_broken/bug1020226.pdf": ("corrupt_document", "no pages could be read"),
    "pdf_broken/REDHAT-1531897-0.pdf": ("corrupt_document", "no pages could be read"),
    "pdf_broken/PDFBOX-3148-2-fuzzed.pdf": ("no_text", "no extractable text"),
    "pdf_broken/poppler-67295-0.pdf": ("corrupt_document", "invalid page count"),
    "pdf_broken/poppler-85140-0.pdf": ("corrupt_document", "could not be opened"),
    "pdf_broken/poppler-742-0-fuzzed.pdf": ("corrupt_document", "could not be opened"),
    "pdf_broken/operator_list_cycle.pdf": ("no_text", "no extractable text"),
    "pdf_broken/bug1980958.pdf": ("no_text", "no extractable text"),
    "pdf_broken/zero-bytes.pdf": ("empty_document", "is empty"),
    # OCR is off for this parser: an image is refused, saying how to have it read.
    "pdf_broken/smile-png-named.pdf": ("image_not_document", "OCR is off"),
    "pdf_broken/tracemonkey-truncated.pdf": ("corrupt_document", "truncated or corrupt"),
    "docx/having-images.docx": ("no_text", "no extractable text"),
    "other/test_open2.doc": ("unsupported_format", "legacy Microsoft Office"),
}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def parser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DocumentParser]:
    # A large max_pages: moby-dick.epub lays out to 612 pages.
    parser = DocumentParser(tmp_path_factory.mktemp("cache"), ParseLimits(), workers=2)
    await parser.start()
    yield parser
    await parser.close()


def _manifest(corpus_dir: Path) -> list[dict[str, str]]:
    with (corpus_dir / "MANIFEST.tsv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


async def test_every_corpus_file_has_an_expectation(corpus_dir: Path) -> None:
    listed = {row["file"] for row in _manifest(corpus_dir)}
    assert listed == set(PARSES) | set(FAILS)


@pytest.mark.parametrize("file", sorted(PARSES))
async def test_parses(corpus_dir: Path, parser: DocumentParser, file: str) -> None:
    kind, numbers, phrase = PARSES[file]
    data = (corpus_dir / file).read_bytes()
    statuses: list[str] = []
    document = await parser.parse(Path(file).name, data, statuses.append)
    assert document.kind == kind
    assert document.name == Path(file).name
    if numbers is not None:
        assert [page.number for page in document.pages] == numbers
    assert phrase in document.text
    assert statuses[-1] == f"Parsing file {Path(file).name}... (100%)"


@pytest.mark.parametrize("file", sorted(FAILS))
async def test_fails_clearly(corpus_dir: Path, parser: DocumentParser, file: str) -> None:
    code, phrase = FAILS[file]
    name = Path(file).name
    with pytest.raises(DocumentError) as caught:
        await parser.parse(name, (corpus_dir / file).read_bytes())
    assert caught.value.code == code
    assert caught.value.message.startswith(f"{name}: ")
    assert phrase in caught.value.message


async def test_pdf_page_counts_match_the_manifest(corpus_dir: Path, parser: DocumentParser) -> None:
    # Where PyMuPDF read a PDF with text cleanly, we return every one of its pages.
    checked = 0
    for row in _manifest(corpus_dir):
        result = re.match(r"pages=(\d+) chars=(\d+)", row["pymupdf_result"])
        if not row["file"].endswith(".pdf") or result is None or result[2] == "0":
            continue
        if "page_errors" in row["pymupdf_result"] or "tables" in row["kind"]:
            continue  # tables become Markdown: more characters than PyMuPDF's loose lines
        document = await parser.parse(row["file"], (corpus_dir / row["file"]).read_bytes())
        assert len(document.pages) == int(result[1])
        # Ours strips trailing whitespace per page; the manifest counted PyMuPDF's raw text.
        assert abs(document.char_count - int(result[2])) <= int(result[2]) // 50 + 10
        checked += 1
    assert checked >= 10
