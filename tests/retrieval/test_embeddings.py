"""Embedding backends: the OpenAI-compatible one against a real fake server, and MiniLM."""

from __future__ import annotations

import asyncio
import math
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from proxy.errors import UpstreamError
from proxy.retrieval.embedding_server import OpenAIEmbedder
from proxy.retrieval.embeddings import (
    BACKGROUND_NICE,
    DefaultEmbedder,
    close_embedder,
    make_embedder,
)
from tests.retrieval.support import FakeEmbeddingServer, hashed_vector


@pytest_asyncio.fixture
async def server() -> AsyncIterator[FakeEmbeddingServer]:
    fake = FakeEmbeddingServer()
    await fake.start()
    yield fake
    await fake.stop()


def nomic(base_url: str, **settings: object) -> OpenAIEmbedder:
    embedder = make_embedder(
        "openai", base_url=base_url, model="nomic-embed-text-v1.5", max_retries=0, **settings
    )
    assert isinstance(embedder, OpenAIEmbedder)
    return embedder


async def test_documents_are_batched_and_prefixed(server: FakeEmbeddingServer) -> None:
    embedder = nomic(server.base_url, batch_size=3)
    texts = [f"passage number {i}" for i in range(7)]
    vectors = await embedder.embed_documents(texts)
    await close_embedder(embedder)
    assert [len(request["input"]) for request in server.requests] == [3, 3, 1]
    sent = [text for request in server.requests for text in request["input"]]
    assert sent == [f"search_document: {text}" for text in texts]
    assert {request["model"] for request in server.requests} == {"nomic-embed-text-v1.5"}
    assert {request["encoding_format"] for request in server.requests} == {"float"}
    # In input order although the server answered in reverse.
    assert vectors == [hashed_vector(f"search_document: {text}", 8) for text in texts]


async def test_queries_get_the_query_prefix(server: FakeEmbeddingServer) -> None:
    embedder = nomic(server.base_url)
    vector = await embedder.embed_query("what is a trace tree?")
    await close_embedder(embedder)
    assert server.requests[0]["input"] == ["search_query: what is a trace tree?"]
    assert vector == hashed_vector("search_query: what is a trace tree?", 8)


async def test_prefixes_can_be_set_or_switched_off(server: FakeEmbeddingServer) -> None:
    plain = nomic(server.base_url, query_prefix="", document_prefix="")
    await plain.embed_documents(["a"])
    await plain.embed_query("b")
    custom = make_embedder(
        "openai", base_url=server.base_url, model="bge-m3", query_prefix="Q: ", max_retries=0
    )
    await custom.embed_documents(["c"])
    await custom.embed_query("d")
    for embedder in (plain, custom):
        await close_embedder(embedder)
    assert [request["input"] for request in server.requests] == [["a"], ["b"], ["c"], ["Q: d"]]


async def test_input_types_are_sent_for_servers_that_read_them(
    server: FakeEmbeddingServer,
) -> None:
    typed = make_embedder(
        "openai",
        base_url=server.base_url,
        model="multilingual-e5-small",
        query_input_type="query",
        document_input_type="passage",
        max_retries=0,
    )
    await typed.embed_documents(["a"])
    await typed.embed_query("b")
    plain = make_embedder("openai", base_url=server.base_url, model="m", max_retries=0)
    await plain.embed_query("c")
    for embedder in (typed, plain):
        await close_embedder(embedder)
    assert [(r["input"], r.get("input_type")) for r in server.requests] == [
        (["a"], "passage"),
        (["b"], "query"),
        (["c"], None),  # not sent unless configured
    ]
    # Vectors made with other input types are other vectors: the index is keyed apart.
    assert isinstance(typed, OpenAIEmbedder) and isinstance(plain, OpenAIEmbedder)
    assert "query|passage" in typed.fingerprint and "query" not in plain.fingerprint


def test_collection_names_are_safe_and_name_the_model() -> None:
    assert nomic("http://127.0.0.1:9/v1").name == "openai-nomic-embed-text-v1.5"
    hub = OpenAIEmbedder("http://127.0.0.1:9/v1", "nomic-ai/nomic-embed-text-v1.5")
    assert hub.name == "openai-nomic-ai-nomic-embed-text-v1.5"
    assert hub.document_prefix == "search_document: "
    assert DefaultEmbedder().name == "default-all-MiniLM-L6-v2"


