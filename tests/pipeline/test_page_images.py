"""Charts and figures reach vision models: a document's drawn pages go as images, counted in the
70% rule's room or the passage budget; a text-only model gets exactly what it got before.

Driven with the openai SDK through the proxy, against fake upstreams that declare vision as
llama.cpp and vLLM do and check every image part as they would take it."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pymupdf
import pytest

from proxy.images.plan import LABEL_TOKENS
from proxy.pipeline import flow
from proxy.pipeline.stages import passages as passages_stage
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.fakes.vision import BAR_RED, VisionUpstream, chart_report_pdf, llamacpp_image_tokens

QUESTION = "Which quarter had the highest revenue in Figure 1?"


@pytest.fixture
def serve_fake(servers: ServerThread) -> Iterator[Callable[[FakeUpstream], str]]:
    def serve(fake: FakeUpstream) -> str:
        fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
        return str(fake.base_url)  # type: ignore[attr-defined]

    yield serve


def pdf_part(data: bytes, name: str = "report.pdf") -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:application/pdf;base64,{encoded}"},
    }


def chat(query: str = QUESTION, *parts: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": query}, *parts]}],
        **body,
    }


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)


def preview(base: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def user_parts(fake: FakeUpstream) -> list[dict[str, Any]]:
    content = fake.last_to("/v1/chat/completions").json["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def test_the_chart_page_reaches_a_vision_model_as_its_image(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    """The answer is only in page 2's bars: that page goes as a PNG the model can decode,
    labelled, before the full-content prompt, counted within the 70% rule's room; the
    answer cites it."""
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)})
    response = client(base).chat.completions.with_raw_response.create(
        **chat(QUESTION, pdf_part(chart_report_pdf()))
    )
    answer = response.parse()
    assert response.headers["X-Enrich-Strategy"] == "inject-full-content"
    assert response.headers["X-Enrich-Images"] == "1"
    [seen] = fake.seen
    [image] = seen
    assert image.mime == "image/png" and max(image.width, image.height) == 896
    assert image.has_colour(BAR_RED)  # the tallest bar is in what the model sees
    parts = user_parts(fake)
    assert [part["type"] for part in parts] == ["text", "image_url", "text"]
    assert parts[0]["text"] == "Page image: report.pdf#page=2"
    assert parts[1]["image_url"]["detail"] == "high"
    assert parts[2]["text"].startswith("This is a Enriched Context Generation scenario.")
    assert parts[2]["text"].endswith(f"User query: {QUESTION}")
    assert answer.model_extra["citations"] == ["report.pdf#page=2"]
    [result] = answer.model_extra["search_results"]
    assert result["page_image"] is True and result["page"] == 2
    # The tokens header counts the image too, as the projector does (with its label).
    used, window = response.headers["X-Enrich-Tokens"].split("/")
    decision = preview(base, chat(QUESTION, pdf_part(chart_report_pdf())))["decision"]
    counted = decision["tokens_in_context"] + decision["file_tokens"]
    assert (int(used), window) == (counted + decision["images"]["tokens"], "8192")
    assert decision["images"]["tokens"] == 256 + 2 + LABEL_TOKENS


def test_the_decision_record_says_what_was_found_and_what_was_sent(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)})
    decision = preview(base, chat(QUESTION, pdf_part(chart_report_pdf())))["decision"]
    images = decision["images"]
    assert images["sees"] is True
    assert images["source"] == "llama.cpp /props modalities.vision"
    assert images["image_tokens"] == "gemma3" and images["estimated"] is True
    assert "<start_of_image>" in images["image_tokens_source"]
    assert images["asked"] == "auto"
    room = decision["available_tokens"] - decision["file_tokens"] - decision["prompt_tokens"]
    assert images["room"] == room
    [page] = images["pages"]
    assert page["file"] == "report.pdf" and page["page"] == 2 and page["reason"] == "figure"
    assert page["tokens"] == llamacpp_image_tokens("gemma3", 896, 896) + LABEL_TOKENS
    assert images["tokens"] == page["tokens"] <= room
    assert page["mime"] == "image/png" and page["bytes"] > 0
    # The window's documents part holds the image.
    assert "page images" in decision["window"]["note"]


def test_statuses_say_how_many_pages_went_as_images(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)}, server={"status_delay_s": 0.0})
    body = chat(QUESTION, pdf_part(chart_report_pdf()), stream=True)
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        raw = b"".join(response.iter_raw()).decode()
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    assert "Rendering 1 pages of report.pdf as images..." in comments
    assert "Sending 1 pages as images: report.pdf (page 2)" in comments
    assert raw.rstrip().endswith("data: [DONE]")


def without_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline as it was before pages as images: no stage, plain passage selection."""
    monkeypatch.setattr(flow, "STAGES", [s for s in flow.STAGES if s[0] != "pages"])

    async def plain(
        exchange: Any,
        services: Any,
        sources: Any,
        candidates: Any,
        budget: Any,
        unit: Any,
        select: Any,
    ) -> Any:
        return await select(budget)

    monkeypatch.setattr(passages_stage, "select_with_pages", plain)


