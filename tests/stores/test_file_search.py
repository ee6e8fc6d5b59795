"""file_search in the Responses API, and vector stores on Chat Completions: the proxy searches
the stores itself, injects the citation prompt and cites the right files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.callers import sdk
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.upstream import ANSWER, FakeUpstream
from tests.stores.support import FAST, upload_topics

CATS = "What did the keeper feed the cats?"
TEXT = "".join(ANSWER)
SHARP = {"score_threshold": 0.6}  # the fake embedder's unrelated texts score below it


def sent_prompt(upstream: FakeUpstream, path: str = "/v1/chat/completions") -> str:
    body = upstream.last_to(path).json
    if path == "/v1/responses":
        return str(body["input"][-1]["content"][0]["text"])
    content = body["messages"][-1]["content"]
    return str(content[0]["text"] if isinstance(content, list) else content)


def ready(base: str) -> tuple[openai.OpenAI, str, dict[str, str]]:
    client = sdk(base)
    ids = upload_topics(client)
    store = client.vector_stores.create(name="topics")
    files = [
        {"file_id": fid, "attributes": {"topic": name.removesuffix(".txt")}}
        for name, fid in ids.items()
    ]
    client.vector_stores.file_batches.create_and_poll(vector_store_id=store.id, files=files)  # type: ignore[arg-type]
    return client, store.id, ids


def tool(store_id: str, **options: Any) -> list[Any]:
    return [{"type": "file_search", "vector_store_ids": [store_id], **options}]


@pytest.fixture
def base(make_proxy: Callable[..., str]) -> str:
    return make_proxy(vector_stores=FAST)


def test_file_search_answers_with_the_search_and_cites_the_file(
    base: str, upstream: FakeUpstream
) -> None:
    client, store_id, ids = ready(base)
    response = client.responses.create(
        model="m",
        input=CATS,
        tools=tool(store_id, ranking_options=SHARP),
        include=["file_search_call.results"],
    )
    search, message = response.output
    assert search.type == "file_search_call" and search.status == "completed"
    assert search.queries == [CATS]
    assert search.results is not None and search.results[0].file_id == ids["lighthouse.txt"]
    assert search.results[0].filename == "lighthouse.txt"
    assert "sardines" in (search.results[0].text or "")
    assert search.results[0].attributes == {"topic": "lighthouse"}
    assert message.type == "message" and response.output_text == TEXT
    notes = message.content[0].annotations  # type: ignore[union-attr]
    assert [(n.type, n.file_id, n.filename) for n in notes] == [  # type: ignore[union-attr]
        ("file_citation", ids["lighthouse.txt"], "lighthouse.txt")
    ]
    prompt = sent_prompt(upstream)
    assert prompt.startswith("The following citations were found in the files provided")
    assert "sardines" in prompt and prompt.endswith(f"User Query:\n\n{CATS}")
    assert "tools" not in upstream.last_to("/v1/chat/completions").json  # searched here
    assert response.tools[0].type == "file_search"


def test_results_only_when_included_and_limits_and_filters_apply(
    base: str, upstream: FakeUpstream
) -> None:
    client, store_id, ids = ready(base)
    plain = client.responses.create(model="m", input=CATS, tools=tool(store_id))
    assert plain.output[0].type == "file_search_call"
    assert plain.output[0].results is None  # type: ignore[union-attr]

    one = client.responses.create(
        model="m",
        input=CATS,
        tools=tool(store_id, max_num_results=1),
        include=["file_search_call.results"],
    )
    assert len(one.output[0].results or []) == 1  # type: ignore[union-attr]

    not_sea = {"type": "ne", "key": "topic", "value": "lighthouse"}
    filtered = client.responses.create(
        model="m",
        input=CATS,
        tools=tool(store_id, filters=not_sea),
        include=["file_search_call.results"],
    )
    found = {r.file_id for r in filtered.output[0].results or []}  # type: ignore[union-attr]
    assert ids["lighthouse.txt"] not in found
    assert "sardines" not in sent_prompt(upstream)

    nothing = client.responses.create(
        model="m", input=CATS, tools=tool(store_id, ranking_options={"score_threshold": 0.999})
    )
    assert nothing.output[0].type == "file_search_call"
    assert sent_prompt(upstream).startswith("Important: No citations were found")
    assert nothing.output[1].content[0].annotations == []  # type: ignore[union-attr]


def test_a_message_without_words_searches_the_stores_with_a_blank_query(base: str) -> None:
    # Embedders refuse an empty input: the stores are searched with a blank, and the search
    # item says so.
    client, store_id, _ = ready(base)
    empty = [{"role": "user", "content": [{"type": "input_text", "text": ""}]}]
    response = client.responses.create(model="m", input=empty, tools=tool(store_id))  # type: ignore[arg-type]
    search = response.output[0]
    assert search.type == "file_search_call" and search.status == "completed"
    [query] = search.queries
    assert query != "" and query.strip() == ""


def test_streamed_file_search_events_come_first(base: str) -> None:
    client, store_id, ids = ready(base)
    with client.responses.stream(
        model="m", input=CATS, tools=tool(store_id, ranking_options=SHARP)
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:7] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.output_item.done",
    ]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    search_id = final.output[0].id
    for event in events[2:7]:
        assert event.output_index == 0  # type: ignore[union-attr]
    assert events[3].item_id == search_id  # type: ignore[union-attr]
    texts = [e for e in events if e.type == "response.output_text.delta"]
    assert texts and all(e.output_index == 1 for e in texts)
    assert [o.type for o in final.output] == ["file_search_call", "message"]
    assert final.output_text == TEXT
    notes = final.output[1].content[0].annotations  # type: ignore[union-attr]
    assert [n.file_id for n in notes] == [ids["lighthouse.txt"]]  # type: ignore[union-attr]

    raw = client.responses.create(
        model="m",
        input=CATS,
        tools=tool(store_id),
        stream=True,
        include=["file_search_call.results"],
    )
    done = [e for e in raw if e.type == "response.output_item.done"]
    assert done[0].item.type == "file_search_call" and done[0].item.results  # type: ignore[union-attr]


def test_chat_completions_search_stores_named_in_enrich_or_a_header(
    base: str, upstream: FakeUpstream
) -> None:
    client, store_id, ids = ready(base)
    answer = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": CATS}],
        extra_body={"enrich": {"vector_store_ids": [store_id], "affinity_threshold": 0.6}},
    )
    extra = answer.model_extra or {}
    assert extra["citations"] == ["lighthouse.txt#line=1"]
    result = extra["search_results"][0]
    assert result["file_id"] == ids["lighthouse.txt"] and result["vector_store_id"] == store_id
    assert "sardines" in sent_prompt(upstream)

    headers = {
        "X-Enrich-Vector-Stores": f"{store_id}, {store_id}",  # named twice: searched once
        "X-Enrich-Citations": "inline",
        "X-Enrich-Affinity-Threshold": "0.6",
    }
    headed = sdk(base, **headers)
    streamed = headed.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text.endswith("Sources:\n- lighthouse.txt, line 1")
    sent = upstream.last_to("/v1/chat/completions")
    assert not any(name.lower().startswith("x-enrich") for name in sent.headers)

    preview = httpx.post(
        base + "/v1/enrich/preview",
        json={
            "model": "m",
            "messages": [{"role": "user", "content": CATS}],
            "enrich": {"vector_store_ids": [store_id]},
        },
    ).json()
    assert preview["decision"]["vector_stores"] == [store_id]
    assert preview["decision"]["strategy"] == "retrieval"
    assert preview["decision"]["reason"] == "vector stores to search"
    # Only the stores searched: no attached file was indexed for this request.
    assert preview["decision"]["retrieval"]["indexed"] == {}

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": CATS}],
            extra_body={"enrich": {"vector_store_ids": ["vs_" + "0" * 24]}},
        )
    bad = httpx.post(
        base + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": CATS}]},
        headers={"X-Enrich-Vector-Stores": ",".join(f"vs_{n}" for n in range(17))},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Enrich-Vector-Stores"


def test_a_native_responses_upstream_gets_the_search_as_input(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(vector_stores=FAST, upstream={"responses": "native"})
    client, store_id, ids = ready(base)
    response = client.responses.create(
        model="m",
        input=CATS,
        tools=tool(store_id, ranking_options=SHARP),
        include=["file_search_call.results"],
    )
    assert [o.type for o in response.output] == ["file_search_call", "message"]
    assert response.output[0].results[0].file_id == ids["lighthouse.txt"]  # type: ignore[union-attr]
    notes = response.output[1].content[0].annotations  # type: ignore[union-attr]
    assert [n.file_id for n in notes] == [ids["lighthouse.txt"]]  # type: ignore[union-attr]
    sent = upstream.last_to("/v1/responses").json
    assert "tools" not in sent and "sardines" in sent_prompt(upstream, "/v1/responses")

    with client.responses.stream(model="m", input=CATS, tools=tool(store_id)) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[1].type == "response.output_item.added"
    assert events[1].item.type == "file_search_call"  # type: ignore[union-attr]
    assert [o.type for o in final.output] == ["file_search_call", "message"]
    assert final.output_text.startswith(TEXT)


def test_file_search_tools_are_validated(base: str) -> None:
    client = sdk(base)
    for tools, param in [
        ([{"type": "file_search", "vector_store_ids": []}], "tools[0].vector_store_ids"),
        (
            [{"type": "file_search", "vector_store_ids": ["vs_a"], "max_num_results": 0}],
            "tools[0].max_num_results",
        ),
        (
            [{"type": "file_search", "vector_store_ids": ["vs_a"], "filters": {"type": "x"}}],
            "tools[0].filters.type",
        ),
    ]:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input=CATS, tools=tools)  # type: ignore[arg-type]
        assert caught.value.body["param"] == param  # type: ignore[index]


FOLLOW_UP = "Who waits there?"  # alone, it shares no word with any file


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": CATS},
        {"role": "assistant", "content": "Fresh sardines from the harbour, every morning."},
        {"role": "user", "content": FOLLOW_UP},
    ]


def test_a_follow_up_searches_the_stores_with_its_conversation(
    base: str, upstream: FakeUpstream, embeddings: FakeEmbeddings
) -> None:
    client, store_id, ids = ready(base)
    options = {"vector_store_ids": [store_id], "affinity_threshold": 0.6}
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=conversation(),  # type: ignore[arg-type]
        extra_body={"enrich": options},
    )
    answer = raw.parse()
    extra = answer.model_extra or {}
    assert [r["file_id"] for r in extra["search_results"]] == [ids["lighthouse.txt"]]
    assert "sardines" in sent_prompt(upstream)
    assert sent_prompt(upstream).endswith(f"User Query:\n\n{FOLLOW_UP}")
    # Each file is one passage: no carried word is rarer there than in a quarter of its
    # passages, so no terms were searched and none are reported.
    # It points back: the last answer is searched with it too (reply 4 x 1.5).
    assert raw.headers["X-Enrich-Searched"] == "question 1; conversation 1.5; reply 6"
    assert [f"{CATS}\n{FOLLOW_UP}"] in embeddings.inputs  # the stores' files ranked for it
    record = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"][0]
    searched = record["decision"]["retrieval"]["searched"]
    assert [(text["from"], text["text"]) for text in searched] == [
        ("question", FOLLOW_UP),
        ("conversation", f"{CATS}\n{FOLLOW_UP}"),
        ("reply", f"Fresh sardines from the harbour, every morning.\n{FOLLOW_UP}"),
    ]

    # The same follow-up asked alone finds nothing over the threshold.
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": FOLLOW_UP}],
        extra_body={"enrich": options},
    )
    assert sent_prompt(upstream).startswith("Important: No citations were found")


def test_a_responses_follow_up_searches_its_file_search_stores_with_its_conversation(
    base: str, upstream: FakeUpstream
) -> None:
    client, store_id, ids = ready(base)
    response = client.responses.create(
        model="m",
        input=conversation(),  # type: ignore[arg-type]
        tools=tool(store_id, ranking_options=SHARP),
        include=["file_search_call.results"],
    )
    search = response.output[0]
    assert search.type == "file_search_call"
    assert search.queries == [FOLLOW_UP]  # the user's words, as the search item reports them
    assert [r.file_id for r in search.results or []] == [ids["lighthouse.txt"]]
    assert "sardines" in sent_prompt(upstream)
