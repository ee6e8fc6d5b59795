"""An image_url part is told from its bytes: a picture goes on, a document is read as one, and
anything else is a 400 naming the part, never an upstream's 500."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import openai
import pymupdf
import pytest

from proxy.pipeline.images import data_head, document_type, is_picture, sorted_image_parts
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import pdf_bytes, preview

QUESTION = "What does it say?"
PDF = pdf_bytes(["The harbour office opens at nine."])


def png_bytes() -> bytes:
    pixmap = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 2, 2), False)
    data: bytes = pixmap.tobytes("png")
    return data


def data_url(label: str, data: bytes) -> str:
    return f"data:{label};base64,{base64.b64encode(data).decode()}"


def asking(url: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": QUESTION},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]


def test_signatures() -> None:
    assert is_picture(png_bytes()[:48])
    assert is_picture(b"\xff\xd8\xff\xe0\x00\x10JFIF")
    assert is_picture(b"RIFF\x24\x00\x00\x00WEBPVP8 ")
    assert is_picture(b"\x00\x00\x00\x1cftypavif")
    assert not is_picture(PDF[:48])
    assert document_type(PDF[:48]) == "application/pdf"
    assert document_type(b"PK\x03\x04\x14\x00") == "application/zip"
    assert document_type(b"hello, world") is None
    assert data_head("data:image/png,notbase64") is None
    assert data_head("data:image/png;base64,%%%%") is None


@pytest.mark.parametrize("label", ["image/png", "application/pdf", "application/octet-stream"])
def test_a_pdf_in_an_image_part_is_read_as_a_document_whatever_its_label(
    make_proxy: Callable[..., str], upstream: FakeUpstream, label: str
) -> None:
    base = make_proxy()
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=asking(data_url(label, PDF))
    )
    assert raw.headers["X-Enrich-Strategy"] == "inject-full-content"
    sent = upstream.last_to("/v1/chat/completions").json["messages"][0]["content"]
    assert [part["type"] for part in sent] == ["text"]  # no image reached the upstream
    assert "The harbour office opens at nine." in sent[0]["text"]
    assert "** document-1.pdf full content **" in sent[0]["text"]
    decision = preview(base, {"model": "m", "messages": asking(data_url(label, PDF))})["decision"]
    assert any(
        "image_url part held a document (application/pdf)" in w for w in decision["warnings"]
    )


def test_a_picture_goes_to_the_upstream_as_it_came(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    client = openai.OpenAI(base_url=make_proxy() + "/v1", api_key="unused", max_retries=0)
    url = data_url("image/jpeg", png_bytes())  # mislabelled, but a picture all the same
    client.chat.completions.create(model="m", messages=asking(url))
    sent = upstream.last_to("/v1/chat/completions").json["messages"][0]["content"][1]
    assert sent == {"type": "image_url", "image_url": {"url": url}}


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (data_url("image/png", b"hello, this is text"), "labelled image/png, whose data starts"),
        ("data:image/png;base64,!!!!", "labelled image/png, whose data is not base64"),
        ("data:,plain", "with no type, whose data is not base64"),
    ],
)
def test_anything_else_is_a_400_naming_the_part_and_never_retried(
    make_proxy: Callable[..., str], upstream: FakeUpstream, url: str, said: str
) -> None:
    client = openai.OpenAI(base_url=make_proxy() + "/v1", api_key="unused", max_retries=2)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="m", messages=asking(url))
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "invalid_image"
    assert error["param"] == "messages[0].content[1].image_url"
    assert error["message"].startswith(f"messages[0].content[1] is an image_url part {said}")
    assert not upstream.to("/v1/chat/completions")


def test_an_https_image_is_left_to_the_upstream() -> None:
    messages = asking("https://example.com/photo.png")
    assert sorted_image_parts(messages) == (messages, [])
