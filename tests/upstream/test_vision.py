"""Whether the upstream model sees images and what one costs it, learnt from each kind of server
(fakes with the servers' own shapes), overridden per model in the config."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pymupdf
import pytest

from proxy.config import load_settings
from proxy.upstream.client import UpstreamClient
from proxy.upstream.introspection import ModelIntrospection
from proxy.upstream.vision import VisionIntrospection, blank_png
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.fakes.vision import VisionUpstream, llamacpp_image_tokens


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


def vision_of(
    fake: FakeUpstream, servers: ServerThread, session: aiohttp.ClientSession, **models: Any
) -> VisionIntrospection:
    base_url = servers.serve(fake.app())
    settings = load_settings(
        None, environ={}, overrides={"upstream": {"base_url": base_url}, "models": models}
    )
    upstream = UpstreamClient(settings.upstream, session)
    return VisionIntrospection(settings, upstream, ModelIntrospection(settings, upstream).kind)


def test_blank_png_decodes_at_its_size() -> None:
    pixmap = pymupdf.Pixmap(blank_png(123, 45))
    assert (pixmap.width, pixmap.height) == (123, 45)


async def test_llamacpp_with_mmproj_sees_and_its_projector_is_guessed_from_the_template(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = VisionUpstream(projector="qwen2vl")
    sight = await vision_of(fake, servers, session).sight("m")
    assert sight.sees and sight.source == "llama.cpp /props modalities.vision"
    assert sight.cost.family == "qwen2vl" and sight.cost.estimated
    assert sight.to_json()["estimated"] is True
    assert "<|vision_start|>" in sight.cost.source


async def test_llamacpp_without_mmproj_does_not_see(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(kind="llamacpp")  # modalities.vision: false
    sight = await vision_of(fake, servers, session).sight("m")
    assert not sight.sees
    assert sight.source == "llama.cpp /props modalities.vision is false (no --mmproj)"


async def test_sight_is_asked_once_per_model(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = VisionUpstream()
    vision = vision_of(fake, servers, session)
    await vision.sight("m")
    await vision.sight("m")
    assert len(fake.to("/props")) == 2  # one for the kind (introspection), one for the sight


async def test_vllm_text_only_refuses_an_image_at_tokenize(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(kind="vllm")
    sight = await vision_of(fake, servers, session).sight("meta-llama/Llama-3.1-8B")
    assert not sight.sees
    assert "is not a multimodal model" in sight.source
    probe = fake.last_to("/tokenize").json
    assert probe["messages"][0]["content"][0]["type"] == "image_url"


async def test_vllm_vision_counts_images_with_its_render_endpoint(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = VisionUpstream(kind="vllm", projector="qwen2vl")
    vision = vision_of(fake, servers, session)
    sight = await vision.sight("Qwen/Qwen2-VL-2B-Instruct")
    assert sight.sees and sight.server_counts
    assert sight.to_json()["image_tokens"] == "counted by the upstream"
    assert sight.to_json()["estimated"] is False
    counts = await vision.counts("Qwen/Qwen2-VL-2B-Instruct", sight, {(560, 784), (392, 504)})
    assert counts == {
        (560, 784): llamacpp_image_tokens("qwen2vl", 560, 784),
        (392, 504): llamacpp_image_tokens("qwen2vl", 392, 504),
    }
    calls = fake.render_calls
    await vision.counts("Qwen/Qwen2-VL-2B-Instruct", sight, {(560, 784)})
    assert fake.render_calls == calls  # remembered per size


async def test_an_older_vllm_without_render_is_estimated_from_the_model_name(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = VisionUpstream(kind="vllm", projector="qwen2vl", render_endpoint=False)
    vision = vision_of(fake, servers, session)
    sight = await vision.sight("Qwen/Qwen2.5-VL-7B-Instruct")
    assert sight.sees and not sight.server_counts
    assert sight.cost.family == "qwen2vl" and sight.cost.estimated


async def test_another_server_does_not_see_unless_the_config_says_so(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = FakeUpstream(kind="plain")
    assert not (await vision_of(fake, servers, session).sight("m")).sees
    told = await vision_of(fake, servers, session, m={"vision": True, "image_tokens": 258}).sight(
        "m"
    )
    assert told.sees and told.source == "models.m.vision: true"
    assert (told.cost.family, told.cost.fixed_tokens, told.cost.estimated) == ("fixed", 258, False)


async def test_vision_false_in_the_config_asks_nothing(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = VisionUpstream()
    sight = await vision_of(fake, servers, session, m={"vision": False}).sight("m")
    assert not sight.sees and sight.source == "models.m.vision: false"
    assert fake.requests == []


async def test_configured_family_replaces_the_guess(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    fake = VisionUpstream(projector="gemma3")
    sight = await vision_of(fake, servers, session, m={"image_tokens": "qwen3vl"}).sight("m")
    assert sight.sees and sight.cost.family == "qwen3vl" and not sight.cost.estimated


def served(fake: Any, servers: ServerThread, session: aiohttp.ClientSession) -> VisionIntrospection:
    base_url = servers.serve(fake.app())
    settings = load_settings(None, environ={}, overrides={"upstream": {"base_url": base_url}})
    upstream = UpstreamClient(settings.upstream, session)
    return VisionIntrospection(settings, upstream, ModelIntrospection(settings, upstream).kind)


@pytest.mark.parametrize("sees", [True, False])
async def test_ollama_says_it_in_the_model_capabilities(
    servers: ServerThread, session: aiohttp.ClientSession, sees: bool
) -> None:
    from tests.fakes.ollama import FakeOllama, OllamaModel

    fake = FakeOllama(models={"gemma3:4b": OllamaModel("gemma3:4b", "gemma3", vision=sees)})
    sight = await served(fake, servers, session).sight("gemma3:4b")
    assert sight.sees is sees
    assert sight.source.startswith("Ollama /api/show capabilities")
    assert sight.cost.estimated  # Ollama does not say what an image costs


async def test_ollama_model_unknown_does_not_see(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    from tests.fakes.ollama import FakeOllama

    sight = await served(FakeOllama(), servers, session).sight("nothere:1b")
    assert not sight.sees and "404" in sight.source


@pytest.mark.parametrize("v1", [True, False])
@pytest.mark.parametrize("sees", [True, False])
async def test_lm_studio_says_it_in_its_model_list(
    servers: ServerThread, session: aiohttp.ClientSession, v1: bool, sees: bool
) -> None:
    from tests.fakes.lmstudio import FakeLmStudio

    fake = FakeLmStudio(model_id="qwen2-vl-7b-instruct", v1=v1, vision=sees)
    sight = await served(fake, servers, session).sight("qwen2-vl-7b-instruct")
    assert sight.sees is sees
    where = "/api/v1/models capabilities.vision" if v1 else "/api/v0/models type"
    assert where in sight.source


async def test_lm_studio_without_the_model_asked_does_not_see(
    servers: ServerThread, session: aiohttp.ClientSession
) -> None:
    from tests.fakes.lmstudio import FakeLmStudio

    fake = FakeLmStudio(model_id="qwen2-vl-7b-instruct", vision=True)
    sight = await served(fake, servers, session).sight("another-model")
    assert not sight.sees and "does not list the model" in sight.source
    assert not sight.keep  # asked again: the model may be loaded later
