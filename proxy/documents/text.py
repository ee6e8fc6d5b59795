"""Decode text files (BOM, UTF-8, else charset-normalizer) and cut long text into pages."""

from __future__ import annotations

import codecs
import re

import charset_normalizer

from proxy.documents.failure import ExtractError

PAGE_CHARS = 4000
"""Text-only formats have no pages: cut them into pages of at most this many characters."""

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_BLANK_RUNS = re.compile(r"\n{3,}")


def decode_text(data: bytes, declared: str | None = None) -> str:
    """Decode bytes of unknown encoding; `declared` is an encoding the file itself names."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _normalise(data.decode(encoding, errors="replace"))
    for encoding in ("utf-8", declared or "utf-8"):
        try:
            return _normalise(data.decode(encoding))
        except (UnicodeDecodeError, LookupError):
            pass
    best = charset_normalizer.from_bytes(data).best()
    if best is None:
        raise ExtractError("could not be decoded as text (unknown encoding)", "corrupt_document")
    return _normalise(str(best))


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


def tidy(text: str) -> str:
    """Strip trailing spaces and collapse runs of blank lines to one."""
    lines = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", lines).strip()


def split_pages(text: str, size: int = PAGE_CHARS) -> list[str]:
    """Cut text into pages of at most `size` characters, at a paragraph, line or word break."""
    pages: list[str] = []
    start, end_of_text = 0, len(text)
    while start < end_of_text:
        end = start + size
        if end >= end_of_text:
            cut = end_of_text
        else:
            floor = start + size // 2
            cut = end
            for sep in ("\n\n", "\n", " "):
                found = text.rfind(sep, floor, end)
                if found != -1:
                    cut = found + len(sep)
                    break
        page = text[start:cut].strip()
        if page:
            pages.append(page)
        start = cut
    return pages
