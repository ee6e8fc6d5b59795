"""What the proxy knows of one kind of upstream server, as one profile every kind fills in."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from proxy.config import Settings, UpstreamKind
from proxy.errors import BadRequest
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import Abilities, ContextWindow, ModelFacts, Sight
from proxy.upstream.tokens import TokenCounter
from proxy.upstream.windows import WindowAsk, from_listing

T = TypeVar("T")

ANSWER_RESERVE = 512
"""Tokens kept free for the answer, when the request sets no max_tokens, on servers that cut a
prompt that leaves too little room: as much as KoboldCpp (400 for chat, 180 for completions,
koboldcpp.py transform_genparams) and text-generation-webui (512, modules/api/completions.py)
generate by default, and a floor for Ollama and LM Studio, which generate without a limit."""

Body = Any
"""A parsed JSON answer (None when it was not JSON)."""


def as_dict(body: Body) -> dict[str, Any]:
    return body if isinstance(body, dict) else {}


# What a build without a version says instead of one: llama.cpp built outside its git tree
# (xllamacpp's) names itself b0-unknown.
_NO_VERSION = re.compile(r"(?:b0-)?unknown|b0|0\.0\.0|", re.IGNORECASE)


def version_at(key: str) -> Callable[[Body], str | None]:
    """Reads the server's version from `key` of a probe's answer."""

    def read(body: Body) -> str | None:
        value = as_dict(body).get(key)
        if not isinstance(value, str) or _NO_VERSION.fullmatch(value.strip()):
            return None
        return value

    return read


def no_version(body: Body) -> str | None:
    return None


@dataclass(frozen=True)
class Probe:
    """One request whose answer identifies one kind."""

    kind: UpstreamKind
    method: str
    path: str
    matches: Callable[[Body], bool]
    payload: dict[str, Any] | None = None
    version: Callable[[Body], str | None] = no_version

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


WindowLearner = Callable[[WindowAsk], Awaitable[ContextWindow]]
"""A model's window as the server states it (`WindowAsk`: the upstream, the model, ...)."""
CounterMaker = Callable[[UpstreamClient, str | None], TokenCounter]
SightLearner = Callable[[UpstreamClient, str | None], Awaitable[Sight]]
AbilitiesLearner = Callable[[UpstreamClient, str | None], Awaitable[Abilities]]


class FitRecord(Protocol):
    """The part of the request's upstream record a kind's fit hooks write (UpstreamRecord)."""

    route: str
    prompt_tokens: int | None
    num_ctx: int | None
    upstream_prompt_tokens: int | None
    note: str
    asked_num_ctx: int | None
    dropped_options: dict[str, str]


class ResponseConverter(Protocol):
    """Turns an upstream's answer into the shape the client asked for (JSON and SSE events):
    a server's own answer (Ollama's native chat) or a text completion into OpenAI's chat."""

    def convert_json(self, payload: dict[str, Any]) -> dict[str, Any]: ...

    def convert_event(self, event: bytes, payload: Any) -> list[bytes | dict[str, Any]]: ...

    def convert_error(self, status: int, payload: Any) -> dict[str, Any] | None:
        """An error answer in OpenAI's shape; None when it is one already."""
        ...


@dataclass
class Fitting:
    """A request on its way upstream as the fit stage hands it to its kind's hooks: what they
    read, and what they may change (the stage takes `body`, `upstream_path` and
    `response_converter` back)."""

    model: str | None
    body: dict[str, Any]
    upstream_path: str
    fixed_route: bool  # the body goes where the caller sent it: no other route
    facts: ModelFacts
    record: FitRecord
    settings: Settings
    label: str
    raised_num_ctx: dict[str, int]  # Ollama: the window asked for per model, kept per upstream
    warnings: list[str]
    response_headers: MutableMapping[str, str]
    count: Callable[[TokenCounter, int], Awaitable[int | None]]
    """The prompt's tokens as sent, by a counter; None when it surely fits the limit given."""
    bound: Callable[[], Awaitable[int | None]]
    """The most tokens the messages can be, whatever the tokenizer (None: too long to say)."""
    answer: int = 0  # tokens kept for the answer
    answer_asked: int | None = None  # the request's own max_tokens, if it sets one
    counter: TokenCounter | None = None  # set for a kind that truncates, before its `fit`
    response_converter: ResponseConverter | None = None

    async def tokens(self, limit: int) -> int | None:
        """The prompt's tokens as sent; None when it surely fits `limit` uncounted."""
        assert self.counter is not None, "counted only for a kind that truncates"
        return await self.count(self.counter, limit)

    def too_small(self, tokens: int, window: int) -> WindowTooSmall:
        return WindowTooSmall(tokens, self.answer, window, self.facts, self.label)


