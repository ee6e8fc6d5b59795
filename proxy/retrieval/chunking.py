"""Passages of a parsed document: split on its structure first, sized in the embedder's tokens."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from semchunk.semchunk import chunk as semchunk_chunk

from proxy.documents.model import ParsedDocument
from proxy.documents.readers.table_form import TableBlock, table_blocks
from proxy.retrieval.headings import SEPARATOR, section_paths

# MiniLM (the default embedder) reads at most 256 word pieces, two of them its [CLS] and
# [SEP]: passages of up to 250 of its own tokens are embedded whole. Measured on the
# retrieval eval (docs/retrieval.md): see DEFAULT_CHUNK_TOKENS below.
DEFAULT_CHUNK_TOKENS = 250
DEFAULT_CHUNK_OVERLAP = 30
# Bumped whenever the same settings would cut a document differently: indexes built by an
# older chunker are then rebuilt on their next use. 6: plain-text books cut at their chapters
# (the parser's format 6), each passage under its chapter's line.
CHUNKER_VERSION = 6
CONTEXT_SHARE = 3
"""A passage's context (where it sits, a table's header) takes at most a third of its tokens."""
SECTION_RANKED_BY_MEANING = True
SECTION_RANKED_BY_WORDS = True
"""Whether the section line goes with a passage into the dense and the lexical ranking."""

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
    section: str = ""
    """Where the passage sits, on a line before it: the document's title and the section path
    where it starts (`Free Culture > Chapter One: Creators`)."""
    context: str = ""
    """What a passage that starts among a table's rows needs to be read: the table's caption
    and header row, on the lines before it."""

    @property
    def shown(self) -> str:
        """The passage as the model receives it: where it sits, its table's header, its text."""
        return "\n".join(part for part in (self.section, self.context, self.text) if part)

    @property
    def embedded(self) -> str:
        """The passage as the embedding model reads it."""
        return self._ranked(SECTION_RANKED_BY_MEANING)

    @property
    def searched(self) -> str:
        """The passage as its words are indexed (BM25)."""
        return self._ranked(SECTION_RANKED_BY_WORDS)

    def _ranked(self, with_section: bool) -> str:
        section = self.section if with_section else ""
        return "\n".join(part for part in (section, self.context, self.text) if part)


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
    tables = table_blocks(text)
    paths = section_paths(text, page_offsets, [title for _, _, title in pages])
    title = " ".join((doc.title or "").split())

    context_tokens = _ContextTokens(count_tokens, chunk_tokens // CONTEXT_SHARE)

    def context_at(offset: int) -> tuple[str, str]:
        table = _table_at(tables, offset, True)
        return context_tokens.fit(where(title, paths.at(offset)), table.head if table else "")

    pieces = _pieces(text, page_offsets, tables, chunk_tokens, overlap, count_tokens)
    spans: list[tuple[int, int]] = []
    limits = [
        max(1, chunk_tokens - context_tokens.count(*context_at(piece.start))) for piece in pieces
    ]
    for start, end, limit in _pack(pieces, limits, overlap):
        if count_tokens(text[start:end]) <= limit:
            spans.append((start, end))
            continue
        # Pieces are counted alone; a BPE tokenizer may merge across their seams differently.
        offsets = _semchunk_offsets(text[start:end], limit, count_tokens)
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
        section, context = context_at(start)
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
                section=section,
                context=context,
            )
        )
    return chunks


def where(title: str, path: str) -> str:
    """The section line: the document's title and the section path."""
    if path and title and path.casefold().startswith(title.casefold()):
        return path  # an outline whose first entry is the document's own title
    return SEPARATOR.join(part for part in (title, path) if part)


class _ContextTokens:
    """Counts contexts (few distinct ones: cached) and fits them into their share of a passage:
    the section path's outer parts go first, then the section line, then the header's last
    words."""

    def __init__(self, count: Callable[[str], int], most: int) -> None:
        self._count = count
        self._most = max(1, most)
        self._known: dict[str, int] = {}

    def count(self, section: str, table: str) -> int:
        return self._tokens(section) + self._tokens(table)

    def _tokens(self, line: str) -> int:
        found = self._known.get(line)
        if found is None:
            found = self._known[line] = self._count(line) + 1 if line else 0
        return found

    def fit(self, section: str, table: str) -> tuple[str, str]:
        while self.count(section, table) > self._most:
            if SEPARATOR in section:
                section = section.split(SEPARATOR, 1)[1]
            elif section and table:
                section = ""  # the header matters more than where the table sits
            elif section:
                section = _fewer_words(section)
            else:
                table = _fewer_words(table)
        return section, table


def _fewer_words(text: str) -> str:
    words = text.split(" ")
    return " ".join(words[: max(0, len(words) * 3 // 4)])


def _table_at(tables: list[TableBlock], offset: int, inside_rows: bool) -> TableBlock | None:
    """The table whose rows (`inside_rows`: after its header) or whose whole span (caption
    line to last row) holds `offset`."""
    starts = [table.start for table in tables]
    index = bisect.bisect_right(starts, offset) - 1
    if index < 0:
        return None
    table = tables[index]
    if not table.start <= offset < table.end:
        return None
    if inside_rows and (not table.rows or offset < table.rows[0][0]):
        return None
    return table


@dataclass(frozen=True)
class _Piece:
    start: int
    end: int
    tokens: int
    boundary: int  # strength of the boundary at `start`


def _pieces(
    text: str,
    page_offsets: list[int],
    tables: list[TableBlock],
    limit: int,
    overlap: int,
    count: Callable[[str], int],
) -> list[_Piece]:
    """The text cut at every boundary, each piece knowing how strong the cut before it is.

    A table's rows are whole pieces (a sentence end inside a cell is no boundary), a passage
    may end after any row, and a table stays with its caption above it."""
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
    ordered = sorted(cuts)
    for table in tables:
        # No cut between a caption and its table, nor inside a row.
        low = bisect.bisect_right(ordered, table.start)
        high = bisect.bisect_left(ordered, table.end)
        for offset in ordered[low:high]:
            cuts.pop(offset, None)
        cuts[table.start] = SECTION
        for row_start, _ in table.rows:
            cuts[row_start] = ITEM
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


def _pack(pieces: list[_Piece], limits: list[int], overlap: int) -> list[tuple[int, int, int]]:
    """Consecutive pieces packed into spans of at most the limit of the piece each starts at
    (room left by its context); a span that has to end early ends at the strongest boundary in
    its second half. Each span comes with its limit."""
    spans: list[tuple[int, int, int]] = []
    i = 0
    while i < len(pieces):
        limit = limits[i]
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
        spans.append((pieces[i].start, pieces[j - 1].end, limit))
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


def joined_text(doc: ParsedDocument) -> tuple[str, list[int], list[tuple[int, str, str]]]:
    """The text of the non-empty pages joined by blank lines, where each page starts, and each
    page's number, location and title."""
    parts: list[str] = []
    offsets: list[int] = []
    pages: list[tuple[int, str, str]] = []
    position = 0
    for page in doc.pages:
        page_text = page.text.replace("\r\n", "\n").replace("\r", "\n")
        if not page_text.strip():
            continue
        if parts:
            parts.append(PAGE_SEPARATOR)
            position += len(PAGE_SEPARATOR)
        offsets.append(position)
        pages.append((page.number, page.where, page.title))
        parts.append(page_text)
        position += len(page_text)
    return "".join(parts), offsets, pages
