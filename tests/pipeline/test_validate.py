"""The validate stage: a body we cannot work on is a 400 naming the field, before anything runs."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from proxy.config import ServerSettings, Settings
from proxy.errors import BadRequest
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.pipeline.stages.validate import validate_request

GOOD = {"role": "user", "content": "q"}


def validated(body: dict[str, Any], max_messages: int = 4096) -> None:
    # The stage reads only the settings from the services.
    settings = Settings(server=ServerSettings(max_messages=max_messages))
    services = cast(Services, SimpleNamespace(settings=settings))
    asyncio.run(validate_request(Exchange("r", body), services))


@pytest.mark.parametrize(
    ("body", "message", "param", "code"),
    [
        (
            {"model": "m"},
            "'messages' must be a non-empty array of messages",
            "messages",
            "invalid_value",
        ),
        (
            {"messages": []},
            "'messages' must be a non-empty array of messages",
            "messages",
            "invalid_value",
        ),
        (
            {"messages": {"role": "user"}},
            "'messages' must be a non-empty array of messages",
            "messages",
            "invalid_value",
        ),
        (
            {"messages": [GOOD, "hello"]},
            "messages[1] must be an object",
            "messages[1]",
            "invalid_type",
        ),
        (
            {"messages": [GOOD, GOOD, {"content": "q"}]},
            "messages[2].role must be a string",
            "messages[2].role",
            "invalid_value",
        ),
        (
            {"messages": [{"role": 1, "content": "q"}]},
            "messages[0].role must be a string",
            "messages[0].role",
            "invalid_value",
        ),
        (
            {"messages": [GOOD, {"role": "user", "content": 42}]},
            "messages[1].content must be a string or an array of content parts",
            "messages[1].content",
            "invalid_type",
        ),
        (
            {"messages": [{"role": "user", "content": {"type": "text"}}]},
            "messages[0].content must be a string or an array of content parts",
            "messages[0].content",
            "invalid_type",
        ),
        (
            {"messages": [GOOD], "stream": "yes"},
            "'stream' must be a boolean",
            "stream",
            "invalid_type",
        ),
        (
            {"messages": [GOOD], "stream": None},
            "'stream' must be a boolean",
            "stream",
            "invalid_type",
        ),
    ],
)
def test_a_body_we_cannot_work_on_is_a_400_naming_the_field(
    body: dict[str, Any], message: str, param: str, code: str
) -> None:
    with pytest.raises(BadRequest) as raised:
        validated(body)
    error = raised.value
    assert (error.message, error.param, error.code, error.status) == (message, param, code, 400)


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [GOOD]},
        {"messages": [{"role": "assistant", "content": None}, GOOD], "stream": True},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]},
        {"messages": [{"role": "system"}, GOOD], "stream": False},
    ],
)
def test_a_body_we_can_work_on_passes(body: dict[str, Any]) -> None:
    validated(body)


def test_more_messages_than_the_cap_are_refused_before_any_is_read() -> None:
    validated({"messages": [GOOD] * 3}, max_messages=3)
    # Not even looked at: the count alone refuses them.
    with pytest.raises(BadRequest) as raised:
        validated({"messages": [GOOD, *["not a message"] * 3]}, max_messages=3)
    error = raised.value
    assert (error.param, error.code, error.status) == ("messages", "too_many_messages", 400)
    assert error.message == "'messages' has 4 items; at most 3 are accepted (server.max_messages)"
