"""A question in another language than its document, translated by the upstream model in one
short, bounded call, so that its words (BM25) and its meaning (embeddings) can meet the text."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import structlog
from cachetools import LRUCache

from proxy import jsonio
from proxy.languages import LANGUAGE_NAMES
from proxy.upstream.client import UpstreamClient

log = structlog.get_logger(__name__)

Endpoint = Literal["chat", "completions", "native"]
"""`/v1/chat/completions`, `/v1/completions`, or Ollama's own `/api/chat` (which takes the
window the model runs with, `extra["options"]["num_ctx"]`, so that asking reloads nothing)."""


# Two questions in every language, the same two: a base model continues the pattern, an
# instruction-tuned one follows it (both seen with llama.cpp's /v1/completions).
_EXAMPLES = {
    "english": ("Where is the train station?", "How much does the ticket cost?"),
    "german": ("Wo ist der Bahnhof?", "Wie viel kostet die Fahrkarte?"),
    "french": ("Où est la gare ?", "Combien coûte le billet ?"),
    "spanish": ("¿Dónde está la estación de tren?", "¿Cuánto cuesta el billete?"),
    "italian": ("Dov'è la stazione ferroviaria?", "Quanto costa il biglietto?"),
    "portuguese": ("Onde fica a estação de comboios?", "Quanto custa o bilhete?"),
    "dutch": ("Waar is het treinstation?", "Hoeveel kost het kaartje?"),
    "russian": ("Где находится вокзал?", "Сколько стоит билет?"),
    "swedish": ("Var ligger tågstationen?", "Hur mycket kostar biljetten?"),
    "danish": ("Hvor er togstationen?", "Hvor meget koster billetten?"),
    "norwegian": ("Hvor er togstasjonen?", "Hvor mye koster billetten?"),
    "turkish": ("Tren istasyonu nerede?", "Bilet ne kadar?"),
}

NOT_A_TRANSLATION = "the answer was not a translation"
MAX_QUERY_WORDS = 80
"""A longer message is not a question to translate: it is searched as it is."""
MAX_OUTPUT_TOKENS = 96
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LETTER = re.compile(r"[^\W\d_]")
_LABEL = re.compile(r"^\s*(?:[A-Za-z]+|translation|перевод)\s*:\s*", re.IGNORECASE)


def translatable(source: str | None, target: str) -> bool:
    """True when a question in `source` should be translated to search a `target` document."""
    return (
        source is not None
        and source != target
        and source in LANGUAGE_NAMES
        and target in LANGUAGE_NAMES
    )


def completion_prompt(query: str, source: str, target: str) -> str:
    """A few-shot prompt whose continuation is the translation (for /v1/completions)."""
    src, dst = LANGUAGE_NAMES[source], LANGUAGE_NAMES[target]
    lines = [
        f"{src}: {a}\n{dst}: {b}" for a, b in zip(_EXAMPLES[source], _EXAMPLES[target], strict=True)
    ]
    return "\n\n".join([*lines, f"{src}: {_one_line(query)}\n{dst}:"])


def chat_messages(query: str, source: str, target: str) -> list[dict[str, str]]:
    """The same, as an instruction with two example turns (for /v1/chat/completions)."""
    src, dst = LANGUAGE_NAMES[source], LANGUAGE_NAMES[target]
    messages = [
        {
            "role": "system",
            "content": f"Translate the user's question from {src} into {dst}. "
            "Reply with the translation only.",
        }
    ]
    for a, b in zip(_EXAMPLES[source], _EXAMPLES[target], strict=True):
        messages += [{"role": "user", "content": a}, {"role": "assistant", "content": b}]
    messages.append({"role": "user", "content": _one_line(query)})
    return messages


def clean_translation(raw: str, query: str, target: str) -> str | None:
    """The translation on the model's first line, or None when it does not look like one: empty,
    the question itself, far longer, or in the wrong script."""
    lines = [line for line in raw.strip().splitlines() if line.strip()]
    if not lines:
        return None
    text = _LABEL.sub("", lines[0]).strip().strip("\"'«»“”„").strip()
    if not text or text.casefold() == query.strip().casefold():
        return None
    if len(text) > 3 * len(query) + 40:
        return None
    letters = _LETTER.findall(text)
    cyrillic = sum(1 for letter in letters if _CYRILLIC.match(letter))
    if not letters or (target == "russian") != (cyrillic * 2 > len(letters)):
        return None
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Translation:
    """What the translation of one question into one language gave: the text (None: failed or
    not taken) and what it cost."""

    source: str
    target: str
    text: str | None
    seconds: float
    endpoint: Endpoint
    error: str | None = None
    cached: bool = False

    def record(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "from": self.source,
            "to": self.target,
            "query": self.text,
            "endpoint": self.endpoint,
            "seconds": round(self.seconds, 3),
        }
        if self.error:
            found["error"] = self.error
        if self.cached:
            found["cached"] = True
        return found


Translate = Callable[[str], Awaitable["Translation | None"]]
"""Translates the request's question into a document's language (None: nothing to do)."""


class QueryTranslator:
    """Asks the upstream model for translations: one short call per question and language,
    capped in time and tokens, remembered per caller; a failure only means no translation."""

    def __init__(self, upstream: UpstreamClient, timeout_s: float, cache_size: int = 1024):
        self.upstream = upstream
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._cache: LRUCache[tuple[str, ...], tuple[str | None, str | None]] = LRUCache(
            maxsize=cache_size
        )

    async def translate(
        self,
        query: str,
        source: str,
        target: str,
        *,
        model: str | None,
        endpoint: Endpoint,
        scope: str,
        extra: dict[str, Any] | None = None,
    ) -> Translation:
        """`query` in `target`. `scope` keeps one caller's translations from answering (and
        timing) another's."""
        started = time.perf_counter()
        key = (scope, model or "", endpoint, source, target, query)
        if key in self._cache:
            text, refused = self._cache[key]
            return Translation(source, target, text, 0.0, endpoint, refused, cached=True)
        if len(query.split()) > MAX_QUERY_WORDS:
            return Translation(source, target, None, 0.0, endpoint, "question too long")
        error: str | None = None
        translated: str | None = None
        try:
            raw = await self._ask(query, source, target, model, endpoint, extra or {})
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError, TypeError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:200] if str(exc) else type(exc).__name__
            log.warning("query translation failed", source=source, target=target, error=error)
        else:
            translated = clean_translation(raw, query, target)
            if translated is None:
                error = NOT_A_TRANSLATION
            # An answer, translation or not, is kept: the same question gets the same answer.
            self._cache[key] = (translated, error)
        seconds = time.perf_counter() - started
        return Translation(source, target, translated, seconds, endpoint, error)

    async def _ask(
        self,
        query: str,
        source: str,
        target: str,
        model: str | None,
        endpoint: Endpoint,
        extra: dict[str, Any],
    ) -> str:
        payload: dict[str, Any] = {
            **extra,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "temperature": 0,
            "stream": False,
        }
        if model:
            payload["model"] = model
        if endpoint == "completions":
            payload |= {"prompt": completion_prompt(query, source, target), "stop": ["\n"]}
            path = "/v1/completions"
        elif endpoint == "native":
            # Ollama's /api/chat (api/types.go ChatRequest): its own names for the same caps.
            options = {**(extra.get("options") or {})}
            options |= {"num_predict": MAX_OUTPUT_TOKENS, "temperature": 0}
            payload = {
                "model": model,
                "messages": chat_messages(query, source, target),
                "stream": False,
                "options": options,
            }
            path = "/api/chat"
        else:
            payload |= {"messages": chat_messages(query, source, target)}
            path = "/v1/chat/completions"
        headers = {**self.upstream.auth_headers(), "Accept-Encoding": "identity"}
        async with self.upstream.open(
            "POST", self.upstream.url(path), json=payload, headers=headers, timeout=self.timeout
        ) as response:
            if response.status != 200:
                raise ValueError(f"upstream answered {response.status}")
            body = await response.json(content_type=None, loads=jsonio.loads)
        if endpoint == "native":
            answer = body["message"]["content"]
        else:
            choice = body["choices"][0]
            answer = choice["text"] if endpoint == "completions" else choice["message"]["content"]
        if not isinstance(answer, str):
            raise ValueError("no text in the answer")
        return answer
