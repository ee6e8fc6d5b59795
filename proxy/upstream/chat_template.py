"""Which chat template a spawned llama.cpp server should use (pure decision)."""

from __future__ import annotations

from dataclasses import dataclass

LLAMACPP_TEMPLATES: dict[str, str] = {
    "chatml": "chatml",
    "llama3": "llama3",
    "mistral": "mistral-v3",
    "mistral-v1": "mistral-v1",
    "mistral-v3": "mistral-v3",
    "mistral-v3-tekken": "mistral-v3-tekken",
    "mistral-v7": "mistral-v7",
    "mistral-v7-tekken": "mistral-v7-tekken",
    "command-r": "command-r",
    "gemma": "gemma",
}
"""Our built-in instruct format names → llama.cpp's built-in template names (src/llama-chat.cpp);
each pair renders the same turns (tests/formats compares ours with the official templates)."""

ARCHITECTURE_FORMATS: dict[str, str] = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3n": "gemma",
}
"""GGUF `general.architecture` values that name one chat format and nothing else. A `llama`
architecture could be Llama 2, Llama 3, Mistral or a fine-tune in any format: not guessed."""

FALLBACK = "chatml"
"""What llama.cpp uses for a model without a template (`<|im_start|>`)."""


@dataclass(frozen=True)
class TemplateChoice:
    """The built-in template to set (None: the model's own, or llama.cpp's fallback) and why."""

    template: str | None
    reason: str
    warning: str | None = None


def choose_chat_template(
    *,
    explicit: str | None,
    model_has_template: bool,
    configured_format: str | None,
    architecture: str | None,
    model_label: str,
) -> TemplateChoice:
    """The template for a spawned GGUF: `upstream.spawn.chat_template`, else the model's own,
    else the format configured for it (`models.<name>.format`), else its family's when the
    architecture names one, else llama.cpp's ChatML fallback — with a warning that says so."""
    if explicit:
        name = explicit.strip().lower()
        return TemplateChoice(LLAMACPP_TEMPLATES.get(name, name), "upstream.spawn.chat_template")
    if model_has_template:
        return TemplateChoice(None, "the model's own tokenizer.chat_template")
    if configured_format:
        name = configured_format.strip().lower()
        if name in LLAMACPP_TEMPLATES:
            return TemplateChoice(LLAMACPP_TEMPLATES[name], f"models.<name>.format {name}")
        return TemplateChoice(
            None,
            f"models.<name>.format {name} has no llama.cpp built-in template",
            warning=(
                f"{model_label} has no chat template and its format {name!r} has no llama.cpp "
                f"built-in equivalent (known: {', '.join(sorted(LLAMACPP_TEMPLATES))}); the "
                f"server falls back to {FALLBACK}. Use adapter: text for this model to have the "
                "proxy render the format itself."
            ),
        )
    family = ARCHITECTURE_FORMATS.get((architecture or "").lower())
    if family is not None:
        return TemplateChoice(LLAMACPP_TEMPLATES[family], f"architecture {architecture}")
    return TemplateChoice(
        None,
        f"no template: llama.cpp falls back to {FALLBACK}",
        warning=(
            f"{model_label} has no chat template and no format is configured for it; the server "
            f"falls back to {FALLBACK} (<|im_start|>), which the model may not have been trained "
            "on. Set upstream.spawn.chat_template or models.<name>.format."
        ),
    )
