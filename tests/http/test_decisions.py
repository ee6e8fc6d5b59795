"""GET /v1/enrich/decisions: recent decision records, bounded, per key, without documents."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.pipeline.decision_log import SNIPPET_CHARS
from proxy.pipeline.window import prompt_sizes, share_window
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, text_part
from tests.retrieval.test_flow import SMALL_CHUNKS, retrieval_body
from tests.test_logs_and_secrets import json_logs, log_events

KEYS = [
    {"name": "team-a", "key": "key-a-0123456789"},
    {"name": "team-b", "key": "key-b-0123456789"},
    {"name": "ops", "key": "key-ops-0123456789", "admin": True},
]


def chat(base: str, body: dict[str, Any], key: str | None = None, **headers: str) -> httpx.Response:
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(base + "/v1/chat/completions", json=body, headers=headers, timeout=60)


def decisions(base: str, key: str | None = None, query: str = "") -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = httpx.get(base + "/v1/enrich/decisions" + query, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def test_a_request_with_a_document_is_recorded(make_proxy: Callable[..., str]) -> None:
    base = make_proxy()
    body = ask([text_part("notes.txt", "The harbour opens at six. " * 20)], max_tokens=64)
    response = chat(base, body, **{"X-Request-ID": "req-1"})
    assert response.status_code == 200
    [record] = decisions(base)
    assert record["request_id"] == "req-1" and record["route"] == "chat"
    assert (record["status"], record["error"], record["model"]) == (200, None, "m")
    assert record["documents"] == [
        {"name": "notes.txt", "new": True, "bytes": 520, "pages": 1, "kind": "text"}
    ]
    assert record["strategy"] == "inject-full-content"
    decision = record["decision"]
    assert decision["reason"] == "token budget" and decision["available_tokens"] > 0
    assert {"decide", "inject", "window"} <= set(record["timings_s"])
    window = decision["window"]
    assert window["context_window"] == 4096 and window["max_tokens"] == 64
    assert window["documents"] >= decision["file_tokens"] > 0
    parts = ("system", "history", "documents", "question")
    assert window["answer_room"] == 4096 - sum(window[part] for part in parts)
    # A name and numbers, never the document itself.
    assert "harbour" not in json.dumps(record)


def test_newest_first_and_bounded_by_the_ring(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(server={"decision_log_size": 3})
    for number in range(5):
        chat(base, ask([], f"question {number}"), **{"X-Request-ID": f"req-{number}"})
    assert [r["request_id"] for r in decisions(base)] == ["req-4", "req-3", "req-2"]
    assert [r["request_id"] for r in decisions(base, query="?limit=2")] == ["req-4", "req-3"]
    for bad in ("0", "-1", "many"):
        response = httpx.get(base + f"/v1/enrich/decisions?limit={bad}")
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "limit"


def test_each_key_sees_its_own_requests_and_admins_all(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(server={"api_keys": KEYS})
    chat(base, ask([text_part("alpha.txt", "a")]), "key-a-0123456789", **{"X-Request-ID": "from-a"})
    chat(base, ask([text_part("beta.txt", "b")]), "key-b-0123456789", **{"X-Request-ID": "from-b"})
    assert [r["request_id"] for r in decisions(base, "key-a-0123456789")] == ["from-a"]
    assert [r["request_id"] for r in decisions(base, "key-b-0123456789")] == ["from-b"]
    seen = decisions(base, "key-ops-0123456789")
    assert [(r["request_id"], r["caller"]) for r in seen] == [
        ("from-b", "team-b"),
        ("from-a", "team-a"),
    ]
    assert httpx.get(base + "/v1/enrich/decisions").status_code == 401
    wrong = httpx.get(base + "/v1/enrich/decisions", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


def test_passage_snippets_are_short_or_off(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    assert chat(base, retrieval_body("What did the keeper feed the cats?")).status_code == 200
    [record] = decisions(base)
    candidates = record["decision"]["retrieval"]["candidates"]
    assert candidates and all(0 < len(c["snippet"]) <= SNIPPET_CHARS for c in candidates)
    assert record["citations"] and record["citations"][0].startswith("book.pdf#page=")
    assert record["question"] == "What did the keeper feed the cats?"  # what /ui shows


def test_snippets_off_keeps_names_and_numbers(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS, server={"decision_log_snippets": False})
    assert chat(base, retrieval_body("What did the keeper feed the cats?")).status_code == 200
    [record] = decisions(base)
    candidates = record["decision"]["retrieval"]["candidates"]
    assert candidates and all("snippet" not in c for c in candidates)
    assert all(c["file"] == "book.pdf" and c["score"] > 0 for c in candidates)
    assert "sardines" not in json.dumps(record)
    assert record["question"] is None and "keeper" not in json.dumps(record)


def test_size_zero_turns_the_log_and_the_page_off(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(server={"decision_log_size": 0})
    assert chat(base, ask([])).status_code == 200
    for path in ("/v1/enrich/decisions", "/ui", "/ui/app.js"):
        response = httpx.get(base + path)
        assert response.status_code == 404, path
        assert response.json()["error"]["type"] == "not_found_error"


def test_failed_requests_are_recorded_with_their_error(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    bad = {"type": "file", "file": {"filename": "bad.pdf", "file_data": "data:a;base64,!!"}}
    assert chat(base, ask([bad]), **{"X-Request-ID": "bad-doc"}).status_code == 400
    upstream.chat_mode = "error"
    assert chat(base, ask([]), **{"X-Request-ID": "upstream-down"}).status_code == 500
    failed, bad_doc = decisions(base)
    assert (failed["request_id"], failed["status"]) == ("upstream-down", 500)
    assert failed["error"] == "the upstream answered 500"
    assert failed["strategy"] == "none"
    assert (bad_doc["request_id"], bad_doc["status"]) == ("bad-doc", 400)
    assert bad_doc["error"] == "bad.pdf: file_data is not valid base64"
    assert bad_doc["strategy"] is None  # it failed before a strategy was chosen


def test_streamed_answers_are_recorded_once_finished(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = retrieval_body("What did the keeper feed the cats?", stream=True)
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert "".join(response.iter_text()).rstrip().endswith("data: [DONE]")
    [record] = decisions(base)
    assert record["stream"] is True and record["status"] == 200
    assert record["citations"][0].startswith("book.pdf#page=")


@pytest.mark.parametrize("route", ["/v1/enrich/preview"])
def test_previews_are_not_recorded(make_proxy: Callable[..., str], route: str) -> None:
    base = make_proxy()
    response = httpx.post(base + route, json=ask([text_part("a.txt", "x")]), timeout=30)
    assert response.status_code == 200
    assert response.json()["decision"]["window"]["documents"] > 0
    assert decisions(base) == []


def test_the_token_budget_is_recorded_as_counted(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    files = [text_part("a.txt", "one two three four"), text_part("b.txt", "five six")]
    response = chat(base, ask(files, "What now?", max_tokens=64))
    assert response.status_code == 200, response.text
    [record] = decisions(base)
    decision = record["decision"]
    in_context = decision["tokens_in_context"]
    assert in_context > 0
    # The fake tokenizer counts words: each file is counted on its own.
    assert {key: decision[key] for key in BUDGET_FIELDS} == {
        "reason": "token budget",
        "counter": "llamacpp",
        "counts_exact": True,
        "context_window": 4096,
        "remaining_context": 4096 - in_context,
        "occupied_percent": round(in_context / 4096 * 100, 3),
        "prompt_tokens": 2,
        "file_tokens": 6,
        "file_tokens_per_file": {"a.txt": 4, "b.txt": 2},
    }
    assert response.headers["X-Enrich-Tokens"] == f"{in_context + 6}/4096"
    assert 0 < record["timings_s"]["count"] <= record["duration_s"]
    # A question with no words of its own is not sent to be counted.
    chat(base, ask(files, ""))
    assert decisions(base)[0]["decision"]["prompt_tokens"] == 0
    assert all(request.json["content"] for request in upstream.to("/tokenize"))


BUDGET_FIELDS = (
    "reason",
    "counter",
    "counts_exact",
    "context_window",
    "remaining_context",
    "occupied_percent",
    "prompt_tokens",
    "file_tokens",
    "file_tokens_per_file",
)


def test_files_past_the_remaining_window_are_not_counted(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(upstream={"context_ttl_s": 0})
    files = [
        text_part("a.txt", "one two three four"),
        text_part("b.txt", "five six"),
        text_part("c.txt", "seven"),
        text_part("d.txt", "eight"),
    ]
    chat(base, ask(files, "What now?"))
    in_context = decisions(base)[0]["decision"]["tokens_in_context"]
    # Room for exactly the first two files: once the count is past what remains, the others
    # are not sent to be counted.
    upstream.n_ctx = in_context + 6
    chat(base, ask(files, "What now?"))
    decision = decisions(base)[0]["decision"]
    assert decision["remaining_context"] == 6
    assert decision["file_tokens_per_file"] == {"a.txt": 4, "b.txt": 2, "c.txt": 1, "d.txt": None}
    upstream.n_ctx = in_context + 5
    chat(base, ask(files, "What now?"))
    decision = decisions(base)[0]["decision"]
    assert decision["file_tokens_per_file"] == {
        "a.txt": 4,
        "b.txt": 2,
        "c.txt": None,
        "d.txt": None,
    }


def test_a_models_own_tokenizer_counts_its_requests(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(models={"tik-*": {"tokenizer": "tiktoken"}})
    body = ask([text_part("a.txt", "one two")], "Why?")
    chat(base, body)
    chat(base, {**body, "model": "tik-1"})
    newest, oldest = decisions(base)
    assert (oldest["decision"]["counter"], oldest["decision"]["counts_exact"]) == ("llamacpp", True)
    assert (newest["decision"]["counter"], newest["decision"]["counts_exact"]) == (
        "tiktoken:cl100k_base",
        False,
    )


def test_an_unknown_window_is_recorded_as_such(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.kind = "plain"  # no /props, no /tokenize: the window cannot be learned
    upstream.n_ctx = None
    base = make_proxy()
    response = chat(base, ask([text_part("a.txt", "one two")], "Why?"))
    assert response.status_code == 200, response.text
    assert "X-Enrich-Tokens" not in response.headers
    decision = decisions(base)[0]["decision"]
    assert decision["reason"] == "unknown context window"
    assert decision["context_window"] is None and decision["occupied_percent"] is None


def expected_window(
    sent: list[dict[str, Any]],
    query: str,
    budget: dict[str, Any] | None,
    *,
    strategy: str,
    counted_chars: int | None,
    window: int,
    max_tokens: int | None,
) -> dict[str, Any]:
    """The window share the pure function makes of these inputs (pinned on its own in
    tests/pipeline/test_window.py): here only what the stage feeds it is checked."""
    injected = strategy in ("inject-full-content", "retrieval")
    share = share_window(
        prompt_sizes(sent, query, injected=injected),
        context_window=window,
        conversation_tokens=budget["tokens_in_context"] if budget else None,
        question_tokens=budget["prompt_tokens"] if budget else None,
        counted_files=(
            (budget["file_tokens"], counted_chars)
            if budget is not None and counted_chars is not None
            else None
        ),
        full_content=strategy == "inject-full-content",
        max_tokens=max_tokens,
    )
    return dataclasses.asdict(share)


CONVERSATION = [
    {"role": "system", "content": "Be brief, and say where you read it."},
    {"role": "user", "content": "An earlier question about the harbour"},
    {"role": "assistant", "content": "An earlier answer about the harbour"},
]
DOCUMENT = "The harbour opens at six and closes at nine in the evening."
SECOND = "Boats leave from the north quay."


@pytest.mark.parametrize("strategy", ["auto", "retrieval"])
def test_the_window_is_shared_from_decides_counts(
    make_proxy: Callable[..., str], upstream: FakeUpstream, strategy: str
) -> None:
    # auto: decide counts, and the document goes in full; a forced strategy skips counting.
    base = make_proxy(retrieval=SMALL_CHUNKS)
    files = [text_part("notes.txt", DOCUMENT), text_part("more.txt", SECOND)]
    body = ask(files, "When does it open?", max_tokens=64)
    body["messages"] = [*CONVERSATION, *body["messages"]]
    body["enrich"] = {"strategy": strategy, "affinity_threshold": 0.0}
    response = chat(base, body)
    assert response.status_code == 200, response.text
    decision = decisions(base)[0]["decision"]
    budget = None
    if strategy == "auto":
        assert decision["strategy"] == "inject-full-content"
        budget = {k: decision[k] for k in ("tokens_in_context", "prompt_tokens", "file_tokens")}
        assert budget["file_tokens"] == len(DOCUMENT.split()) + len(SECOND.split())
    sent = upstream.last_to("/v1/chat/completions").json["messages"]
    assert decision["window"] == expected_window(
        sent,
        "When does it open?",
        budget,
        strategy=decision["strategy"],
        counted_chars=len(DOCUMENT) + len(SECOND),
        window=4096,
        max_tokens=64,
    )


def test_the_window_of_a_request_without_documents_is_estimated(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # No document, so nothing was counted; the window is the model's own (from its settings).
    base = make_proxy(models={"small-*": {"context_length": 3000}})
    body = {"model": "small-1", "messages": [*CONVERSATION, {"role": "user", "content": "Hi"}]}
    assert chat(base, body).status_code == 200
    decision = decisions(base)[0]["decision"]
    sent = upstream.last_to("/v1/chat/completions").json["messages"]
    assert decision["window"] == expected_window(
        sent, "Hi", None, strategy="none", counted_chars=None, window=3000, max_tokens=None
    )


def test_a_file_not_counted_leaves_the_documents_estimated(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Past the remaining window, the second file is not counted: no exact documents part.
    base = make_proxy(upstream={"context_ttl_s": 0}, retrieval=SMALL_CHUNKS)
    files = [text_part("a.txt", DOCUMENT), text_part("b.txt", DOCUMENT + " Really.")]
    body = ask(files, "When does it open?")
    chat(base, body)
    in_context = decisions(base)[0]["decision"]["tokens_in_context"]
    upstream.n_ctx = in_context + 3
    chat(base, body)
    decision = decisions(base)[0]["decision"]
    assert decision["file_tokens_per_file"]["b.txt"] is None
    assert "documents" in decision["window"]["estimated"]
    assert decision["window"]["note"].endswith("estimated at 4.00 characters per token")


def test_what_was_asked_and_found_is_recorded_and_logged(
    make_proxy: Callable[..., str], capfd: pytest.CaptureFixture[str]
) -> None:
    with json_logs("debug"):
        base = make_proxy(retrieval=SMALL_CHUNKS)
        body = ask([text_part("a.txt", "one two")], "Why?")
        chat(base, body, **{"X-Request-ID": "req-files"})
        # Retrieval asked for, but no file to retrieve from: nothing to do.
        chat(base, {**ask([], "Hi"), "enrich": {"strategy": "retrieval"}})
        logs = capfd.readouterr()
    nothing, files = decisions(base)
    assert (files["decision"]["new_files"], files["decision"]["old_files"]) == (["a.txt"], [])
    assert files["decision"]["requested_strategy"] == "auto"
    assert (nothing["strategy"], nothing["decision"]["reason"]) == ("none", "no files")
    assert nothing["decision"]["requested_strategy"] == "retrieval"
    logged = [e for e in log_events(logs.out + logs.err) if e["event"] == "decision"]
    first = logged[0]
    assert (first["request_id"], first["new_files"]) == ("req-files", ["a.txt"])


def test_snippets_off_keeps_no_text_of_what_was_searched_for() -> None:
    # Without snippets, the record keeps how the search went, not what it searched for.
    from proxy.pipeline.decision import Decision, RetrievalRecord, SearchCall, SearchesRecord
    from proxy.pipeline.decision_log import decision_json

    decision = Decision()
    decision.retrieval = RetrievalRecord(
        sources=["book.pdf"],
        limit=3,
        affinity_threshold=0.3,
        embedder="e",
        scores={},
        budget_limit=100,
        budget_unit="tokens",
        selected_per_source={},
        left_out=[],
        searched=[
            {"text": "And the keeper?", "weight": 1, "from": "question"},
            {"text": "x", "weight": 1.5, "from": "terms", "carried": ["ada"], "words": {"a": []}},
        ],
        translations=[{"from": "en", "to": "de", "query": "Und der Wärter?"}],
        rewrite={"outcome": "rewritten", "why": "leans", "text": "Who is the keeper?"},
    )
    decision.searches = SearchesRecord("tool", "tool", "asked", calls=[SearchCall(1, ["keeper"])])
    kept = decision_json(decision, snippets=True)
    assert kept["retrieval"]["searched"][0]["text"] == "And the keeper?"
    record = decision_json(decision, snippets=False)
    text = json.dumps(record)
    assert "keeper" not in text and "Wärter" not in text and "ada" not in text
    assert [entry["from"] for entry in record["retrieval"]["searched"]] == ["question", "terms"]
    assert record["retrieval"]["rewrite"]["outcome"] == "rewritten"
    assert record["searches"]["calls"][0]["round"] == 1
