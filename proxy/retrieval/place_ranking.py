"""The passages of the place a question names, put before the rest of a document's ranking."""

from __future__ import annotations

from dataclasses import replace

from proxy.retrieval.fusion import best_scored, reciprocal_rank_fusion
from proxy.retrieval.passages import DocumentPassages
from proxy.retrieval.place_finder import Found
from proxy.retrieval.places import Place
from proxy.retrieval.scored import Scored
from proxy.retrieval.space import Scorer

PLACE_FIRST = 4
"""Passages of the place a question names that come before the rest of the ranking: its
opening (a chapter's first lines, a table's caption), then its best for the question; the
budget's other room goes to the ranking of the whole document, in case the place was misread."""
PLACE_EMBEDDED = 8
"""A new document's place passages embedded for its first question (by their words' order)."""


def described(place: Place, where: Found | None) -> str:
    """`chapter 3: "3: Catalogs", passages 105-115` or `chapter 3: not found`."""
    if where is None or not where.passages:
        return f"{place.describe()}: not found"
    span = where.passages
    spread = f"passage {span[0]}" if len(span) == 1 else f"passages {span[0]}-{span[-1]}"
    return f'{place.describe()}: "{where.what}", {spread}'


def place_order(
    passages: DocumentPassages,
    where: list[int],
    queries: list[str],
    dense: list[dict[int, float]],
) -> list[int]:
    """The place's passages for the question: its opening first, then the rest ranked by the
    queries' words and cosines (where known) fused, then those neither ranks, in order."""
    inside = set(where)
    rankings = [
        [i for i in passages.lexical.ranked(text, len(passages.chunks))[0] if i in inside]
        for text in queries
    ]
    rankings += [best_scored({i: c for i, c in scores.items() if i in inside}) for scores in dense]
    fused = [i for i, _ in reciprocal_rank_fusion([r for r in rankings if r])]
    return list(dict.fromkeys([where[0], *fused, *where]))


def place_first(
    passages: DocumentPassages,
    found: list[Scored],
    where: list[int],
    queries: list[str],
    scorer: Scorer,
    vectors: list[list[float]],
) -> list[Scored]:
    """The place's first PLACE_FIRST passages (marked), then the rest of the ranking."""
    per_query = [scorer(vector) for vector in vectors]
    chosen = place_order(passages, where, queries, per_query)[:PLACE_FIRST]
    ranked = {item.chunk.index: item for item in found}
    cosine = {i: max(scores.get(i, 0.0) for scores in per_query or [{}]) for i in chosen}
    first = [
        replace(ranked[i], place=True)
        if i in ranked
        else Scored(chunk=passages.chunks[i], dense=cosine[i], place=True)
        for i in chosen
    ]
    return first + [item for item in found if item.chunk.index not in set(chosen)]
