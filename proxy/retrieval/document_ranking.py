"""One document's passages ranked for weighted search texts: the rankings fused, then shaped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from proxy.retrieval.function_words import function_word
from proxy.retrieval.fusion import POOL, best_scored, weighted_fusion
from proxy.retrieval.history import SearchText, salient_words
from proxy.retrieval.overview import overview_passages
from proxy.retrieval.passages import DocumentPassages
from proxy.retrieval.scored import Scored

RANKINGS = ("hybrid", "dense", "lexical")

DenseScores = Callable[[list[float]], dict[int, float]]


def no_cosines(vector: list[float]) -> dict[int, float]:
    """The dense scores of a document ranked by its words alone: none."""
    return {}


def rank_passages(
    passages: DocumentPassages,
    queries: Sequence[tuple[str, float]],
    dense_scores: DenseScores,
    embeddings: Sequence[tuple[list[float], float]],
    by_words: Sequence[tuple[str, float]] = (),
    ranking: str = "hybrid",
) -> list[Scored]:
    """Passages ranked for the weighted queries (the question, its translation if any, the
    question in its conversation): each candidate's cosine and BM25 score are its best over
    the queries; each query's rankings count at its weight in the fusion. `by_words` are
    ranked by their words alone and lend no scores to a passage. Without embeddings (or with
    `ranking` "lexical") the words alone decide."""
    per_query = [(dense_scores(embedding), weight) for embedding, weight in embeddings]
    cosines: dict[int, float] = {}
    for scores, _ in per_query:
        for i, score in scores.items():
            cosines[i] = max(score, cosines.get(i, score))
    dense_orders = [(best_scored(scores), weight) for scores, weight in per_query]
    found = [(passages.lexical.ranked(text, POOL), weight) for text, weight in queries]
    word_orders = [(order, weight) for (order, _), weight in found]
    lexical: dict[int, float] = {}
    for (_, scores), _ in found:
        for i, score in scores.items():
            lexical[i] = max(score, lexical.get(i, score))
    word_orders += [(passages.lexical.ranked(text, POOL)[0], weight) for text, weight in by_words]
    order: list[tuple[int, float | None]]
    if ranking == "dense" and embeddings:
        order = weighted_fusion(dense_orders)
    elif ranking == "lexical" or not embeddings:
        order = weighted_fusion(word_orders)
    else:
        order = weighted_fusion([*dense_orders, *word_orders])
    return [
        Scored(
            chunk=passages.chunks[i],
            dense=cosines.get(i, 0.0),
            lexical=lexical.get(i),
            fused=fused,
        )
        for i, fused in order
    ]


def carried_texts(
    also: Sequence[SearchText],
    passages: DocumentPassages,
    chosen: dict[str, list[str]] | None,
    name: str,
) -> list[tuple[SearchText, str]]:
    """The `terms` texts as the document searches them: the question and the carried words
    rarest in this document (none: not searched), noted in `chosen` by document name."""
    lexical = passages.lexical
    found = []

    def common(word: str) -> bool:
        return function_word(word, lexical.language)

    for extra in also:
        if extra.source != "terms":
            continue
        words = salient_words(
            extra.carried, lexical.frequency, lexical.size, extra.pick, extra.near, common
        )
        if words:
            text = f"{extra.text} {' '.join(words)}"
            found.append((extra, text))
            if chosen is not None:
                chosen.setdefault(name, []).extend(words)
    return found


def overview_first(passages: DocumentPassages, found: list[Scored]) -> list[Scored]:
    """The document's overview passages first (with their cosines where ranked), then the
    rest of the ranking as it was."""
    chosen = overview_passages(passages.chunks)
    ranked = {item.chunk.index: item for item in found}
    moved = set(chosen)
    first = [
        replace(ranked[i], overview=True)
        if i in ranked
        else Scored(chunk=passages.chunks[i], dense=0.0, overview=True)
        for i in chosen
    ]
    return first + [item for item in found if item.chunk.index not in moved]


def with_neighbours(passages: DocumentPassages, found: list[Scored], reach: int) -> list[Scored]:
    """Each passage joined with `reach` passages before and after it; a passage already inside
    a better one's neighbourhood is not repeated."""
    covered: set[int] = set()
    joined: list[Scored] = []
    for item in found:
        index = item.chunk.index
        if index in covered:
            continue
        covered.update(range(index - reach, index + reach + 1))
        joined.append(replace(item, chunk=passages.around(index, reach, reach)))
    return joined
