"""Passages of a parsed document: split on its structure first, sized in the embedder's tokens."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from semchunk.semchunk import chunk as semchunk_chunk

from proxy.documents.model import ParsedDocument

# MiniLM (the default embedder) reads at most 256 word pieces, two of them its [CLS] and
# [SEP]: passages of up to 250 of its own tokens are embedded whole. Measured on the
# retrieval eval (README, "How the defaults were chosen"): see DEFAULT_CHUNK_TOKENS below.
DEFAULT_CHUNK_TOKENS = 250
DEFAULT_CHUNK_OVERLAP = 30
# Bumped whenever the same settings would cut a document differently: indexes built by an
# older chunker are then rebuilt on their next use.
CHUNKER_VERSION = 3

PAGE_SEPARATOR = "\n\n"

# Boundary strengths: where a passage had best end, strongest first.
SECTION, ITEM, SENTENCE, ANYWHERE = 3, 2, 1, 0

# A list item, a numbered clause or a lettered one: `- x`, `• x`, `3. x`, `(b) x`, `§ 4`, `IV. x`.
_ITEM = re.compile(
    r"[ \t]*(?:[-*•▪◦‣–]\s|\(?\d{1,3}(?:\.\d{1,3})*[.)]\s|\(?[a-zA-Z][.)]\s|§|[IVX]{1,5}\.\s)"
)
# A sentence ends at . ! ? … (perhaps closed by quotes or brackets) before the next one starts.
_SENTENCE_END = re.compile(
    r"(?<=[.!?…])[\"'”’)\]]*\s+(?=[\"'“‘„«(\[]?[A-ZÀ-ÖØ-ÞА-ЯЁ0-9])|(?<=[。！？])"
)
_TERMINAL = ".!?:;。！？…\"'”’"


@dataclass(frozen=True)
class Chunk:
    """One passage of a document, as embedded and cited; `start`/`end` locate it in the text of
    the document's non-empty pages joined by blank lines."""

    doc_sha256: str
    filename: str
    index: int
    text: str
    page_start: int
    page_end: int
    location: str = ""
    """Where the passage starts, as a person finds it: `page=4`, `section=Refunds`, ..."""
    start: int = 0
    end: int = 0


def chunk_document(
    doc: ParsedDocument,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
    count_tokens: Callable[[str], int],
) -> list[Chunk]:
    """Split `doc` into passages of at most `chunk_tokens`, cut where its structure allows.

    Headings, blank lines and pages end a passage before list items and numbered clauses do,
    and those before sentence ends; a piece longer than a passage (a sentence without end) is
    cut by semchunk. Passages that end inside a paragraph repeat up to `overlap` tokens of
    its last sentences at the start of the next, so an answer cut in two is whole in one.
    """
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be at least 1")
    if not 0 <= overlap < chunk_tokens:
        raise ValueError("overlap must be at least 0 and less than chunk_tokens")
    text, page_offsets, pages = joined_text(doc)
    if not text.strip():
        return []
    pieces = _pieces(text, page_offsets, chunk_tokens, overlap, count_tokens)
    spans: list[tuple[int, int]] = []
    for start, end in _pack(pieces, chunk_tokens, overlap):
        if count_tokens(text[start:end]) <= chunk_tokens:
            spans.append((start, end))
            continue
        # Pieces are counted alone; a BPE tokenizer may merge across their seams differently.
        offsets = _semchunk_offsets(text[start:end], chunk_tokens, count_tokens)
        spans.extend((start + sub_start, start + sub_end) for sub_start, sub_end in offsets)
    chunks: list[Chunk] = []
    for start, end in spans:
        raw = text[start:end]
        passage = raw.strip()
        if not passage:
            continue
        start += len(raw) - len(raw.lstrip())
        end = start + len(passage)
        first = pages[bisect.bisect_right(page_offsets, start) - 1]
        last = pages[bisect.bisect_right(page_offsets, end - 1) - 1]
        chunks.append(
            Chunk(
                doc_sha256=doc.sha256,
                filename=doc.name,
                index=len(chunks),
                text=passage,
                page_start=first[0],
                page_end=last[0],
                location=first[1],
                start=start,
                end=end,
            )
        )
    return chunks


@dataclass(frozen=True)
class _Piece:
    start: int
    end: int
    tokens: int
    boundary: int  # strength of the boundary at `start`


