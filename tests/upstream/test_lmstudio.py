"""LM Studio 0.4 refusing a prompt over its window (a 400, or a 200 stream with an `event: error`
frame) when its tokenizer counts more than even the margin allows: the client gets OpenAI's
error, streamed or not, with its code and how to load the model with a larger window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.lmstudio import FakeLmStudio
from tests.fakes.servers import ServerThread
from tests.upstream.test_kinds import client, text

HINT = "load it with a larger context length (lms load --context-length)"


@pytest.fixture
def lmstudio(servers: ServerThread) -> FakeLmStudio:
    # A tokenizer half as dense again as tiktoken's count: past what the 1.25 margin covers.
    fake = FakeLmStudio(window=4096, density=1.5)
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def base(proxy_before: Callable[..., str], lmstudio: FakeLmStudio) -> str:
    return proxy_before(lmstudio.base_url)  # type: ignore[attr-defined]


def long_question(lmstudio: FakeLmStudio) -> dict[str, Any]:
    # 3,000 words: 3,750 by the estimate and its margin, 4,500 of LM Studio's tokens.
    return {
        "model": lmstudio.model_id,
        "messages": [{"role": "user", "content": text(3000)}],
        "max_tokens": 16,
    }


def test_the_fake_answers_as_lm_studio_0_4(lmstudio: FakeLmStudio) -> None:
    url = lmstudio.base_url + "/v1/chat/completions"  # type: ignore[attr-defined]
    refused = httpx.post(url, json=long_question(lmstudio))
    assert refused.status_code == 400 and refused.json()["error"].startswith(
        "The number of tokens to keep from the initial prompt is greater than the context length"
    )
    streamed = httpx.post(url, json={**long_question(lmstudio), "stream": True})
    assert streamed.status_code == 200 and streamed.text.startswith("event: error\ndata: ")


def test_its_400_becomes_openais_error(base: str, lmstudio: FakeLmStudio) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(**long_question(lmstudio))
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("The number of tokens to keep from the initial prompt")
    assert error["message"].endswith(HINT)
    assert len(lmstudio.to("/v1/chat/completions")) == 1


@pytest.mark.parametrize("started", [False, True])
def test_its_error_frame_becomes_openais_error_event(
    proxy_before: Callable[..., str], lmstudio: FakeLmStudio, started: bool
) -> None:
    base = proxy_before(
        lmstudio.base_url,  # type: ignore[attr-defined]
        server={"status_delay_s": 0.0} if started else {},
    )
    with pytest.raises(openai.APIError) as caught:
        list(client(base).chat.completions.create(**long_question(lmstudio), stream=True))
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert error["message"].startswith(
        "Input does not fit in context length. The input has 4504 tokens, but the context "
        "length only supports 4096 tokens."
    )
    assert error["message"].endswith(HINT)
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json={**long_question(lmstudio), "stream": True}
    ) as raw:
        body = raw.read().decode()
    assert raw.status_code == 200 and "event: error" not in body
    assert body.rstrip().endswith('"code": "context_length_exceeded"}}\n\ndata: [DONE]')


def test_a_responses_stream_fails_with_its_code(base: str, lmstudio: FakeLmStudio) -> None:
    events = list(
        client(base).responses.create(
            model=lmstudio.model_id, input=text(3000), max_output_tokens=16, stream=True
        )
    )
    assert [event.type for event in events[-2:]] == ["error", "response.failed"]
    assert events[-2].code == "context_length_exceeded"  # type: ignore[union-attr]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.error is not None
    assert failed.error.message.startswith("Input does not fit in context length.")
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).responses.create(
            model=lmstudio.model_id, input=text(3000), max_output_tokens=16
        )
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.message.endswith(HINT)


def test_answers_that_fit_go_through_untouched(base: str, lmstudio: FakeLmStudio) -> None:
    body = {"model": lmstudio.model_id, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}) as raw:
        streamed = raw.read()
    direct = httpx.post(
        lmstudio.base_url + "/v1/chat/completions",  # type: ignore[attr-defined]
        json={**body, "stream": True},
    ).content
    # Byte for byte but the timestamps and the id: nothing was parsed and written again.
    assert streamed.count(b"data: ") == direct.count(b"data: ") and b"[DONE]" in streamed
    answer = client(base).chat.completions.create(**body)  # type: ignore[call-overload]
    assert answer.choices[0].message.content == "The answer ."
