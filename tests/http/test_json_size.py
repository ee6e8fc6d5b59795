"""Bodies with too many JSON values are refused before they are parsed; ordinary ones, text
full of commas and brackets included, are not."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.http import jsonsize
from proxy.http.jsonsize import values_over

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40,
)


def count(value: Any) -> int:
    """Values as a parser makes them: containers, their members, object keys."""
    if isinstance(value, dict):
        return 1 + sum(1 + count(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(count(item) for item in value)
    return 1


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from([3, 16, 1 << 20]))
def test_the_bound_is_never_below_the_values(value: Any, step: int) -> None:
    raw = json.dumps(value).encode()
    saved, jsonsize.STEP = jsonsize.STEP, step  # steps that split strings and escapes
    try:
        assert values_over(raw, count(value) - 1) or count(value) == 0
    finally:
        jsonsize.STEP = saved


def test_commas_and_brackets_inside_strings_do_not_count() -> None:
    prose = "one, two, [three], {four}, " * 40_000  # 1,1 MB of text: 160,000 commas
    body = json.dumps({"messages": [{"role": "user", "content": prose}]}).encode()
    assert not values_over(body, 1000)
    quoted = json.dumps({"content": 'say "a, b" and \\"c, d\\" ' * 50_000}).encode()
    assert not values_over(quoted, 1000)


def test_many_tiny_values_are_over() -> None:
    messages = json.dumps({"messages": [{"role": "user", "content": "hi"}] * 50_000})
    assert values_over(messages.encode(), 250_000)
    assert values_over(json.dumps(list(range(300_000))).encode(), 250_000)
    assert not values_over(json.dumps(list(range(200_000))).encode(), 250_000)


def test_a_body_over_the_limit_is_413_before_it_is_parsed(
    make_proxy: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.http import body as body_module

    parsed: list[int] = []
    original = body_module._loads
    monkeypatch.setattr(body_module, "_loads", lambda raw: parsed.append(len(raw)) or original(raw))
    base = make_proxy(server={"max_json_values": 1000})
    for size, status in ((100, 200), (400, 413), (40_000, 413)):  # on the loop, in a thread
        body = {"messages": [{"role": "user", "content": "hi"}] * size}
        response = httpx.post(base + "/v1/chat/completions", json=body, timeout=30)
        assert response.status_code == status, response.text
    assert len(parsed) == 1  # only the one that fit was parsed
    error = response.json()["error"]
    assert error["code"] == "too_many_json_values"
    assert error["message"] == (
        "the request body holds more than 1000 JSON values (server.max_json_values)"
    )
