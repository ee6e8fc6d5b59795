"""models.<name>: what the proxy is told of a model, and the instruct formats (formats)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from proxy.config.base import Section
from proxy.config.options import EnrichFields
from proxy.config.upstream import TokenizerSetting

Projector = Literal["gemma3", "qwen2vl", "qwen3vl", "llava", "estimate"]
"""Image-cost families: the tokens an image of a given size takes (proxy/upstream/image_cost)."""


class ModelSettings(Section):
    context_length: int | None = Field(
        None,
        ge=1,
        description="The model's context window, overriding what the upstream says.",
    )
    adapter: Literal["chat", "text"] = Field(
        "chat",
        description=(
            "chat: sent to /v1/chat/completions | text: rendered with an instruct format and sent "
            "to /v1/completions."
        ),
    )
    format: str | None = Field(
        None,
        description=(
            "The instruct format for adapter text (python -m proxy formats list); null = chatml."
        ),
    )
    tokenizer: TokenizerSetting | None = Field(
        None,
        description="Overrides upstream.tokenizer for this model.",
    )
    enrich: EnrichFields = Field(
        default_factory=EnrichFields,
        description=(
            "Defaults of the request options (enrich) for requests naming this model; the "
            "request's X-Enrich-* headers and enrich object win over them."
        ),
    )
    upstream_model: str | None = Field(
        None,
        description=(
            "Set: this model name is an alias, and the upstream is asked for this model instead."
        ),
    )
    vision: bool | None = Field(
        None,
        description=(
            "Does the model see images? null = ask the upstream (llama.cpp /props "
            "modalities.vision, vLLM /tokenize with an image)."
        ),
    )
    image_tokens: Projector | Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None,
        description=(
            "What an image costs the model: gemma3 | qwen2vl | qwen3vl | llava | estimate (a "
            "projector family) or a number of tokens per image; null = the server's own count "
            "where it gives one (vLLM render), else guessed from its chat template."
        ),
    )
    instruct: bool | None = Field(
        None,
        description=(
            "Is the model instruction-tuned (a chat template of its own)? null = learnt from "
            "the upstream (llama.cpp /props, vLLM /tokenize, Ollama /api/show, LM Studio's "
            "model list, the spawned GGUF's metadata)."
        ),
    )
    tools: bool | None = Field(
        None,
        description=(
            "Does the server turn this model's tool calls into OpenAI tool_calls? null = learnt"
            " from the upstream (llama.cpp chat_template_caps and --jinja, vLLM "
            "--enable-auto-tool-choice, Ollama and LM Studio capabilities)."
        ),
    )


# What a model without a `models:` entry gets; one shared instance (read, never changed), as
# building a pydantic model on each of a request's lookups costs more than the lookup.
DEFAULT_MODEL_SETTINGS = ModelSettings()


class FormatSettings(Section):
    presets_dir: Path | None = Field(
        None,
        description=(
            "Extra presets (ours or SillyTavern's JSON); null = <data_dir>/formats, where `python "
            "-m proxy formats import` saves them."
        ),
    )
    custom: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Inline formats: {name: {templates: ..., stop: [...], ...}}.",
    )
    variables: dict[str, str] = Field(
        default_factory=dict,
        description="Macros resolved in messages before rendering: {user: Ann, char: Aria}.",
    )
