"""Whether the upstream model is instruction-tuned and whether its server parses its tool calls,
learnt from each kind of server (fakes with the servers' own shapes), overridden per model in
the config, shown in the decision record and /healthz."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import httpx
import pytest

from proxy.config import load_settings
from proxy.upstream.abilities import Abilities, AbilityIntrospection
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import Fact
from proxy.upstream.introspection import ModelIntrospection
from proxy.upstream.local import is_base_model, trained_for_chat
from tests.fakes.lmstudio import FakeLmStudio
from tests.fakes.ollama import FakeOllama, OllamaModel
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import (
    BASE_MODEL_CAPS,
    HERMES_TEMPLATE,
    LLAMACPP_CHATML_FALLBACK,
    TOOL_TEMPLATE_CAPS,
    FakeUpstream,
)

Fake = FakeUpstream | FakeOllama | FakeLmStudio


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


def abilities_of(
    fake: Fake,
    servers: ServerThread,
    session: aiohttp.ClientSession,
    *,
    spawned: Fact[bool | None] | None = None,
    kind: str = "auto",
    **models: Any,
) -> AbilityIntrospection:
    base_url = servers.serve(fake.app())
    upstream_settings = {"base_url": base_url, "kind": kind}
    settings = load_settings(
        None, environ={}, overrides={"upstream": upstream_settings, "models": models}
    )
    upstream = UpstreamClient(settings.upstream, session)
    kind = ModelIntrospection(settings, upstream).kind
    return AbilityIntrospection(settings, upstream, kind, spawned)


async def learn(fake: Fake, servers: ServerThread, session: aiohttp.ClientSession) -> Abilities:
    return await abilities_of(fake, servers, session).of("m")


# -- llama.cpp -------------------------------------------------------------------------------


async def test_llamacpp_base_model_its_chatml_fallback_and_caps_say_no(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    # The bundled Gemma 3 270M: no template of its own, so llama.cpp's ChatML fallback.
    fake = FakeUpstream(chat_template=LLAMACPP_CHATML_FALLBACK, template_caps=BASE_MODEL_CAPS)
    found = await learn(fake, servers, session)
    assert found.instruct == Fact(
        False,
        True,
        "llama.cpp /props chat_template is its ChatML fallback: "
        "the GGUF has no chat template of its own",
    )
    assert found.tools.value is False and found.tools.exact
    assert "supports_tool_calls is false" in found.tools.source
    assert fake.to("/apply-template") == []  # the caps settle it: --jinja is not asked


async def test_llamacpp_tool_template_with_jinja_calls_tools(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(chat_template=HERMES_TEMPLATE, template_caps=TOOL_TEMPLATE_CAPS)
    found = await learn(fake, servers, session)
    assert found.instruct.value is True and found.instruct.exact
    assert found.tools.value is True and found.tools.exact
    assert found.tools.source == (
        "llama.cpp /props chat_template_caps.supports_tool_calls, "
        "--jinja on (POST /apply-template took a tool)"
    )
    [probe] = fake.to("/apply-template")
    assert probe.json["tools"][0]["function"]["name"] == "probe"


async def test_llamacpp_tool_template_without_jinja_does_not(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(
        chat_template=HERMES_TEMPLATE, template_caps=TOOL_TEMPLATE_CAPS, jinja=False
    )
    found = await learn(fake, servers, session)
    assert found.instruct.value is True
    assert found.tools == Fact(
        False, True, "llama.cpp runs without --jinja ('tools param requires --jinja flag')"
    )


async def test_llamacpp_tool_use_template_in_props_means_jinja(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(
        chat_template=HERMES_TEMPLATE,
        template_caps=TOOL_TEMPLATE_CAPS,
        tool_use_template=HERMES_TEMPLATE,
    )
    found = await learn(fake, servers, session)
    assert found.tools.value is True and "chat_template_tool_use" in found.tools.source
    assert fake.to("/apply-template") == []


@pytest.mark.parametrize(
    ("template", "instruct", "tools", "exact_tools"),
    [
        ("", False, False, False),  # builds before the template refactor: "" for none
        (HERMES_TEMPLATE, True, True, False),  # it renders tool_calls, and --jinja is on
        ("{% for m in messages %}{{ m.content }}{% endfor %}", True, False, False),
        ("gemma", None, False, False),  # --chat-template gemma without --jinja
    ],
    ids=["empty", "tool-template", "plain-template", "builtin-name"],
)
async def test_llamacpp_builds_without_caps(
    servers: ServerThread,
    session: aiohttp.ClientSession,
    template: str,
    instruct: bool | None,
    tools: bool,
    exact_tools: bool,
) -> None:
    found = await learn(FakeUpstream(chat_template=template), servers, session)
    assert found.instruct.value is instruct
    assert found.tools.value is tools and found.tools.exact is exact_tools
    assert "without chat_template_caps" in found.tools.source


async def test_the_spawned_gguf_decides_instruct(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    # The proxy's own server runs the base Gemma with llama.cpp's built-in `gemma` template:
    # /props cannot tell, the GGUF's metadata can.
    spawned = trained_for_chat({"general.architecture": "gemma3", "general.name": "Gemma"})
    fake = FakeUpstream(chat_template="gemma", template_caps=BASE_MODEL_CAPS)
    found = await abilities_of(fake, servers, session, spawned=spawned).of("m")
    assert found.instruct == spawned and spawned.value is False
    assert "no tokenizer.chat_template and names no fine-tune" in found.instruct.source
    assert found.tools.value is False


@pytest.mark.parametrize(
    ("metadata", "instruct"),
    [
        ({}, None),  # the header could not be read
        ({"general.architecture": "gemma3"}, False),
        ({"general.architecture": "gemma3", "tokenizer.chat_template": "{{ x }}"}, True),
        ({"general.architecture": "llama", "general.finetune": "Instruct"}, True),
    ],
)
def test_trained_for_chat_agrees_with_is_base_model(
    metadata: dict[str, Any], instruct: bool | None
) -> None:
    fact = trained_for_chat(metadata)  # type: ignore[arg-type]
    assert fact.value is instruct and fact.exact is (instruct is not None)
    assert is_base_model(metadata) is (instruct is False)  # type: ignore[arg-type]


# -- vLLM ------------------------------------------------------------------------------------


async def test_vllm_chat_model_without_a_tool_parser(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(kind="vllm")
    found = await learn(fake, servers, session)
    assert found.instruct.value is True and "POST /tokenize" in found.instruct.source
    assert found.tools.value is False and "--enable-auto-tool-choice" in found.tools.source
    assert fake.to("/v1/chat/completions") == []  # the render endpoint said it, nothing generated


async def test_vllm_with_auto_tool_choice_calls_tools(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(kind="vllm", auto_tools=True)
    found = await learn(fake, servers, session)
    assert found.tools == Fact(
        True,
        True,
        "vLLM took tool_choice auto (POST /v1/chat/completions/render): "
        "--enable-auto-tool-choice with a --tool-call-parser",
    )
    assert fake.to("/v1/chat/completions") == []


@pytest.mark.parametrize("auto_tools", [True, False])
async def test_vllm_without_the_render_endpoint_asks_one_token(
    servers: ServerThread, session: aiohttp.ClientSession, auto_tools: bool
) -> None:
    fake = FakeUpstream(kind="vllm", auto_tools=auto_tools, render_endpoint=False)
    found = await learn(fake, servers, session)
    assert found.tools.value is auto_tools and "one-token" in found.tools.source
    [asked] = fake.to("/v1/chat/completions")
    assert asked.json["max_tokens"] == 1 and asked.json["tool_choice"] == "auto"


async def test_vllm_base_model_has_no_chat_template(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(kind="vllm", chat_template="", auto_tools=True)
    found = await learn(fake, servers, session)
    assert found.instruct.value is False and found.instruct.exact
    assert "default chat template is no longer allowed" in found.instruct.source
    # The tool parser is on, but the model cannot be chatted with: the answer is not known.
    assert found.tools.value is None and not found.keep


# -- Ollama ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "version", "instruct", "tools", "tools_source"),
    [
        (OllamaModel("m:latest"), "0.13.0", True, True, "Ollama /api/show capabilities: tools"),
        (
            OllamaModel("m:latest", base=True),
            "0.13.0",
            False,
            False,
            "Ollama /api/show capabilities without tools",
        ),
        (OllamaModel("m:latest"), "0.6.2", True, True, "Ollama /api/show template uses .Tools"),
        (
            OllamaModel("m:latest", base=True),
            "0.6.2",
            False,
            False,
            "Ollama /api/show template does not use .Tools",
        ),
    ],
    ids=["chat", "base", "chat-before-capabilities", "base-before-capabilities"],
)
async def test_ollama_capabilities_and_template(
    servers: ServerThread,
    session: aiohttp.ClientSession,
    model: OllamaModel,
    version: str,
    instruct: bool,
    tools: bool,
    tools_source: str,
) -> None:
    fake = FakeOllama(version=version, models={"m:latest": model})
    found = await learn(fake, servers, session)
    assert found.instruct.value is instruct and found.instruct.exact
    if not instruct:
        assert found.instruct.source == (
            "Ollama /api/show template is {{ .Prompt }}: no chat template"
        )
    assert found.tools == Fact(tools, True, tools_source)


async def test_ollama_renderer_is_a_chat_model_and_a_missing_model_is_kept(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeOllama(models={"m:latest": OllamaModel("m:latest", base=True, renderer="qwen3")})
    abilities = abilities_of(fake, servers, session)
    found = await abilities.of("m")
    assert found.instruct == Fact(True, True, "Ollama /api/show renderer 'qwen3'")
    missing = await abilities.of("nowhere")
    assert missing.instruct.value is None and missing.keep  # a 404 stays a 404
    await abilities.of("nowhere")
    assert [r.json["model"] for r in fake.to("/api/show")] == ["m", "nowhere"]


# -- LM Studio -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fake", "instruct", "tools", "tools_source"),
    [
        (
            FakeLmStudio(),
            True,
            True,
            "LM Studio /api/v1/models capabilities.trained_for_tool_use",
        ),
        (FakeLmStudio(trained_for_tools=False), None, False, "trained_for_tool_use is false"),
        (FakeLmStudio(v1=False), True, True, "LM Studio /api/v0/models capabilities: tool_use"),
        (FakeLmStudio(v1=False, trained_for_tools=False), None, False, "no tool_use"),
        (FakeLmStudio(v1=False, v0_capabilities=False), None, None, "names no capabilities"),
    ],
    ids=["v1-trained", "v1-untrained", "v0-trained", "v0-untrained", "v0-silent"],
)
async def test_lmstudio_trained_for_tool_use(
    servers: ServerThread,
    session: aiohttp.ClientSession,
    fake: FakeLmStudio,
    instruct: bool | None,
    tools: bool | None,
    tools_source: str,
) -> None:
    found = await abilities_of(fake, servers, session).of(fake.model_id)
    assert found.instruct.value is instruct
    assert found.instruct.exact is False  # LM Studio never says it outright
    assert found.tools.value is tools and tools_source in found.tools.source


# -- any kind --------------------------------------------------------------------------------


async def test_other_kinds_are_unknown(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(kind="plain")
    found = await learn(fake, servers, session)
    assert found.instruct.value is None and found.tools.value is None
    assert found.keep  # nothing more to learn by asking again


async def test_the_config_overrides_what_is_learnt(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(chat_template=HERMES_TEMPLATE, template_caps=TOOL_TEMPLATE_CAPS)
    abilities = abilities_of(fake, servers, session, m={"tools": False}, n={"instruct": False})
    found = await abilities.of("m")
    assert found.tools == Fact(False, True, "models.m.tools: false")
    assert found.instruct.value is True  # still learnt
    other = await abilities.of("n")
    assert other.instruct == Fact(False, True, "models.n.instruct: false")
    assert other.tools.value is True


async def test_both_configured_asks_nothing(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream()
    abilities = abilities_of(fake, servers, session, m={"instruct": True, "tools": True})
    found = await abilities.of("m")
    assert (found.instruct.value, found.tools.value) == (True, True)
    assert fake.requests == []


async def test_asked_once_per_model(servers: ServerThread, session: aiohttp.ClientSession) -> None:
    fake = FakeUpstream(chat_template=HERMES_TEMPLATE, template_caps=TOOL_TEMPLATE_CAPS)
    abilities = abilities_of(fake, servers, session)
    first = await abilities.of("m")
    again = await abilities.of("m")
    assert first == again
    props = len(fake.to("/props"))
    await abilities.of("other")
    assert len(fake.to("/props")) == props + 1  # another model is asked for itself
    assert len(fake.to("/apply-template")) == 2  # once for each model


async def test_a_failed_probe_is_unknown_and_asked_again(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(required_key="secret")  # /props refused: 401 without the key
    abilities = abilities_of(fake, servers, session, kind="llamacpp")  # no detection asked
    found = await abilities.of("m")
    assert found.instruct == Fact(None, False, "llama.cpp /props answered 401")
    assert not found.keep
    await abilities.of("m")
    assert len(fake.to("/props")) == 2


async def test_an_unreachable_upstream_never_fails(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    settings = load_settings(
        None,
        environ={},
        overrides={"upstream": {"base_url": "http://127.0.0.1:9", "kind": "llamacpp"}},
    )
    upstream = UpstreamClient(settings.upstream, session)
    abilities = AbilityIntrospection(
        settings, upstream, ModelIntrospection(settings, upstream).kind
    )
    found = await abilities.of("m")
    assert found.instruct.value is None and found.instruct.source.startswith("unknown: ")
    assert not found.keep


# -- through the proxy -----------------------------------------------------------------------


def file_question(model: str) -> dict[str, Any]:
    data = base64.b64encode(b"The keeper fed the cats at noon.").decode()
    part = {
        "type": "file",
        "file": {"filename": "n.txt", "file_data": f"data:text/plain;base64,{data}"},
    }
    content = [{"type": "text", "text": "Who fed the cats?"}, part]
    return {"model": model, "messages": [{"role": "user", "content": content}]}


KEYS = [
    {"name": "team", "key": "team-abilities-key-0001"},
    {"name": "ops", "key": "ops-abilities-key-00002", "admin": True},
]


def test_the_decision_record_and_healthz_show_them(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.chat_template = LLAMACPP_CHATML_FALLBACK
    upstream.template_caps = BASE_MODEL_CAPS
    base = make_proxy(server={"api_keys": KEYS})
    team = {"Authorization": f"Bearer {KEYS[0]['key']}"}
    admin = {"Authorization": f"Bearer {KEYS[1]['key']}"}
    preview = httpx.post(
        base + "/v1/enrich/preview", json=file_question("gemma-270m"), headers=team, timeout=60
    )
    assert preview.status_code == 200, preview.text
    record = preview.json()["decision"]["upstream"]
    assert record["instruct"] is False and "ChatML fallback" in record["instruct_source"]
    assert record["tools"] is False and "supports_tool_calls" in record["tools_source"]

    def details(headers: dict[str, str]) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(base + "/healthz", headers=headers, timeout=30).json()
        return found["details"]["upstream"]  # type: ignore[no-any-return]

    for headers in ({}, team):  # the model names are the callers': an admin's only
        assert "abilities" not in details(headers)
    shown = details(admin)["abilities"]["gemma-270m"]
    assert shown["instruct"]["value"] is False and shown["instruct"]["exact"] is True
    assert "no chat template of its own" in shown["instruct"]["source"]
    assert shown["tools"]["value"] is False
