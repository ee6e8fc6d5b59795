"""OCR of pages without a text layer and of images sent as documents (Tesseract via PyMuPDF)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.documents.limits import ParseLimits
from proxy.documents.ocr import OcrUnavailable, find_tessdata, ocr_status
from proxy.documents.parser import DocumentParser
from proxy.errors import DocumentError
from tests.documents import makers

LINES = ["The invoice number is 4711.", "Total due: 93.50 EUR by Friday."]
TESSDATA, _ = find_tessdata(["eng"])
needs_tesseract = pytest.mark.skipif(
    not TESSDATA, reason="Tesseract's English data is not installed (apt-get install tesseract-ocr)"
)


def test_language_data_is_found_in_the_folder_that_has_every_language(tmp_path: Path) -> None:
    only_eng, both = tmp_path / "a" / "tessdata", tmp_path / "b" / "tessdata"
    for folder, languages in ((only_eng, ["eng"]), (both, ["eng", "deu"])):
        folder.mkdir(parents=True)
        for language in languages:
            (folder / f"{language}.traineddata").write_bytes(b"x")
    search = [str(tmp_path / "*" / "tessdata")]
    assert find_tessdata(["eng", "deu"], search) == (str(both), "")
    assert find_tessdata(["eng", "fra"], search) == (
        "",
        f"no Tesseract language data for fra in {both}, {only_eng}",
    )
    assert find_tessdata(["eng"], [str(tmp_path / "none")])[0] in ("", TESSDATA)


def test_no_language_data_at_all_still_names_the_languages_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TESSDATA_PREFIX", raising=False)
    assert find_tessdata(["eng", "xyz"], [str(tmp_path / "none")]) == (
        "",
        "Tesseract language data not found (none for eng, xyz)",
    )


def test_ocr_settings_resolve_to_on_off_or_a_startup_error(tmp_path: Path) -> None:
    empty = [str(tmp_path / "nothing")]
    assert ocr_status(False, ["eng"], 300, 50, empty).describe() == (
        "off (documents.ocr.enabled is false)"
    )
    (tmp_path / "eng.traineddata").write_bytes(b"x")
    found = ocr_status("auto", ["eng"], 200, 5, [str(tmp_path)])
    assert found.options is not None and found.options.tessdata == str(tmp_path)
    assert (found.options.dpi, found.options.max_pages, found.options.language) == (200, 5, "eng")
    if not TESSDATA:  # nothing installed where the real search looks
        assert not ocr_status("auto", ["eng"], 300, 50, empty).on
        with pytest.raises(OcrUnavailable, match="apt-get install tesseract-ocr"):
            ocr_status(True, ["eng"], 300, 50, empty)


async def test_ocr_off_says_how_to_turn_it_on(tmp_path: Path) -> None:
    scan, picture = makers.scanned_pdf(LINES, dpi=100)
    parser = DocumentParser(tmp_path, workers=1)  # OCR not configured
    try:
        with pytest.raises(DocumentError, match="scanned document without a text layer") as caught:
            await parser.parse("scan.pdf", scan)
        assert "apt-get install tesseract-ocr" in caught.value.message
        with pytest.raises(DocumentError, match="OCR is off") as image:
            await parser.parse("scan.png", picture)
        assert image.value.code == "image_not_document"
    finally:
        await parser.close()


@pytest.fixture
async def ocr_parser(tmp_path: Path) -> DocumentParser:
    status = ocr_status("auto", ["eng"], 150, 1, [TESSDATA])
    parser = DocumentParser(tmp_path, ParseLimits(timeout_s=30), workers=1, ocr=status)
    yield parser  # type: ignore[misc]
    await parser.close()


@needs_tesseract
async def test_a_scanned_page_is_read_by_ocr(ocr_parser: DocumentParser) -> None:
    scan, _ = makers.scanned_pdf(LINES)
    statuses: list[str] = []
    document = await ocr_parser.parse("scan.pdf", scan, statuses.append)
    assert "invoice number is 4711" in document.text
    assert "93.50 EUR" in document.text
    assert document.pages[0].ocr and document.ocr_pages == [1]
    assert "OCR page 1 of 1 of scan.pdf..." in statuses
    assert [w.message for w in document.warnings] == [
        "page 1 has no text layer and was read by OCR (eng)"
    ]


@needs_tesseract
async def test_an_image_sent_as_a_document_is_read_by_ocr(ocr_parser: DocumentParser) -> None:
    _, picture = makers.scanned_pdf(LINES)
    document = await ocr_parser.parse("photo of the invoice.png", picture)
    assert document.kind == "image"
    assert "invoice number is 4711" in document.text
    assert document.pages[0].location == "page=1"


@needs_tesseract
async def test_ocr_stops_at_its_page_cap_and_says_so(ocr_parser: DocumentParser) -> None:
    import pymupdf

    one, _ = makers.scanned_pdf(LINES)
    two = pymupdf.open(stream=one, filetype="pdf")
    two.insert_pdf(pymupdf.open(stream=one, filetype="pdf"))
    document = await ocr_parser.parse("two scans.pdf", two.tobytes())
    assert document.ocr_pages == [1]  # documents.ocr.max_pages is 1 here
    assert document.pages[1].text == ""
    assert "ocr_cut" in [w.code for w in document.warnings]


@needs_tesseract
@pytest.mark.slow
async def test_the_corpus_scans_are_answered_from_ocr(corpus_dir: Path, tmp_path: Path) -> None:
    # Two of its eight pages (3-6 s each at 300 dpi here): the default run stays short.
    status = ocr_status("auto", ["eng"], 300, 2, [TESSDATA])
    parser = DocumentParser(tmp_path, workers=1, ocr=status)
    try:
        data = (corpus_dir / "pdf/test_3863.pdf").read_bytes()
        document = await parser.parse("test_3863.pdf", data)
        assert document.ocr_pages == [1, 2]
        assert "Rohrbuch" in document.pages[0].text
        assert "Erdgasleitung" in document.pages[0].text
        assert [page.number for page in document.pages] == list(range(1, 9))
    finally:
        await parser.close()


def test_required_ocr_without_its_data_stops_start_up() -> None:
    from proxy.config import ConfigError, load_settings
    from proxy.wiring import ocr_of

    settings = load_settings(
        None, environ={}, overrides={"documents": {"ocr": {"enabled": True, "languages": ["xyz"]}}}
    )
    with pytest.raises(ConfigError, match=r"documents\.ocr\.enabled is true but .*xyz"):
        ocr_of(settings)
    off = load_settings(None, environ={}, overrides={"documents": {"ocr": {"enabled": False}}})
    assert not ocr_of(off).on
