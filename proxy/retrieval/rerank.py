"""An OpenAI-style rerank endpoint (llama.cpp `/v1/rerank`, vLLM `/rerank`, Jina/Cohere shape)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp

from proxy import jsonio
from proxy.config import without_credentials
from proxy.errors import UpstreamError


class Reranker:
    """Scores passages against a query with a cross-encoder served over HTTP.

    `POST {base_url}/rerank {"model", "query", "documents", "top_n"}` answers
    `{"results": [{"index", "relevance_score"}]}`; `base_url` ends where the server's routes
    start (`http://host:8080/v1` for llama.cpp, `http://host:8000` for vLLM's `/rerank`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        top_n: int = 20,
        timeout_s: float = 60.0,
    ) -> None:
        self.url = base_url.rstrip("/") + "/rerank"
        self.model = model
        self.top_n = top_n
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage, in the passages' order (higher is more relevant)."""
        if not passages:
            return []
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout, trust_env=False)
        body: dict[str, Any] = {"model": self.model, "query": query}
        body.update(documents=list(passages), top_n=len(passages))
        try:
            async with self._session.post(self.url, json=body, headers=self._headers) as reply:
                if reply.status >= 400:
                    text = (await reply.text())[:300]
                    raise self._error(f"HTTP {reply.status}: {text}")
                payload: Any = await reply.json(content_type=None, loads=jsonio.loads)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._error(f"unreachable ({type(exc).__name__}: {exc})") from exc
        except ValueError as exc:
            raise self._error("answered something that is not JSON") from exc
        return self._read(payload, len(passages))

    def _read(self, payload: Any, count: int) -> list[float]:
        results = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(results, list):
            raise self._error("answer has no 'results' list")
        scores: list[float | None] = [None] * count
        for item in results:
            try:
                index, score = int(item["index"]), float(item["relevance_score"])
            except (KeyError, TypeError, ValueError) as exc:
                raise self._error(f"malformed result {str(item)[:100]}") from exc
            if not 0 <= index < count:
                raise self._error(f"result index {index} out of range")
            scores[index] = score
        if any(score is None for score in scores):
            raise self._error(f"returned {sum(s is not None for s in scores)} of {count} scores")
        return [float(score) for score in scores if score is not None]

    def _error(self, reason: str) -> UpstreamError:
        shown = without_credentials(self.url)
        return UpstreamError(
            f"rerank server {shown}: {reason}; check that it runs and serves "
            "retrieval.rerank.model, or remove retrieval.rerank",
            code="rerank_failed",
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
