"""Tell a document's format from its bytes (magic numbers first) and its name."""

from __future__ import annotations

import codecs
import io
import zipfile
from enum import StrEnum
from pathlib import PurePath

import charset_normalizer

from proxy.errors import DocumentError


class Kind(StrEnum):
    """A format we can parse; the value is the PyMuPDF filetype for the PyMuPDF kinds."""

    PDF = "pdf"
    XPS = "xps"
    EPUB = "epub"
    MOBI = "mobi"
    FB2 = "fb2"
    CBZ = "cbz"
    DOCX = "docx"
    HTML = "html"
    TEXT = "text"


MUPDF_KINDS = frozenset({Kind.PDF, Kind.XPS, Kind.EPUB, Kind.MOBI, Kind.FB2, Kind.CBZ})

LIBRARY = {
    **{kind: "PyMuPDF" for kind in MUPDF_KINDS},
    Kind.DOCX: "python-docx",
    Kind.HTML: "selectolax",
    Kind.TEXT: "text",
}

_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".svg", ".heic"}
_BINARY_EXTS = {".pdf", ".xps", ".oxps", ".epub", ".mobi", ".cbz", ".docx"}
_HTML_EXTS = {".html", ".htm", ".xhtml"}
_TEXT_EXTS = {".txt", ".md", ".markdown", ".csv", ".tsv", ".json", ".yaml", ".yml", ".xml"}
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
# A real .docx or .epub unpacks to a few times its size; far more is a zip bomb.
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024


def detect(name: str, data: bytes) -> Kind:
    """Return the kind of document, or raise DocumentError saying why it cannot be parsed."""
    ext = PurePath(name).suffix.lower()
    if not data:
        raise DocumentError(name, "is empty (0 bytes)", code="empty_document")
    head = data[:8192]
    image = _image_format(head)
    if image is not None:
        raise DocumentError(
            name, f"is an image ({image}), not a document", code="image_not_document"
        )
    # PDF readers accept a header anywhere in the first KiB, but a note about PDFs named
    # .md or .txt must stay text: for those only a header at the very start counts.
    if data.startswith(b"%PDF-") or (
        ext not in _TEXT_EXTS | _HTML_EXTS and b"%PDF-" in data[:1024]
    ):
        return Kind.PDF
    if head.startswith(_OLE2):
        raise DocumentError(
            name,
            "is a legacy Microsoft Office file (OLE2: .doc/.xls/.ppt), which is not supported;"
            " save it as .docx or PDF",
            code="unsupported_format",
        )
    if data[60:68] == b"BOOKMOBI":
        return Kind.MOBI
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(name, ext, data)
    if ext in _BINARY_EXTS:
        raise DocumentError(
            name,
            f"is not a valid {ext[1:].upper()} file (its content does not match the format)",
            code="corrupt_document",
        )
    if ext in _IMAGE_EXTS and ext != ".svg":
        raise DocumentError(name, "is not a valid image or document", code="unsupported_format")
    if not looks_like_text(head):
        raise DocumentError(
            name,
            "is not a supported document format (unrecognised binary data)",
            code="unsupported_format",
        )
    if ext == ".svg":
        raise DocumentError(name, "is an image (SVG), not a document", code="image_not_document")
    sniff = head[:4096].lower()
    if ext == ".fb2" or b"<fictionbook" in sniff:
        return Kind.FB2
    if ext in _HTML_EXTS:
        return Kind.HTML
    if ext not in _TEXT_EXTS and (b"<!doctype html" in sniff[:512] or b"<html" in sniff):
        return Kind.HTML
    return Kind.TEXT


def _image_format(head: bytes) -> str | None:
    for magic, label in _IMAGE_MAGIC:
        if head.startswith(magic):
            return label
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    return None


def looks_like_text(head: bytes) -> bool:
    """True for a sample of bytes that decodes as text in some encoding."""
    if head.startswith(_BOMS):
        return True
    if b"\x00" in head:
        return False
    controls = sum(1 for byte in head if byte < 9 or (13 < byte < 32 and byte != 27))
    if controls > len(head) // 100:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        return True
    except UnicodeDecodeError:
        return charset_normalizer.from_bytes(head).best() is not None


def _zip_kind(name: str, ext: str, data: bytes) -> Kind:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            names = {info.filename for info in infos}
            mimetype = archive.read("mimetype")[:64] if "mimetype" in names else b""
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        label = f"{ext[1:].upper()} file" if ext else "ZIP archive"
        raise DocumentError(name, f"is a corrupt {label} ({exc})", code="corrupt_document") from exc
    if sum(info.file_size for info in infos) > MAX_UNPACKED_BYTES:
        raise DocumentError(
            name, "unpacks to more than 1 GiB (a zip bomb?)", code="document_too_large"
        )
    if "word/document.xml" in names:
        return Kind.DOCX
    if mimetype.startswith(b"application/epub+zip") or "META-INF/container.xml" in names:
        return Kind.EPUB
    if any(entry.lower().endswith(".fdseq") for entry in names):
        return Kind.XPS
    if "xl/workbook.xml" in names or "ppt/presentation.xml" in names:
        what = "an Excel workbook (.xlsx)" if "xl/workbook.xml" in names else "a PowerPoint (.pptx)"
        raise DocumentError(
            name, f"is {what}, which is not supported; export it as PDF", code="unsupported_format"
        )
    files = [entry for entry in names if not entry.endswith("/")]
    if ext == ".cbz" or (files and all(f.lower().endswith(_IMAGE_SUFFIXES) for f in files)):
        return Kind.CBZ
    raise DocumentError(
        name, "is a ZIP archive, not a supported document", code="unsupported_format"
    )
