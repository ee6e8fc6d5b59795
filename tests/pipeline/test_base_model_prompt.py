"""A base model gets the completion shape: passages, `Question: ... Answer:`, sent as a text
completion; instruction-tuned and unknown models keep the chat prompts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from proxy.pipeline.answer_shape import CHAT, COMPLETION, choose_shape
from proxy.pipeline.completion_prompt import (
    ANSWER_STOP,
    EXAMPLE_ANSWER,
    CompletionPrompt,
    completion_body,
    earlier_turns,
    render_completion,
    unwrapped,
)
from proxy.upstream.base_answer import BaseAnswerConverter, first_sentence
from proxy.upstream.facts import Fact
from tests.fakes.upstream import LLAMACPP_CHATML_FALLBACK, FakeUpstream
from tests.pipeline.test_enrich import ask, pdf_part, preview, text_part

PAGES = [
    "The lighthouse keeper fed the cats every morning with fresh sardines.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "The bakery on the corner sells sourdough bread and croissants at dawn.",
    "The ferry to the island leaves at seven and returns at noon.",
]
QUESTION = "What did the lighthouse keeper feed the cats?"
SMALL_CHUNKS = {"chunk_tokens": 20, "chunk_overlap": 0}
RETRIEVE = {"strategy": "retrieval", "affinity_threshold": 0.0}
BASE = Fact(False, True, "llama.cpp /props chat_template is its ChatML fallback")
TUNED = Fact(True, True, "llama.cpp /props chat_template: a chat template")
UNKNOWN: Fact[bool | None] = Fact(None, False, "unknown: this kind of server does not say")


def base_model(upstream: FakeUpstream) -> None:
    """llama.cpp serving a GGUF without a chat template (the bundled Gemma 3 270M's /props)."""
    upstream.chat_template = LLAMACPP_CHATML_FALLBACK


def book_request(**extra: Any) -> dict[str, Any]:
    extra.setdefault("enrich", RETRIEVE)
    return ask([pdf_part("book.pdf", PAGES)], QUESTION, **extra)


# -- the pure parts ------------------------------------------------------------------------------


def test_the_prompt_is_an_example_then_the_passages_then_the_question() -> None:
    prompt = CompletionPrompt(("first passage\nwrapped", "second"), "What is it?\nReally?")
    text = render_completion(prompt, [{"role": "user", "content": "What is it?"}])
    assert text.startswith("Context: Orders ship from the Leeds warehouse")
    assert f"Answer: {EXAMPLE_ANSWER}\n\n" in text
    # The passages' hard-wrapped lines are joined; the question is one line; the model goes on.
    assert text.endswith(
        "\n\nContext: first passage wrapped\n\nsecond\n\nQuestion: What is it? Really?\nAnswer:"
    )
    assert text.count("Question:") == 2 and text.count("Context:") == 2


def test_no_passage_says_so_where_the_passages_go() -> None:
    text = render_completion(CompletionPrompt((), "Why?"), [])
    assert "Context: (nothing in the documents matches the question)\n\nQuestion: Why?" in text


def test_the_system_text_and_earlier_turns_go_before_the_question() -> None:
    messages = [
        {"role": "system", "content": "You answer about ferries."},
        {"role": "user", "content": "When does it leave?"},
        {"role": "assistant", "content": "At\nseven."},
        {"role": "user", "content": [{"type": "text", "text": "And back?"}]},
    ]
    system, pairs = earlier_turns(messages)
    assert system == "You answer about ferries."
    assert pairs == [("When does it leave?", "At\nseven.")]
    text = render_completion(CompletionPrompt(("p",), "And back?"), messages)
    assert text.startswith("You answer about ferries.\n\nContext: Orders ship")
    assert "Question: When does it leave?\nAnswer: At seven.\n\nContext: p\n\n" in text


def test_unwrapping_joins_lines_and_hyphenated_words_but_keeps_paragraphs() -> None:
    assert unwrapped("a long sen-\ntence that\n  goes on\n\n\n\nnext one\n") == (
        "a long sentence that goes on\n\nnext one"
    )


def test_the_body_stops_at_the_line_end_and_decodes_greedily_unless_asked() -> None:
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "stop": "END",
        "max_completion_tokens": 30,
        "tools": [],
        "seed": 3,
    }
    body, greedy = completion_body(chat, "Answer:")
    assert body == {
        "model": "m",
        "prompt": "Answer:",
        "stop": [ANSWER_STOP, "END"],
        "max_tokens": 30,
        "temperature": 0,
        "seed": 3,
    }
    assert greedy
    body, greedy = completion_body({**chat, "temperature": 0.7}, "Answer:")
    assert body["temperature"] == 0.7 and not greedy


