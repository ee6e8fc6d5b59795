"""One document's ranking: rankings fused at their weights, words lending no scores, neighbours."""

from __future__ import annotations

from proxy.retrieval.chunking import Chunk
from proxy.retrieval.document_ranking import no_cosines, rank_passages, with_neighbours
from proxy.retrieval.lexical import LexicalIndex
from proxy.retrieval.passages import DocumentPassages
from proxy.retrieval.scored import Scored

TEXTS = [
    "Penguins cannot fly but they swim fast in cold water.",
    "The kettle boils water for tea in about three minutes.",
    "Ostriches cannot fly either; they run across the savanna.",
    "A bicycle chain needs oil every few hundred kilometres.",
]


def passages() -> DocumentPassages:
    chunks, start = [], 0
    for i, text in enumerate(TEXTS):
        chunks.append(Chunk("sha", "birds.txt", i, text, 1, 1, start=start, end=start + len(text)))
        start += len(text) + 2
    return DocumentPassages("sha", "birds.txt", chunks, LexicalIndex.build(TEXTS))


def order(found: list[Scored]) -> list[int]:
    return [item.chunk.index for item in found]


def test_a_heavier_text_leads_the_fusion() -> None:
    """Two texts each find a different passage first: the one at the higher weight wins."""
    kettle = ("kettle tea", 1.0)
    bicycle = ("bicycle chain oil", 3.0)
    assert order(rank_passages(passages(), [kettle, bicycle], no_cosines, []))[0] == 3
    assert (
        order(rank_passages(passages(), [(kettle[0], 3.0), (bicycle[0], 1.0)], no_cosines, []))[0]
        == 1
    )


def test_cosines_join_the_words_and_keep_each_passage_best_score() -> None:
    """A passage no word finds is still ranked by meaning; its cosine is its best over texts."""
    cosines = [{2: 0.9, 0: 0.1}, {2: 0.4, 0: 0.7}]
    vectors = [([1.0], 1.0), ([2.0], 1.0)]
    found = rank_passages(
        passages(), [("fly", 1.0)], lambda vector: cosines[int(vector[0]) - 1], vectors
    )
    best = {item.chunk.index: item.dense for item in found}
    assert best[2] == 0.9 and best[0] == 0.7
    heavier_first = [([1.0], 2.0), ([2.0], 1.0)]
    only_dense = rank_passages(
        passages(), [("fly", 1.0)], lambda v: cosines[int(v[0]) - 1], heavier_first, ranking="dense"
    )
    assert order(only_dense) == [2, 0]  # dense alone: only the ranked-by-meaning passages


def test_words_only_texts_rank_but_lend_no_scores() -> None:
    """A carried-words text moves a passage up without giving it a BM25 score of its own."""
    found = rank_passages(passages(), [("tea", 1.0)], no_cosines, [], [("bicycle oil", 2.0)])
    assert order(found)[0] == 3
    scores = {item.chunk.index: item.lexical for item in found}
    assert scores[3] is None and scores[1] is not None


def test_neighbours_join_and_are_not_repeated() -> None:
    """A passage inside a better one's neighbourhood is not shown again."""
    ranked = rank_passages(passages(), [("cannot fly", 1.0)], no_cosines, [])
    joined = with_neighbours(passages(), ranked, 1)
    assert [item.chunk.index for item in joined][:1] == [ranked[0].chunk.index]
    shown = [item.chunk.text for item in joined]
    assert sum("Ostriches" in text for text in shown) == 1
