"""Text of PyMuPDF documents (PDF, XPS, EPUB, MOBI, FB2, CBZ), page by page."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from proxy.documents.failure import ExtractError

# When installed, pymupdf imports its optional add-ons (layout analysis, pymupdf4llm with
# numpy) eagerly: over a second of worker start-up that get_text() never uses.
# setdefault: an add-on that is already loaded stays loaded.
for _addon in ("pymupdf.layout", "pymupdf4llm"):
    sys.modules.setdefault(_addon, None)  # type: ignore[arg-type]

import pymupdf  # noqa: E402

PageText = tuple[int, str]
# PyMuPDF's calls are untyped; going through Any keeps mypy --strict quiet without ignores.
_mupdf: Any = pymupdf

# Keep MuPDF's own complaints off stderr; the worker forwards them to the parent's log.
_mupdf.TOOLS.mupdf_display_errors(False)
_mupdf.TOOLS.mupdf_display_warnings(False)


def mupdf_pages(
    data: bytes,
    filetype: str,
    max_pages: int,
    on_count: Callable[[int], None],
) -> Iterator[PageText]:
    """Yield (1-based number, text) for each page that can be read."""
    _mupdf.TOOLS.reset_mupdf_warnings()
    label = filetype.upper()
    try:
        document: Any = _mupdf.open(stream=data, filetype=filetype)
    except Exception as exc:
        raise ExtractError(
            f"is corrupt or not a valid {label} file and could not be opened ({exc})",
            "corrupt_document",
        ) from exc
    with document:
        # needs_pass is read once and before anything else: see FACTS (PyMuPDF).
        if document.needs_pass:
            raise ExtractError(
                "is password-protected (encrypted); it needs a password to be opened",
                "encrypted_document",
            )
        try:
            count = document.page_count
        except Exception as exc:
            raise ExtractError(
                f"has an invalid page count ({exc}); the file is corrupt", "corrupt_document"
            ) from exc
        if count <= 0:
            raise ExtractError(
                f"is damaged: no pages could be read (the {label} may be truncated or corrupt)",
                "corrupt_document",
            )
        if count > max_pages:
            raise ExtractError(
                f"has {count} pages, more than the limit of {max_pages} pages", "too_many_pages"
            )
        on_count(count)
        for index in range(count):
            try:
                text = document.load_page(index).get_text()
            except Exception:
                # A page that cannot be loaded (cycle in the page tree, broken object) is
                # skipped; the parent fails the document only if no page at all was read.
                continue
            yield index + 1, text


def mupdf_warnings() -> str:
    """Warnings MuPDF collected since the last document was opened."""
    return str(_mupdf.TOOLS.mupdf_warnings())
