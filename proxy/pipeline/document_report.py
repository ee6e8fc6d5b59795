"""What the user and the decision record are told about parsed documents (pure functions)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from proxy.documents.model import ParsedDocument

HEADER_CHARS = 1024
_HEADER_SAFE = " !#$&'()*+,-./:;<=>?@[]^_`{}~"


def document_record(document: ParsedDocument) -> dict[str, Any]:
    """One document in the decision record: what it was read as, where its units are, what
    was lossy."""
    return {
        "name": document.name,
        "kind": document.kind,
        "library": document.library,
        "title": document.title,
        "units": len(document.pages),
        "locations": [page.where for page in document.pages[:20]],
        "ocr_pages": document.ocr_pages,
        "warnings": [{"code": w.code, "message": w.message} for w in document.warnings],
    }


def warning_lines(documents: Iterable[ParsedDocument]) -> list[str]:
    """`report.pdf: was damaged and has been repaired; 12 of 14 pages could be read`, ..."""
    return [f"{doc.name}: {warning.message}" for doc in documents for warning in doc.warnings]


def warnings_header(lines: list[str], limit: int = HEADER_CHARS) -> str:
    """The lines for `X-Enrich-Warnings`: ` | `-separated, non-ASCII percent-encoded, bounded."""
    value = " | ".join(quote(line.replace("|", "/"), safe=_HEADER_SAFE) for line in lines)
    return value if len(value) <= limit else value[: limit - 3] + "..."


def location_fragment(location: str) -> str:
    """`section=2.3 Refunds` → `section=2.3%20Refunds`, for `file#...` citations."""
    key, _, value = location.partition("=")
    return f"{key}={quote(value, safe='')}" if value else quote(location, safe="=")
