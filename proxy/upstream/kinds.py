"""How each kind of upstream behaves where the window is concerned (checked against its source)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.config import UpstreamKind

ANSWER_RESERVE = 512
"""Tokens kept free for the answer, when the request sets no max_tokens, on servers that cut a
prompt that leaves too little room: as much as KoboldCpp (400 for chat, 180 for completions,
koboldcpp.py transform_genparams) and text-generation-webui (512, modules/api/completions.py)
generate by default, and a floor for Ollama and LM Studio, which generate without a limit."""


@dataclass(frozen=True)
class KindTraits:
    """What the proxy must know of a kind of server beyond its endpoints."""

    label: str
    truncates: bool
    """Cuts a prompt longer than its window and answers 200, without an error (the proxy must
    never send it one); the others refuse such a prompt with a 4xx the client sees."""
    error_frames: bool = False
    """Says a failure after its 200 in an SSE `event: error` frame, which the proxy turns into
    OpenAI's error event."""


TRAITS: dict[UpstreamKind, KindTraits] = {
    "llamacpp": KindTraits("llama.cpp", truncates=False),  # 400 exceed_context_size_error
    "vllm": KindTraits("vLLM", truncates=False),  # 400 "maximum context length is ..."
    "sglang": KindTraits("SGLang", truncates=False),  # 400 unless --allow-auto-truncate
    # server/prompt.go drops old messages, llm/llama_server.go (older: runner.go) cuts the
    # prompt's tokens ("truncating input prompt"), both with a 200.
    "ollama": KindTraits("Ollama", truncates=True),
    # lmstudio-bug-tracker #2339: a prompt over the loaded context gives a 200 with no content
    # (0.3); 0.4 answers 400, or streamed a 200 and an `event: error` frame (#2322).
    "lmstudio": KindTraits("LM Studio", truncates=True, error_frames=True),
    "tgi": KindTraits("TGI", truncates=False),  # 422 "`inputs` tokens + `max_new_tokens` must be"
    # gpttype_adapter.cpp keeps the last nctx - max_length tokens ("truncate to front").
    "koboldcpp": KindTraits("KoboldCpp", truncates=True),
    "tabbyapi": KindTraits("TabbyAPI", truncates=False),  # 400 context_length_exceeded
    # modules/text_generation.py encode(truncation_length=...) keeps the prompt's last tokens.
    "textgen": KindTraits("text-generation-webui", truncates=True),
    "llama-cpp-python": KindTraits("llama-cpp-python", truncates=False),  # 400
    # Its middle-out transform cuts the middle of a prompt only when asked: the proxy sends
    # `transforms: []` so that it never does.
    "openrouter": KindTraits("OpenRouter", truncates=False),
    "openai-compatible": KindTraits("an OpenAI-compatible API", truncates=False),
    "other": KindTraits("an OpenAI-compatible server", truncates=False),
}


def traits(kind: UpstreamKind) -> KindTraits:
    return TRAITS[kind]
