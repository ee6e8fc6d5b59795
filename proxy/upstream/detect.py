"""Which kind of server the upstream is, from what it answers: one probe per kind, in order.

Each probe asks for an endpoint only that kind serves and checks the fields only it sends
(cited from each server's source or documentation beside the signature). The order puts the
most common upstream first and, where one server imitates another (TabbyAPI answers a
llama.cpp-shaped `/props`, SGLang an Ollama-shaped `/api/*`, vLLM and SGLang the same
`/tokenize`), the signature tells them apart or the imitator is asked first.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from proxy.config import UpstreamKind
from proxy.errors import ProxyError, UpstreamTimeout
from proxy.logs import probe_failed
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import Detection

log = structlog.get_logger(__name__)

Body = Any
"""A parsed JSON answer (None when it was not JSON)."""


def _dict(body: Body) -> dict[str, Any]:
    return body if isinstance(body, dict) else {}


def llamacpp_props(body: Body) -> bool:
    """llama.cpp `GET /props` (tools/server/server.cpp): `default_generation_settings` with the
    slot's parameters, plus `model_path`/`build_info` in current builds. TabbyAPI answers a
    `/props` too (endpoints/core/router.py), with `default_generation_settings: {n_ctx}` only."""
    props = _dict(body)
    settings = props.get("default_generation_settings")
    if not isinstance(settings, dict):
        return False
    return "build_info" in props or "model_path" in props or len(settings) > 1


def sglang_model_info(body: Body) -> bool:
    """SGLang `GET /get_model_info` (srt/entrypoints/http_server.py): `model_path`,
    `is_generation` (and `tokenizer_path`)."""
    info = _dict(body)
    return isinstance(info.get("model_path"), str) and "is_generation" in info


def ollama_version(body: Body) -> bool:
    """Ollama `GET /api/version` (server/routes.go) → `{"version": "0.12.6"}`."""
    version = _dict(body)
    return set(version) == {"version"} and isinstance(version["version"], str)


def koboldcpp_version(body: Body) -> bool:
    """KoboldCpp `GET /api/extra/version` (koboldcpp.py) → `{"result": "KoboldCpp", "version"}`."""
    return _dict(body).get("result") == "KoboldCpp"


def tabbyapi_serviceinfo(body: Body) -> bool:
    """TabbyAPI `GET /.well-known/serviceinfo` (endpoints/core/router.py): `software.name`."""
    software = _dict(body).get("software")
    return isinstance(software, dict) and software.get("name") == "TabbyAPI"


def lmstudio_v1_models(body: Body) -> bool:
    """LM Studio ≥ 0.4 `GET /api/v1/models` (lmstudio-ai/docs 1_developer/2_rest/list.md):
    `{"models": [{"key", "loaded_instances", "max_context_length", ...}]}`."""
    models = _dict(body).get("models")
    return isinstance(models, list) and any(
        isinstance(m, dict) and "key" in m and "max_context_length" in m for m in models
    )


def lmstudio_v0_models(body: Body) -> bool:
    """LM Studio ≥ 0.3.6 `GET /api/v0/models` (1_developer/2_rest/endpoints.md): OpenAI's list
    with `state` ("loaded"/"not-loaded") and `max_context_length` on each model."""
    data = _dict(body).get("data")
    return isinstance(data, list) and any(
        isinstance(m, dict) and "state" in m and "max_context_length" in m for m in data
    )


def tgi_info(body: Body) -> bool:
    """TGI `GET /info` (router/src/lib.rs `Info`): `model_id`, `max_total_tokens` (and
    `max_input_tokens`, `max_input_length` before 2.0), `router`, `version`."""
    info = _dict(body)
    return "model_id" in info and "max_total_tokens" in info


def textgen_model_info(body: Body) -> bool:
    """text-generation-webui `GET /v1/internal/model/info` (modules/api/models.py):
    `model_name`, `lora_names` (and `loader`)."""
    info = _dict(body)
    return "model_name" in info and "lora_names" in info


def vllm_tokenize(body: Body) -> bool:
    """vLLM `POST /tokenize {"prompt"}` → `{"count", "max_model_len", "tokens"}`."""
    answer = _dict(body)
    return isinstance(answer.get("count"), int) and "tokens" in answer


def llama_cpp_python_count(body: Body) -> bool:
    """llama-cpp-python `POST /extras/tokenize/count {"input"}` (llama_cpp/server/app.py)
    → `{"count": N}` and nothing else."""
    answer = _dict(body)
    return set(answer) == {"count"} and isinstance(answer["count"], int)


# What a build without a version says instead of one: llama.cpp built outside its git tree
# (xllamacpp's) names itself b0-unknown.
_NO_VERSION = re.compile(r"(?:b0-)?unknown|b0|0\.0\.0|", re.IGNORECASE)


def _version(key: str) -> Callable[[Body], str | None]:
    def read(body: Body) -> str | None:
        value = _dict(body).get(key)
        if not isinstance(value, str) or _NO_VERSION.fullmatch(value.strip()):
            return None
        return value

    return read


def _none(body: Body) -> str | None:
    return None


@dataclass(frozen=True)
class Probe:
    """One request whose answer identifies one kind."""

    kind: UpstreamKind
    method: str
    path: str
    matches: Callable[[Body], bool]
    payload: dict[str, Any] | None = None
    version: Callable[[Body], str | None] = _none

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


# Read this list to know how the proxy tells servers apart, in the order it asks.
PROBES: list[Probe] = [
    Probe("llamacpp", "GET", "/props", llamacpp_props, version=_version("build_info")),
    Probe("sglang", "GET", "/get_model_info", sglang_model_info, version=_version("version")),
    Probe("ollama", "GET", "/api/version", ollama_version, version=_version("version")),
    Probe("koboldcpp", "GET", "/api/extra/version", koboldcpp_version, version=_version("version")),
    Probe("tabbyapi", "GET", "/.well-known/serviceinfo", tabbyapi_serviceinfo),
    Probe("lmstudio", "GET", "/api/v1/models", lmstudio_v1_models),
    Probe("lmstudio", "GET", "/api/v0/models", lmstudio_v0_models),
    Probe("tgi", "GET", "/info", tgi_info, version=_version("version")),
    Probe("textgen", "GET", "/v1/internal/model/info", textgen_model_info),
    Probe(
        "vllm",
        "POST",
        "/tokenize",
        vllm_tokenize,
        {"prompt": "probe", "add_special_tokens": False},
    ),
    Probe(
        "llama-cpp-python", "POST", "/extras/tokenize/count", llama_cpp_python_count, {"input": "x"}
    ),
]

# Context windows in OpenAI-style model lists of hosted APIs, by field.
LISTING_WINDOW_FIELDS = ("context_length", "context_window", "max_context_length", "max_model_len")


def listing_kind(body: Body) -> UpstreamKind | None:
    """A `/v1/models` list that states its models' windows: OpenRouter's (`context_length`,
    `top_provider`, `pricing`, its docs' Models API schema), or another hosted API's."""
    data = _dict(body).get("data")
    if not isinstance(data, list):
        return None
    cards = [card for card in data if isinstance(card, dict)]
    if any("top_provider" in card and "context_length" in card for card in cards):
        return "openrouter"
    if any(isinstance(card.get(key), int) for card in cards for key in LISTING_WINDOW_FIELDS):
        return "openai-compatible"
    return None


async def _ask(upstream: UpstreamClient, probe: Probe) -> tuple[int, Body]:
    if probe.method == "GET":
        return await upstream.get_json(probe.path)
    return await upstream.post_json(probe.path, probe.payload)


async def detect_kind(
    upstream: UpstreamClient, probes: Sequence[Probe] = PROBES, timeout_s: float | None = None
) -> tuple[Detection, int]:
    """The upstream's kind and how many requests finding it took. Never raises: a failed
    probe gives `other`, uncertain, so that the next request asks again. `timeout_s` bounds
    all the probes together: an upstream that holds them open without an answer gives `other`,
    uncertain and `timed_out`."""
    asked = 0
    refused = False
    asking = ""
    try:
        async with asyncio.timeout(timeout_s):
            for probe in probes:
                asking = probe.name
                status, body = await _ask(upstream, probe)
                asked += 1
                refused = refused or status in (401, 403)
                if status == 200 and probe.matches(body):
                    return Detection(probe.kind, probe.name, True, probe.version(body)), asked
            asking = "GET /v1/models"
            status, listing = await upstream.get_json("/v1/models")
            asked += 1
    except TimeoutError:
        log.warning("upstream probes unanswered", waiting_for=asking, seconds=timeout_s)
        return Detection(
            "other",
            f"unknown: {asking} was not answered in {timeout_s:g} s (upstream.probe_timeout_s)",
            certain=False,
            timed_out=True,
        ), asked + 1
    except ProxyError as error:
        probe_failed(log, "upstream probe failed", error.code, error.message)
        unreached = error.code in ("upstream_unreachable", "upstream_timeout")
        detection = Detection(
            "other",
            f"probe failed: {error.message}",
            False,
            failure=error if unreached else None,
            timed_out=isinstance(error, UpstreamTimeout),
        )
        return detection, asked
    refused = refused or status in (401, 403)
    kind = listing_kind(listing) if status == 200 else None
    if kind is not None:
        return Detection(kind, "GET /v1/models (context lengths in the list)"), asked
    if refused:
        return Detection("other", "probes refused for want of a key", certain=False), asked
    return Detection("other", "no probe matched"), asked
