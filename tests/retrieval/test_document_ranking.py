"""One document's ranking: rankings fused at their weights, words lending no scores, neighbours."""

from __future__ import annotations

from proxy.retrieval.chunking import Chunk
from proxy.retrieval.document_ranking import (
    carried_texts,
    no_cosines,
    overview_first,
    rank_passages,
    with_neighbours,
)
from proxy.retrieval.history import SearchText
from proxy.retrieval.lexical import LexicalIndex
from proxy.retrieval.passages import DocumentPassages
from proxy.retrieval.scored import Scored

TEXTS = [
    "Penguins cannot fly but they swim fast in cold water.",
    "The kettle boils water for tea in about three minutes.",
    "Ostriches cannot fly either; they run across the savanna.",
    "A bicycle chain needs oil every few hundred kilometres.",
]


def passages(texts: list[str] = TEXTS) -> DocumentPassages:
    chunks, start = [], 0
    for i, text in enumerate(texts):
        chunks.append(Chunk("sha", "birds.txt", i, text, 1, 1, start=start, end=start + len(text)))
        start += len(text) + 2
    return DocumentPassages("sha", "birds.txt", chunks, LexicalIndex.build(texts))


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
        passages(), [("tea", 1.0)], lambda v: cosines[int(v[0]) - 1], heavier_first, ranking="dense"
    )
    assert order(only_dense) == [2, 0]  # dense alone: only the ranked-by-meaning passages


def test_a_passage_found_by_its_words_alone_has_no_affinity_to_pass_a_threshold() -> None:
    cosines = {2: 0.9, 0: 0.1}
    found = rank_passages(passages(), [("tea", 1.0)], lambda v: cosines, [([1.0], 1.0)])
    assert {item.chunk.index: item.dense for item in found} == {2: 0.9, 0: 0.1, 1: 0.0}
    by_words = rank_passages(passages(), [("tea", 1.0)], no_cosines, [])
    assert [(item.chunk.index, item.dense) for item in by_words] == [(1, 0.0)]


def test_a_passage_keeps_its_best_bm25_score_over_the_texts() -> None:
    doc = passages()
    best = doc.lexical.ranked("kettle tea water", 50)[1][1]
    assert best > doc.lexical.ranked("water", 50)[1][1]
    found = rank_passages(doc, [("kettle tea water", 1.0), ("water", 1.0)], no_cosines, [])
    assert {item.chunk.index: item.lexical for item in found}[1] == best


def test_words_only_texts_rank_but_lend_no_scores() -> None:
    """A carried-words text moves a passage up without giving it a BM25 score of its own."""
    found = rank_passages(passages(), [("tea", 1.0)], no_cosines, [], [("bicycle oil", 2.0)])
    assert order(found)[0] == 3
    scores = {item.chunk.index: item.lexical for item in found}
    assert scores[3] is None and scores[1] is not None
    # Words found inside others count there too ("cycle" in "bicycle").
    pieces = rank_passages(passages(), [("tea", 1.0)], no_cosines, [], [("cycle", 2.0)])
    assert order(pieces) == [3, 1]


def test_neighbours_join_and_are_not_repeated() -> None:
    """A passage inside a better one's neighbourhood is not shown again."""
    ranked = rank_passages(passages(), [("cannot fly", 1.0)], no_cosines, [])
    joined = with_neighbours(passages(), ranked, 1)
    assert [item.chunk.index for item in joined][:1] == [ranked[0].chunk.index]
    shown = [item.chunk.text for item in joined]
    assert sum("Ostriches" in text for text in shown) == 1


def test_neighbours_a_better_passage_showed_are_skipped_the_others_kept() -> None:
    ranked = [Scored(chunk=passages().chunks[i], dense=0.5) for i in (2, 1, 3, 0)]
    joined = with_neighbours(passages(), ranked, 1)
    assert [item.chunk.index for item in joined] == [2, 0]
    assert joined[0].chunk.text == "\n".join(TEXTS[1:4])
    wide = with_neighbours(passages(), ranked[1:2], 2)  # passage 1, two either side
    assert wide[0].chunk.text == "\n".join(TEXTS)


def test_the_overview_passages_go_first_with_the_scores_they_were_ranked_with() -> None:
    doc = passages([*TEXTS, "Conclusions\nFlightless birds run or swim instead."])
    found = [Scored(chunk=doc.chunks[1], dense=0.6), Scored(chunk=doc.chunks[4], dense=0.8)]
    assert overview_first(doc, found) == [
        Scored(chunk=doc.chunks[0], dense=0.0, overview=True),  # the opening, unranked
        Scored(chunk=doc.chunks[4], dense=0.8, overview=True),  # the conclusions
        Scored(chunk=doc.chunks[1], dense=0.6),
    ]


def test_carried_words_are_the_documents_rarest_in_its_language() -> None:
    doc = passages([*TEXTS, "Old batteries die quickly in the cold."])
    also = [
        SearchText("How do I stop a transfer?\nAnd that?", 1.0, "conversation"),
        SearchText("And that?", 0.5, "terms", ("every", "die", "kettle", "chain"), pick=2),
    ]
    chosen: dict[str, list[str]] = {}
    found = carried_texts(also, doc, chosen, "birds.txt")
    # "every" is an English function word; "die" is German's, but this document is English.
    assert found == [(also[1], "And that? die kettle")]
    assert chosen == {"birds.txt": ["die", "kettle"]}


def test_asking_words_and_fillers_of_the_documents_language_are_never_carried() -> None:
    texts = [
        "Pourquoi choisir UTF-8 ? Parce que la locale UTF-8 code tout Unicode.",
        "Le noyau écrit ses messages dans le journal, puis journald les garde.",
        "Le clavier japonais passe par ibus-mozc.",
        "Le nom d'hôte se lit dans /etc/hostname.",
    ]
    chunks = [
        Chunk("sha", "ref.txt", i, text, 1, 1, start=i * 80, end=i * 80 + len(text))
        for i, text in enumerate(texts)
    ]
    doc = DocumentPassages("sha", "ref.txt", chunks, LexicalIndex.build(texts))
    assert doc.lexical.language == "french"
    carried = ("Pourquoi", "puis", "exactement", "locale", "journald")
    also = [SearchText("Comment je la change ?", 1.0, "terms", carried, pick=3)]
    chosen: dict[str, list[str]] = {}
    # "pourquoi" and "puis" are each in one passage of four, as rare as "locale": only their
    # being French asking and filler words keeps them out.
    assert carried_texts(also, doc, chosen, "ref.txt") == [
        (also[0], "Comment je la change ? locale journald")
    ]
    assert chosen == {"ref.txt": ["locale", "journald"]}