def _pieces(
    text: str, page_offsets: list[int], limit: int, overlap: int, count: Callable[[str], int]
) -> list[_Piece]:
    """The text cut at every boundary, each piece knowing how strong the cut before it is."""
    cuts: dict[int, int] = {offset: SECTION for offset in page_offsets}
    lines = text.splitlines(keepends=True)
    stripped = [line.strip() for line in lines]
    headings = [_is_heading(stripped, k) for k in range(len(stripped))]
    position = 0
    after_heading = False  # a heading stays with what follows it, across blank lines too
    for k, line in enumerate(lines):
        if not stripped[k]:
            if not after_heading:
                cuts[position + len(line)] = SECTION
        elif after_heading:
            cuts.pop(position, None)
        elif stripped[k].startswith("#") or (k and (not stripped[k - 1] or headings[k])):
            cuts[position] = max(cuts.get(position, 0), SECTION)
        elif _ITEM.match(line):
            cuts[position] = max(cuts.get(position, 0), ITEM)
        if stripped[k]:
            after_heading = headings[k] or stripped[k].startswith("#")
        position += len(line)
    for offset in page_offsets:  # a new page always may start a passage
        cuts[offset] = SECTION
    for match in _SENTENCE_END.finditer(text):
        cuts.setdefault(match.end(), SENTENCE)
    cuts[0] = SECTION
    edges = sorted(offset for offset in cuts if offset < len(text))
    pieces: list[_Piece] = []
    for start, end in zip(edges, [*edges[1:], len(text)], strict=True):
        piece = text[start:end]
        tokens = count(piece)
        if tokens <= limit:
            pieces.append(_Piece(start, end, tokens, cuts[start]))
            continue
        # Cut in small parts (at semchunk's best places) that pack and overlap like sentences.
        part = max(8, min(overlap or limit, limit) // 2)
        # Contiguous parts: the whitespace between them is counted too.
        starts = [0, *[sub_start for sub_start, _ in _semchunk_offsets(piece, part, count)][1:]]
        for offset, (sub_start, sub_end) in enumerate(
            zip(starts, [*starts[1:], len(piece)], strict=True)
        ):
            boundary = cuts[start] if offset == 0 else ANYWHERE
            sub = piece[sub_start:sub_end]
            pieces.append(_Piece(start + sub_start, start + sub_end, count(sub), boundary))
    return pieces


def _is_heading(lines: list[str], k: int) -> bool:
    """A short line that does not end like a sentence, after a sentence's end or a blank line,
    before a line that does not go on in lower case: `3.2 Refunds`, `INTRODUCTION`; not a line
    of a narrow column."""
    line = lines[k]
    if not 0 < len(line) <= 60 or line[-1] in _TERMINAL or line.endswith((",", "-")):
        return False
    if k and lines[k - 1] and lines[k - 1][-1] not in _TERMINAL:
        return False
    following = lines[k + 1] if k + 1 < len(lines) else ""
    return not following or not following[0].islower()


def _pack(pieces: list[_Piece], limit: int, overlap: int) -> list[tuple[int, int]]:
    """Consecutive pieces packed into spans of at most `limit` tokens; a span that has to end
    early ends at the strongest boundary in its second half."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(pieces):
        total, j = 0, i
        while j < len(pieces) and total + pieces[j].tokens <= limit:
            total += pieces[j].tokens
            j += 1
        j = max(j, i + 1)
        if j < len(pieces):
            best, filled = j, 0
            for k in range(i + 1, j + 1):
                filled += pieces[k - 1].tokens
                if filled * 2 >= total and pieces[k].boundary >= pieces[best].boundary:
                    best = k
            j = best
        spans.append((pieces[i].start, pieces[j - 1].end))
        following = j
        if j < len(pieces) and pieces[j].boundary <= SENTENCE and overlap:
            shared = 0
            while following - 1 > i and shared + pieces[following - 1].tokens <= overlap:
                following -= 1
                shared += pieces[following].tokens
                if pieces[following].boundary > SENTENCE:
                    break
        i = following
    return spans


def _semchunk_offsets(text: str, limit: int, count: Callable[[str], int]) -> list[tuple[int, int]]:
    _, offsets = cast(
        "tuple[list[str], list[tuple[int, int]]]",
        semchunk_chunk(text, chunk_size=limit, token_counter=count, memoize=False, offsets=True),
    )
    return offsets


def head(text: str, tokens: int, count: Callable[[str], int]) -> str:
    """The start of `text` holding at most `tokens` tokens, cut between words."""
    used = 0
    for match in _WORD_AND_SPACE.finditer(text):
        used += count(match.group())
        if used > tokens:
            return text[: match.start()]
    return text


_WORD_AND_SPACE = re.compile(r"\S+\s*")


def joined_text(doc: ParsedDocument) -> tuple[str, list[int], list[tuple[int, str]]]:
    """The text of the non-empty pages joined by blank lines, where each page starts, and each
    page's number and location."""
    parts: list[str] = []
    offsets: list[int] = []
    pages: list[tuple[int, str]] = []
    position = 0
    for page in doc.pages:
        page_text = page.text.replace("\r\n", "\n").replace("\r", "\n")
        if not page_text.strip():
            continue
        if parts:
            parts.append(PAGE_SEPARATOR)
            position += len(PAGE_SEPARATOR)
        offsets.append(position)
        pages.append((page.number, page.where))
        parts.append(page_text)
        position += len(page_text)
    return "".join(parts), offsets, pages
