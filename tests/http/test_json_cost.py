"""Whatever a JSON body holds, reading and writing it costs what its length costs: numbers are
read as orjson reads them (never an integer whose conversion grows with the square of its
digits), what is read can always be written by orjson again, and the body's size is estimated
from every field before it is written on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import jsonio
from proxy.errors import BadRequest
from proxy.http import body as body_module
from proxy.http.body import OFF_LOOP_BYTES, parse_body, serialise
from proxy.http.jsonsize import size_over
from tests.fakes.upstream import FakeUpstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
JSON = {"Content-Type": "application/json"}
# The red team's shape, small: integers of 4,299 digits (the most Python converts).
BIG = "7" * 4299


def big_integers(base: dict[str, Any], count: int = 14) -> bytes:
    text = json.dumps({**base, "metadata": {"n": "__N__"}})
    return text.replace('"__N__"', "[" + ",".join([BIG] * count) + "]").encode()


def test_numbers_past_a_double_are_refused_on_every_route(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    routes = (
        ("/v1/chat/completions", CHAT),
        ("/v1/responses", {"model": "m", "input": "Hi"}),
        ("/v1/enrich/preview", CHAT),
    )
    for path, body in routes:
        answer = httpx.post(base + path, content=big_integers(body), headers=JSON, timeout=30)
        assert answer.status_code == 400, (path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "number_out_of_range", path
        assert "4,299 characters" in error["message"] and "1.8e308" in error["message"]
    for literal in ("1e400", "-1e400", "1" + "0" * 400 + ".5"):
        raw = json.dumps(CHAT)[:-1] + f', "temperature": {literal}}}'
        answer = httpx.post(base + "/v1/chat/completions", content=raw, headers=JSON)
        assert answer.json()["error"]["code"] == "number_out_of_range", literal
    assert upstream.to("/v1/chat/completions") == []


def test_a_lone_surrogate_is_a_400_not_a_500(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    for text in ('"\\ud800 hi"', '"\\udfff"', '"a\\uDBFF"'):
        raw = json.dumps(CHAT).replace('"Hi"', text)
        answer = httpx.post(base + "/v1/chat/completions", content=raw, headers=JSON)
        assert answer.status_code == 400, (text, answer.text)
        assert "surrogate" in answer.json()["error"]["message"]
    # UTF-8 bytes of a surrogate (invalid UTF-8) are not JSON text either.
    raw = json.dumps(CHAT).encode().replace(b"Hi", b"\xed\xa0\x80")
    answer = httpx.post(base + "/v1/chat/completions", content=raw, headers=JSON)
    assert answer.status_code == 400
    # A pair is one character, read and sent on as it came.
    raw = json.dumps(CHAT).replace('"Hi"', '"\\ud83d\\ude00"')
    assert httpx.post(base + "/v1/chat/completions", content=raw, headers=JSON).is_success
    assert upstream.last.json["messages"][-1]["content"] == "\U0001f600"


async def test_the_json_module_reads_numbers_as_orjson_does() -> None:
    # NaN sends the body to the json module; its numbers come out as orjson makes them.
    numbers = b'"seed": 123456789012345678901234, "n": -9223372036854775808'
    body = await parse_body(b'{"t": NaN, ' + numbers + b"}")
    assert isinstance(body["seed"], float) and isinstance(body["n"], int)
    assert {"seed": body["seed"], "n": body["n"]} == orjson.loads(b"{" + numbers + b"}")
    assert (await parse_body(b'{"t": NaN, "big": 18446744073709551615}'))["big"] == 2**64 - 1
    assert isinstance((await parse_body(b'{"t": NaN, "x": 18446744073709551616}'))["x"], float)


async def test_the_json_module_reads_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[bool] = []
    read = jsonio.loads_stdlib

    def recorded(raw: bytes) -> Any:
        threads.append(threading.current_thread() is threading.main_thread())
        return read(raw)

    monkeypatch.setattr(jsonio, "loads_stdlib", recorded)
    for raw in (b'{"t": NaN}', b'{"n": 1e5}', '{"a": "é"}'.encode("utf-16"), b"[" * 2000):
        refused = pytest.raises(BadRequest) if raw.startswith(b"[") else contextlib.nullcontext()
        with refused:
            await parse_body(raw)
    # orjson read `1e5` itself; NaN, UTF-16 and the nesting went to the json module, in a thread.
    assert threads == [False, False, False]


json_texts = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: hundreds of digits
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats()  # NaN and the infinities included
    | st.text()
    | st.sampled_from(["\ud800", "a\udfff", "\U0001f600"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_texts, st.booleans())
def test_whatever_is_read_orjson_writes_again(value: Any, ascii_only: bool) -> None:
    raw = json.dumps({"v": value}, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        body = asyncio.run(parse_body(raw))
    except BadRequest as refused:
        assert refused.code in ("number_out_of_range", "invalid_json"), refused.message
        return
    orjson.dumps(body)  # never the json module's slow path for a parsed body


async def test_every_field_counts_towards_writing_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[bool] = []
    write = body_module._dumps

    def recorded(body: dict[str, Any]) -> bytes:
        threads.append(threading.current_thread() is threading.main_thread())
        return write(body)

    monkeypatch.setattr(body_module, "_dumps", recorded)
    big = "x" * (OFF_LOOP_BYTES + 1)
    bodies = [
        {**CHAT, "metadata": {"note": big}},
        {**CHAT, "tools": [{"type": "function", "function": {"name": "f", "description": big}}]},
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"schema": {"d": big}}}},
        {**CHAT, "stop": [big]},
        {**CHAT, "metadata": {f"k{i}": i for i in range(30_000)}},  # many small values
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": big}]}]},
    ]
    for body in bodies:
        await serialise(body)
    assert threads == [False] * len(bodies)
    threads.clear()
    await serialise(CHAT)  # a small body stays on the loop: a thread costs more than it saves
    assert threads == [True]


def test_the_size_estimate_never_falls_below_the_written_length() -> None:
    for body in (
        CHAT,
        {"a": [1, 2.5, None, True, {"b": "c" * 100}], "é": "ü" * 50},
        {"n": [10**18] * 100, "f": [-1.2345678901234567e-300] * 100},
    ):
        written = len(orjson.dumps(body).decode())
        assert size_over(body, written - 1), body
