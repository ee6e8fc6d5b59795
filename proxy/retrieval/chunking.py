"""Token-aware, overlapping chunks of a parsed document, each knowing its page range."""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from semchunk.semchunk import chunk as semchunk_chunk

from proxy.documents.model import ParsedDocument

# MiniLM (the default embedder) embeds the first 256 word-pieces of a passage. Chunks of at
# most 200 cl100k tokens (30 shared with the next) measured ≤ 205 word-pieces on English
# corpus documents, so nothing is cut off there and a passage stays a paragraph-sized
# citation. Cyrillic or punctuation-heavy text needs up to 2-3 word-pieces per token: a few
# such chunks are embedded by their first 256 word-pieces only (still cited in full).
DEFAULT_CHUNK_TOKENS = 200
DEFAULT_CHUNK_OVERLAP = 30

PAGE_SEPARATOR = "\n\n"

# A lone line break (hard-wrapped PDF lines) is not a boundary worth splitting at; a blank
# line is. Same-length replacement keeps semchunk's offsets valid for the original text.
_LONE_NEWLINE = re.compile(r"(?<!\n)\n(?!\n)")


@dataclass(frozen=True)
class Chunk:
    """One passage of a document, as embedded and cited."""

    doc_sha256: str
    filename: str
    index: int
    text: str
    page_start: int
    page_end: int
    location: str = ""
    """Where the passage starts, as a person finds it: `page=4`, `section=Refunds`, ..."""


def chunk_document(
    doc: ParsedDocument,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
    count_tokens: Callable[[str], int],
) -> list[Chunk]:
    """Split `doc` into chunks of at most `chunk_tokens`, consecutive ones sharing ~`overlap`."""
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be at least 1")
    if not 0 <= overlap < chunk_tokens:
        raise ValueError("overlap must be at least 0 and less than chunk_tokens")
    text, page_offsets, page_numbers = _join_pages(doc)
    where = {page.number: page.where for page in doc.pages}
    if not text:
        return []
    # A per-call cache: semchunk counts the same pieces many times, and its own memoizer
    # keeps every text it ever saw for the life of the process.
    counter = functools.lru_cache(maxsize=None)(count_tokens)
    chunks: list[Chunk] = []
    for start, end in _spans(text, chunk_tokens, counter, overlap):
        passage = text[start:end].strip()
        if not passage:
            continue
        first = page_numbers[bisect.bisect_right(page_offsets, start) - 1]
        last = page_numbers[bisect.bisect_right(page_offsets, end - 1) - 1]
        chunks.append(
            Chunk(
                doc_sha256=doc.sha256,
                filename=doc.name,
                index=len(chunks),
                text=passage,
                page_start=first,
                page_end=last,
                location=where[first],
            )
        )
    return chunks


def _spans(
    text: str, chunk_tokens: int, counter: Callable[[str], int], overlap: int
) -> list[tuple[int, int]]:
    """Chunk offsets into `text`, split where the view says, each span within `chunk_tokens`."""
    view = _LONE_NEWLINE.sub(" ", text)
    spans: list[tuple[int, int]] = []
    for start, end in _semchunk_offsets(view, chunk_tokens, counter, overlap):
        if counter(text[start:end]) <= chunk_tokens:
            spans.append((start, end))
            continue
        # The original has line breaks where the split view had spaces, and "\n" + word
        # often costs one token more than " " + word: re-split the rare chunk that grew.
        for sub_start, sub_end in _semchunk_offsets(text[start:end], chunk_tokens, counter, 0):
            spans.append((start + sub_start, start + sub_end))
    return spans


def _semchunk_offsets(
    text: str, chunk_tokens: int, counter: Callable[[str], int], overlap: int
) -> list[tuple[int, int]]:
    _, offsets = cast(
        "tuple[list[str], list[tuple[int, int]]]",
        semchunk_chunk(
            text,
            chunk_size=chunk_tokens,
            token_counter=counter,
            memoize=False,
            offsets=True,
            overlap=overlap or None,
        ),
    )
    return offsets


def _join_pages(doc: ParsedDocument) -> tuple[str, list[int], list[int]]:
    """The text of the non-empty pages joined by blank lines, with where each page starts."""
    parts: list[str] = []
    offsets: list[int] = []
    numbers: list[int] = []
    position = 0
    for page in doc.pages:
        page_text = page.text.replace("\r\n", "\n").replace("\r", "\n")
        if not page_text.strip():
            continue
        if parts:
            parts.append(PAGE_SEPARATOR)
            position += len(PAGE_SEPARATOR)
        offsets.append(position)
        numbers.append(page.number)
        parts.append(page_text)
        position += len(page_text)
    return "".join(parts), offsets, numbers
