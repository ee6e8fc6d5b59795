"""Retrieval through the proxy: the budget filled past the limit, indexing statuses, reranking."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.retrieval import new_document as retriever_module
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.reranker import FakeReranker
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, pdf_part, preview, text_part

# Twelve one-sentence passages that all mention the harbour, one of them the answer.
PAGES = [f"Note {n}: the harbour had {n} boats moored at dawn." for n in range(1, 13)]
PAGES[8] = "Note 9: the harbour master rang the bell at noon to call the ferry."
SMALL = {"chunk_tokens": 16, "chunk_overlap": 0, "affinity_threshold": 0.0}


def body(query: str, stream: bool = False, **enrich: Any) -> dict[str, Any]:
    return ask(
        [text_part("notes.txt", "\n\n".join(PAGES))],
        query,
        stream=stream,
        enrich={"strategy": "retrieval", **enrich},
    )


def test_room_in_the_budget_takes_more_passages_than_the_limit(
    make_proxy: Callable[..., str],
) -> None:
    base = make_proxy(retrieval=SMALL)
    record = preview(base, body("when did the harbour master ring the bell"))["decision"]
    retrieval = record["retrieval"]
    assert retrieval["limit"] == 3 and retrieval["fill"] == "passages"
    assert sum(retrieval["selected_per_source"]) > 3
    assert retrieval["candidates"][0]["snippet"].startswith("Note 9")
    first = retrieval["candidates"][0]
    assert first["passage"] is not None and first["dense"] == first["score"]
    assert first["lexical"] > 0 and first["fused"] > 0 and first["rerank"] is None
    assert retrieval["ranking"] == "hybrid" and retrieval["indexed"] == {"notes.txt": 100}


def test_an_explicit_limit_is_honoured_exactly_and_fill_none_keeps_the_limit(
    make_proxy: Callable[..., str], tmp_path: Path
) -> None:
    other = tmp_path / "other"  # a second proxy, its own store
    base = make_proxy(retrieval=SMALL)
    explicit = preview(base, body("harbour bell", retrieval_limit=2))["decision"]["retrieval"]
    assert explicit["selected_per_source"] == [2] and explicit["fill"] == "none"
    fixed = make_proxy(retrieval={**SMALL, "fill": "none"}, server={"data_dir": str(other)})
    retrieval = preview(fixed, body("harbour bell"))["decision"]["retrieval"]
    assert retrieval["selected_per_source"] == [3]


def test_a_small_window_fills_only_what_fits(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.n_ctx = 200  # the fake counts a token per word: a 100-word budget
    base = make_proxy(retrieval=SMALL)
    retrieval = preview(base, body("harbour bell"))["decision"]["retrieval"]
    assert 1 <= sum(retrieval["selected_per_source"]) < 12
    assert retrieval["left_out"] > 0


def test_indexing_statuses_stream_before_the_answer(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(retrieval=SMALL)
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=body("harbour bell", stream=True), timeout=60
    ) as response:
        raw = b"".join(response.iter_raw()).decode()
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    indexing = [c for c in comments if c.startswith("Indexing file notes.txt... (")]
    assert indexing[0] == "Indexing file notes.txt... (0%)"
    assert indexing[-1] == "Indexing file notes.txt... (100%)"
    assert comments.index(indexing[-1]) < next(
        i for i, c in enumerate(comments) if c.startswith("Retrieved ")
    )
    # The document is indexed now: the next question says nothing about indexing.
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=body("ferry", stream=True), timeout=60
    ) as response:
        again = b"".join(response.iter_raw()).decode()
    assert "Indexing file" not in again and "data: [DONE]" in again


async def test_a_slow_index_reports_progress_every_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retriever_module, "STATUS_EVERY_S", 0.01)
    lines: list[str] = []
    async with retriever_module._ticking(lines.append, lambda: f"tick {len(lines)}"):
        while len(lines) < 4:  # the block outlasts several ticks
            await asyncio.sleep(0.005)
    assert lines[:4] == ["tick 0", "tick 1", "tick 2", "tick 3"] and len(lines) >= 5


@pytest.fixture
def reranker(servers: ServerThread) -> FakeReranker:
    fake = FakeReranker(scorer="reverse")
    fake.base_url = servers.serve(fake.app()) + "/v1"  # type: ignore[attr-defined]
    return fake


def test_a_configured_reranker_orders_the_candidates(
    make_proxy: Callable[..., str], reranker: FakeReranker, tmp_path: Path
) -> None:
    plain = make_proxy(retrieval=SMALL)
    before = preview(plain, body("harbour bell"))["decision"]["retrieval"]["candidates"]
    rerank = {"base_url": reranker.base_url, "model": "bge-reranker", "top_n": 5}  # type: ignore[attr-defined]
    reranked = make_proxy(
        retrieval={**SMALL, "rerank": rerank}, server={"data_dir": str(tmp_path / "other")}
    )
    record = preview(reranked, body("harbour bell"))["decision"]["retrieval"]
    after = record["candidates"]
    # "reverse" scores the last of the 5 it is sent highest: the first five, reversed.
    assert [c["snippet"] for c in after[:5]] == [c["snippet"] for c in before[:5]][::-1]
    assert after[0]["rerank"] == 4.0 and record["ranking"] == "hybrid+rerank"
    sent = reranker.requests[-1]
    assert sent["model"] == "bge-reranker" and sent["query"] == "harbour bell"
    assert len(sent["documents"]) == 5


@pytest.mark.parametrize("scorer", ["fail", "bad"])
def test_a_failing_reranker_is_a_502_naming_it(
    make_proxy: Callable[..., str], reranker: FakeReranker, upstream: FakeUpstream, scorer: str
) -> None:
    reranker.scorer = scorer
    rerank = {"base_url": reranker.base_url}  # type: ignore[attr-defined]
    base = make_proxy(retrieval={**SMALL, "rerank": rerank})
    response = httpx.post(base + "/v1/chat/completions", json=body("harbour"), timeout=60)
    assert response.status_code == 502
    error = response.json()["error"]
    assert "rerank server" in error["message"] and error["code"] == "rerank_failed"
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]


# -- the retrieval branch: index once, cite passages, send citations once -------------------------


BOOK_PAGES = [
    "The lighthouse keeper fed the cats every morning with fresh sardines.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "The bakery on the corner sells sourdough bread and croissants at dawn.",
]

# One sentence per chunk, so each page is its own passage.
SMALL_CHUNKS = {"chunk_tokens": 20, "chunk_overlap": 0}


def retrieval_body(query: str, **extra: Any) -> dict[str, Any]:
    extra.setdefault("enrich", {"strategy": "retrieval", "affinity_threshold": 0.2})
    return ask([pdf_part("book.pdf", BOOK_PAGES)], query, **extra)


def after_old_file(old: str, question: str | list[dict[str, Any]]) -> dict[str, Any]:
    """A conversation whose first turn attached `old` (as old.txt) and whose last asks."""
    return {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "read this"}, text_part("old.txt", old)],
            },
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": question},
        ]
    }


def test_citations_in_prompt_and_response(
    make_proxy: Callable[..., str], upstream: FakeUpstream, embeddings: FakeEmbeddings
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    response = httpx.post(
        base + "/v1/chat/completions",
        json=retrieval_body("What did the lighthouse keeper feed the cats?"),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["citations"][0] == "book.pdf#page=1"
    first = answer["search_results"][0]
    assert first["source"] == "attachment" and first["page"] == 1 and 0 < first["score"] <= 1
    assert "sardines" in first["snippet"]
    assert response.headers["X-Enrich-Strategy"] == "retrieval"
    assert int(response.headers["X-Enrich-Citations"]) == len(answer["citations"])
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert sent.startswith("The following citations were found in the files provided by the user:")
    assert 'Citation 1: "' in sent and "sardines" in sent
    assert sent.endswith("User Query:\n\nWhat did the lighthouse keeper feed the cats?")


def test_document_embedded_once(make_proxy: Callable[..., str], embeddings: FakeEmbeddings) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = retrieval_body("sardines for the cats")
    httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    batches = len(embeddings.inputs)
    httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    # Only the query is embedded the second time.
    assert len(embeddings.inputs) == batches + 1
    assert embeddings.inputs[-1] == ["sardines for the cats"]


def test_no_passage_over_threshold(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = retrieval_body(
        "zebra xylophone", enrich={"strategy": "retrieval", "affinity_threshold": 0.99}
    )
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert "citations" not in response.json()
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert sent.startswith("Important: No citations were found in the user files")


def test_streamed_citations_once_on_first_chunk(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    with httpx.stream(
        "POST",
        base + "/v1/chat/completions",
        json=retrieval_body("lighthouse cats sardines", stream=True),
        timeout=60,
    ) as response:
        raw = b"".join(response.iter_raw()).decode()
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    assert "Retrieving relevant citations for user query..." in comments
    assert any(
        c.startswith("Retrieved ") and c.endswith(" relevant citations for user query")
        for c in comments
    )
    chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]
    assert "citations" in chunks[0] and "search_results" in chunks[0]
    assert not any("citations" in chunk for chunk in chunks[1:])


def test_old_files_only_take_the_retrieval_path(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={**SMALL_CHUNKS, "affinity_threshold": 0.2})
    body = after_old_file(BOOK_PAGES[2], "Where can I buy sourdough bread?")
    record = preview(base, body)
    assert record["strategy"] == "retrieval"
    assert record["decision"]["reason"] == "only files from earlier messages"
    # Plain text has no pages: the citation names the line its passage starts on.
    assert record["citations"] == ["old.txt#line=1"]
    last = record["upstream"]["body"]["messages"][-1]["content"]
    assert "sourdough" in last and last.endswith("Where can I buy sourdough bread?")


def test_embedding_server_down_is_502(
    make_proxy: Callable[..., str], upstream: FakeUpstream, embeddings: FakeEmbeddings
) -> None:
    embeddings.fail = True
    base = make_proxy(retrieval=SMALL_CHUNKS)
    response = httpx.post(base + "/v1/chat/completions", json=retrieval_body("cats"), timeout=60)
    assert response.status_code == 502
    assert "embedding server" in response.json()["error"]["message"]
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    embeddings.fail = False
    again = httpx.post(base + "/v1/chat/completions", json=retrieval_body("cats"), timeout=60)
    assert again.status_code == 200  # nothing half-indexed counts as done


# -- the passage budget and retrieval_limit, through the retrieval stage ----------------------

ANIMALS = ["cats", "dogs", "owls", "foxes", "goats", "bees"]


def paragraph(animal: str) -> str:
    return (
        f"On this page the keeper of the lighthouse fed the {animal} every morning with fresh "
        "fish from the harbour before the sun rose over the quiet grey sea and the boats."
    )


# Six paragraphs, one passage each (a paragraph is ~34 cl100k tokens, two would be over 45).
PARAGRAPHS = [paragraph(animal) for animal in ANIMALS]
ONE_PER_PARAGRAPH = {"chunk_tokens": 45, "chunk_overlap": 0}
KEEPER_QUERY = "How did the keeper of the lighthouse feed the animals every morning?"


def cited(upstream: FakeUpstream) -> list[str]:
    """The passages of the citation prompt the upstream received, in order."""
    text = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    return re.findall(r'^Citation \d+: "(.*)"$', text, flags=re.MULTILINE)


def keeper_request(limit: int | None = None, *parts: dict[str, Any]) -> dict[str, Any]:
    enrich: dict[str, Any] = {"strategy": "retrieval", "affinity_threshold": 0.0}
    if limit is not None:
        enrich["retrieval_limit"] = limit
    documents = parts or (text_part("keeper.txt", "\n\n".join(PARAGRAPHS)),)
    return ask(list(documents), KEEPER_QUERY, enrich=enrich)


def cited_as_one_passage(base: str, upstream: FakeUpstream, text: str) -> list[str]:
    """The passages sent for `text` attached as one file and chunked whole, one asked for."""
    body = keeper_request(1, text_part("long.txt", text))
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return cited(upstream)


WHOLE = {"chunk_tokens": 1000, "chunk_overlap": 0}  # the long text is one passage


def test_the_budget_is_half_the_window_in_the_models_tokens(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # The fake tokenizer counts words: a passage as received, `Citation 5: "…"`, is its words
    # plus 2. Half the window holds exactly four of the five passages asked for.
    as_received = len(PARAGRAPHS[0].split()) + 2
    upstream.n_ctx = 2 * 4 * as_received
    base = make_proxy(retrieval=ONE_PER_PARAGRAPH, upstream={"context_ttl_s": 0})
    response = httpx.post(base + "/v1/chat/completions", json=keeper_request(5), timeout=60)
    assert response.status_code == 200, response.text
    passages = cited(upstream)
    assert len(passages) == 4 and set(passages) <= set(PARAGRAPHS)
    assert response.headers["X-Enrich-Citations"] == "4"
    # Four passages of one text file, all in its one unit: one place to cite, once.
    assert response.json()["citations"] == ["keeper.txt#line=1"]
    record = preview(base, keeper_request(5))
    retrieval = record["decision"]["retrieval"]
    assert retrieval["budget_limit"] == 4 * as_received
    assert retrieval["budget_unit"] == "tokens"
    assert retrieval["selected_per_source"] == [4] and retrieval["left_out"] == 1
    # One token less and only three fit.
    upstream.n_ctx = 2 * (4 * as_received - 1)
    httpx.post(base + "/v1/chat/completions", json=keeper_request(5), timeout=60)
    assert len(cited(upstream)) == 3


def test_a_passage_longer_than_the_budget_is_shortened_to_fit(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    words = " ".join(f"{ANIMALS[n % 6]} fed by the keeper at dawn" for n in range(60))
    upstream.n_ctx = 200  # a budget of 100 tokens (words, to the fake), for a 420-word passage
    [passage] = cited_as_one_passage(make_proxy(retrieval=WHOLE), upstream, words)
    assert words.startswith(passage) and len(passage) < len(words)
    assert 50 < len(passage.split()) + 2 <= 100  # cut to fit, not to nothing


def test_without_a_known_window_the_budget_counts_characters(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.kind = "plain"  # no /props, no n_ctx: the window is unknown
    upstream.n_ctx = None
    long_paragraphs = [paragraph(animal) * 12 for animal in ANIMALS]  # ~1,900 characters each
    base = make_proxy(retrieval={"chunk_tokens": 600, "chunk_overlap": 0})
    body = keeper_request(5, text_part("long.txt", "\n\n".join(long_paragraphs)))
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    passages = cited(upstream)
    # 8,000 characters hold four `Citation 5: "…"` lines of ~1,900 characters, not five.
    assert len(passages) == 4
    assert sum(len(f'Citation 5: "{p}"') for p in passages) <= 8_000


@pytest.mark.parametrize(("limit", "expected"), [(1, 1), (5, 5), (None, 2)])
def test_retrieval_limit_is_honoured(
    make_proxy: Callable[..., str], upstream: FakeUpstream, limit: int | None, expected: int
) -> None:
    upstream.n_ctx = 100_000
    # The config's limit; without `fill` (room left takes more passages), it is also a ceiling.
    base = make_proxy(retrieval={**ONE_PER_PARAGRAPH, "limit": 2, "fill": "none"})
    response = httpx.post(base + "/v1/chat/completions", json=keeper_request(limit), timeout=60)
    assert response.status_code == 200, response.text
    assert len(cited(upstream)) == expected
    assert response.headers["X-Enrich-Citations"] == str(expected)


def test_files_take_turns_rank_by_rank(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Two files, two passages each asked for, room for three: both files' best passages come
    # before either file's second best.
    as_received = len(PARAGRAPHS[0].split()) + 2
    upstream.n_ctx = 2 * 3 * as_received
    base = make_proxy(retrieval=ONE_PER_PARAGRAPH)
    first = text_part("first.txt", "\n\n".join(PARAGRAPHS[:3]))
    second = text_part("second.txt", "\n\n".join(PARAGRAPHS[3:]))
    body = keeper_request(2, first, second)
    record = preview(base, body)
    retrieval = record["decision"]["retrieval"]
    assert retrieval["selected_per_source"] == [2, 1] and retrieval["left_out"] == 1
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    citations = response.json()["citations"]
    assert citations == ["first.txt#line=1", "second.txt#line=1"]  # each place once
    passages = cited(upstream)
    assert passages[0] in PARAGRAPHS[:3] and passages[1] in PARAGRAPHS[:3]
    assert passages[2] in PARAGRAPHS[3:]


def test_the_retrieval_record_tells_what_was_searched_and_with_what(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # The model's own context length, not the upstream's, sets the budget.
    upstream.n_ctx = 100_000
    base = make_proxy(retrieval=ONE_PER_PARAGRAPH, models={"m": {"context_length": 4_000}})
    record = preview(base, keeper_request(2))
    retrieval = record["decision"]["retrieval"]
    assert retrieval["sources"] == ["keeper.txt"]
    assert retrieval["affinity_threshold"] == 0.0
    assert isinstance(retrieval["embedder"], str) and retrieval["embedder"]
    assert (retrieval["depth"], retrieval["fill"], retrieval["limit"]) == (2, "none", 2)
    assert retrieval["budget_limit"] == 2_000 and retrieval["budget_unit"] == "tokens"
    candidates = retrieval["candidates"]
    assert retrieval["scores"] == [[candidate["score"] for candidate in candidates]]
    assert all(score == round(score, 4) for score in retrieval["scores"][0])
    assert all(c["location"].startswith("line=") for c in candidates)
    assert 0 < record["timings_s"]["retrieve"] < 600  # a duration, not a clock reading


def test_an_unknown_window_is_a_budget_in_characters_in_the_record(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.kind = "plain"
    upstream.n_ctx = None
    base = make_proxy(retrieval=ONE_PER_PARAGRAPH)
    record = preview(base, keeper_request(2))
    assert record["decision"]["retrieval"]["budget_unit"] == "characters"


def test_a_request_that_chooses_nothing_gets_the_configured_options(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    retrieval = {**SMALL_CHUNKS, "affinity_threshold": 0.0, "limit": 1, "fill": "none"}
    base = make_proxy(retrieval={**retrieval, "citations": "inline"})
    body = after_old_file("\n\n".join(BOOK_PAGES), "Where can I buy sourdough bread?")
    record = preview(base, body)
    assert record["decision"]["retrieval"]["limit"] == 1
    assert len(record["citations"]) == 1
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60).json()
    assert "citations" not in answer  # inline only: the sources are in the text, not a field
    assert "Sources:" in answer["choices"][0]["message"]["content"]


def test_new_and_old_files_are_both_searched(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={**SMALL_CHUNKS, "affinity_threshold": 0.0})
    question = [
        {"type": "text", "text": "Where can I buy sourdough bread?"},
        text_part("new.txt", BOOK_PAGES[2]),
    ]
    body = {**after_old_file(BOOK_PAGES[0], question), "enrich": {"strategy": "retrieval"}}
    record = preview(base, body)
    assert record["decision"]["retrieval"]["sources"] == ["new.txt", "old.txt"]


def test_neighbours_fill_joins_each_passage_with_the_ones_around_it(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.n_ctx = 100_000
    base = make_proxy(retrieval={**ONE_PER_PARAGRAPH, "limit": 1, "fill": "neighbours"})
    record = preview(base, keeper_request())
    assert record["decision"]["retrieval"]["fill"] == "neighbours"
    prompt = record["upstream"]["body"]["messages"][-1]["content"][0]["text"]
    citations = re.split(r"^Citation \d+: ", prompt, flags=re.MULTILINE)[1:]
    joined = [sum(paragraph in citation for paragraph in PARAGRAPHS) for citation in citations]
    # Each passage with the one before and the one after it (one of them, at an end).
    assert joined and set(joined) <= {2, 3} and 3 in joined, joined


def test_a_message_without_words_is_searched_with_a_blank_query(
    make_proxy: Callable[..., str], upstream: FakeUpstream, embeddings: FakeEmbeddings
) -> None:
    # Only a file, no question: embedders refuse an empty input (the fake too), so the search
    # asks with a blank, which brings no words of its own to rank the passages by.
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = ask([pdf_part("book.pdf", BOOK_PAGES)], "", enrich={"strategy": "retrieval"})
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    blanks = [text for batch in embeddings.inputs for text in batch if not text.strip()]
    assert len(blanks) == 1 and blanks[0] != ""


def test_the_record_says_how_far_each_files_index_was(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Six passages: a document this small is embedded whole while the request waits.
    base = make_proxy(retrieval=ONE_PER_PARAGRAPH)
    record = preview(base, keeper_request(2))
    assert record["decision"]["retrieval"]["indexed"] == {"keeper.txt": 100}


def test_the_budget_counts_in_the_models_own_tokenizer(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # 30 words (32 as received, to the fake llama.cpp tokenizer this model uses) fit a budget of
    # 100 tokens; counted by the upstream's default, cl100k, they are over 200 and would be cut.
    words = " ".join(["lighthouse-keeper-morning-animals"] * 30)
    base = make_proxy(
        retrieval=WHOLE,
        upstream={"tokenizer": "tiktoken"},
        models={"m": {"tokenizer": "llamacpp", "context_length": 200}},
    )
    assert cited_as_one_passage(base, upstream, words) == [words]


def test_a_shortened_passage_is_guarded_where_it_was_cut(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Wherever this text is cut, it ends in the start of a token the model declares. The cut
    # passage is guarded again, with the model's tokens: its end no longer starts one.
    token = "[LIGHTHOUSE_KEEPER_TURN]"
    upstream.chat_template = "{% for m in messages %}" + token + "{{ m.content }}{% endfor %}"
    text = token[:-1] * 40  # ~320 cl100k tokens, never the whole token
    base = make_proxy(
        retrieval=WHOLE, upstream={"tokenizer": "tiktoken"}, models={"m": {"context_length": 200}}
    )
    [passage] = cited_as_one_passage(base, upstream, text)
    cut = passage.rfind("\u27e6")  # ⟦, the look-alike of `[`
    assert len(passage) < len(text) // 2  # cut to fit
    assert cut > 0 and text.startswith(passage[:cut])  # only its end changed
    assert re.fullmatch(r"\u27e6[A-Z_]*", passage[cut:]), passage[cut:]


NOTES = "\n\n".join(
    f"Note {n}: the {['ferry', 'bakery', 'garden', 'lighthouse'][n % 4]} log of day {n}."
    + (" The keeper fed sardines to the cats." if n == 17 else "")
    for n in range(160)
)


def notes_request(stream: bool = False) -> dict[str, Any]:
    return ask(
        [text_part("notes.txt", NOTES)],
        "Who fed sardines to the cats?",
        stream=stream,
        enrich={"strategy": "retrieval", "affinity_threshold": 0.0},
    )


def streamed(base: str, body: dict[str, Any]) -> tuple[httpx.Headers, list[str]]:
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        raw = b"".join(response.iter_raw()).decode()
        headers = response.headers
    return headers, [line[2:] for line in raw.split("\n") if line.startswith(": ")]


def test_a_large_document_answered_before_it_is_indexed_says_how_much_was_ready(
    make_proxy: Callable[..., str],
) -> None:
    base = make_proxy(
        retrieval={**SMALL_CHUNKS, "new_document_candidates": 2, "whole_document_s": 0}
    )
    # A stream has sent its headers before the document is searched: it says so in a status.
    _, comments = streamed(base, notes_request(stream=True))
    said = [c for c in comments if c.startswith("Answering from notes.txt while it is indexed: ")]
    assert len(said) == 1 and said[0].endswith("% of its passages ranked by meaning so far")
    percent = int(said[0].split(": ")[1].split("%")[0])
    assert 0 <= percent < 100
    record = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"][0]
    retrieval = record["decision"]["retrieval"]
    assert retrieval["indexed"] == {"notes.txt": percent}
    assert retrieval["indexing"] == {"notes.txt": "in part, the rest in the background"}
    # Once the background is done, the same question is answered from the whole index.
    deadline = time.monotonic() + 60  # a bound on a broken test, not a measurement
    while time.monotonic() < deadline:
        done = preview(base, notes_request())["decision"]["retrieval"]
        # Every passage embedded (100) comes a moment before the index is readable whole.
        if done["indexing"] == {"notes.txt": "complete"}:
            break
        time.sleep(0.05)
    assert done["indexed"] == {"notes.txt": 100}
    assert done["indexing"] == {"notes.txt": "complete"}
    _, comments = streamed(base, notes_request(stream=True))
    assert not [c for c in comments if c.startswith("Answering from")]
    answer = httpx.post(base + "/v1/chat/completions", json=notes_request(), timeout=60)
    assert answer.headers["X-Enrich-Index-Ready"] == "notes.txt=100"


def test_a_plain_answer_says_in_a_header_how_much_of_each_index_was_ready(
    make_proxy: Callable[..., str],
) -> None:
    base = make_proxy(
        retrieval={**SMALL_CHUNKS, "new_document_candidates": 2, "whole_document_s": 0}
    )
    body = ask(
        [text_part("notes.txt", NOTES), text_part("a, b.txt", "The ferry left at noon.")],
        "Who fed sardines to the cats?",
        enrich={"strategy": "retrieval", "affinity_threshold": 0.0},
    )
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    notes, small = answer.headers["X-Enrich-Index-Ready"].split(", ")
    assert notes.startswith("notes.txt=") and int(notes.split("=")[1]) < 100
    assert small == "a%2C%20b.txt=100"  # names percent-encoded: a comma always separates two


def test_a_small_document_is_whole_before_its_first_answer(
    make_proxy: Callable[..., str],
) -> None:
    # The default budget (retrieval.whole_document_s: 5 s) against a fast embedding server.
    base = make_proxy(retrieval={**SMALL_CHUNKS, "new_document_candidates": 2})
    _, comments = streamed(base, notes_request(stream=True))
    assert "Indexing file notes.txt... (100%)" in comments
    assert not [c for c in comments if c.startswith("Answering from")]
    record = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"][0]
    assert record["decision"]["retrieval"]["indexing"] == {"notes.txt": "whole before the answer"}


def test_a_question_naming_a_chapter_is_answered_from_that_chapter(
    make_proxy: Callable[..., str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    from tests.retrieval.test_places import chaptered

    base = make_proxy(retrieval={"chunk_tokens": 40, "chunk_overlap": 0})
    body = ask(
        [text_part("harbour.md", chaptered())],
        "What does chapter 5 say about the harbour?",
        enrich={"strategy": "retrieval"},
    )
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    first = sent.split('Citation 1: "', 1)[1].split('"\n\nCitation 2', 1)[0]
    # the passage holding the chapter's heading and its first lines (it starts in chapter 4)
    assert "# Chapter 5\n\nThe harbour of chapter 5" in first
    record = preview(base, body)["decision"]["retrieval"]
    assert record["places"]["harbour.md"].startswith('chapter 5: "Chapter 5", passage')
    kept = [c for c in record["candidates"] if c["outcome"] == "kept"]
    assert kept[0]["place"] and kept[1]["place"] and kept[1]["location"] == "section=Chapter 5"
    # Turned off, the same question is ranked as any other.
    plain = make_proxy(
        retrieval={"chunk_tokens": 40, "chunk_overlap": 0, "places": False},
        server={"data_dir": str(tmp_path / "plain")},
    )
    record = preview(plain, body)["decision"]["retrieval"]
    assert record["places"] == {} and not any(c["place"] for c in record["candidates"])
