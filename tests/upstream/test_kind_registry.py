"""A server kind is one module and one registry line: every kind has its profile, and a kind
registered from outside is a valid setting and is detected, sized and fitted through its profile
like the built-in ones."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

import proxy.upstream.kinds as kinds_package
from proxy.config import ConfigError, Settings, load_settings
from proxy.server_kinds import KINDS, Registered
from proxy.upstream.detect import PROBES, all_probes, listing_kind
from proxy.upstream.facts import ContextWindow
from proxy.upstream.kinds import PROFILES, named, profile
from proxy.upstream.kinds.profile import Body, Fitting, Probe, ServerKind, as_dict, version_at
from proxy.upstream.windows import WindowAsk
from tests.fakes.openai_like import OpenAIServer, Seen
from tests.fakes.servers import ServerThread

MODULES = [
    name
    for info in pkgutil.iter_modules(kinds_package.__path__)
    if (name := info.name) != "profile"
]


def test_every_registered_kind_has_its_profile_under_its_name() -> None:
    assert list(PROFILES) == list(KINDS)
    assert all(found.kind == kind for kind, found in PROFILES.items())


def test_the_registry_says_which_kinds_count_tokens_as_their_profiles_do() -> None:
    counting = {kind for kind, found in PROFILES.items() if found.counter is not None}
    assert {name for name, kind in KINDS.items() if kind.counts} == counting
    assert all(PROFILES[kind].counter_source for kind in counting)
    assert named("tiktoken") is None and named("sglang") is PROFILES["sglang"]


def test_the_config_takes_the_registered_kinds_and_names_them_when_refused() -> None:
    for name in ["auto", *KINDS]:
        assert Settings.model_validate({"upstream": {"kind": name}}).upstream.kind == name
    counting = [name for name, kind in KINDS.items() if kind.counts]
    for name in ["auto", *counting, "tiktoken"]:
        upstream = Settings.model_validate({"upstream": {"tokenizer": name}}).upstream
        assert upstream.tokenizer == name
    with pytest.raises(ConfigError) as refused:
        load_settings(None, environ={}, overrides={"upstream": {"kind": "vlm"}})
    listed = ", ".join(repr(name) for name in ["auto", *KINDS][:-1])
    assert str(refused.value) == (f"config key upstream.kind: Input should be {listed} or 'other'")
    with pytest.raises(ConfigError, match=r"upstream\.tokenizer: Input should be 'auto', "):
        load_settings(None, environ={}, overrides={"upstream": {"tokenizer": "ollama"}})
    schema = Settings.model_json_schema()["$defs"]["UpstreamSettings"]["properties"]
    assert schema["kind"]["enum"] == ["auto", *KINDS]
    assert "ollama" not in schema["tokenizer"]["enum"] and "vllm" in schema["tokenizer"]["enum"]


@pytest.mark.parametrize("module_name", MODULES)
def test_each_kind_module_defines_the_profile_it_is_registered_under(module_name: str) -> None:
    module = importlib.import_module(f"proxy.upstream.kinds.{module_name}")
    found = module.PROFILE
    assert isinstance(found, ServerKind)
    assert found.kind.replace("-", "_") == module_name  # the module is named after its kind
    assert profile(found.kind) is found
    assert all(probe.kind == found.kind for probe in found.probes)


def test_every_registered_kind_has_its_module() -> None:
    assert {kind.replace("-", "_") for kind in PROFILES} == set(MODULES)


def test_probes_are_asked_in_the_registry_order() -> None:
    order = list(dict.fromkeys(probe.kind for probe in PROBES))
    assert order == [kind for kind, found in PROFILES.items() if found.probes]
    assert all_probes() == PROBES


# -- a toy kind, registered from outside ------------------------------------------------------


@dataclass
class FakeToy(OpenAIServer):
    """A made-up server: `GET /toy/status` → `{"engine": "toy", "version", "context"}`; it keeps
    the last `keep_tokens` tokens of a prompt (its context when unset) and says nothing."""

    model_id: str = "toy-7b"
    label: str = "Toy"
    window: int = 2048

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/toy/status", self.status)

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response({"engine": "toy", "version": "0.3.1", "context": self.window})

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        keep = int(body.get("keep_tokens") or self.window) - max_tokens
        if len(tokens) > keep:
            return Seen(path, tokens[-keep:], truncated=True)
        return Seen(path, tokens)


TOY_KIND = "toy"  # a name proxy/config/ never mentions


def toy_status(body: Body) -> bool:
    return as_dict(body).get("engine") == "toy"


async def toy_window(asked: WindowAsk) -> ContextWindow:
    status, body = await asked.upstream.get_json("/toy/status")
    context = as_dict(body).get("context")
    if status == 200 and isinstance(context, int):
        return ContextWindow(context, "toy /toy/status context", hint="start toy with --context")
    return ContextWindow(None, "unknown")


def toy_prepare(fitting: Fitting) -> None:
    fitting.body["cache"] = False


async def toy_fit(fitting: Fitting) -> bool:
    window = fitting.facts.window.tokens
    tokens = await fitting.tokens(0)
    fitting.record.prompt_tokens = tokens
    if window is None or tokens is None:
        return False
    if tokens + fitting.answer > window:
        raise fitting.too_small(tokens, window)
    fitting.body["keep_tokens"] = window
    fitting.record.note = f"keep_tokens {window} sent"
    return True


TOY = ServerKind(
    TOY_KIND,
    "Toy",
    truncates=True,
    probes=(
        Probe(
            TOY_KIND,
            "GET",
            "/toy/status",
            toy_status,
            version=version_at("version"),
        ),
    ),
    window=toy_window,
    prepare=toy_prepare,
    fit=toy_fit,
)


PROFILE = TOY  # what the registry loads: the kind's module is this one


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerKind]:
    """The one line a new kind adds to the registry, made for the test's length."""
    monkeypatch.setitem(KINDS, TOY_KIND, Registered(TOY_KIND, module=__name__))
    yield TOY


