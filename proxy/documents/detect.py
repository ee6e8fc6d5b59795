"""Tell a document's format from its bytes first (magic numbers, container contents), then its name.

Runs in the main process, so it reads no more than a few bytes of any compressed member.
"""

from __future__ import annotations

import codecs
import re
from pathlib import PurePath

import charset_normalizer

from proxy.documents.failure import ExtractError
from proxy.documents.formats import CODE_LANGUAGES, CODE_NAMES, TEXT_KINDS, Kind
from proxy.documents.readers.archive import open_zip, read_head
from proxy.errors import DocumentError

_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
OCR_IMAGES = frozenset({"PNG", "JPEG", "TIFF"})
"""Images read as documents by OCR; others are refused (send them as image_url parts)."""
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE2_WORKBOOK = ("Workbook".encode("utf-16-le"), "Book\x00".encode("utf-16-le"))
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".svg", ".heic"}
_HTML_EXTS = {".html", ".htm", ".xhtml"}
_MARKDOWN_EXTS = {".md", ".markdown", ".mdown", ".mkd", ".rst"}
_CSV_EXTS = {".csv", ".tsv"}
_JSON_EXTS = {".json", ".jsonl", ".ndjson", ".geojson"}
_ODF_MIMETYPES = {
    b"application/vnd.oasis.opendocument.text": Kind.ODT,
    b"application/vnd.oasis.opendocument.spreadsheet": Kind.ODS,
    b"application/vnd.oasis.opendocument.presentation": Kind.ODP,
}
EXTENSION_KINDS = {
    ".pdf": Kind.PDF, ".xps": Kind.XPS, ".oxps": Kind.XPS, ".epub": Kind.EPUB,
    ".mobi": Kind.MOBI, ".fb2": Kind.FB2, ".cbz": Kind.CBZ, ".docx": Kind.DOCX,
    ".odt": Kind.ODT, ".rtf": Kind.RTF, ".xlsx": Kind.XLSX, ".xlsm": Kind.XLSX,
    ".xls": Kind.XLS, ".ods": Kind.ODS, ".pptx": Kind.PPTX, ".odp": Kind.ODP,
    ".txt": Kind.TEXT, ".text": Kind.TEXT, ".log": Kind.TEXT,
    **{ext: Kind.HTML for ext in _HTML_EXTS}, **{ext: Kind.MARKDOWN for ext in _MARKDOWN_EXTS},
    **{ext: Kind.CSV for ext in _CSV_EXTS}, **{ext: Kind.JSON for ext in _JSON_EXTS},
    **{ext: Kind.CODE for ext in CODE_LANGUAGES},
    **{ext: Kind.IMAGE for ext in (".png", ".jpg", ".jpeg", ".tif", ".tiff")},
}  # fmt: skip
_BINARY_KINDS = frozenset(EXTENSION_KINDS.values()) - TEXT_KINDS - {Kind.HTML, Kind.FB2}
_MARKDOWN_HINT = re.compile(rb"^(#{1,6} \S|```|\* \S|- \S|\d+\. \S|\|.*\|\s*$)", re.MULTILINE)
_HTML_HINT = re.compile(rb"<!doctype html|<html[\s>]|<head[\s>]|<body[\s>]")


def declared_kind(name: str) -> Kind | None:
    """The kind a file's name claims, if it claims one."""
    path = PurePath(name)
    if path.name.lower() in CODE_NAMES:
        return Kind.CODE
    return EXTENSION_KINDS.get(path.suffix.lower())


def detect(name: str, data: bytes) -> Kind:
    """Return the kind of document, or raise DocumentError saying why it cannot be parsed."""
    try:
        return _detect(name, data)
    except ExtractError as exc:
        raise DocumentError(name, exc.reason, code=exc.code) from None


def _detect(name: str, data: bytes) -> Kind:
    ext = PurePath(name).suffix.lower()
    declared = declared_kind(name)
    if not data:
        raise ExtractError("is empty (0 bytes)", "empty_document")
    head = data[:8192]
    image = _image_format(head)
    if image in OCR_IMAGES:
        return Kind.IMAGE
    if image is not None:
        raise ExtractError(
            f"is an image ({image}), not a document; send it as an image_url part",
            "image_not_document",
        )
    # PDF readers accept a header anywhere in the first KiB, but a note about PDFs named
    # .md or .txt must stay text: for those only a header at the very start counts.
    if data.startswith(b"%PDF-") or (
        (declared is None or declared not in TEXT_KINDS | {Kind.HTML}) and b"%PDF-" in data[:1024]
    ):
        return Kind.PDF
    if head.startswith(_OLE2):
        return _ole2_kind(ext, data)
    if data[60:68] == b"BOOKMOBI":
        return Kind.MOBI
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(ext, data)
    if head.startswith(b"{\\rtf"):
        return Kind.RTF
    if not looks_like_text(head):
        if declared in _BINARY_KINDS:
            raise ExtractError(
                f"is not a valid {ext[1:].upper()} file (its content does not match the format)",
                "corrupt_document",
            )
        raise ExtractError(
            "is not a supported document format (unrecognised binary data)", "unsupported_format"
        )
    if ext == ".svg":
        raise ExtractError("is an image (SVG), not a document", "image_not_document")
    sniff = head[:4096].lower()
    if ext == ".fb2" or b"<fictionbook" in sniff:
        return Kind.FB2
    if declared in TEXT_KINDS or declared == Kind.HTML:
        return declared
    # No name, an unknown one, or a binary format's name on text: the content decides.
    if _HTML_HINT.search(sniff[:1024]):
        return Kind.HTML
    if declared is not None and _MARKDOWN_HINT.search(head):
        return Kind.MARKDOWN
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


def _ole2_kind(ext: str, data: bytes) -> Kind:
    # The compound file's directory names its streams in UTF-16: a workbook says so.
    if ext == ".xls" or any(marker in data[: 4 * 1024 * 1024] for marker in _OLE2_WORKBOOK):
        return Kind.XLS
    raise ExtractError(
        "is a legacy Microsoft Office file (OLE2: .doc/.ppt), which is not supported;"
        " save it as .docx/.pptx or PDF",
        "unsupported_format",
    )


def _zip_kind(ext: str, data: bytes) -> Kind:
    label = f"{ext[1:].upper()} file" if ext else "ZIP archive"
    with open_zip(data, label) as archive:
        names = set(archive.namelist())
        try:
            mimetype = read_head(archive, "mimetype") if "mimetype" in names else b""
        except Exception as exc:  # any failure to inflate a few bytes: a corrupt container
            raise ExtractError(f"is a corrupt {label} ({exc})", "corrupt_document") from exc
    if "word/document.xml" in names:
        return Kind.DOCX
    if "xl/workbook.xml" in names:
        return Kind.XLSX
    if "ppt/presentation.xml" in names:
        return Kind.PPTX
    for prefix, kind in _ODF_MIMETYPES.items():
        if mimetype.startswith(prefix):
            return kind
    if mimetype.startswith(b"application/epub+zip") or "META-INF/container.xml" in names:
        return Kind.EPUB
    if any(entry.lower().endswith(".fdseq") for entry in names):
        return Kind.XPS
    files = [entry for entry in names if not entry.endswith("/")]
    if ext == ".cbz" or (files and all(f.lower().endswith(_CBZ_IMAGES) for f in files)):
        return Kind.CBZ
    raise ExtractError("is a ZIP archive, not a supported document", "unsupported_format")


_CBZ_IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
