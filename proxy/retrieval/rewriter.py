"""A follow-up rewritten as a standalone search question by an instruction-tuned model: one
short, bounded chat call, remembered per caller, conversation and model."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog
from cachetools import LRUCache

from proxy import jsonio
from proxy.retrieval.standalone_answer import Cleaned, clean_rewrite
from proxy.retrieval.translation import Endpoint
from proxy.upstream.client import UpstreamClient

log = structlog.get_logger(__name__)

TIMED_OUT = "timed out"
MAX_ANSWER_BYTES = 256 * 1024
"""An answer of a few dozen tokens is a few hundred bytes; more than this is not read."""


@dataclass(frozen=True)
class Rewrite:
    """What one call gave: the question kept (None: nothing usable, `error` says why) and what
    it cost."""

    text: str | None
    seconds: float
    endpoint: Endpoint
    error: str | None = None
    timed_out: bool = False
    cached: bool = False
    rejected: bool = False  # an answer the proxy's checks turned down (`error` says why)


class QuestionRewriter:
    """Asks a model for standalone questions: one chat call per conversation and follow-up,
    capped in time and tokens; answers (questions or refusals) are remembered per caller,
    server, model and conversation, failures are not."""

    def __init__(self, timeout_s: float, max_tokens: int, cache_size: int = 1024) -> None:
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.max_tokens = max_tokens
        self._cache: LRUCache[str, tuple[str | None, str | None]] = LRUCache(maxsize=cache_size)

    def key(
        self, server: UpstreamClient, messages: list[dict[str, str]], model: str | None, scope: str
    ) -> str:
        """The cache key: `scope` keeps one caller's answers (and timings) from another's; the
        messages hold the conversation's questions, its last answer and the follow-up."""
        asked = json.dumps([scope, server.base_url, model or "", messages], ensure_ascii=False)
        return hashlib.sha256(asked.encode()).hexdigest()

    async def rewrite(
        self,
        server: UpstreamClient,
        messages: list[dict[str, str]],
        *,
        model: str | None,
        endpoint: Endpoint,
        scope: str,
        extra: dict[str, Any] | None = None,
        clean: Callable[[str], Cleaned] = clean_rewrite,
    ) -> Rewrite:
        started = time.perf_counter()
        key = self.key(server, messages, model, scope)
        if key in self._cache:
            text, error = self._cache[key]
            return Rewrite(text, 0.0, endpoint, error, cached=True)
        try:
            raw = await self._ask(server, messages, model, endpoint, extra or {})
        except TimeoutError:
            seconds = time.perf_counter() - started
            log.warning("question rewrite timed out", seconds=round(seconds, 3))
            return Rewrite(None, seconds, endpoint, TIMED_OUT, timed_out=True)
        except (aiohttp.ClientError, ValueError, LookupError, TypeError, AttributeError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:200] if str(exc) else type(exc).__name__
            log.warning("question rewrite failed", error=error)
            return Rewrite(None, time.perf_counter() - started, endpoint, error)
        cleaned = clean(raw)
        # An answer, question or not, is kept: the same conversation gets the same search.
        self._cache[key] = (cleaned.text, cleaned.error)
        return Rewrite(cleaned.text, time.perf_counter() - started, endpoint, cleaned.error)

    async def _ask(
        self,
        server: UpstreamClient,
        messages: list[dict[str, str]],
        model: str | None,
        endpoint: Endpoint,
        extra: dict[str, Any],
    ) -> str:
        if endpoint == "native":
            # Ollama's /api/chat (api/types.go ChatRequest): its own names for the same caps,
            # and `think: false` for a model that reasons.
            options = {**(extra.get("options") or {})}
            options |= {"num_predict": self.max_tokens, "temperature": 0}
            payload: dict[str, Any] = {
                "model": model,
                "messages": messages,
                "stream": False,
                "think": False,
                "options": options,
            }
            path = "/api/chat"
        else:
            payload = {
                **extra,
                "messages": messages,
                "max_tokens": self.max_tokens,
                "temperature": 0,
                "stream": False,
            }
            if model:
                payload["model"] = model
            path = "/v1/chat/completions"
        headers = {**server.auth_headers(), "Accept-Encoding": "identity"}
        async with server.open(
            "POST", server.url(path), json=payload, headers=headers, timeout=self.timeout
        ) as response:
            if response.status != 200:
                raise ValueError(f"upstream answered {response.status}")
            data = await response.content.read(MAX_ANSWER_BYTES + 1)
        if len(data) > MAX_ANSWER_BYTES:
            raise ValueError(f"the answer is over {MAX_ANSWER_BYTES} bytes")
        body = jsonio.loads(data)
        message = body["message"] if endpoint == "native" else body["choices"][0]["message"]
        answer = message.get("content")
        if not isinstance(answer, str):
            raise ValueError("no text in the answer")
        return answer