@pytest.mark.parametrize(
    ("asked", "instruct", "fields", "shape", "why"),
    [
        ("auto", BASE, {}, COMPLETION, "not instruction-tuned (llama.cpp /props"),
        ("auto", TUNED, {}, CHAT, "is instruction-tuned"),
        ("auto", UNKNOWN, {}, CHAT, "unknown"),
        ("chat", BASE, {}, CHAT, "prompt: chat"),
        ("completion", UNKNOWN, {}, COMPLETION, "prompt: completion"),
        ("auto", BASE, {"tools": True}, CHAT, "tools"),
        ("completion", BASE, {"images": True}, CHAT, "images"),
        ("auto", BASE, {"adapter": "text"}, CHAT, "adapter: text"),
        ("completion", BASE, {"fixed_route": True}, CHAT, "native Responses"),
    ],
)
def test_which_shape_and_why(
    asked: Any, instruct: Fact[bool | None], fields: dict[str, Any], shape: str, why: str
) -> None:
    options = {"adapter": "chat", "tools": False, "images": False, "fixed_route": False}
    choice = choose_shape(asked, instruct, **{**options, **fields})
    assert choice.shape == shape and why in choice.reason


def test_the_answer_is_the_first_sentence_from_its_first_word() -> None:
    assert first_sentence(" The default weight is 50. The default weight is used") == (
        "The default weight is 50."
    )
    assert (
        first_sentence(' It starts "MIME-Magic\\0\\n". There is no')
        == 'It starts "MIME-Magic\\0\\n".'
    )
    # Not sentence ends: an abbreviation, a decimal, a section number's dot before lowercase.
    assert first_sentence("Use e.g. the 2.5 GHz one, as in 2.5. then") == (
        "Use e.g. the 2.5 GHz one, as in 2.5. then"
    )
    assert first_sentence("Why? Because.") == "Why?"


def stream_of(pieces: list[str], finish: str = "length") -> list[dict[str, Any]]:
    converter = BaseAnswerConverter(["\n"])
    chunks: list[dict[str, Any]] = []
    for number, text in enumerate(pieces):
        last = number == len(pieces) - 1
        choice = {"index": 0, "text": text, "finish_reason": finish if last else None}
        for chunk in converter.convert_event(b"", {"id": "c", "choices": [choice]}):
            assert isinstance(chunk, dict)
            chunks.append(chunk)
    return chunks


def test_streamed_the_answer_ends_with_its_first_sentence() -> None:
    chunks = stream_of([" ", " The", " weight is 50", ". ", "The weight is", " used for"])
    texts = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert "".join(t or "" for t in texts) == "The weight is 50."
    assert [c["choices"][0]["finish_reason"] for c in chunks].count("stop") == 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    # One sentence to the end: the upstream's own finish reason.
    whole = stream_of([" Fresh", " sardines", "."], finish="stop")
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in whole) == (
        "Fresh sardines."
    )
    assert whole[-1]["choices"][0]["finish_reason"] == "stop"
    cut = stream_of([" It ran", " on and on"], finish="length")
    assert cut[-1]["choices"][0]["finish_reason"] == "length"


def test_not_streamed_the_same() -> None:
    converted = BaseAnswerConverter(["\n"]).convert_json(
        {"id": "c", "choices": [{"index": 0, "text": " 50. Then more", "finish_reason": "length"}]}
    )
    choice = converted["choices"][0]
    assert choice["message"]["content"] == "50." and choice["finish_reason"] == "stop"


# -- through the proxy ---------------------------------------------------------------------------


def test_a_base_model_gets_its_two_best_passages_as_a_text_completion(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base_model(upstream)
    base = make_proxy(retrieval=SMALL_CHUNKS)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=book_request()["messages"],
        extra_body={"enrich": RETRIEVE},
        extra_headers={"X-Enrich-Citations": "both"},
    )
    answer = raw.parse()
    assert not upstream.to("/v1/chat/completions")
    sent = upstream.last_to("/v1/completions").json
    prompt = sent["prompt"]
    assert prompt.endswith(f"\n\nQuestion: {QUESTION}\nAnswer:")
    assert "fresh sardines" in prompt
    # Four passages pass the threshold; a base model gets the two best.
    assert sum(page in prompt for page in PAGES) == 2
    assert sent["stop"] == ["\n"] and sent["temperature"] == 0
    assert "messages" not in sent
    # The client still gets a chat answer, with its citations and Sources block.
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.content is not None
    assert answer.choices[0].message.content.startswith("Hi there\n\nSources:\n- book.pdf, page")
    assert answer.model_extra is not None and len(answer.model_extra["citations"]) == 2
    assert raw.headers["X-Enrich-Citations"] == "2"


