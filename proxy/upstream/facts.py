"""What the proxy knows of its upstream: each fact with its value, whether it is exact, and where
it was learnt (the upstream's kind, a model's window, its tokenizer, its sight, its abilities)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from proxy.config import UpstreamKind
from proxy.errors import ProxyError
from proxy.upstream.image_cost import ImageCost

T = TypeVar("T")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One thing learnt about the upstream: its value, exact or estimated, and its source (the
    endpoint and field, the config key, or how it was estimated)."""

    value: T
    exact: bool
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "exact": self.exact, "source": self.source}


@dataclass(frozen=True)
class Detection:
    """The upstream's kind and how it was found. `certain` is False when the kind is not known
    (a probe failed or was refused for want of a key: the next request asks again); `timed_out`
    when the probes were not answered in time (asked again after a pause)."""

    kind: UpstreamKind
    source: str
    certain: bool = True
    version: str | None = None
    timed_out: bool = False
    failure: ProxyError | None = field(default=None, compare=False)
    """The error a probe met when the upstream could not be reached at all (refused, no
    answer, not resolved): what a request that needs the upstream fails with first."""

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"value": self.kind, "source": self.source}
        if self.version:
            record["version"] = self.version
        if not self.certain:
            record["known"] = False
        return record


@dataclass(frozen=True)
class ContextWindow:
    """A model's context window as the proxy plans with it, and where it was learnt.

    `tokens` is None when nobody says. `loaded` is the window the server runs the model with
    (for Ollama: for a request that sets none) and `trained` the model's own maximum, where the
    server tells them apart (Ollama, LM Studio); `running` what Ollama runs it with right now;
    `hint` says how to make it larger. `keep` is False when the answer must be asked for again
    next time (refused for want of a key, or a model not loaded yet)."""

    tokens: int | None
    source: str
    exact: bool = True
    keep: bool = True
    loaded: int | None = None
    trained: int | None = None
    running: int | None = None
    hint: str = ""

    def fact(self) -> Fact[int | None]:
        return Fact(self.tokens, self.exact and self.tokens is not None, self.source)


@dataclass(frozen=True)
class ModelFacts:
    """What the proxy uses for one model behind the upstream. A new fact (say, whether the model
    sees images) joins as one more `Fact` field."""

    kind: Detection
    window: ContextWindow
    tokenizer: Fact[str]

    def to_json(self) -> dict[str, Any]:
        window = self.window.fact().to_json()
        if self.window.loaded is not None:
            window["loaded"] = self.window.loaded
        if self.window.trained is not None:
            window["trained"] = self.window.trained
        return {
            "kind": self.kind.to_json(),
            "window": window,
            "tokenizer": self.tokenizer.to_json(),
        }


@dataclass(frozen=True)
class Sight:
    """Whether a model sees images, where that was learnt, and what an image costs it."""

    sees: bool
    source: str
    cost: ImageCost
    server_counts: bool = False  # the upstream counts an image's tokens itself (vLLM render)
    keep: bool = True  # False: learnt from a failure; asked again next time

    def to_json(self) -> dict[str, Any]:
        return {
            "sees": self.sees,
            "source": self.source,
            "image_tokens": "counted by the upstream" if self.server_counts else self.cost.family,
            "image_tokens_source": self.cost.source,
            "estimated": self.cost.estimated and not self.server_counts,
        }


ESTIMATE = ImageCost("estimate", "estimated: one token per 28×28 pixels", estimated=True)


def unknown(source: str) -> Fact[bool | None]:
    return Fact(None, False, source)


@dataclass(frozen=True)
class Abilities:
    """Whether a model is instruction-tuned and whether its server parses its tool calls.
    `keep` is False when learnt from a failure: asked again next time."""

    instruct: Fact[bool | None]
    tools: Fact[bool | None]
    keep: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"instruct": self.instruct.to_json(), "tools": self.tools.to_json()}


def both_unknown(source: str, keep: bool = False) -> Abilities:
    return Abilities(unknown(source), unknown(source), keep=keep)