@pytest.mark.parametrize("strategy", ["inject-full-content", "retrieval"])
def test_a_text_only_model_gets_exactly_what_it_got_before(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    strategy: str,
) -> None:
    """llama.cpp without --mmproj (modalities.vision false): the body forwarded is byte for byte
    the one the pipeline without pages as images forwards, and holds no image."""
    base = make_proxy()
    body = chat(QUESTION, pdf_part(chart_report_pdf(filler_pages=2)), enrich={"strategy": strategy})
    assert httpx.post(base + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    with_feature = upstream.last_to("/v1/chat/completions").body
    assert b"image_url" not in with_feature
    with monkeypatch.context() as patch:
        without_pages(patch)
        assert httpx.post(base + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    assert upstream.last_to("/v1/chat/completions").body == with_feature
    decision = preview(base, body)["decision"]
    assert decision["images"]["sees"] is False
    assert decision["images"]["pages"] == []


def test_retrieval_sends_the_kept_passages_drawn_pages_within_the_passage_budget(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    """A long report in a small window: the passages and the chart page's image share half
    the window, and the whole request fits (the fake refuses a prompt over its window)."""
    fake = VisionUpstream(projector="gemma3", n_ctx=2048)
    base = make_proxy(upstream={"base_url": serve_fake(fake)})
    body = chat(
        "Figure 1: Revenue by quarter", pdf_part(chart_report_pdf(filler_pages=12, words=300))
    )
    enrich = {"affinity_threshold": 0.0}  # the fake embedder's cosines are low
    response = client(base).chat.completions.with_raw_response.create(
        **body, extra_body={"enrich": enrich}
    )
    answer = response.parse()
    body["enrich"] = enrich
    assert response.headers["X-Enrich-Strategy"] == "retrieval"
    assert response.headers["X-Enrich-Images"] == "1"
    [seen] = fake.seen
    assert len(seen) == 1 and seen[0].has_colour(BAR_RED)
    assert fake.prompt_tokens[-1] <= 2048
    results = answer.model_extra["search_results"]
    assert any(r["page"] == 2 and r.get("page_image") for r in results)
    decision = preview(base, body)["decision"]
    images, retrieval = decision["images"], decision["retrieval"]
    assert images["tokens"] <= images["room"] <= retrieval["budget_limit"]
    assert retrieval["budget_limit"] == 1024
    parts = user_parts(fake)
    assert parts[-1]["text"].startswith("The following citations were found")


def test_images_none_sends_no_image(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)})
    response = httpx.post(
        base + "/v1/chat/completions",
        json=chat(QUESTION, pdf_part(chart_report_pdf())),
        headers={"X-Enrich-Images": "none"},
        timeout=60,
    )
    assert response.status_code == 200
    assert "X-Enrich-Images" not in response.headers
    assert fake.seen == [[]]
    bad = httpx.post(
        base + "/v1/chat/completions",
        json=chat(QUESTION, pdf_part(chart_report_pdf()), enrich={"images": "huge"}),
        timeout=60,
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "enrich.images"


def test_responses_input_file_detail_low_and_high(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    """A Qwen2-VL projector costs by size: `low` sends at most 512 pixels a side, `high` more,
    each side a whole number of 28-pixel blocks."""
    fake = VisionUpstream(projector="qwen2vl", n_ctx=16384)
    base = make_proxy(upstream={"base_url": serve_fake(fake)})
    encoded = base64.b64encode(chart_report_pdf()).decode()
    sizes = {}
    for detail in ("low", "high"):
        client(base).responses.create(
            model="m",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": QUESTION},
                        {
                            "type": "input_file",
                            "filename": "report.pdf",
                            "file_data": f"data:application/pdf;base64,{encoded}",
                            "detail": detail,
                        },
                    ],
                }
            ],
        )
        [image] = fake.seen[-1]
        assert image.width % 28 == 0 and image.height % 28 == 0
        assert image.detail == detail
        sizes[detail] = max(image.width, image.height)
    assert sizes["low"] <= 512 < sizes["high"] <= 1280
    bad = httpx.post(
        base + "/v1/responses",
        json={
            "model": "m",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "x"},
                        {
                            "type": "input_file",
                            "filename": "a.pdf",
                            "file_data": "data:application/pdf;base64,AA==",
                            "detail": "max",
                        },
                    ],
                }
            ],
        },
        timeout=60,
    )
    assert bad.status_code == 400 and "detail must be one of auto, low, high" in bad.text


