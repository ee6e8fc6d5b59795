"""The registry of upstream server kinds: their names, in the order the proxy probes them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Registered:
    """A server kind as the configuration knows it, before any of its code is loaded."""

    name: str
    """As `upstream.kind` takes it; its profile is `PROFILE` in proxy/upstream/kinds/<name>.py
    (a `-` written `_`), or in `module` when given."""
    counts: bool = False
    """It has its own tokenizer (its profile's `counter`), which `upstream.tokenizer` may name."""
    module: str | None = None

    @property
    def module_name(self) -> str:
        return self.module or "proxy.upstream.kinds." + self.name.replace("-", "_")


# The order is the order of detection: the most common upstream first, and where one server
# imitates another (TabbyAPI answers a llama.cpp-shaped `/props`, SGLang an Ollama-shaped
# `/api/*`, vLLM and SGLang the same `/tokenize`), the imitated one's signature tells them
# apart or the imitator is asked first. Kinds known by their model list alone come last.
KINDS: dict[str, Registered] = {
    kind.name: kind
    for kind in (
        Registered("llamacpp", counts=True),
        Registered("sglang", counts=True),
        Registered("ollama"),
        Registered("koboldcpp", counts=True),
        Registered("tabbyapi", counts=True),
        Registered("lmstudio"),
        Registered("tgi", counts=True),
        Registered("textgen", counts=True),
        Registered("vllm", counts=True),
        Registered("llama-cpp-python", counts=True),
        Registered("openrouter"),
        Registered("openai-compatible"),
        Registered("other"),
    )
}


def kind_names() -> tuple[str, ...]:
    """Every registered kind, in probing order."""
    return tuple(KINDS)


def counting_kinds() -> tuple[str, ...]:
    """The kinds whose own tokenizer `upstream.tokenizer` may name."""
    return tuple(name for name, kind in KINDS.items() if kind.counts)
