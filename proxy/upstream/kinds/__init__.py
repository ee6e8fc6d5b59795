"""The kinds of upstream server, one module each: the registry that maps a kind to its profile."""

from __future__ import annotations

from proxy.config import UpstreamKind
from proxy.upstream.kinds import (
    koboldcpp,
    llama_cpp_python,
    llamacpp,
    lmstudio,
    ollama,
    openai_compatible,
    openrouter,
    other,
    sglang,
    tabbyapi,
    textgen,
    tgi,
    vllm,
)
from proxy.upstream.kinds.profile import ServerKind

# The order is the order of detection: the most common upstream first, and where one server
# imitates another (TabbyAPI answers a llama.cpp-shaped `/props`, SGLang an Ollama-shaped
# `/api/*`, vLLM and SGLang the same `/tokenize`), the imitated one's signature tells them
# apart or the imitator is asked first. Kinds known by their model list alone come last.
PROFILES: dict[UpstreamKind, ServerKind] = {
    profile.kind: profile
    for profile in (
        llamacpp.PROFILE,
        sglang.PROFILE,
        ollama.PROFILE,
        koboldcpp.PROFILE,
        tabbyapi.PROFILE,
        lmstudio.PROFILE,
        tgi.PROFILE,
        textgen.PROFILE,
        vllm.PROFILE,
        llama_cpp_python.PROFILE,
        openrouter.PROFILE,
        openai_compatible.PROFILE,
        other.PROFILE,
    )
}


def profile(kind: UpstreamKind) -> ServerKind:
    """What the proxy knows of servers of `kind`."""
    return PROFILES[kind]


def named(name: str) -> ServerKind | None:
    """The profile of the kind a setting names (`upstream.tokenizer: sglang`), if it is one."""
    return next((found for kind, found in PROFILES.items() if kind == name), None)
