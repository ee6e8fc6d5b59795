"""What an image costs a vision model, in its tokens, and the size to send it at (pure).

Ported from llama.cpp's multimodal projectors (tools/mtmd/clip.cpp `clip_n_output_tokens`, the
preprocessing in `clip_image_preprocess`, and the image markers mtmd puts around each image):

- Gemma 3 (`PROJECTOR_TYPE_GEMMA3`): every image is resized to 896×896 and pooled to 16×16:
  256 tokens, whatever its size, between `<start_of_image>` and `<end_of_image>`.
- Qwen2-VL / Qwen2.5-VL (`QWEN2VL`, `QWEN25VL`; patch 14, merged 2×2) and Qwen3-VL (`QWEN3VL`;
  patch 16): the image keeps its aspect ratio, each side rounded to a multiple of 28 (32), between
  8 and 4,096 tokens (`set_limit_image_tokens(8, 4096)`); one token per 28×28 (32×32) block, between
  `<|vision_start|>` and `<|vision_end|>`. vLLM's HF processors count the same blocks.
- LLaVA 1.5 (`PROJECTOR_TYPE_MLP`, CLIP ViT-L/14 at 336): 576 tokens per image.

Unknown projectors are estimated at one token per 28×28 block, the Qwen rule: more than a
fixed-size projector such as Gemma 3's takes for a page-sized image, so an estimate errs on the
side of a request the upstream accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Detail = Literal["low", "high"]


@dataclass(frozen=True)
class Family:
    """How one kind of projector sizes and counts images."""

    name: str
    native: int | None  # the side the server resizes every image to; None: any size
    per_image: int | None  # tokens per image when fixed; None: by size
    align: int = 28  # pixels per token side, for sized families
    min_tokens: int = 8
    max_tokens: int = 4096
    markers: int = 2  # text tokens around each image (begin/end of image)


FAMILIES: dict[str, Family] = {
    "gemma3": Family("gemma3", native=896, per_image=256),
    "qwen2vl": Family("qwen2vl", native=None, per_image=None, align=28),
    "qwen3vl": Family("qwen3vl", native=None, per_image=None, align=32),
    "llava": Family("llava", native=336, per_image=576, markers=0),
    "estimate": Family("estimate", native=None, per_image=None, align=28),
}


@dataclass(frozen=True)
class ImageCost:
    """A model's image cost: its projector family (or a fixed count), where that was learnt,
    and whether the numbers are the model's own or an estimate."""

    family: str
    source: str
    estimated: bool
    fixed_tokens: int | None = None  # models.<name>.image_tokens given as a number

    @property
    def kind(self) -> Family:
        return FAMILIES.get(self.family, FAMILIES["estimate"])

    def size(
        self, width_pt: float, height_pt: float, detail: Detail, low_px: int, high_px: int
    ) -> tuple[int, int]:
        """The pixel size to render a page of `width_pt` × `height_pt` at: its aspect kept,
        its longest side the family's native one (a bigger image costs the same and is only
        scaled down by the server) or the detail's (`low_px`, `high_px`), each side a whole
        number of the family's blocks so that the server's own resize changes nothing."""
        family = self.kind
        box = low_px if detail == "low" else high_px
        if family.native is not None and self.fixed_tokens is None:
            box = family.native
        longest = max(width_pt, height_pt, 1e-6)
        scale = box / longest
        width, height = max(1.0, width_pt * scale), max(1.0, height_pt * scale)
        if family.per_image is not None or self.fixed_tokens is not None:
            return max(1, round(width)), max(1, round(height))
        align = family.align
        columns, rows = max(1, math.floor(width / align)), max(1, math.floor(height / align))
        if columns * rows > family.max_tokens:  # a box larger than the server would take
            shrink = math.sqrt(family.max_tokens / (columns * rows))
            columns, rows = max(1, math.floor(columns * shrink)), max(1, math.floor(rows * shrink))
        return columns * align, rows * align

    def tokens(self, width: int, height: int) -> int:
        """Tokens an image of `width` × `height` pixels takes, markers included."""
        family = self.kind
        if self.fixed_tokens is not None:
            return self.fixed_tokens
        if family.per_image is not None:
            return family.per_image + family.markers
        columns, rows = smart_resize(width, height, family)
        return columns * rows + family.markers


def smart_resize(width: int, height: int, family: Family) -> tuple[int, int]:
    """Blocks across and down after llama.cpp's resize for dynamic-resolution projectors
    (`calc_size_preserved_ratio`): each side rounded to the block size, then scaled into the
    family's token range keeping the aspect ratio."""
    align = family.align
    min_pixels = family.min_tokens * align * align
    max_pixels = family.max_tokens * align * align

    def rounded(x: float) -> int:
        return math.floor(x / align + 0.5) * align  # std::round: halves away from zero

    w_bar, h_bar = max(align, rounded(width)), max(align, rounded(height))
    if w_bar * h_bar > max_pixels:
        beta = math.sqrt(width * height / max_pixels)
        w_bar = max(align, math.floor(width / beta / align) * align)
        h_bar = max(align, math.floor(height / beta / align) * align)
    elif w_bar * h_bar < min_pixels:
        beta = math.sqrt(min_pixels / (width * height))
        w_bar = math.ceil(width * beta / align) * align
        h_bar = math.ceil(height * beta / align) * align
    return w_bar // align, h_bar // align


def configured(value: str | int, model: str | None) -> ImageCost:
    """`models.<name>.image_tokens`: a family name or a number of tokens per image."""
    source = f"models.{model or '*'}.image_tokens"
    if isinstance(value, int):
        return ImageCost("fixed", source, estimated=False, fixed_tokens=value)
    return ImageCost(value, source, estimated=value == "estimate")


# Chat templates spell the image markers of their family; llama.cpp's /props hands the template.
_TEMPLATE_MARKERS = (
    ("<start_of_image>", "gemma3"),
    ("<|vision_start|>", "qwen2vl"),
)


def guessed(template: str, names: str) -> ImageCost:
    """The family the model's chat template (and its file or model name) points to, marked as
    an estimate: the projector itself is not named by any endpoint."""
    lowered = names.lower().replace("_", "-")
    for marker, family in _TEMPLATE_MARKERS:
        if marker in template:
            if family == "qwen2vl" and ("qwen3" in lowered):
                family = "qwen3vl"
            return ImageCost(family, f"guessed from the chat template ({marker})", estimated=True)
    for needle, family in (
        ("gemma-3", "gemma3"),
        ("gemma3", "gemma3"),
        ("qwen3-vl", "qwen3vl"),
        ("qwen2.5-vl", "qwen2vl"),
        ("qwen2-vl", "qwen2vl"),
    ):
        if needle in lowered:
            return ImageCost(family, f"guessed from the model's name ({needle})", estimated=True)
    return ImageCost("estimate", "estimated: one token per 28×28 pixels", estimated=True)
