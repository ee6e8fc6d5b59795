"""An image's cost in a vision model's tokens, and the size it is sent at (pure)."""

from __future__ import annotations

import pytest

from proxy.upstream.image_cost import FAMILIES, ImageCost, configured, guessed, smart_resize
from tests.fakes.vision import llamacpp_image_tokens

LETTER = (612.0, 792.0)  # points
A4 = (595.0, 842.0)


def test_gemma3_costs_256_tokens_at_any_size_and_is_sent_at_its_native_896() -> None:
    cost = ImageCost("gemma3", "test", estimated=False)
    assert cost.tokens(896, 896) == 256 + 2
    assert cost.tokens(300, 4000) == 256 + 2
    # Both details: a larger or smaller image costs the same, so the native size is sent.
    assert cost.size(*LETTER, "high", 512, 1280) == (692, 896)
    assert cost.size(*LETTER, "low", 512, 1280) == (692, 896)


def test_qwen2vl_sizes_are_whole_blocks_so_the_server_does_not_resize() -> None:
    cost = ImageCost("qwen2vl", "test", estimated=False)
    width, height = cost.size(*A4, "high", 512, 1280)
    assert (width % 28, height % 28) == (0, 0)
    assert height <= 1280 and width <= 1280
    assert smart_resize(width, height, FAMILIES["qwen2vl"]) == (width // 28, height // 28)
    assert cost.tokens(width, height) == (width // 28) * (height // 28) + 2
    low = cost.size(*A4, "low", 512, 1280)
    assert max(low) <= 512 and cost.tokens(*low) < cost.tokens(width, height)


def test_qwen3vl_counts_32_pixel_blocks() -> None:
    cost = ImageCost("qwen3vl", "test", estimated=False)
    width, height = cost.size(*LETTER, "high", 512, 1280)
    assert (width % 32, height % 32) == (0, 0)
    assert cost.tokens(width, height) == (width // 32) * (height // 32) + 2


@pytest.mark.parametrize(
    ("width", "height"),
    [
        (800, 1000),
        (1000, 1400),
        (27, 27),
        (5000, 300),
        (4000, 4000),
        (1234, 567),
        (56, 4096),
        (294, 406),
    ],
)
def test_qwen2vl_counts_as_the_llama_cpp_fake_does(width: int, height: int) -> None:
    """Any image size, resized as llama.cpp resizes it: the same count as the fake upstream's,
    which is written from clip.cpp separately."""
    cost = ImageCost("qwen2vl", "test", estimated=False)
    assert cost.tokens(width, height) == llamacpp_image_tokens("qwen2vl", width, height)


def test_a_box_too_large_for_the_server_is_brought_within_its_token_limit() -> None:
    cost = ImageCost("qwen2vl", "test", estimated=False)
    width, height = cost.size(4000.0, 4000.0, "high", 512, 4096)
    assert (width // 28) * (height // 28) <= 4096
    assert cost.tokens(width, height) == (width // 28) * (height // 28) + 2


def test_an_unknown_projector_is_estimated_at_one_token_per_28_pixels() -> None:
    cost = ImageCost("estimate", "test", estimated=True)
    width, height = cost.size(*LETTER, "high", 512, 1280)
    assert max(width, height) <= 1280
    assert cost.tokens(width, height) == (width // 28) * (height // 28) + 2
    # More than Gemma 3's 256 for a page: an estimate errs towards a request that fits.
    assert cost.tokens(width, height) > 256


def test_configured_family_or_number() -> None:
    fixed = configured(300, "m")
    assert (fixed.family, fixed.estimated, fixed.source) == (
        "fixed",
        False,
        "models.m.image_tokens",
    )
    assert fixed.tokens(10, 10) == fixed.tokens(2000, 2000) == 300
    assert fixed.size(*LETTER, "low", 512, 1280) == (396, 512)
    family = configured("qwen3vl", "m")
    assert (family.family, family.estimated) == ("qwen3vl", False)
    assert configured("estimate", None).estimated


@pytest.mark.parametrize(
    ("template", "names", "family"),
    [
        ("<start_of_turn>user<start_of_image>", "", "gemma3"),
        ("<|vision_start|><|image_pad|><|vision_end|>", "/m/Qwen2.5-VL-7B.gguf", "qwen2vl"),
        ("<|vision_start|><|image_pad|><|vision_end|>", "/m/Qwen3-VL-8B-Instruct.gguf", "qwen3vl"),
        ("", "google/gemma-3-4b-it", "gemma3"),
        ("", "Qwen/Qwen2-VL-2B-Instruct", "qwen2vl"),
        ("<|im_start|>", "/m/llava-v1.6.gguf", "estimate"),
    ],
)
def test_the_family_is_guessed_from_the_template_or_name_and_marked_estimated(
    template: str, names: str, family: str
) -> None:
    cost = guessed(template, names)
    assert cost.family == family
    assert cost.estimated
