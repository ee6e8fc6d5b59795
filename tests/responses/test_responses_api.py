"""POST /v1/responses through the official openai SDK, the proxy and a chat-only fake upstream."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.upstream import ANSWER, FakeUpstream
from tests.pipeline.test_enrich import pdf_bytes

PAGES = [
    "The lighthouse keeper fed the cats every morning with fresh sardines.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "The bakery on the corner sells sourdough bread and croissants at dawn.",
]
SMALL_CHUNKS = {"chunk_tokens": 20, "chunk_overlap": 0}
QUESTION = "What did the lighthouse keeper feed the cats?"
RETRIEVE = {"strategy": "retrieval", "affinity_threshold": 0.2}
TEXT = "".join(ANSWER)


def sdk(base: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base + "/v1", api_key="none", max_retries=0, default_headers=headers or None
    )


def pdf_input(**fields: Any) -> list[dict[str, Any]]:
    if not fields:
        data = base64.b64encode(pdf_bytes(PAGES)).decode()
        fields = {"filename": "book.pdf", "file_data": f"data:application/pdf;base64,{data}"}
    return [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": QUESTION}, {"type": "input_file", **fields}],
        }
    ]


def sent_prompt(upstream: FakeUpstream) -> str:
    content = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"]
    return str(content[0]["text"] if isinstance(content, list) else content)


@pytest.fixture
def base(make_proxy: Callable[..., str]) -> str:
    return make_proxy(retrieval=SMALL_CHUNKS)


def test_create_with_a_pdf_cites_its_passages(base: str, upstream: FakeUpstream) -> None:
    response = sdk(base).responses.create(
        model="m", input=pdf_input(), extra_body={"enrich": RETRIEVE}
    )
    # The document's passages reached the chat upstream, in the citation prompt.
    prompt = sent_prompt(upstream)
    assert prompt.startswith("The following citations were found in the files provided")
    assert "sardines" in prompt and prompt.endswith(f"User Query:\n\n{QUESTION}")
    assert "input_file" not in upstream.last_to("/v1/chat/completions").body.decode()
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_") and response.model == "m"
    assert response.output_text == TEXT
    message = response.output[0]
    assert message.type == "message" and message.role == "assistant"
    annotations = message.content[0].annotations
    assert annotations and all(a.type == "file_citation" for a in annotations)
    assert annotations[0].filename == "book.pdf" and annotations[0].index == len(TEXT)
    assert annotations[0].file_id is None  # sent as file_data: no id to name
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 6)
    extra = response.model_extra or {}
    assert extra["citations"][0] == "book.pdf#page=1"


def test_file_id_is_named_in_the_annotation(base: str) -> None:
    client = sdk(base)
    uploaded = client.files.create(
        file=("/home/someone/Documents/book.pdf", io.BytesIO(pdf_bytes(PAGES))),
        purpose="user_data",
    )
    assert uploaded.filename == "book.pdf"  # a path sent as the name keeps its last part
    response = client.responses.create(
        model="m", input=pdf_input(file_id=uploaded.id), extra_body={"enrich": RETRIEVE}
    )
    annotation = response.output[0].content[0].annotations[0]
    assert (annotation.file_id, annotation.filename) == (uploaded.id, "book.pdf")


def test_stream_event_sequence(base: str) -> None:
    stream = sdk(base).responses.create(
        model="m", input=pdf_input(), stream=True, extra_body={"enrich": RETRIEVE}
    )
    events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert "".join(deltas) == TEXT and len(deltas) == len(ANSWER)
    tail = [k for k in kinds[4:] if k != "response.output_text.delta"]
    notes = tail.count("response.output_text.annotation.added")
    assert notes >= 1
    assert tail[notes:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    completed = events[-1].response  # type: ignore[union-attr]
    assert completed.output_text == TEXT
    assert completed.output[0].content[0].annotations[0].filename == "book.pdf"
    assert completed.usage is not None and completed.usage.output_tokens == 6


def test_stream_helper_and_inline_sources(base: str, upstream: FakeUpstream) -> None:
    # A client that cannot send body fields chooses everything with headers.
    client = sdk(
        base,
        **{
            "X-Enrich-Strategy": "retrieval",
            "X-Enrich-Affinity-Threshold": "0.2",
            "X-Enrich-Citations": "inline",
        },
    )
    with client.responses.stream(model="m", input=pdf_input()) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    assert final.output_text.startswith(TEXT + "\n\nSources:\n- book.pdf, page")
    annotation = final.output[0].content[0].annotations[0]
    # At its page in the file's line of the block.
    line = final.output_text[: annotation.index].rsplit("\n", 1)[1]
    assert line.startswith("- book.pdf, page") and final.output_text[annotation.index].isdigit()
    assert "citations" not in (final.model_extra or {})  # inline only: no extra fields
    assert "X-Enrich" not in json.dumps(dict(upstream.last_to("/v1/chat/completions").headers))


def test_status_comments_come_first(base: str) -> None:
    with httpx.stream(
        "POST",
        base + "/v1/responses",
        json={"model": "m", "input": pdf_input(), "stream": True, "enrich": RETRIEVE},
        timeout=60,
    ) as response:
        raw = b"".join(response.iter_raw()).decode()
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    assert "Retrieving relevant citations for user query..." in comments
    assert raw.index(": ") < raw.index("event: response.created")
    assert "data: [DONE]" not in raw


def test_function_calls_and_tools(base: str, upstream: FakeUpstream) -> None:
    upstream.reply = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    tool = {
        "type": "function",
        "name": "weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    response = sdk(base).responses.create(
        model="m",
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "function_call", "call_id": "call_0", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_0", "output": "sunny"},
        ],
        tools=[tool],  # type: ignore[list-item]
        tool_choice="auto",
        max_output_tokens=50,
        temperature=0.5,
        metadata={"who": "test"},
        text={"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
    )
    call = response.output[-1]
    assert call.type == "function_call"
    assert (call.call_id, call.name, call.arguments) == ("call_1", "weather", '{"city":"Oslo"}')
    assert response.metadata == {"who": "test"} and response.instructions == "Be brief."
    sent = upstream.last_to("/v1/chat/completions").json
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["messages"][2]["tool_calls"][0]["function"]["name"] == "weather"
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}
    assert sent["tools"][0]["function"]["name"] == "weather"
    assert sent["max_tokens"] == 50 and sent["temperature"] == 0.5
    assert sent["response_format"]["json_schema"]["name"] == "w"
    assert "metadata" not in sent and "input" not in sent


def test_stateless_and_url_refusals(base: str, upstream: FakeUpstream) -> None:
    client = sdk(base)
    with pytest.raises(openai.BadRequestError, match="keeps no responses"):
        client.responses.create(model="m", input="hi", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="allowed_url_prefixes"):
        client.responses.create(
            model="m", input=pdf_input(file_url="http://127.0.0.1:9/secret.pdf")
        )
    missing = httpx.get(base + "/v1/responses/resp_1", timeout=10)
    assert missing.status_code == 404 and "keeps no responses" in missing.text
    assert not [r for r in upstream.requests if r.path.startswith("/v1/responses")]


def test_plain_text_input_round_trip(base: str, upstream: FakeUpstream) -> None:
    response = sdk(base).responses.create(model="m", input="Say hello")
    assert response.output_text == TEXT
    assert upstream.last_to("/v1/chat/completions").json["messages"] == [
        {"role": "user", "content": "Say hello"}
    ]


def test_native_upstream_gets_enriched_input(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS, upstream={"responses": "native"})
    client = sdk(base)
    response = client.responses.create(
        model="m", input=pdf_input(), extra_body={"enrich": {**RETRIEVE, "citations": "both"}}
    )
    sent = upstream.last_to("/v1/responses").json
    assert "enrich" not in sent
    content = sent["input"][0]["content"]
    assert [part["type"] for part in content] == ["input_text"]
    assert "sardines" in content[0]["text"]
    assert response.id == "resp_up"
    assert response.output_text.startswith(TEXT + "\n\nSources:\n- book.pdf")
    assert response.output[0].content[0].annotations[0].filename == "book.pdf"
    with client.responses.stream(
        model="m", input=pdf_input(), extra_body={"enrich": {**RETRIEVE, "citations": "inline"}}
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    assert final.output_text.startswith(TEXT + "\n\nSources:\n- book.pdf")
    assert final.output[0].content[0].annotations[0].type == "file_citation"


def test_text_completion_upstream_answers_responses_too(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # A base model behind /v1/completions: its answer becomes chat first, then a response.
    base = make_proxy(models={"base": {"adapter": "text", "format": "chatml"}})
    client = sdk(base)
    response = client.responses.create(model="base", input="Say hi", max_output_tokens=5)
    assert response.output_text == "Hi there"
    sent = upstream.last_to("/v1/completions").json
    assert sent["prompt"].endswith("<|im_start|>assistant\n") and sent["max_tokens"] == 5
    with client.responses.stream(model="base", input="Say hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "Hi there"


def test_upstream_failures_reach_the_sdk(base: str, upstream: FakeUpstream) -> None:
    upstream.chat_mode = "error"
    with pytest.raises(openai.InternalServerError, match="boom"):
        sdk(base).responses.create(model="m", input="hi")
    upstream.chat_mode = "die"  # the upstream breaks off mid-stream
    events = list(sdk(base).responses.create(model="m", input="hi", stream=True))
    # As OpenAI's own stream fails: an `error` event, then `response.failed`, never [DONE].
    assert [event.type for event in events[-2:]] == ["error", "response.failed"]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.status == "failed" and failed.id == events[0].response.id  # type: ignore[union-attr]
    assert failed.error is not None and "broke off the stream" in failed.error.message
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(numbers)))
    with (
        pytest.raises(RuntimeError, match=r"response\.completed"),
        sdk(base).responses.stream(model="m", input="hi") as stream,
    ):
        stream.get_final_response()


def test_responses_are_in_the_decision_log(base: str) -> None:
    sdk(base).responses.create(model="m", input=pdf_input(), extra_body={"enrich": RETRIEVE})
    response = httpx.get(base + "/v1/enrich/decisions", timeout=30)
    [record] = response.json()["data"]
    assert (record["route"], record["status"], record["strategy"]) == (
        "responses",
        200,
        "retrieval",
    )
    assert record["documents"][0]["name"] == "book.pdf"


def test_a_stream_the_statuses_began_ends_failed_whatever_fails(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # No status delay: the stream is the proxy's from the first status on, so a document that
    # cannot be read, or an upstream that answers an error, ends it the Responses way.
    client = sdk(make_proxy(server={"status_delay_s": 0.0}))
    broken = {"filename": "broken.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQKJeLj"}
    upstream.chat_mode = "error"
    for case in (pdf_input(**broken), pdf_input()):
        events = list(client.responses.create(model="m", input=case, stream=True))
        assert events[0].type == "response.created"
        assert [event.type for event in events[-2:]] == ["error", "response.failed"]
        failed = events[-1].response  # type: ignore[union-attr]
        assert failed.id == events[0].response.id  # type: ignore[union-attr]
        assert failed.status == "failed" and failed.error is not None
        assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "broken.pdf" in events_error(client, pdf_input(**broken))


def events_error(client: openai.OpenAI, given: list[dict[str, Any]]) -> str:
    """The message of the `error` event a failed stream sends."""
    events = list(client.responses.create(model="m", input=given, stream=True))  # type: ignore[arg-type]
    return str(next(event for event in events if event.type == "error").message)  # type: ignore[union-attr]