async def test_server_error_names_the_server_and_the_status(server: FakeEmbeddingServer) -> None:
    server.mode = "fail"
    embedder = nomic(server.base_url)
    with pytest.raises(UpstreamError) as caught:
        await embedder.embed_documents(["x"])
    await close_embedder(embedder)
    assert caught.value.status == 502
    assert server.base_url in caught.value.message and "HTTP 500" in caught.value.message


async def test_a_missing_vector_is_an_upstream_error(server: FakeEmbeddingServer) -> None:
    server.mode = "short"
    embedder = nomic(server.base_url)
    with pytest.raises(UpstreamError, match="2 vectors for 3 inputs"):
        await embedder.embed_documents(["x", "y", "z"])
    await close_embedder(embedder)


async def test_a_slow_server_times_out(server: FakeEmbeddingServer) -> None:
    server.mode = "slow"
    embedder = nomic(server.base_url, timeout=0.3)
    with pytest.raises(UpstreamError, match=r"no answer within 0\.3 s"):
        await embedder.embed_query("x")
    await close_embedder(embedder)


async def test_refused_connection_names_the_server() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    embedder = nomic(base_url)
    with pytest.raises(UpstreamError) as caught:
        await embedder.embed_query("x")
    await close_embedder(embedder)
    assert f"embedding server {base_url}: unreachable" in caught.value.message


def test_the_default_backend_ignores_server_settings() -> None:
    embedder = make_embedder("default", base_url="http://x/v1", model="m", api_key=None)
    assert isinstance(embedder, DefaultEmbedder)
    unset = make_embedder("openai", base_url="http://x/v1", model="m", query_prefix=None)
    assert isinstance(unset, OpenAIEmbedder) and unset.query_prefix == ""


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown embeddings backend"):
        make_embedder("word2vec")


async def test_default_embedder_gives_unit_vectors_without_prefixes() -> None:
    embedder = make_embedder("default", batch_size=2)
    texts = ["The moon was buried in the bog.", "JavaScript traces", "npm install"]
    vectors = await embedder.embed_documents(texts)
    query = await embedder.embed_query(texts[0])
    assert [len(vector) for vector in vectors] == [384, 384, 384]
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    assert math.isclose(
        sum(a * b for a, b in zip(query, vectors[0], strict=True)), 1.0, rel_tol=1e-4
    )
    await close_embedder(embedder)


async def test_default_embedder_matches_chromas_own_function() -> None:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    texts = ["short query?", "a much longer passage " * 30, "", "middle length text " * 5]
    ours = await DefaultEmbedder(batch_size=3, precision="fp32").embed_documents(texts)
    chromas = ONNXMiniLM_L6_V2()(texts)
    for mine, theirs in zip(ours, chromas, strict=True):
        assert max(abs(a - float(b)) for a, b in zip(mine, theirs, strict=True)) < 1e-5


@pytest.mark.slow
async def test_the_default_embedder_gives_chromas_vectors() -> None:
    # Our own session (no spinning) and padding to the batch's longest text change the cost,
    # not the vectors (of the fp32 build; the int8 build is checked in test_minilm.py).
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    texts = ["short", "a somewhat longer passage about lighthouses and ships " * 6, "Формат A4"]
    ours = await DefaultEmbedder(precision="fp32").embed_documents(texts)
    theirs = ONNXMiniLM_L6_V2()(texts)
    for mine, reference in zip(ours, theirs, strict=True):
        assert max(abs(a - float(b)) for a, b in zip(mine, reference, strict=True)) < 1e-4


