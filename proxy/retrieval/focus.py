"""The page a passage over a page break is cited by: where its sentence nearest the question is."""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Sequence

from proxy.documents.model import ParsedDocument
from proxy.retrieval.chunking import joined_text
from proxy.retrieval.lexical import question_terms, terms

# A sentence ends at . ! ? (perhaps closed by a quote or bracket) before a space, or at a line's
# end: a heading, a table row or a list item is a sentence of its own.
_SENTENCE = re.compile(r"(?<=[.!?。！？])[\"'”’)\]]*\s+|\n+")


def page_parts(document: ParsedDocument, start: int, end: int) -> list[tuple[int, str]]:
    """Each page's share of the passage at [start, end) of the document's joined text (the
    offsets a `Chunk` has), as (page number, text), in order; blank shares left out."""
    text, offsets, pages = joined_text(document)
    cuts = [start, *[offset for offset in offsets if start < offset < end], end]
    parts = []
    for left, right in itertools.pairwise(cuts):
        share = text[left:right]
        if share.strip():
            parts.append((pages[bisect.bisect_right(offsets, left) - 1][0], share))
    return parts


def focus_page(parts: Sequence[tuple[int, str]], question: str, language: str) -> int | None:
    """The page holding the passage's sentence that shares the most of the question's words,
    rarer ones (in the passage's sentences) weighing more; when no sentence shares one, the
    page holding most of the passage. None for no parts.

    Measured on the passages over a page break that hold a question's answer (tuning half of
    the retrieval evaluation, and the README tour's specification): the answer's page for 5 of
    6, where the passage starts for 2 (cosines of the sentences, or of each page's share: 3).
    """
    if not parts:
        return None
    wanted = set(question_terms(question, language))
    sentences = [
        (page, set(terms(sentence, language)))
        for page, text in parts
        for sentence in _SENTENCE.split(text)
        if sentence.strip()
    ]
    holding = {term: sum(term in found for _, found in sentences) for term in wanted}
    weight = {
        term: math.log(1 + len(sentences) / count) for term, count in holding.items() if count
    }
    best_page, best = None, 0.0
    for page, found in sentences:
        score = sum(weight.get(term, 0.0) for term in found)
        if score > best:
            best_page, best = page, score
    if best_page is not None:
        return best_page
    return max(parts, key=lambda part: len(part[1].strip()))[0]