def test_vllm_counts_the_image_itself(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(kind="vllm", projector="qwen2vl", n_ctx=16384)
    base = make_proxy(upstream={"base_url": serve_fake(fake)})
    body = chat(QUESTION, pdf_part(chart_report_pdf()))
    images = preview(base, body)["decision"]["images"]
    assert images["image_tokens"] == "counted by the upstream" and images["estimated"] is False
    [page] = images["pages"]
    assert (
        page["tokens"]
        == llamacpp_image_tokens("qwen2vl", page["width"], page["height"]) + LABEL_TOKENS
    )
    client(base).chat.completions.create(**body)
    assert len(fake.seen[-1]) == 1


def test_a_text_completion_model_gets_no_image(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)}, models={"m": {"adapter": "text"}})
    response = httpx.post(
        base + "/v1/chat/completions", json=chat(QUESTION, pdf_part(chart_report_pdf())), timeout=60
    )
    assert response.status_code == 200
    prompt = json.dumps(fake.last_to("/v1/completions").json)
    assert "image" not in prompt and "Page image" not in prompt


def test_a_model_configured_not_to_see_gets_no_image(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)}, models={"m": {"vision": False}})
    client(base).chat.completions.create(**chat(QUESTION, pdf_part(chart_report_pdf())))
    assert fake.seen == [[]]


def test_context_shifting_makes_room_for_the_images(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    """A long conversation in a small window: the old turns dropped to fit are counted with the
    page images, which no text counter sees (the fake refuses a prompt over its window)."""
    fake = VisionUpstream(projector="gemma3", n_ctx=2048)
    base = make_proxy(upstream={"base_url": serve_fake(fake)})
    history = []
    for turn in range(6):
        history.append({"role": "user", "content": f"question {turn} " + "blah " * 250})
        history.append({"role": "assistant", "content": f"answer {turn} " + "yes " * 10})
    body = chat(
        "Figure 1: Revenue by quarter", pdf_part(chart_report_pdf(filler_pages=12, words=300))
    )
    body["messages"] = [*history, *body["messages"]]
    response = client(base).chat.completions.with_raw_response.create(
        **body, extra_body={"enrich": {"affinity_threshold": 0.0}}
    )
    assert response.headers["X-Enrich-Images"] == "1"
    assert int(response.headers["X-Enrich-Dropped-Messages"]) > 0
    assert fake.prompt_tokens[-1] <= 2048


def test_when_no_kept_page_fits_the_passages_get_the_whole_budget_back(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=2048)
    base = make_proxy(upstream={"base_url": serve_fake(fake)}, vision={"budget_share": 0.02})
    body = chat(
        "Figure 1: Revenue by quarter", pdf_part(chart_report_pdf(filler_pages=12, words=300))
    )
    body["enrich"] = {"affinity_threshold": 0.0}
    # Both requests on the complete index: a new document's first questions rank fewer passages
    # by meaning, so what they select depends on how far the background got.
    deadline = time.monotonic() + 120
    while set(preview(base, body)["decision"]["retrieval"]["indexed"].values()) != {100}:
        assert time.monotonic() < deadline, "not indexed within 120 s"
        time.sleep(0.2)
    decision = preview(base, body)["decision"]
    assert decision["images"]["pages"] == []
    assert "the passages took the whole budget" in decision["images"]["note"]
    body["enrich"]["images"] = "none"
    plain = preview(base, body)["decision"]
    assert decision["retrieval"]["selected_per_source"] == plain["retrieval"]["selected_per_source"]
    assert "images" not in plain  # images: none asks nothing of the model


def noisy_pdf() -> bytes:
    """A page of prose and a photograph-like image (noise compresses in no format)."""
    document = pymupdf.open()
    page = document.new_page()
    page.insert_text((72, 72), "A photograph of the warehouse follows.")
    noise = pymupdf.Pixmap(pymupdf.csRGB, 300, 300, os.urandom(300 * 300 * 3), False)
    page.insert_image(pymupdf.Rect(72, 100, 472, 500), pixmap=noise)
    return document.tobytes()


def test_a_page_too_big_to_encode_is_left_out_and_the_text_still_goes(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)}, vision={"max_image_kb": 16})
    response = httpx.post(
        base + "/v1/chat/completions",
        json=chat("What is shown?", pdf_part(noisy_pdf(), "photo.pdf")),
        timeout=60,
    )
    assert response.status_code == 200 and "X-Enrich-Images" not in response.headers
    assert fake.seen == [[]]
    assert "A photograph of the warehouse follows." in user_parts(fake)[-1]["text"]
    images = preview(base, chat("What is shown?", pdf_part(noisy_pdf(), "photo.pdf")))["decision"][
        "images"
    ]
    assert images["left_out"] == [
        {"file": "photo.pdf", "page": 1, "reason": "image", "why": "not rendered"}
    ]


