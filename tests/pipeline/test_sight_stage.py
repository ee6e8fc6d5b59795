"""The model's sight, learnt once by the `sight` stage before retrieval and the pages: only for
a request whose documents' pages could go as images; the later stages read it."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from proxy.config import load_settings
from proxy.documents.model import Page, ParsedDocument
from proxy.images.plan import PageSizes
from proxy.pipeline.decision import PromptRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.option_layers import Options
from proxy.pipeline.stages.sight import learn_sight
from proxy.pipeline.strategy import INJECT, NONE, RETRIEVAL
from proxy.upstream.image_cost import ImageCost
from proxy.upstream.vision import Sight, VisionIntrospection
from tests.fakes.upstream import FakeUpstream
from tests.fakes.vision import VisionUpstream, chart_report_pdf
from tests.pipeline.test_page_images import QUESTION, chat, pdf_part, preview

PDF = ParsedDocument("a.pdf", "sha-a", "pdf", "PyMuPDF", (Page(1, "x"),))
GEMMA = ImageCost("gemma3", "test", estimated=False)


def services(sees: bool = True, **models: Any) -> tuple[SimpleNamespace, list[str | None]]:
    asked: list[str | None] = []

    async def sight(model: str | None) -> Sight:
        asked.append(model)
        return Sight(sees, "test", GEMMA)

    settings = load_settings(None, environ={}, overrides={"models": models} if models else None)
    return SimpleNamespace(settings=settings, vision=SimpleNamespace(sight=sight)), asked


def exchange(strategy: str = RETRIEVAL, documents: bool = True, **options: Any) -> Exchange:
    found = Exchange("r", {"model": "m", "messages": []}, options=Options(**options))
    found.decision.strategy = strategy  # type: ignore[assignment]
    if documents:
        found.new_documents = [PDF]
    return found


@pytest.mark.parametrize("strategy", [INJECT, RETRIEVAL])
async def test_a_model_that_sees_is_asked_once_and_its_page_sizes_kept(strategy: str) -> None:
    edges, asked = services()
    request = exchange(strategy)
    await learn_sight(request, edges)  # type: ignore[arg-type]
    assert asked == ["m"]
    assert request.pages is not None and request.pages.sight.sees
    vision = edges.settings.vision
    assert request.pages.sizes == PageSizes(GEMMA, vision.low_px, vision.high_px)
    assert request.decision.images is not None and request.decision.images.sees is True
    assert request.decision.images.image_tokens == "gemma3"


async def test_a_model_that_does_not_see_is_recorded_and_gets_no_page_state() -> None:
    edges, asked = services(sees=False)
    request = exchange()
    await learn_sight(request, edges)  # type: ignore[arg-type]
    assert asked == ["m"] and request.pages is None
    assert request.decision.images is not None and request.decision.images.sees is False


def completion_shaped(request: Exchange) -> Exchange:
    request.decision.prompt = PromptRecord("completion", "a base model")
    return request


@pytest.mark.parametrize(
    ("request_", "models"),
    [
        (exchange(documents=False), {}),  # nothing whose pages could go
        (exchange(NONE), {}),  # the documents are not put into the prompt
        (exchange(images="none"), {}),  # no image asked for
        (exchange(), {"m": {"adapter": "text"}}),  # a rendered text prompt holds no image
        (completion_shaped(exchange()), {}),  # nor does a base model's completion
    ],
    ids=["no documents", "strategy none", "images none", "adapter text", "completion shape"],
)
async def test_sight_is_not_asked_when_no_page_could_go(
    request_: Exchange, models: dict[str, Any]
) -> None:
    edges, asked = services(**models)
    await learn_sight(request_, edges)  # type: ignore[arg-type]
    assert asked == [] and request_.pages is None and request_.decision.images is None


def image_probes(fake: FakeUpstream) -> int:
    """vLLM's sight probe: a /tokenize with an image part."""
    return sum(b"image_url" in request.body for request in fake.to("/tokenize"))


def test_the_upstream_is_asked_about_sight_only_for_a_request_with_documents(
    make_proxy: Callable[..., str], servers: Any
) -> None:
    fake = VisionUpstream(kind="vllm", projector="qwen2vl", n_ctx=16384)
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    base = make_proxy(upstream={"base_url": fake.base_url})  # type: ignore[attr-defined]
    plain = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
    assert httpx.post(base + "/v1/chat/completions", json=plain, timeout=60).status_code == 200
    assert image_probes(fake) == 0
    assert "images" not in preview(base, plain)["decision"]
    body = chat(QUESTION, pdf_part(chart_report_pdf()))
    assert httpx.post(base + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    assert image_probes(fake) == 1
    # Kept for the model: the next request with a document asks nothing again.
    assert preview(base, body)["decision"]["images"]["sees"] is True
    assert image_probes(fake) == 1


@pytest.mark.parametrize("strategy", ["inject-full-content", "retrieval"])
def test_each_request_asks_for_the_sight_once(
    make_proxy: Callable[..., str], monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    """Before the `passages` and `pages` stages, which read it (a text-only llama.cpp: the
    pages stage once asked again when retrieval had found no page state)."""
    asked: list[str | None] = []
    learn = VisionIntrospection.sight

    async def counted(self: VisionIntrospection, model: str | None) -> Sight:
        asked.append(model)
        return await learn(self, model)

    monkeypatch.setattr(VisionIntrospection, "sight", counted)
    base = make_proxy()
    body = chat(QUESTION, pdf_part(chart_report_pdf(filler_pages=2)), enrich={"strategy": strategy})
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200 and response.headers["X-Enrich-Strategy"] == strategy
    assert asked == ["m"]