def test_the_decision_says_which_prompt_and_why(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base_model(upstream)
    base = make_proxy(retrieval=SMALL_CHUNKS)
    decision = preview(base, book_request())["decision"]
    assert decision["prompt"]["shape"] == "completion"
    assert "not instruction-tuned" in decision["prompt"]["reason"]
    assert decision["prompt"]["sampling"].startswith("greedy")
    assert decision["adapter"] == {
        "kind": "completion",
        "format": "question-answer",
        "stop": ["\n"],
    }
    assert decision["retrieval"]["limit"] == 2 and decision["retrieval"]["fill"] == "none"


def test_a_base_model_streams_a_chat_answer(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base_model(upstream)
    base = make_proxy(retrieval=SMALL_CHUNKS)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model="m",
        messages=book_request()["messages"],
        extra_body={"enrich": {**RETRIEVE, "citations": "inline"}},
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Hi there\n\nSources:\n- book.pdf")
    assert upstream.last_to("/v1/completions").json["stream"] is True


def test_a_whole_document_goes_in_the_same_shape(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base_model(upstream)
    base = make_proxy()
    note = "The ferry leaves at seven."
    body = ask([text_part("ferry.txt", note)], "When does the ferry leave?")
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["X-Enrich-Strategy"] == "inject-full-content"
    prompt = upstream.last_to("/v1/completions").json["prompt"]
    assert prompt.endswith(
        f"Context: ferry.txt: {note}\n\nQuestion: When does the ferry leave?\nAnswer:"
    )


@pytest.mark.parametrize(
    ("template", "headers", "fields"),
    [
        ("{{ messages }}", {}, {}),  # an instruction-tuned model: a chat template of its own
        ("chatml", {}, {}),  # llama.cpp's built-in name: unknown, so today's prompts
        (LLAMACPP_CHATML_FALLBACK, {"X-Enrich-Prompt": "chat"}, {}),  # asked for
        (
            LLAMACPP_CHATML_FALLBACK,
            {},
            {"tools": [{"type": "function", "function": {"name": "f"}}]},
        ),
    ],
)
def test_other_models_keep_the_chat_prompt(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    template: str,
    headers: dict[str, str],
    fields: dict[str, Any],
) -> None:
    upstream.chat_template = template
    base = make_proxy(retrieval=SMALL_CHUNKS)
    response = httpx.post(
        base + "/v1/chat/completions", json=book_request(**fields), headers=headers, timeout=60
    )
    assert response.status_code == 200, response.text
    assert not upstream.to("/v1/completions")
    text = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert text.startswith("The following citations were found in the files provided by the user")


def test_completion_can_be_asked_for_a_model_that_does_not_say(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    response = httpx.post(
        base + "/v1/chat/completions",
        json=book_request(temperature=0.5),
        headers={"X-Enrich-Prompt": "completion"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert upstream.last_to("/v1/completions").json["temperature"] == 0.5


def test_a_mistyped_prompt_option_is_a_400(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    response = httpx.post(
        base + "/v1/chat/completions",
        json=book_request(),
        headers={"X-Enrich-Prompt": "completions"},
        timeout=60,
    )
    assert response.status_code == 400
    assert "X-Enrich-Prompt" in response.json()["error"]["message"]


def test_older_turns_go_first_when_the_prompt_would_not_fit(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base_model(upstream)
    upstream.n_ctx = 400  # the fake counts words: room for the question, not for the chatter
    base = make_proxy(retrieval=SMALL_CHUNKS, upstream={"context_ttl_s": 0})
    chatter = " ".join(["word"] * 250)
    body = book_request(max_tokens=20)
    body["messages"] = [
        {"role": "user", "content": chatter},
        {"role": "assistant", "content": chatter},
        *body["messages"],
    ]
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["X-Enrich-Dropped-Messages"] == "2"
    assert chatter not in upstream.last_to("/v1/completions").json["prompt"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_api_gets_a_base_model_s_answer_with_its_annotations(
    make_proxy: Callable[..., str], upstream: FakeUpstream, stream: bool
) -> None:
    base_model(upstream)
    base = make_proxy(retrieval=SMALL_CHUNKS)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    part = pdf_part("book.pdf", PAGES)["file"]
    asked = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": QUESTION},
                {
                    "type": "input_file",
                    "filename": part["filename"],
                    "file_data": part["file_data"],
                },
            ],
        }
    ]
    options = {"enrich": RETRIEVE}
    if stream:
        with client.responses.stream(model="m", input=asked, extra_body=options) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="m", input=asked, extra_body=options)
    assert response.output_text == "Hi there"
    [message] = [item for item in response.output if item.type == "message"]
    annotations = message.content[0].annotations  # type: ignore[union-attr]
    assert annotations and {a.filename for a in annotations} == {"book.pdf"}  # type: ignore[union-attr]
    assert upstream.last_to("/v1/completions").json["prompt"].endswith("Answer:")
