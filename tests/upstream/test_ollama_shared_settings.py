"""A caller's Ollama settings that would change the loaded model for every caller: the window it
asks for is bounded, the rest is never sent (chat completions and Responses alike)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from proxy.upstream.ollama.native import RUNNER_OPTIONS, without_shared_settings
from tests.fakes.ollama import FakeOllama, OllamaModel
from tests.fakes.servers import ServerThread
from tests.upstream.test_ollama import MODEL, ask, client, document, preview, user_file

# What each setting would do to Ollama for every caller (api/types.go `Runner`, server/sched.go).
SHARED: list[tuple[dict[str, Any], str]] = [
    ({"options": {"num_gpu": 1}}, "options.num_gpu"),
    ({"options": {"num_thread": 2}}, "options.num_thread"),
    ({"options": {"num_batch": 64}}, "options.num_batch"),
    ({"options": {"use_mmap": False}}, "options.use_mmap"),
    ({"options": {"main_gpu": 1}}, "options.main_gpu"),
    ({"num_gpu": 1}, "num_gpu"),  # at the top level, as Ollama's own option names
    ({"num_thread": 2}, "num_thread"),
    ({"num_batch": 64}, "num_batch"),
    ({"keep_alive": 0}, "keep_alive"),
    ({"keep_alive": "0s"}, "keep_alive"),
]


@pytest.fixture
def ollama(servers: ServerThread) -> FakeOllama:
    fake = FakeOllama()
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def start(proxy_before: Callable[..., str], ollama: FakeOllama) -> Callable[..., str]:
    def run(**upstream: Any) -> str:
        return proxy_before(ollama.base_url, upstream=upstream)  # type: ignore[attr-defined]

    return run


def send(base: str, route: str, text: str, extra: dict[str, Any]) -> None:
    sdk = client(base)
    if route == "chat":
        sdk.chat.completions.create(**ask(text), extra_body=extra)
    else:
        sdk.responses.create(model=MODEL, input=[user_file(text)], extra_body=extra)


def test_what_is_taken_out_and_why() -> None:
    body = {
        "model": "m",
        "keep_alive": -1,
        "shift": False,
        "num_thread": 4,
        "top_k": 20,
        "options": {"num_ctx": 1_000_000, "num_gpu": 0, "min_p": 0.1, "use_mlock": True},
    }
    sent, shared = without_shared_settings(body)
    assert sent == {"model": "m", "top_k": 20, "options": {"min_p": 0.1}}
    assert shared.asked_num_ctx == 1_000_000
    assert set(shared.dropped) == {
        "keep_alive",
        "shift",
        "num_thread",
        "options.num_gpu",
        "options.use_mlock",
    }
    assert "unloads the model" in shared.dropped["keep_alive"]
    assert "needsReload" in shared.dropped["options.num_gpu"]
    assert body["options"]["num_ctx"] == 1_000_000  # the caller's body is left as it came
    assert without_shared_settings({"options": {"num_ctx": True}})[1].asked_num_ctx is None
    assert {"num_ctx", "num_batch", "num_gpu", "use_mmap", "num_thread"} - {"num_ctx"} <= set(
        RUNNER_OPTIONS
    )


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize(("extra", "name"), SHARED, ids=[f"{n}={e}" for e, n in SHARED])
def test_settings_that_reload_or_unload_the_model_never_reach_ollama(
    start: Callable[..., str], ollama: FakeOllama, route: str, extra: dict[str, Any], name: str
) -> None:
    base = start()
    send(base, route, document(6000), extra)  # over the loaded window: /api/chat
    send(base, route, document(6000), {})  # another caller, who sets nothing
    sent = ollama.to("/api/chat")[0].json
    field = name.removeprefix("options.")
    assert field not in sent and field not in sent["options"]
    # The model was loaded once, as the proxy sized it, and stays loaded for everyone.
    assert ollama.loads == 1 and ollama.reloads == 0 and ollama.unloads == 0
    assert ollama.loaded == {"llama3.2:latest": (8192, False)}
    if route == "chat":
        upstream = preview(base, ask(document(6000), **extra))["decision"]["upstream"]
        assert name in upstream["dropped_options"]


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_a_callers_window_is_bounded_by_the_cap(
    start: Callable[..., str], ollama: FakeOllama, route: str
) -> None:
    base = start()  # upstream.ollama.max_num_ctx: 32768 by default
    send(base, route, document(6000), {"options": {"num_ctx": 1_000_000}})
    assert ollama.to("/api/chat")[-1].json["options"]["num_ctx"] == 32768
    send(base, route, document(6000), {"options": {"num_ctx": 1_048_576}})
    assert ollama.to("/api/chat")[-1].json["options"]["num_ctx"] == 32768
    assert ollama.loaded["llama3.2:latest"] == (32768, False) and ollama.reloads == 0
    if route == "chat":
        upstream = preview(base, ask(document(6000), options={"num_ctx": 1_000_000}))["decision"][
            "upstream"
        ]
        assert upstream["asked_num_ctx"] == 1_000_000 and upstream["num_ctx"] == 32768
        assert (
            "the caller's options.num_ctx 1000000 bounded by the model's trained window"
            in (upstream["note"])
        )


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_a_callers_window_is_bounded_by_the_trained_one(
    start: Callable[..., str], ollama: FakeOllama, route: str
) -> None:
    ollama.models["llama3.2:latest"] = OllamaModel(trained=16384)
    base = start(ollama={"max_num_ctx": 65536})
    send(base, route, document(6000), {"options": {"num_ctx": 1_000_000}})
    assert ollama.to("/api/chat")[-1].json["options"]["num_ctx"] == 16384


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_a_callers_window_within_the_bounds_is_taken_in_the_proxys_steps(
    start: Callable[..., str], ollama: FakeOllama, route: str
) -> None:
    base = start()
    send(base, route, document(6000), {"options": {"num_ctx": 10000}})
    # A power of two, as the proxy's own sizes: few sizes, few reloads.
    assert ollama.to("/api/chat")[-1].json["options"]["num_ctx"] == 16384


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_refuse_mode_never_raises_the_window_for_a_caller(
    start: Callable[..., str], ollama: FakeOllama, route: str
) -> None:
    base = start(ollama={"overflow": "refuse"})
    forced = {"enrich": {"strategy": "inject-full-content"}}
    send(base, route, document(2500), {"options": {"num_ctx": 1_000_000}, **forced})
    assert ollama.to("/api/chat")[-1].json["options"]["num_ctx"] == 4096
    assert ollama.reloads == 0


def test_a_small_request_says_the_window_asked_for_was_not_needed(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"num_ctx": 1_000_000},
        "keep_alive": 0,
    }
    upstream = preview(base, body)["decision"]["upstream"]
    assert upstream["route"] == "openai" and upstream["asked_num_ctx"] == 1_000_000
    assert "not needed" in upstream["dropped_options"]["options.num_ctx"]
    client(base).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"options": {"num_ctx": 1_000_000}, "keep_alive": 0},
    )
    sent = ollama.to("/v1/chat/completions")[-1].json
    assert "options" not in sent or "num_ctx" not in sent["options"]
    assert "keep_alive" not in sent and ollama.unloads == 0


def test_the_answer_is_the_same_without_the_dropped_settings(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    answer = client(base).chat.completions.create(
        **ask(document(6000)), extra_body={"keep_alive": 0, "options": {"num_gpu": 0}}
    )
    assert answer.choices[0].message.content == "The answer from the fake Ollama ."
    with pytest.raises(openai.BadRequestError):  # over the cap: refused, a window or not
        client(base).chat.completions.create(
            **ask(document(40000)),
            extra_body={
                "options": {"num_ctx": 1_000_000},
                "enrich": {"strategy": "inject-full-content"},
            },
        )
    assert ollama.loaded["llama3.2:latest"][0] == 8192
