"""A fake vision upstream: llama-server with a multimodal projector (`/props` declares vision),
or vLLM serving a vision model. Every image part is checked as the servers would take it — a
`data:` URL of a PNG or JPEG that decodes, within a size — and counted as llama.cpp's projector
counts it; a prompt over the window is refused as llama-server refuses it."""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pymupdf
from aiohttp import web

from tests.fakes.upstream import RECORDED, FakeUpstream, chatml, completion, fake_tokens

TEMPLATES = {
    # The image markers of each family's chat template (as llama.cpp's /props hands it).
    "gemma3": "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n"
    "{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}"
    "{% if p.type == 'image' %}<start_of_image>{% else %}{{ p.text }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}<start_of_turn>model\n",
    "qwen2vl": "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}"
    "{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ p.text }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n",
}


def llamacpp_image_tokens(projector: str, width: int, height: int) -> int:
    """What llama.cpp's mtmd puts in the prompt for one image, markers included, written from
    tools/mtmd/clip.cpp: Gemma 3 resizes to 896×896, 14-pixel patches pooled 4×4 → 256;
    Qwen2-VL keeps the aspect ratio, each side rounded to 28 (two 14-pixel patches) within 8 to
    4,096 tokens (calc_size_preserved_ratio), one token per 2×2 patches."""
    if projector == "gemma3":
        patches = (896 // 14) * (896 // 14)
        return patches // (4 * 4) + 2  # <start_of_image> ... <end_of_image>
    align = 14 * 2
    min_pixels, max_pixels = 8 * align * align, 4096 * align * align
    h_bar = max(align, math.floor(height / align + 0.5) * align)
    w_bar = max(align, math.floor(width / align + 0.5) * align)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(align, math.floor(height / beta / align) * align)
        w_bar = max(align, math.floor(width / beta / align) * align)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / align) * align
        w_bar = math.ceil(width * beta / align) * align
    return (w_bar // 14 // 2) * (h_bar // 14 // 2) + 2  # <|vision_start|> ... <|vision_end|>


@dataclass
class SeenImage:
    """An image part as the fake decoded it."""

    mime: str
    width: int
    height: int
    size: int
    detail: str | None
    pixmap: pymupdf.Pixmap = field(repr=False)

    def has_colour(self, rgb: tuple[int, int, int], tolerance: int = 40) -> bool:
        """Whether some pixel is close to `rgb` (a chart's bar colour, say)."""
        samples = self.pixmap.samples
        n = self.pixmap.n
        step = max(1, (self.width * self.height) // 200_000)
        for index in range(0, self.width * self.height, step):
            r, g, b = samples[index * n : index * n + 3]
            if all(abs(a - c) <= tolerance for a, c in zip((r, g, b), rgb, strict=True)):
                return True
        return False


def refuse(
    status: int, message: str, kind: str = "invalid_request_error", **more: Any
) -> web.Response:
    return web.json_response(
        {"error": {"code": status, "message": message, "type": kind, **more}}, status=status
    )


@dataclass
class VisionUpstream(FakeUpstream):
    """llama-server with `--mmproj` (kind llamacpp) or vLLM with a vision model (kind vllm)."""

    vision: bool = True
    projector: str = "gemma3"  # gemma3 | qwen2vl
    max_image_side: int = 4096
    max_images: int = 16
    seen: list[list[SeenImage]] = field(default_factory=list)  # per chat request
    prompt_tokens: list[int] = field(default_factory=list)
    render_calls: int = 0

    def __post_init__(self) -> None:
        self.chat_template = TEMPLATES[self.projector]

    def decode(self, part: dict[str, Any]) -> SeenImage | web.Response:
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        if not isinstance(url, str) or not url.startswith("data:"):
            return refuse(400, "image_url must be a data: URL")
        header, _, payload = url.partition(",")
        mime = header[5:].split(";")[0]
        if mime not in ("image/png", "image/jpeg") or ";base64" not in header:
            return refuse(400, f"unsupported image type {mime}")
        try:
            raw = base64.b64decode(payload, validate=True)
            pixmap = pymupdf.Pixmap(raw)
        except (binascii.Error, ValueError, RuntimeError):
            return refuse(400, "Failed to load image or audio file")
        magic = raw[:4] == b"\x89PNG" if mime == "image/png" else raw[:2] == b"\xff\xd8"
        if not magic:
            return refuse(400, f"the data is not a {mime}")
        if max(pixmap.width, pixmap.height) > self.max_image_side:
            return refuse(400, f"image of {pixmap.width}x{pixmap.height} is too large")
        if pixmap.n > 3 or pixmap.alpha:
            pixmap = pymupdf.Pixmap(pymupdf.csRGB, pixmap)
        detail = image.get("detail") if isinstance(image, dict) else None
        return SeenImage(mime, pixmap.width, pixmap.height, len(raw), detail, pixmap)

    def count(self, messages: list[dict[str, Any]]) -> tuple[int, list[SeenImage]] | web.Response:
        seen: list[SeenImage] = []
        for message in messages:
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    if not self.vision:
                        return refuse(400, "image input is not supported by this model")
                    found = self.decode(part)
                    if isinstance(found, web.Response):
                        return found
                    seen.append(found)
        if len(seen) > self.max_images:
            return refuse(400, f"At most {self.max_images} image(s) may be provided in one prompt.")
        tokens = len(fake_tokens(chatml(messages))) + sum(
            llamacpp_image_tokens(self.projector, image.width, image.height) for image in seen
        )
        return tokens, seen

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = request[RECORDED].json
        counted = self.count(body.get("messages") or [])
        if isinstance(counted, web.Response):
            return counted
        tokens, seen = counted
        self.seen.append(seen)
        self.prompt_tokens.append(tokens)
        if self.n_ctx is not None and tokens > self.n_ctx:
            return refuse(
                400,
                f"the request exceeds the available context size ({tokens} > {self.n_ctx})",
                "exceed_context_size_error",
                n_prompt_tokens=tokens,
                n_ctx=self.n_ctx,
            )
        answer = completion(body)
        answer["usage"] = {
            "prompt_tokens": tokens,
            "completion_tokens": 6,
            "total_tokens": tokens + 6,
        }
        if body.get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            chunk = {**answer, "object": "chat.completion.chunk"}
            chunk["choices"] = [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": "Q3."},
                    "finish_reason": None,
                }
            ]
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        return web.json_response(answer)

    async def render(self, request: web.Request) -> web.Response:
        """vLLM's `/v1/chat/completions/render`: the prompt's token ids, each image's
        placeholder expanded by the model's processor (here: the Qwen2-VL rule)."""
        if self.kind != "vllm" or not self.render_endpoint:
            raise web.HTTPNotFound()
        body = request[RECORDED].json
        refusal = self.refused(body)
        if refusal is not None:
            return refusal
        self.render_calls += 1
        counted = self.count(body.get("messages") or [])
        if isinstance(counted, web.Response):
            return counted
        tokens, _ = counted
        return web.json_response({"request_id": "render-1", "token_ids": list(range(tokens))})


BAR_RED = (220, 30, 30)


def chart_report_pdf(filler_pages: int = 0, words: int = 120) -> bytes:
    """A report whose answer is only in a chart: page 2 draws revenue by quarter as bars (the
    tallest, Q3, in red) and its text names the quarters but no figure; the other pages are
    prose (`filler_pages` more of them make it long enough for retrieval)."""
    document = pymupdf.open()
    prose = " ".join(f"word{n % 37}" for n in range(words))
    first = document.new_page()
    first.insert_textbox(
        pymupdf.Rect(72, 72, 540, 720),
        "Quarterly revenue report\n\nThe company sold widgets in four quarters. " + prose,
        fontsize=11,
    )
    chart = document.new_page()
    chart.insert_text((72, 90), "Figure 1: Revenue by quarter", fontsize=12)
    chart.draw_line((100, 500), (500, 500))  # the axes
    chart.draw_line((100, 500), (100, 150))
    for index, (label, height) in enumerate((("Q1", 120), ("Q2", 180), ("Q3", 320), ("Q4", 90))):
        x = 130 + index * 90
        colour = tuple(c / 255 for c in BAR_RED) if label == "Q3" else (0.3, 0.3, 0.6)
        chart.draw_rect(pymupdf.Rect(x, 500 - height, x + 50, 500), color=None, fill=colour)
        chart.insert_text((x + 15, 520), label, fontsize=10)
    for number in range(filler_pages + 1):
        page = document.new_page()
        page.insert_textbox(
            pymupdf.Rect(72, 72, 540, 720),
            f"Notes part {number}. The widgets were shipped from the warehouse. " + prose,
            fontsize=11,
        )
    data = document.tobytes()
    document.close()
    return data
