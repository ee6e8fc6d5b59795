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
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return normalise_characters(text)


# What reaches the prompt is plain lines and spaces: separators that mean a line break become
# one, spaces of other widths become a space, the Latin ligatures PDFs are full of (U+FB00-FB06,
# `ﬁ`) become their letters, and a soft hyphen (an invisible hyphenation hint) goes; a soft
# hyphen ending a line joins the word it split. Models tokenize all of these badly, and a
# person reading a quoted passage does not expect them.
_SEPARATORS = {
    **dict.fromkeys(map(ord, "\u2028\u2029\u0085\x0b\x0c"), "\n"),
    **dict.fromkeys(map(ord, "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006"), " "),
    **dict.fromkeys(map(ord, "\u2007\u2008\u2009\u200a\u202f\u205f"), " "),
    ord("\u00ad"): "",
    0xFB00: "ff",
    0xFB01: "fi",
    0xFB02: "fl",
    0xFB03: "ffi",
    0xFB04: "ffl",
    0xFB05: "st",
    0xFB06: "st",
}
_SOFT_HYPHEN_BREAK = re.compile("\u00ad[ \t]*\r?\n[ \t]*")
# One str.replace per character present (C speed); str.translate with a table walks every
# character in Python's loop, about 15 times slower on a long document.
_REPLACEMENTS = [(chr(code), replacement) for code, replacement in _SEPARATORS.items()]


def normalise_characters(text: str) -> str:
    """Line and paragraph separators as line breaks, odd spaces as spaces, ligatures as
    letters, soft hyphens removed (joining the word they split at a line's end)."""
    if text.isascii():
        return text
    if "\u00ad" in text:
        text = _SOFT_HYPHEN_BREAK.sub("", text)
    for character, replacement in _REPLACEMENTS:
        if character in text:
            text = text.replace(character, replacement)
    return text


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