def figures_pdf(markers: list[str]) -> bytes:
    """One page per marker: a figure (four black discs) and the marker as its text."""
    document = pymupdf.open()
    for marker in markers:
        page = document.new_page()
        page.insert_text((72, 72), f"{marker}. The discs below show the four stations.")
        for offset in range(4):
            page.draw_circle((150 + offset * 100, 300), 45, fill=(0, 0, 0))
    return document.tobytes()


@pytest.fixture
def hooked_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse workers where a page saying SURVEY-SLOW takes half a second to survey."""
    from functools import partial

    from proxy.documents.parser import DocumentParser
    from proxy.wiring import build
    from tests.documents.test_workers import HOOK_WORKER

    # Where make_parser looks the class up.
    monkeypatch.setattr(build, "DocumentParser", partial(DocumentParser, worker_argv=HOOK_WORKER))


@pytest.mark.usefixtures("hooked_workers")
def test_another_keys_pages_are_surveyed_while_a_keys_slow_ones_run(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    # Surveys once all ran under one key (""): a 1-page PDF waited 117 s behind another key's
    # drawing-heavy ones. Now each waits in its caller's turn: team-a holds one of the two
    # parse workers, and team-b's document takes the other.
    import threading

    from tests.callers import KEY_A, KEY_B, KEYS

    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(
        upstream={"base_url": serve_fake(fake)},
        server={"api_keys": KEYS},
        documents={"parse_workers": 2},
    )
    finished: list[str] = []

    def ask(key: str, name: str, data: bytes) -> None:
        response = httpx.post(
            base + "/v1/chat/completions",
            json=chat("What do the figures show?", pdf_part(data, name)),
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        finished.append(name)

    theirs = [
        threading.Thread(
            target=ask,
            args=(KEY_A, f"big-{n}.pdf", figures_pdf([f"SURVEY-SLOW {n}-{p}" for p in range(12)])),
        )
        for n in (1, 2)
    ]
    for thread in theirs:
        thread.start()
    time.sleep(1.0)  # both of team-a's documents parsed and their surveys asked for
    ask(KEY_B, "note.pdf", figures_pdf(["One figure"]))
    assert finished == ["note.pdf"]  # neither of team-a's surveys had to end first
    for thread in theirs:
        thread.join()
    assert sorted(finished) == ["big-1.pdf", "big-2.pdf", "note.pdf"]


@pytest.mark.usefixtures("hooked_workers")
def test_a_survey_out_of_time_sends_what_it_found_and_says_so(
    make_proxy: Callable[..., str], serve_fake: Callable[[FakeUpstream], str]
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": serve_fake(fake)}, documents={"parse_timeout_s": 3})
    data = figures_pdf([f"SURVEY-SLOW {p}" for p in range(12)])
    body = chat("What do the figures show?", pdf_part(data, "drawings.pdf"))
    first = preview(base, body)["decision"]["images"]
    note = first["note"]
    assert note.startswith("drawings.pdf: its pages were surveyed through page ")
    through = int(note.split("through page ")[1].split(" ")[0])
    assert note.endswith(
        f"through page {through} of 12 (its time ran out (3 s, documents.parse_timeout_s));"
        " the later pages go as text only, and it is not surveyed again"
    )
    assert 1 <= through < 12
    assert first["pages"] and all(page["page"] <= through for page in first["pages"])
    # The next turn meets the same survey, remembered: the same pages, the same note.
    again = preview(base, body)["decision"]["images"]
    assert again["note"] == first["note"] and again["pages"] == first["pages"]
