"""Telling servers apart from what they answer (pure signatures, then the probe order)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.config import load_settings
from proxy.errors import UpstreamError
from proxy.upstream.detect import PROBES, detect_kind, listing_kind
from proxy.upstream.facts import Detection
from proxy.upstream.introspection import ModelIntrospection
from proxy.upstream.kinds.koboldcpp import koboldcpp_version
from proxy.upstream.kinds.llama_cpp_python import llama_cpp_python_count
from proxy.upstream.kinds.llamacpp import llamacpp_props
from proxy.upstream.kinds.lmstudio import lmstudio_v0_models, lmstudio_v1_models
from proxy.upstream.kinds.ollama import ollama_version
from proxy.upstream.kinds.sglang import sglang_model_info
from proxy.upstream.kinds.tabbyapi import tabbyapi_serviceinfo
from proxy.upstream.kinds.textgen import textgen_model_info
from proxy.upstream.kinds.tgi import tgi_info
from proxy.upstream.kinds.vllm import vllm_tokenize

LLAMACPP_PROPS = {
    "default_generation_settings": {"n_ctx": 4096, "params": {"temperature": 0.8}},
    "total_slots": 1,
    "model_path": "/models/gemma.gguf",
    "chat_template": "...",
    "build_info": "b6800-abcdef",
}
TABBY_PROPS = {
    "total_slots": 1,
    "chat_template": "",
    "default_generation_settings": {"n_ctx": 8192},
}


def test_llamacpp_props_and_tabbyapis_imitation() -> None:
    assert llamacpp_props(LLAMACPP_PROPS)
    # Older llama.cpp builds: no model_path/build_info, but the slot's settings in full.
    assert llamacpp_props({"default_generation_settings": {"n_ctx": 2048, "seed": -1}})
    assert not llamacpp_props(TABBY_PROPS)
    assert not llamacpp_props({"detail": "Not Found"}) and not llamacpp_props(None)


def test_each_signature_matches_its_own_server_only() -> None:
    answers: dict[str, Any] = {
        "sglang": {"model_path": "Qwen/Qwen2.5-7B", "tokenizer_path": "x", "is_generation": True},
        "ollama": {"version": "0.13.0"},
        "koboldcpp": {"result": "KoboldCpp", "version": "1.76", "protected": False},
        "tabbyapi": {"version": 0.1, "software": {"name": "TabbyAPI"}, "api": {}},
        "lmstudio1": {"models": [{"key": "qwen", "loaded_instances": [], "max_context_length": 4}]},
        "lmstudio0": {
            "object": "list",
            "data": [{"id": "q", "state": "loaded", "max_context_length": 4}],
        },
        "tgi": {"model_id": "m", "max_input_tokens": 1, "max_total_tokens": 2, "router": "r"},
        "textgen": {"model_name": "m", "lora_names": [], "loader": "llama.cpp"},
        "vllm": {"count": 1, "max_model_len": 8192, "tokens": [5]},
        "llama-cpp-python": {"count": 1},
    }
    signatures = {
        "sglang": sglang_model_info,
        "ollama": ollama_version,
        "koboldcpp": koboldcpp_version,
        "tabbyapi": tabbyapi_serviceinfo,
        "lmstudio1": lmstudio_v1_models,
        "lmstudio0": lmstudio_v0_models,
        "tgi": tgi_info,
        "textgen": textgen_model_info,
        "vllm": vllm_tokenize,
        "llama-cpp-python": llama_cpp_python_count,
    }
    for name, signature in signatures.items():
        for other, answer in answers.items():
            assert signature(answer) is (name == other), (name, other)
    # vLLM's /version and llama.cpp's answers are not Ollama's version.
    assert not ollama_version({"version": "0.9.2", "commit": "x"})


def test_listing_kinds() -> None:
    openrouter = {
        "data": [{"id": "m", "context_length": 8192, "top_provider": {"context_length": 8192}}]
    }
    assert listing_kind(openrouter) == "openrouter"
    assert listing_kind({"data": [{"id": "m", "context_window": 131072}]}) == "openai-compatible"
    assert listing_kind({"data": [{"id": "m", "owned_by": "me"}]}) is None
    assert listing_kind({"data": "none"}) is None and listing_kind(None) is None


def test_imitators_are_asked_before_the_imitated() -> None:
    order = [probe.kind for probe in PROBES]
    assert order[0] == "llamacpp"  # the main upstream: one request
    assert order.index("sglang") < order.index("ollama")  # SGLang answers Ollama's /api/*
    assert order.index("sglang") < order.index("vllm")  # and vLLM's /tokenize


class Scripted:
    """An upstream client answering each path from a script; records what it was asked."""

    def __init__(self, answers: dict[str, tuple[int, Any]], fail: bool = False) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.fail = fail

    async def get_json(self, path: str) -> tuple[int, Any]:
        return await self._answer(path)

    async def post_json(self, path: str, payload: Any) -> tuple[int, Any]:
        return await self._answer(path)

    async def _answer(self, path: str) -> tuple[int, Any]:
        self.asked.append(path)
        if self.fail:
            raise UpstreamError("upstream http://x is unreachable: Connection refused")
        return self.answers.get(path, (404, {"detail": "Not Found"}))


async def test_detection_stops_at_the_first_match() -> None:
    upstream = Scripted({"/props": (200, LLAMACPP_PROPS)})
    found, asked = await detect_kind(upstream)  # type: ignore[arg-type]
    assert (found.kind, found.source, found.version, asked) == (
        "llamacpp",
        "GET /props",
        "b6800-abcdef",
        1,
    )


async def test_ollama_is_found_in_three_requests() -> None:
    upstream = Scripted({"/api/version": (200, {"version": "0.13.0"})})
    found, asked = await detect_kind(upstream)  # type: ignore[arg-type]
    assert (found.kind, found.version, asked) == ("ollama", "0.13.0", 3)


async def test_tabbyapi_is_not_taken_for_llamacpp() -> None:
    upstream = Scripted(
        {
            "/props": (200, TABBY_PROPS),
            "/.well-known/serviceinfo": (200, {"software": {"name": "TabbyAPI"}}),
        }
    )
    found, _ = await detect_kind(upstream)  # type: ignore[arg-type]
    assert found.kind == "tabbyapi" and found.certain


async def test_a_failed_probe_gives_other_and_is_not_kept() -> None:
    found, asked = await detect_kind(Scripted({}, fail=True))  # type: ignore[arg-type]
    assert found.kind == "other" and not found.certain
    assert found.source.startswith("probe failed: upstream http://x is unreachable")
    assert asked == 0


async def test_probes_refused_for_want_of_a_key_are_not_kept() -> None:
    upstream = Scripted({"/props": (401, {"error": "no key"}), "/v1/models": (401, None)})
    found, _ = await detect_kind(upstream)  # type: ignore[arg-type]
    assert found.kind == "other" and not found.certain


@pytest.mark.parametrize(
    ("answers", "kind"),
    [
        ({}, "other"),
        ({"/v1/models": (200, {"data": [{"id": "m", "context_length": 1}]})}, "openai-compatible"),
    ],
)
async def test_servers_no_probe_knows(answers: dict[str, tuple[int, Any]], kind: str) -> None:
    upstream = Scripted(answers)
    found, asked = await detect_kind(upstream)  # type: ignore[arg-type]
    assert found.kind == kind and found.certain
    assert asked == len(PROBES) + 1 and upstream.asked[-1] == "/v1/models"


class Silent(Scripted):
    """An upstream that holds every probe open, without an answer."""

    base_url = "http://silent"

    async def _answer(self, path: str) -> tuple[int, Any]:
        self.asked.append(path)
        await asyncio.sleep(3600)
        raise AssertionError("never answered")


async def test_probes_held_open_are_bounded_all_together() -> None:
    found, asked = await detect_kind(Silent({}), timeout_s=0.2)  # type: ignore[arg-type]
    assert found.kind == "other" and not found.certain and found.timed_out
    assert (
        found.source == "unknown: GET /props was not answered in 0.2 s (upstream.probe_timeout_s)"
    )
    assert asked == 1
    assert found.to_json()["known"] is False


def introspection(upstream: Scripted, **settings: Any) -> ModelIntrospection:
    config = load_settings(
        None,
        environ={},
        overrides={"upstream": {"base_url": "http://silent", "probe_timeout_s": 0.2, **settings}},
    )
    return ModelIntrospection(config, upstream)  # type: ignore[arg-type]


async def test_requests_meanwhile_wait_for_one_detection_and_the_unknown_stands_a_while() -> None:
    upstream = Silent({})
    found = introspection(upstream, probe_retry_s=30)
    now = [1000.0]
    found._unanswered.clock = lambda: now[0]
    # Four requests at once: one set of probes (one held request), all four wait for it once.
    four = await asyncio.gather(*(found.detection() for _ in range(4)))
    assert upstream.asked == ["/props"]
    assert len({d.source for d in four}) == 1
    kind = four[0]
    assert kind.kind == "other" and not kind.certain
    assert kind.source.endswith("; taken as an OpenAI-compatible server, asked again after 30 s")
    # Until the pause is over, requests go on with it and nothing is asked.
    now[0] += 29
    assert await found.detection() == kind and upstream.asked == ["/props"]
    assert found.known_detection() == kind
    # Then the upstream is asked again; unanswered again, the pause doubles (up to 32 times).
    now[0] += 2
    again = await found.detection()
    assert upstream.asked == ["/props"] * 2
    assert again.source.endswith("asked again after 60 s")
    for _ in range(8):
        now[0] += 10_000
        await found.detection()
    assert (await found.detection()).source.endswith("asked again after 960 s")


async def test_the_window_of_an_upstream_that_left_the_probes_unanswered() -> None:
    class Gateway(Silent):
        """Holds every path open but /v1/models, which it routes (a window in the list)."""

        async def _answer(self, path: str) -> tuple[int, Any]:
            if path == "/v1/models":
                self.asked.append(path)
                return 200, {"data": [{"id": "m", "max_model_len": 8192}]}
            return await super()._answer(path)

    gateway = Gateway({})
    window = await introspection(gateway).context_window("m")
    assert window.tokens == 8192 and gateway.asked == ["/props", "/v1/models"]
    silent = Silent({})
    found = introspection(silent)
    window = await found.context_window("m")
    # A fifth of the probes' time: the request waited for them already.
    assert window.tokens is None and window.source.startswith("unknown (not answered in 0.04 s")
    assert await found.context_window("m") == window  # remembered: not asked again meanwhile
    assert silent.asked == ["/props", "/v1/models"]


async def test_an_unanswered_window_lookup_is_bounded_and_stands_a_while() -> None:
    class Quiet(Scripted):
        base_url = "http://quiet"

        async def _answer(self, path: str) -> tuple[int, Any]:
            self.asked.append(path)
            if path == "/v1/models":
                await asyncio.sleep(3600)
            return (404, None)

    upstream = Quiet({})
    found = introspection(upstream, kind="vllm")
    window = await found.context_window("m")
    assert window.tokens is None
    assert window.source == (
        "unknown (not answered in 0.2 s, upstream.probe_timeout_s; asked again after 30 s)"
    )
    assert await found.context_window("m") == window
    assert upstream.asked == ["/v1/models"]
    assert await found.detection() == Detection("vllm", "upstream.kind in the config")
