"""Request bodies in flight count against their key's budget and the process's: bytes as they
arrive, the parsed body once read, what goes upstream; over it a 429 (the key's own), a 503 (all
callers together) or a 413 (a body no budget holds), given back however the request ends."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.config import ConfigError, load_settings
from proxy.errors import PayloadTooLarge
from proxy.http.body_budget import MIB, BodiesFull, BodyBudget, TooManyBodiesInFlight
from tests.callers import KEY_A, KEY_B, KEYS, sdk
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import wait_until

CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}
HELD = int(0.9 * MIB)  # what each held connection has sent of its 1 MiB body


# -- the ledger -----------------------------------------------------------------------------


def test_the_ledger_refuses_by_whose_budget_is_full() -> None:
    budget = BodyBudget(key_limit=10, total_limit=15)
    a1, a2, b1 = budget.hold("a"), budget.hold("a"), budget.hold("b")
    a1.arrived(4)
    with pytest.raises(TooManyBodiesInFlight) as caught:  # a's own budget: 4 + 7 > 10
        a2.arrived(7)
    assert caught.value.status == 429 and caught.value.code == "too_many_bodies_in_flight"
    a2.arrived(3)
    b1.arrived(5)
    with pytest.raises(BodiesFull) as full:  # b's budget has room (9), the process's not (16)
        budget.hold("b").arrived(4)
    assert full.value.status == 503 and full.value.code == "proxy_busy"
    with pytest.raises(PayloadTooLarge):  # more than any budget holds, whoever else reads
        budget.hold("c").expect(11)
    # The parsed body is held beside its bytes, then alone; what is sent is never refused.
    a1.parsed_as(3)
    assert budget.held("a") == 10 and budget.total == 15
    a1.raw_dropped()
    a1.sending(9)
    assert budget.held("a") == 15 and budget.total == 20
    for held in (a1, a2, b1, a1):  # releasing twice gives back once
        held.release()
    assert budget.held("a") == budget.held("b") == budget.total == 0


def test_a_budget_below_the_body_limit_is_refused_at_start() -> None:
    for key in ("max_inflight_body_mb_per_key", "max_inflight_body_mb"):
        with pytest.raises(ConfigError, match=key):
            load_settings(None, environ={}, overrides={"server": {"max_body_mb": 64, key: 32}})
    unlimited = {"max_inflight_body_mb_per_key": None, "max_inflight_body_mb": None}
    assert load_settings(None, environ={}, overrides={"server": unlimited})


# -- through the proxy ----------------------------------------------------------------------


@contextlib.contextmanager
def held_bodies(base: str, count: int, key: str | None = None) -> Iterator[list[socket.socket]]:
    """`count` connections each sending 0.9 MiB of a 1 MiB chat body, then nothing."""
    port = int(base.rsplit(":", 1)[1])
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {MIB}\r\n{auth}\r\n"
    ).encode()
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    try:
        for connection in held:
            connection.sendall(head + b'{"messages": "' + b"x" * (HELD - 14))
        yield held
    finally:
        for connection in held:
            connection.close()


def ask(base: str, key: str, size: int = MIB // 2) -> Any:
    """A chat request whose body is about `size` bytes, through the openai SDK."""
    text = "x" * size
    return sdk(base, key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}]
    )


def refusal(call: Callable[[], Any]) -> openai.APIStatusError | None:
    try:
        call()
    except openai.APIStatusError as error:
        return error
    return None


BUDGETS = {"max_body_mb": 1, "max_inflight_body_mb_per_key": 2, "max_inflight_body_mb": 3}


def test_held_bodies_fill_their_keys_budget_then_the_processes(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={**BUDGETS, "api_keys": KEYS})
    with held_bodies(base, 2, KEY_A):  # 1.8 MiB of team-a's 2 MiB
        error = wait_until(lambda: refusal(lambda: ask(base, KEY_A)))
        assert isinstance(error, openai.RateLimitError), error
        body = error.body
        assert isinstance(body, dict) and body["code"] == "too_many_bodies_in_flight"
        assert "server.max_inflight_body_mb_per_key (2 MiB)" in body["message"]
        ask(base, KEY_B)  # team-b's budget is its own, and the process's 3 MiB have room
        with held_bodies(base, 1, KEY_B):  # 2.7 MiB held in all
            busy = wait_until(lambda: refusal(lambda: ask(base, KEY_B)))
            assert isinstance(busy, openai.InternalServerError) and busy.status_code == 503
            assert isinstance(busy.body, dict) and busy.body["code"] == "proxy_busy"
    # The clients hung up mid-body: what they held comes back.
    wait_until(lambda: refusal(lambda: ask(base, KEY_A)) is None)
    wait_until(lambda: refusal(lambda: ask(base, KEY_B)) is None)


def test_every_ending_gives_the_budget_back(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # 2 MiB for everyone (no keys): a request of 0.9 MiB that kept its share would leave no
    # room for the third.
    base = make_proxy(server={**BUDGETS, "max_json_values": 1000})
    chat = {"model": "m", "messages": [{"role": "user", "content": "x" * HELD}]}
    endings: list[tuple[str, bytes, int]] = [
        ("answered", json.dumps(chat).encode(), 200),
        ("streamed", json.dumps({**chat, "stream": True}).encode(), 200),
        ("not JSON", b"{" + b"x" * HELD, 400),
        ("a number past a double", json.dumps(chat).encode()[:-1] + b', "seed": 1e999}', 400),
        ("too many values", json.dumps({**chat, "stop": [1] * 2000}).encode(), 413),
    ]
    for _ in range(3):
        for name, raw, status in endings:
            answer = httpx.post(base + CHAT, content=raw, headers=JSON, timeout=30)
            assert answer.status_code == status, (name, answer.text[:200])
        upstream.chat_mode = "error"  # the upstream fails: its 500 relayed
        assert httpx.post(base + CHAT, json=chat, timeout=30).status_code == 500
        upstream.chat_mode = "auto"
        forwarded = httpx.post(base + "/v1/embeddings", json={"input": "x" * HELD}, timeout=30)
        assert forwarded.status_code == 200  # relayed as it came
        with held_bodies(base, 1):  # a client that hangs up mid-body
            pass
    wait_until(lambda: httpx.post(base + CHAT, json=chat, timeout=30).status_code == 200)
    with held_bodies(base, 2):  # and the budget is whole again: 1.8 MiB of 2
        wait_until(lambda: refusal(lambda: ask(base, "none")))


def test_a_parsed_body_is_charged_what_it_holds(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # 1 MB of small numbers (200,000 of them) holds 7.2 MB once parsed: more than a 4 MiB budget
    # lets one key hold, though its bytes were well within it.
    base = make_proxy(
        server={
            "max_body_mb": 1,
            "max_inflight_body_mb_per_key": 4,
            "max_inflight_body_mb": 4,
            "max_json_values": 300_000,
        }
    )
    numbers = "[" + ",".join(["1000"] * 199_000) + "]"
    raw = '{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stop": ' + numbers
    answer = httpx.post(base + CHAT, content=raw + "}", headers=JSON, timeout=30)
    assert answer.status_code == 413, answer.text[:300]
    error = answer.json()["error"]
    assert error["code"] == "request_too_large"
    assert "once read" in error["message"] and "max_inflight_body_mb_per_key" in error["message"]
    assert upstream.to(CHAT) == []
    # The same values as text: a few bytes each once parsed, and it is read.
    text = json.dumps({"model": "m", "messages": [{"role": "user", "content": numbers}]})
    assert httpx.post(base + CHAT, content=text, headers=JSON, timeout=30).status_code == 200
