"""Windows around retrieved passages: the sentences just before and after a hit, so that an
answer cut off by a passage's edge still reaches the model, merged where they meet so that the
budget is spent on distinct places."""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from proxy.retrieval.chunking import Chunk, head

# Where a window may end (or start): after a sentence's end, a line's end or a table row.
_STOP = re.compile(r"(?<=[.!?…:;。！？])[\"'”’)\]]*(?=\s)|(?<=\|)[ \t]*\n|\n[ \t]*\n")
# A window never runs into the next section: a Markdown heading, a page's first line.
_HEADING = re.compile(r"\n[ \t]{0,3}#{1,6}[ \t]")
MERGED_SHARE = 3
"""A window grown by merging holds at most three passages' worth of tokens: past that, the
next hit keeps a window of its own (without the text already shown)."""


@dataclass(frozen=True)
class WindowShape:
    """How many tokens of the surrounding text join each hit, before and after it."""

    before: int = 0
    after: int = 0

    def __bool__(self) -> bool:
        return self.before > 0 or self.after > 0


def document_text(chunks: list[Chunk]) -> str:
    """The document's text rebuilt from its passages at their offsets (the whitespace between
    two passages, which neither kept, as line breaks)."""
    parts: list[str] = []
    position = 0
    for chunk in sorted(chunks, key=lambda chunk: chunk.start):
        if chunk.start > position:
            parts.append("\n" * (chunk.start - position))
            position = chunk.start
        if chunk.end > position:
            parts.append(chunk.text[position - chunk.start :])
            position = chunk.end
    return "".join(parts)


@dataclass
class _Window:
    start: int
    end: int
    chunk: Chunk  # the best hit inside it
    order: int  # that hit's rank


def windows(
    chunks: list[Chunk],
    text: str,
    hits: list[Chunk],
    shape: WindowShape,
    count: Callable[[str], int],
    chunk_tokens: int,
) -> list[tuple[int, Chunk]]:
    """Each hit (best first) as a window of its document's text, with the rank of the hit it was
    made for. A window that meets a better one is merged into it while the merged window stays
    within `MERGED_SHARE` passages; else it keeps only the text not shown already. No two
    windows share text."""
    made: list[_Window] = []
    most = chunk_tokens * MERGED_SHARE
    for order, hit in enumerate(hits):
        start = _back(text, hit.start, shape.before, count)
        end = _forward(text, hit.end, shape.after, count)
        if _merge(made, _Window(start, end, hit, order), text, count, most):
            continue
        for piece_start, piece_end in _uncovered(start, end, made):
            if (
                hit.start < piece_end
                and piece_start < hit.end
                and text[piece_start:piece_end].strip()
            ):
                made.append(_Window(piece_start, piece_end, hit, order))
                break
    starts = [chunk.start for chunk in chunks]
    found: list[tuple[int, Chunk]] = []
    for window in sorted(made, key=lambda window: window.order):
        raw = text[window.start : window.end]
        start = window.start + len(raw) - len(raw.lstrip())
        body = raw.strip()
        first = chunks[max(0, bisect.bisect_right(starts, start) - 1)]
        last = chunks[max(0, bisect.bisect_right(starts, start + len(body) - 1) - 1)]
        earlier = start < window.chunk.start
        found.append(
            (
                window.order,
                dataclasses.replace(
                    window.chunk,
                    text=body,
                    start=start,
                    end=start + len(body),
                    page_start=first.page_start if earlier else window.chunk.page_start,
                    page_end=max(last.page_end, window.chunk.page_end),
                    location=first.location if earlier else window.chunk.location,
                    # The lines a passage needs to be read are those of where it now starts.
                    section=first.section if earlier else window.chunk.section,
                    context=first.context if earlier else window.chunk.context,
                ),
            )
        )
    return found


def _merge(
    made: list[_Window], window: _Window, text: str, count: Callable[[str], int], most: int
) -> bool:
    """Merge `window` into a better window it meets, and that one into any other it then meets,
    as long as a merged window holds at most `most` tokens. False when it met none it fits."""
    for existing in made:
        if _meet(existing, window) and _fits(existing, window, text, count, most):
            _absorb(existing, window)
            for other in [w for w in made if w is not existing]:
                if _meet(existing, other) and _fits(existing, other, text, count, most):
                    _absorb(existing, other)
                    made.remove(other)
            return True
    return False


def _meet(one: _Window, other: _Window) -> bool:
    return one.start <= other.end and other.start <= one.end


def _fits(one: _Window, other: _Window, text: str, count: Callable[[str], int], most: int) -> bool:
    start, end = min(one.start, other.start), max(one.end, other.end)
    return (start, end) == (one.start, one.end) or count(text[start:end]) <= most


def _absorb(into: _Window, other: _Window) -> None:
    into.start, into.end = min(into.start, other.start), max(into.end, other.end)
    if other.order < into.order:
        into.order, into.chunk = other.order, other.chunk


def _uncovered(start: int, end: int, made: list[_Window]) -> list[tuple[int, int]]:
    """The parts of [start, end) that no window holds yet."""
    pieces = [(start, end)]
    for window in made:
        rest: list[tuple[int, int]] = []
        for piece_start, piece_end in pieces:
            if piece_end <= window.start or piece_start >= window.end:
                rest.append((piece_start, piece_end))
                continue
            if piece_start < window.start:
                rest.append((piece_start, window.start))
            if piece_end > window.end:
                rest.append((window.end, piece_end))
        pieces = rest
    return pieces


def _forward(text: str, end: int, tokens: int, count: Callable[[str], int]) -> int:
    """The offset after the whole sentences (lines, rows) that follow `end` within `tokens`; a
    first sentence longer than that is cut between words."""
    if tokens <= 0 or end >= len(text):
        return end
    following = text[end : end + tokens * 12]  # no token is longer than 12 characters
    stop = _HEADING.search(following)
    if stop is not None:
        following = following[: stop.start()]
    best = end
    for match in _STOP.finditer(following):
        if match.end() == 0:
            continue
        if count(following[: match.end()]) > tokens:
            break
        best = end + match.end()
    if best == end and following.strip():
        best = end + len(head(following, tokens, count).rstrip())
    return best


def _back(text: str, start: int, tokens: int, count: Callable[[str], int]) -> int:
    """The offset of the first of the whole sentences (lines, rows) before `start` that fit in
    `tokens`."""
    if tokens <= 0 or start <= 0:
        return start
    window_start = max(0, start - tokens * 12)
    preceding = text[window_start:start]
    headings = list(_HEADING.finditer(preceding))
    if headings:
        cut = headings[-1].start() + 1  # the heading itself belongs with what follows it
        preceding, window_start = preceding[cut:], window_start + cut
    best = start
    for match in reversed(list(_STOP.finditer(preceding))):
        if count(preceding[match.end() :]) > tokens:
            break
        best = window_start + match.end()
    return best
