"""Format detection by magic bytes first, then by name."""

from __future__ import annotations

import io
import zipfile

import pytest

from proxy.documents.detect import detect
from proxy.documents.formats import Kind
from proxy.errors import DocumentError

OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "kind"),
    [
        ("report.pdf", b"%PDF-1.7\n...", Kind.PDF),
        ("no-extension", b"%PDF-1.4\n...", Kind.PDF),
        ("junk-before-header.bin", b"\x00garbage\n%PDF-1.4\n", Kind.PDF),
        ("named.txt", b"%PDF-1.4\n", Kind.PDF),
        ("book", b"\x00" * 60 + b"BOOKMOBI" + b"\x00" * 20, Kind.MOBI),
        ("a.docx", _zip({"word/document.xml": b"<w:document/>"}), Kind.DOCX),
        ("a.zip", _zip({"word/document.xml": b"<w:document/>"}), Kind.DOCX),
        ("b", _zip({"mimetype": b"application/epub+zip"}), Kind.EPUB),
        ("c", _zip({"FixedDocSeq.fdseq": b"<x/>"}), Kind.XPS),
        ("comic.cbz", _zip({"01.jpg": b"\xff\xd8\xff"}), Kind.CBZ),
        ("comic", _zip({"01.png": b"x", "02.png": b"y"}), Kind.CBZ),
        ("book.fb2", b'<?xml version="1.0"?><FictionBook></FictionBook>', Kind.FB2),
        ("noext", b'<?xml version="1.0"?>\n<FictionBook xmlns="x">', Kind.FB2),
        ("page.html", b"<p>hello</p>", Kind.HTML),
        ("page", b"<!DOCTYPE html><html><body>x</body></html>", Kind.HTML),
        ("notes.md", b"# Title\n\nText", Kind.MARKDOWN),
        ("notes.md", b"<html> in markdown is still markdown", Kind.MARKDOWN),
        ("pdf-notes.md", b"# PDF\n\nEvery file starts with `%PDF-1.7`.", Kind.MARKDOWN),
        ("data.csv", b"a,b\n1,2\n", Kind.CSV),
        ("code.py", b"print('hi')\n", Kind.CODE),
        ("Dockerfile", b"FROM python:3.11\n", Kind.CODE),
        ("data.json", b'{"a": 1}', Kind.JSON),
        ("plain", b"just words", Kind.TEXT),
        # Content over the declared type: clear text named like a binary format is text.
        ("notes.pdf", b"<!DOCTYPE html><html><title>N</title><p>x</p></html>", Kind.HTML),
        ("notes.pdf", b"# Notes\n\n- one\n- two\n", Kind.MARKDOWN),
        ("fake.pdf", b"just some text", Kind.TEXT),
        ("report.docx", b"<html><body><p>hi</p></body></html>", Kind.HTML),
        ("scan.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, Kind.IMAGE),
        ("photo.pdf", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, Kind.IMAGE),
        ("fax.tif", b"II*\x00" + b"\x00" * 20, Kind.IMAGE),
        ("s.xlsx", _zip({"xl/workbook.xml": b"x"}), Kind.XLSX),
        ("deck", _zip({"ppt/presentation.xml": b"x"}), Kind.PPTX),
        ("t", _zip({"mimetype": b"application/vnd.oasis.opendocument.text"}), Kind.ODT),
        ("s", _zip({"mimetype": b"application/vnd.oasis.opendocument.spreadsheet"}), Kind.ODS),
        ("p", _zip({"mimetype": b"application/vnd.oasis.opendocument.presentation"}), Kind.ODP),
        ("letter.rtf", b"{\\rtf1\\ansi Hello}", Kind.RTF),
        ("old.xls", OLE2 + b"\x00" * 50, Kind.XLS),
        ("book", OLE2 + b"\x00" * 50 + "Workbook".encode("utf-16-le"), Kind.XLS),
        ("latin1.txt", "Grad: 25 °C, déjà vu".encode("latin-1"), Kind.TEXT),
        ("utf16.txt", "héllo wörld".encode("utf-16"), Kind.TEXT),
    ],
)
def test_detects_kind(name: str, data: bytes, kind: Kind) -> None:
    assert detect(name, data) == kind


@pytest.mark.parametrize(
    ("name", "data", "code", "phrase"),
    [
        ("empty.pdf", b"", "empty_document", "is empty"),
        ("anim", b"GIF89a" + b"\x00" * 20, "image_not_document", "GIF"),
        ("x.webp", b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image_not_document", "WebP"),
        (
            "old.doc",
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 50,
            "unsupported_format",
            "OLE2",
        ),
        ("prog", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "unsupported_format", "binary"),
        ("fake.pdf", b"\x7fELF\x02\x01" + bytes(range(256)), "corrupt_document", "not a valid PDF"),
        ("a.zip", _zip({"readme.txt": b"x"}), "unsupported_format", "ZIP archive"),
        ("broken.docx", b"PK\x03\x04" + b"\x00" * 30, "corrupt_document", "corrupt DOCX"),
    ],
)
def test_refuses_with_reason(name: str, data: bytes, code: str, phrase: str) -> None:
    with pytest.raises(DocumentError) as caught:
        detect(name, data)
    assert caught.value.code == code
    assert caught.value.filename == name
    assert phrase in caught.value.message
    assert caught.value.message.startswith(f"{name}: ")
