"""The retriever: first questions from what is ready, the rest indexed once in the background,
passages kept on disk, settings changes indexed again."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from proxy.documents.model import ParsedDocument
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.new_document import first_question_candidates
from proxy.retrieval.retriever import Retriever
from tests.retrieval.support import CountingEmbedder, HashEmbedder, text_document

TOPICS = ["lighthouse lamp keeper", "bakery bread flour", "river boat ferry", "garden roses soil"]


def book(pages: int = 40) -> ParsedDocument:
    """Pages of one sentence each about a rotating topic; page 7 alone mentions sardines."""
    texts = [
        f"Page {n} tells about the {TOPICS[n % len(TOPICS)]} in chapter {n}."
        + (" The keeper fed sardines to the cats." if n == 7 else "")
        for n in range(1, pages + 1)
    ]
    return text_document(texts, name="book.txt")


Make = Callable[..., Retriever]


@pytest_asyncio.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    opened: list[Retriever] = []

    def build(embedder: Embedder | None = None, **fields: Any) -> Retriever:
        embedder = embedder or CountingEmbedder(HashEmbedder())
        fields.setdefault("chunk_tokens", 14)
        fields.setdefault("chunk_overlap", 0)
        fields.setdefault("new_document_candidates", 4)
        retriever = Retriever(
            index=VectorIndex.embedded(tmp_path / "chroma", embedder),
            embedder=embedder,
            count_tokens=embedder.count_tokens,
            passages_dir=tmp_path / "passages",
            **fields,
        )
        opened.append(retriever)
        return retriever

    yield build
    for retriever in opened:
        await retriever.close()


async def finished(retriever: Retriever, doc: ParsedDocument) -> None:
    while retriever.indexer.running(doc.sha256):
        await asyncio.sleep(0.01)


async def test_a_new_document_is_answered_from_its_candidates_before_it_is_indexed(
    make: Make,
) -> None:
    retriever = make()
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    doc = book()
    statuses: list[str] = []
    async with retriever.indexer.gate.foreground():  # keeps the background waiting
        ranked, ready = await retriever.search(
            [doc], "who fed sardines to the cats", 3, statuses.append
        )
        assert ranked[0][0].chunk.page_start == 7
        assert ranked[0][0].lexical is not None and ranked[0][0].fused is not None
        # Only the lexical candidates were embedded for this question.
        assert len(counting.documents) <= retriever.new_document_candidates
        assert ready == {"book.txt": statuses and int(statuses[-1].split("(")[1][:-2])}
        assert statuses[0] == "Indexing file book.txt... (0%)"
        assert not await retriever.index.is_indexed(doc.sha256, retriever.settings)
    await finished(retriever, doc)
    assert await retriever.index.is_indexed(doc.sha256, retriever.settings)
    passages = await retriever.store.open(doc)
    # Every passage embedded exactly once: candidates in the foreground, the rest in the back.
    assert sorted(counting.documents) == sorted(chunk.text for chunk in passages.chunks)
    ranked, ready = await retriever.search([doc], "who fed sardines to the cats", 3)
    assert ready == {"book.txt": 100} and ranked[0][0].chunk.page_start == 7


async def test_concurrent_questions_embed_each_passage_once(make: Make) -> None:
    retriever = make()
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    doc = book(60)
    questions = ["bakery bread", "river ferry", "garden roses", "sardines cats"]
    await asyncio.gather(*(retriever.search([doc], q, 3) for q in questions))
    await finished(retriever, doc)
    passages = await retriever.store.open(doc)
    assert await retriever.index.is_indexed(doc.sha256, retriever.settings)
    assert Counter(counting.documents).most_common(1)[0][1] == 1, [
        t for t, n in Counter(counting.documents).items() if n > 1
    ]
    assert len(counting.documents) == len(passages.chunks)


async def test_a_small_document_is_indexed_while_the_request_waits(make: Make) -> None:
    retriever = make(new_document_candidates=100)
    doc = book(6)
    statuses: list[str] = []
    _, ready = await retriever.search([doc], "bakery", 2, statuses.append)
    assert ready == {"book.txt": 100} and statuses[-1] == "Indexing file book.txt... (100%)"
    assert not retriever.indexer.running(doc.sha256)
    assert await retriever.index.is_indexed(doc.sha256, retriever.settings)


async def test_passages_and_their_lexical_index_are_kept_on_disk(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = make(new_document_candidates=100)
    doc = book(8)
    await first.search([doc], "bakery", 2)
    await first.close()
    again = make(new_document_candidates=100)
    monkeypatch.setattr(again.store, "_chunker", lambda doc: pytest.fail("chunked again"))
    counting = again.embedder
    assert isinstance(counting, CountingEmbedder)
    ranked, _ = await again.search([doc], "garden roses", 2)
    assert "roses" in ranked[0][0].chunk.text and counting.documents == []


async def test_a_lexical_index_from_an_earlier_version_is_made_again_from_the_passages(
    make: Make, tmp_path: Path
) -> None:
    first = make(new_document_candidates=100)
    doc = book(8)
    await first.search([doc], "bakery", 2)
    await first.close()
    # As an earlier version saved it: words whole only, no pieces.
    (saved,) = (tmp_path / "passages").glob(f"{doc.sha256}/*/bm25")
    shutil.rmtree(saved / "subwords")
    again = make(new_document_candidates=100)
    # Given by reference (no pages, as a vector store's file): not parsed again.
    reference = dataclasses.replace(doc, pages=())
    ranked, _ = await again.search([reference], "gardens", 2)
    assert "garden" in ranked[0][0].chunk.text
    await again.close_indexing()  # written again, whole
    assert (saved / "subwords").is_dir()


@pytest.mark.parametrize(
    "change",
    [
        {"chunk_tokens": 9},
        {"chunk_overlap": 3},
        {"embedder": CountingEmbedder(HashEmbedder(fingerprint="another model or prefix"))},
    ],
)
async def test_changed_settings_index_the_document_again(
    make: Make, change: dict[str, Any]
) -> None:
    first = make(new_document_candidates=100)
    doc = book(8)
    await first.search([doc], "bakery", 2)
    await first.close()
    changed = make(new_document_candidates=100, **change)
    counting = changed.embedder
    assert isinstance(counting, CountingEmbedder)
    assert not await changed.index.is_indexed(doc.sha256, changed.settings)
    await changed.search([doc], "bakery", 2)
    passages = await changed.store.open(doc)
    assert sorted(counting.documents) == sorted(chunk.text for chunk in passages.chunks)
    assert await changed.index.is_indexed(doc.sha256, changed.settings)
    assert not await changed.index.is_indexed(doc.sha256, first.settings)


async def test_rankings_differ_as_configured(make: Make) -> None:
    doc = book(8)
    query = "keeper sardines"
    hybrid = make(new_document_candidates=100)
    mixed, _ = await hybrid.search([doc], query, 8)
    await hybrid.close()
    lexical, _ = await make(ranking="lexical", new_document_candidates=100).search([doc], query, 8)
    # Lexical ranking holds only passages sharing a term with the query; hybrid adds the rest.
    assert all(item.lexical for item in lexical[0])
    assert len(mixed[0]) > len(lexical[0])
    assert [item.fused for item in mixed[0]] == sorted((i.fused for i in mixed[0]), reverse=True)


async def test_a_compound_holding_the_questions_word_is_a_candidate_and_ranked(
    make: Make,
) -> None:
    # Page 8 alone holds "Kurve", inside "Jordankurve": no whole word of the question is in
    # it, and with four candidates neither the openings nor the spread reach it.
    pages = [f"Abschnitt {n} behandelt Gruppen und Mengen in Kapitel {n}." for n in range(1, 13)]
    pages[7] = "Jede geschlossene Jordankurve zerlegt die Ebene in zwei Gebiete."
    doc = text_document(pages, name="skript.txt")
    retriever = make()
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    async with retriever.indexer.gate.foreground():  # a first question: candidates only
        first, _ = await retriever.search([doc], "Kurve", 12)
        # It is one of the candidates embedded for this question, and ranked.
        assert any("Jordankurve" in text for text in counting.documents)
    assert 8 in [item.chunk.page_start for item in first[0]]
    await retriever.close()
    lexical = make(ranking="lexical")
    ranked, _ = await lexical.search([doc], "Kurve", 3)
    assert ranked[0][0].chunk.page_start == 8 and ranked[0][0].lexical is None


async def test_neighbours_join_a_passage_with_the_ones_around_it(make: Make) -> None:
    retriever = make(new_document_candidates=100)
    doc = book(8)
    ranked, _ = await retriever.search([doc], "sardines", 2, neighbours=1)
    first = ranked[0][0].chunk
    # The hit ("... fed sardines ...") with the passage before it and the one after it.
    assert first.text.index("Page 7 tells") < first.text.index("sardines")
    assert first.text.index("sardines") < first.text.index("Page 8 tells")
    assert (first.page_start, first.page_end) == (7, 8)
    # The runner-up is not a passage already inside the first one's neighbourhood.
    assert abs(ranked[0][1].chunk.index - first.index) > 1


async def test_long_candidates_are_ranked_by_their_heads_and_indexed_whole_later(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.retrieval import new_document as retriever_module

    monkeypatch.setattr(retriever_module, "PREVIEW_TOKENS", 6)
    retriever = make()
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    doc = book()
    async with retriever.indexer.gate.foreground():
        ranked, _ = await retriever.search([doc], "who fed sardines to the cats", 3)
        assert "sardines" in ranked[0][0].chunk.text
        heads = list(counting.documents)
        assert heads and all(len(text.split()) <= 6 for text in heads)
    await finished(retriever, doc)
    passages = await retriever.store.open(doc)
    # The heads were not stored: every passage was embedded whole by the background.
    whole = [text for text in counting.documents if text not in heads]
    assert sorted(whole) == sorted(chunk.text for chunk in passages.chunks)


def test_first_question_candidates_lexical_first_then_openings_then_spread() -> None:
    # Lexical matches lead; the document's opening passages always join them.
    assert first_question_candidates([40, 7, 1], total=100, count=3) == [40, 7, 1, 0, 2]
    # A question whose words match nothing still gets `count` candidates, spread out.
    assert first_question_candidates([], total=100, count=4) == [0, 1, 2, 25]
    spread = first_question_candidates([], total=1000, count=16)
    assert len(spread) == 16 and spread[:3] == [0, 1, 2] and max(spread) >= 750
    # Small documents: nothing past their end, nothing twice.
    assert first_question_candidates([1], total=2, count=16) == [1, 0]


RUSSIAN = [
    "Срок действия договора составляет три года с даты его подписания сторонами.",
    "Оплата производится банковским переводом в течение десяти рабочих дней.",
    "Доставка товара выполняется силами продавца и за его счёт.",
] * 4


async def test_a_language_the_embedder_does_not_read_is_ranked_by_its_words(make: Make) -> None:
    retriever = make(languages=frozenset({"english"}), chunk_tokens=40)
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    doc = text_document(RUSSIAN, name="договор.txt")
    ranked, ready = await retriever.search([doc], "Какой срок действия договора?", 3)
    first = ranked[0][0]
    assert "Срок действия договора" in first.chunk.text
    assert not first.by_meaning and first.lexical is not None
    # Nothing of it was embedded, now or in the background: its cosines would be noise.
    await finished(retriever, doc)
    assert counting.documents == []
    assert ready == {"договор.txt": 100}
    # An English document is still ranked by meaning too.
    english, _ = await retriever.search([book(8)], "who fed sardines to the cats", 2)
    assert english[0][0].by_meaning and counting.documents


async def test_passages_of_an_unread_language_are_sized_in_characters(make: Make) -> None:
    from proxy.retrieval.retriever import characters_as_tokens

    retriever = make(languages=frozenset({"english"}), chunk_tokens=40)
    doc = text_document([" ".join(RUSSIAN)], name="договор.txt")
    passages = await retriever.passages(doc)
    sizes = [len(chunk.shown) for chunk in passages.chunks]
    # 40 "tokens" of four characters: about 160 characters a passage, not 40 word pieces.
    assert max(characters_as_tokens(chunk.shown) for chunk in passages.chunks) <= 40
    assert sum(sizes) / len(sizes) > 100
    assert not retriever.reads("russian") and retriever.reads("english") and retriever.reads(None)


def test_the_languages_read_are_part_of_the_passages_settings(make: Make) -> None:
    # Which languages are sized in the embedder's tokens decides where passages end.
    from dataclasses import replace

    english = make(languages=frozenset({"english"}))
    every = replace(english, languages=None)  # the same index, another reading
    assert english.chunking_settings != every.chunking_settings
    assert english.settings != every.settings


# ---------------------------------------------------------------------------------------------
# A small document is whole before its first answer; a large one says how much was ready


def test_the_pace_is_a_moving_average_of_what_requests_waited_for() -> None:
    from proxy.retrieval.indexing import EmbeddingPace

    pace = EmbeddingPace()
    assert pace.estimate(1000) is None  # nothing measured: nothing promised
    pace.record(1000, 2.0)
    assert pace.estimate(500) == pytest.approx(1.0)
    pace.record(1000, 4.0)  # slower now: the newest run weighs 0.3
    assert pace.seconds_per_char == pytest.approx(0.002 + 0.3 * 0.002)
    pace.record(0, 1.0)  # nothing to learn from
    pace.record(10, 0.0)
    assert pace.seconds_per_char == pytest.approx(0.0026)


async def test_a_document_cheap_to_embed_is_whole_before_its_first_answer(make: Make) -> None:
    from proxy.retrieval.new_document import WHOLE_NOW

    retriever = make(whole_document_s=60.0)
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    retriever.indexer.pace.record(1_000_000, 1.0)  # a fast embedder, as measured before
    doc = book()
    how: dict[str, str] = {}
    statuses: list[str] = []
    ranked, ready = await retriever.search(
        [doc], "who fed sardines to the cats", 3, statuses.append, indexing=how
    )
    # The answer waited for every passage: the dense ranking is the complete one.
    assert ready == {"book.txt": 100} and how == {"book.txt": WHOLE_NOW}
    assert await retriever.index.is_indexed(doc.sha256, retriever.settings)
    assert not retriever.indexer.running(doc.sha256)
    passages = await retriever.store.open(doc)
    assert sorted(counting.documents) == sorted(chunk.text for chunk in passages.chunks)
    assert ranked[0][0].chunk.page_start == 7
    assert statuses[-1] == "Indexing file book.txt... (100%)"


async def test_the_first_question_measures_the_pace_it_decides_by(make: Make) -> None:
    from proxy.retrieval.new_document import WHOLE_NOW

    retriever = make(whole_document_s=60.0)
    assert retriever.indexer.pace.seconds_per_char is None  # a new process
    how: dict[str, str] = {}
    _, ready = await retriever.search([book()], "sardines", 3, indexing=how)
    # The candidates were embedded first, which measured the pace; then the rest, at once.
    assert retriever.indexer.pace.seconds_per_char is not None
    assert ready == {"book.txt": 100} and how == {"book.txt": WHOLE_NOW}


async def test_a_document_costly_to_embed_is_answered_from_its_candidates(make: Make) -> None:
    from proxy.retrieval.new_document import COMPLETE, PARTLY

    retriever = make(whole_document_s=2.0)
    retriever.indexer.pace.record(1, 1.0)  # a second a character: far over two seconds
    doc = book()
    how: dict[str, str] = {}
    async with retriever.indexer.gate.foreground():  # keeps the background waiting
        _, ready = await retriever.search([doc], "who fed sardines", 3, indexing=how)
        assert how == {"book.txt": PARTLY} and ready["book.txt"] < 100
        assert retriever.indexer.running(doc.sha256)
    await finished(retriever, doc)
    how.clear()
    _, ready = await retriever.search([doc], "who fed sardines", 3, indexing=how)
    assert ready == {"book.txt": 100} and how == {"book.txt": COMPLETE}


async def test_a_large_documents_rest_is_waited_for_once_it_is_cheap(make: Make) -> None:
    from proxy.retrieval.new_document import PARTLY, WHOLE_NOW

    retriever = make(whole_document_s=2.0)
    pace = retriever.indexer.pace
    pace.record(1, 1.0)
    doc = book()
    how: dict[str, str] = {}
    async with retriever.indexer.gate.foreground():
        await retriever.search([doc], "who fed sardines", 3, indexing=how)
    assert how["book.txt"] == PARTLY
    # The background has not run; the machine turns out fast: the next question finishes it.
    pace.seconds_per_char = 1e-9
    async with retriever.indexer.gate.foreground():
        _, ready = await retriever.search([doc], "bakery bread", 3, indexing=how)
    assert how["book.txt"] == WHOLE_NOW and ready == {"book.txt": 100}


def test_a_new_documents_candidates_are_as_many_as_a_second_embeds(make: Make) -> None:
    from proxy.retrieval.new_document import CHARS_PER_TOKEN, MOST_CANDIDATES, PREVIEW_TOKENS

    retriever = make(new_document_candidates=16, candidate_s=1.0)
    pace = retriever.indexer.pace
    assert retriever.new_documents.candidates_for(retriever.indexer) == 16  # nothing measured yet
    head = PREVIEW_TOKENS * CHARS_PER_TOKEN
    pace.seconds_per_char = 1.0 / (40 * head)  # forty heads a second
    assert retriever.new_documents.candidates_for(retriever.indexer) == 40
    pace.seconds_per_char = 1.0 / (1000 * head)  # a fast machine: capped
    assert retriever.new_documents.candidates_for(retriever.indexer) == MOST_CANDIDATES
    pace.seconds_per_char = 1.0 / (3 * head)  # a slow embedder: the configured least
    assert retriever.new_documents.candidates_for(retriever.indexer) == 16
    retriever.candidate_s = 0.0  # off: the configured number exactly
    pace.seconds_per_char = 1.0 / (40 * head)
    assert retriever.new_documents.candidates_for(retriever.indexer) == 16


async def test_the_first_question_ranks_that_many_candidates_by_meaning(make: Make) -> None:
    from proxy.retrieval.new_document import CHARS_PER_TOKEN, PREVIEW_TOKENS

    retriever = make(new_document_candidates=2, candidate_s=1.0)
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    retriever.indexer.pace.seconds_per_char = 1.0 / (10 * PREVIEW_TOKENS * CHARS_PER_TOKEN)
    async with retriever.indexer.gate.foreground():  # the background waits
        await retriever.search([book()], "who fed sardines to the cats", 3)
        # ten candidates (the opening three among them, and passages spread through the rest)
        assert len(counting.documents) == 10