class HeldModel:
    """Stands in for MiniLM's session: records each run (its thread, its texts' lengths in
    tokens, the thread's nice value) and holds every background run until `release` is set."""

    def __init__(self, meet: int = 0) -> None:
        self.runs: list[tuple[str, list[int], int]] = []
        self.release = threading.Event()
        self.meet = meet  # each run waits (a while at most) until this many run side by side
        self.side_by_side = 0
        self.most_side_by_side = 0
        self._count = threading.Lock()

    def run(self, _: object, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        mask = inputs["attention_mask"]
        thread = threading.current_thread().name
        with self._count:
            self.side_by_side += 1
            self.most_side_by_side = max(self.most_side_by_side, self.side_by_side)
        deadline = time.monotonic() + 5  # a bound on a broken test, not a measurement
        while self.most_side_by_side < self.meet and time.monotonic() < deadline:
            time.sleep(0.001)
        try:
            if thread.startswith("minilm-background"):
                # a bound on a broken test, not a measurement
                assert self.release.wait(30), "background run never released"
            nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            self.runs.append((thread, [int(row.sum()) for row in mask], nice))
            return [np.ones((*mask.shape, 384), dtype=np.float32)]
        finally:
            with self._count:
                self.side_by_side -= 1


def ready_embedder(model: HeldModel, **settings: Any) -> DefaultEmbedder:
    from proxy.retrieval.embeddings import _minilm_tokenizer

    embedder = DefaultEmbedder(**settings)
    tokenizer = _minilm_tokenizer()
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    embedder._model, embedder._tokenizer = model, tokenizer
    return embedder


PASSAGES = [f"passage {n} " + "about the harbour and its ships " * (5 + n) for n in range(6)]


async def test_a_request_never_waits_for_the_background_runs() -> None:
    model = HeldModel()
    embedder = ready_embedder(model, lanes=2)
    background = asyncio.create_task(embedder.embed_in_background(PASSAGES))
    deadline = time.monotonic() + 30  # a bound on a broken test, not a measurement
    while model.side_by_side < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    assert model.side_by_side == 2  # both background lanes are busy (and held)
    # The request's query and passages are embedded while every background run is held.
    await embedder.embed_query("where?")
    await embedder.embed_documents(PASSAGES[:2])
    assert [thread.startswith("minilm-background") for thread, _, _ in model.runs] == [False] * 3
    model.release.set()
    await background
    assert len(model.runs) == 3 + len(PASSAGES)
    await embedder.close()


async def test_background_runs_use_every_lane_at_once_one_passage_each() -> None:
    model = HeldModel(meet=2)
    model.release.set()
    embedder = ready_embedder(model, lanes=2)
    vectors = await embedder.embed_in_background(PASSAGES)
    assert len(vectors) == len(PASSAGES)
    # One passage a run (no padding), shortest first, two runs side by side.
    assert [lengths for _, lengths, _ in model.runs] and all(
        len(lengths) == 1 for _, lengths, _ in model.runs
    )
    assert model.most_side_by_side == 2
    await embedder.close()


async def test_runs_of_several_passages_hold_passages_of_similar_lengths() -> None:
    model = HeldModel()
    model.release.set()
    embedder = ready_embedder(model, lanes=1, batch_size=3)
    shuffled = [PASSAGES[i] for i in (4, 0, 5, 2, 1, 3)]
    await embedder.embed_documents(shuffled)
    lengths = [embedder.count_tokens(text) + 2 for text in PASSAGES]  # [CLS] and [SEP]
    # the three shortest together, then the three longest (each run is padded to its longest)
    assert [runs for _, runs, _ in model.runs] == [lengths[:3], lengths[3:]]
    await embedder.close()


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
async def test_the_background_steps_back_for_everything_else() -> None:
    model = HeldModel()
    model.release.set()
    embedder = ready_embedder(model, lanes=2)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    await embedder.embed_in_background(PASSAGES[:2])
    await embedder.embed_query("where?")
    nice = {thread.startswith("minilm-background"): value for thread, _, value in model.runs}
    assert nice == {True: min(19, own + BACKGROUND_NICE), False: own}
    # and the process itself is left as it was
    assert os.getpriority(os.PRIO_PROCESS, 0) == own
    await embedder.close()


def test_the_batch_size_defaults_to_each_backends_own() -> None:
    from proxy.config import load_settings
    from proxy.retrieval.embeddings import MODEL_RUN
    from proxy.wiring import make_embedder_from

    assert MODEL_RUN == 1
    default = make_embedder_from(load_settings(None, environ={}))
    assert isinstance(default, DefaultEmbedder) and default.batch_size == MODEL_RUN
    server = make_embedder_from(
        load_settings(
            None,
            environ={},
            overrides={"embeddings": {"backend": "openai", "base_url": "http://x/v1"}},
        )
    )
    assert isinstance(server, OpenAIEmbedder) and server.batch_size == 64
    chosen = make_embedder_from(
        load_settings(None, environ={}, overrides={"embeddings": {"batch_size": 8}})
    )
    assert isinstance(chosen, DefaultEmbedder) and chosen.batch_size == 8


def test_the_model_lock_is_taken_in_the_order_asked() -> None:
    import threading

    from proxy.retrieval.embeddings import TurnLock

    lock = TurnLock()
    order: list[int] = []

    def take(n: int) -> None:
        with lock:
            order.append(n)

    with lock:  # held while sixteen threads ask, one after the other
        threads = []
        for n in range(16):
            thread = threading.Thread(target=take, args=(n,))
            thread.start()
            threads.append(thread)
            while lock.asked < n + 2:
                time.sleep(0.001)
    for thread in threads:
        thread.join(30)
    assert order == list(range(16))