class WindowTooSmall(BadRequest):
    """The prompt does not fit the window the server runs the model with, and the server would
    cut it without an error (400)."""

    def __init__(
        self, tokens: int, answer: int, window: int, facts: ModelFacts, label: str
    ) -> None:
        about = "" if facts.tokenizer.exact else "about "
        hint = facts.window.hint or (
            f"{label} runs this model with a window of {window} tokens "
            "and would cut a longer prompt without saying so"
        )
        super().__init__(
            f"the prompt needs {about}{tokens} tokens and the answer {answer} more, "
            f"over the window of {window}: {hint}",
            code="context_length_exceeded",
            param="messages",
        )


@dataclass(frozen=True)
class ServerKind:
    """Everything the proxy knows of one kind of upstream server; each field is one question the
    proxy asks of a kind, answered in the kind's own module."""

    kind: UpstreamKind
    label: str  # the server's name in messages
    truncates: bool
    """Cuts a prompt longer than its window and answers 200, without an error (the proxy must
    never send it one); the others refuse such a prompt with a 4xx the client sees."""
    error_frames: bool = False
    """Says a failure after its 200 in an SSE `event: error` frame, which the proxy turns into
    OpenAI's error event."""
    probes: tuple[Probe, ...] = ()
    """The requests that tell this kind apart, asked in the registry's order."""
    lists: Callable[[list[dict[str, Any]]], bool] | None = None
    """Knows this kind by the cards of its `GET /v1/models` (hosted APIs with no probe)."""
    window: WindowLearner = from_listing
    counter: CounterMaker | None = None
    """The server's own tokenizer behind its endpoints (also `upstream.tokenizer: <kind>`);
    None: tiktoken estimates."""
    counter_source: str = ""  # the endpoints the counter asks, as /healthz shows them
    sight: SightLearner | None = None  # None: unknown, no images unless configured
    abilities: AbilitiesLearner | None = None  # None: unknown unless configured
    control_tokens: Callable[[UpstreamClient], Awaitable[set[str]]] | None = None
    """The control tokens the model declares, which the guard keeps out of documents."""
    prepare: Callable[[Fitting], None] | None = None
    """Fixes the body for this server before anything is sent (every request of the kind)."""
    fit: Callable[[Fitting], Awaitable[bool]] | None = None
    """For a kind that `truncates`: fits the prompt to the window its own way; True when it
    did, False to leave it to the generic check against the window."""
    completions_take_any_model: bool = False
    """Its /v1/completions takes any model, base models included: a few-shot prompt there
    translates with a model that follows no instruction."""
    reads_template_kwargs: bool = False
    """Passes `chat_template_kwargs` to the model's template (`enable_thinking: false` keeps a
    reasoning model from spending a short call's tokens on thinking)."""
    repeatable: Mapping[str, Any] = field(default_factory=dict)
    """Fields that make two identical greedy requests answer alike, for the proxy's own calls
    whose answers must not depend on what was asked before."""
    native_side_calls: bool = False
    """The proxy's own short calls (a translation, the standalone question) go to its native
    chat with the window the model runs with: its OpenAI endpoint would reload the model."""
    no_search_loop: str = ""
    """Why the model's search loop cannot run on this kind ("" when it can)."""