def test_a_registered_kind_is_a_valid_setting(toy_registered: ServerKind) -> None:
    assert profile(TOY_KIND) is TOY
    settings = load_settings(None, environ={"PROXY__UPSTREAM__KIND": "toy"})
    assert settings.upstream.kind == "toy"
    schema = Settings.model_json_schema()["$defs"]["UpstreamSettings"]["properties"]["kind"]
    assert "toy" in schema["enum"]
    with pytest.raises(ConfigError) as refused:  # a kind with no counter is no tokenizer
        load_settings(None, environ={}, overrides={"upstream": {"tokenizer": "toy"}})
    assert "upstream.tokenizer: Input should be 'auto'" in str(refused.value)
    assert "'toy'" not in str(refused.value)


def test_an_unregistered_kind_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigError, match=r"upstream\.kind: Input should be 'auto', 'llamacpp'"):
        load_settings(None, environ={"PROXY__UPSTREAM__KIND": "toy"})


@pytest.fixture
def behind_toy(
    servers: ServerThread, proxy_before: Callable[..., str], toy_registered: ServerKind
) -> tuple[str, FakeToy]:
    fake = FakeToy()
    url = servers.serve(fake.app())
    return proxy_before(url), fake


def chat(words: int) -> dict[str, Any]:
    text = " ".join(["word"] * words)
    return {"model": "toy-7b", "messages": [{"role": "user", "content": text}]}


def test_a_registered_kind_is_detected_sized_and_fitted_by_its_profile(
    behind_toy: tuple[str, FakeToy],
) -> None:
    base, fake = behind_toy
    response = httpx.post(base + "/v1/enrich/preview", json=chat(20), timeout=60)
    assert response.status_code == 200, response.text
    upstream = response.json()["decision"]["upstream"]
    assert upstream["kind"] == "toy" and upstream["kind_source"] == "GET /toy/status"
    assert upstream["window"] == 2048 and upstream["window_source"] == "toy /toy/status context"
    assert upstream["answer_tokens"] == 512  # it truncates: room kept for an answer
    assert upstream["note"] == "keep_tokens 2048 sent"

    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
    answer = client.chat.completions.create(**chat(20), max_tokens=16)
    assert answer.choices[0].message.content
    sent = fake.to("/v1/chat/completions")[-1].json
    assert sent["cache"] is False  # the profile's body fix
    assert sent["keep_tokens"] == 2048  # the profile's own fit
    assert not fake.seen[-1].truncated

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**chat(2100), max_tokens=16)
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert "start toy with --context" in error["message"]
    assert len(fake.to("/v1/chat/completions")) == 1  # never sent to be cut


def test_without_the_registry_line_the_kind_is_unknown(
    servers: ServerThread, proxy_before: Callable[..., str]
) -> None:
    fake = FakeToy()
    base = proxy_before(servers.serve(fake.app()))
    response = httpx.post(base + "/v1/enrich/preview", json=chat(20), timeout=60)
    assert response.json()["decision"]["upstream"]["kind"] == "other"


def test_a_kind_known_by_its_model_list_is_asked_in_the_registry_order(
    toy_registered: ServerKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = {"data": [{"id": "m", "toy_context": 8, "context_length": 8}]}
    assert listing_kind(listing) == "openai-compatible"
    toy = ServerKind(TOY_KIND, "Toy", truncates=False, lists=lambda cards: True)
    monkeypatch.setattr("proxy.upstream.detect.PROFILES", {**PROFILES, TOY_KIND: toy})
    # After openai-compatible in the registry, the toy is asked after it; first, before it.
    assert listing_kind(listing) == "openai-compatible"
    reordered = {
        TOY_KIND: toy,
        **{k: v for k, v in PROFILES.items() if k != "toy"},
    }
    monkeypatch.setattr("proxy.upstream.detect.PROFILES", reordered)
    assert listing_kind(listing) == "toy"
