"""Counting tokens as the upstream model does: its own tokenizer, or tiktoken as an estimate."""

from __future__ import annotations

import asyncio
import math
from typing import Any, Protocol

import tiktoken
from cachetools import LRUCache

from proxy.formats.render import message_text
from proxy.offline import settle_tiktoken_cache, tiktoken_missing
from proxy.upstream.client import UpstreamClient, upstream_failure

# Texts longer than this are tokenized in a thread, not on the event loop.
OFF_LOOP_CHARS = 20_000


def load_encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding, or a clear 503 when its file can be neither found nor downloaded."""
    settle_tiktoken_cache()
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises whatever its HTTP client raises
        raise tiktoken_missing(name, exc) from exc


class TokenCounter(Protocol):
    kind: str
    exact: bool

    async def count_text(self, text: str) -> int: ...

    async def count_messages(self, messages: list[dict[str, Any]]) -> int: ...

    async def count_prompt(self, prompt: str) -> int: ...


def text_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with their content reduced to text: templates count words, not image parts."""
    return [
        {"role": str(m.get("role", "user")), "content": message_text(m.get("content"))}
        for m in messages
    ]


def chatml(messages: list[dict[str, Any]]) -> str:
    """The proxy's own rendering for estimates, ChatML-style with the generation prompt."""
    rendered = "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in text_only(messages)
    )
    return rendered + "<|im_start|>assistant\n"


class TiktokenCounter:
    """An estimate with OpenAI's BPE: right for OpenAI models, close enough for others."""

    exact = False

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.kind = f"tiktoken:{encoding}"
        self.encoding = load_encoding(encoding)

    def _count(self, text: str) -> int:
        # encode_ordinary: document text may contain "<|endoftext|>"; it is text, not a token.
        return len(self.encoding.encode_ordinary(text))

    async def count_text(self, text: str) -> int:
        if len(text) > OFF_LOOP_CHARS:
            return await asyncio.to_thread(self._count, text)
        return self._count(text)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return await self.count_text(chatml(messages))

    async def count_prompt(self, prompt: str) -> int:
        return await self.count_text(prompt)


class LlamaCppCounter:
    """llama.cpp's own tokenizer and chat template: `/tokenize` and `/apply-template`."""

    kind = "llamacpp"
    exact = True

    def __init__(self, upstream: UpstreamClient) -> None:
        self.upstream = upstream
        self.calls = 0

    async def _tokenize(self, text: str, special: bool) -> int:
        self.calls += 1
        status, body = await self.upstream.post_json(
            "/tokenize", {"content": text, "add_special": special, "parse_special": special}
        )
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            raise upstream_failure(status, body, "/tokenize")
        return len(body["tokens"])

    async def count_text(self, text: str) -> int:
        return await self._tokenize(text, False)

    async def count_prompt(self, prompt: str) -> int:
        # A rendered prompt is read the way the server reads it: control tokens parsed.
        return await self._tokenize(prompt, True)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        plain = text_only(messages)
        if not any(m["role"] == "user" for m in plain):
            # Some templates refuse a conversation without a user turn (as LM Studio notes).
            plain = [*plain, {"role": "user", "content": "?"}]
        self.calls += 1
        status, body = await self.upstream.post_json("/apply-template", {"messages": plain})
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise upstream_failure(status, body, "/apply-template")
        return await self.count_prompt(body["prompt"])


class VllmCounter:
    """vLLM's `/tokenize`, with the model's chat template applied server-side for messages."""

    kind = "vllm"
    exact = True

    def __init__(self, upstream: UpstreamClient, model: str | None) -> None:
        self.upstream = upstream
        self.model = model
        self.calls = 0

    async def _count(self, payload: dict[str, Any]) -> int:
        if self.model:
            payload["model"] = self.model
        self.calls += 1
        status, body = await self.upstream.post_json("/tokenize", payload)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("count"), int):
            raise upstream_failure(status, body, "/tokenize")
        return int(body["count"])

    async def count_text(self, text: str) -> int:
        return await self._count({"prompt": text, "add_special_tokens": False})

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return await self._count({"messages": text_only(messages), "add_generation_prompt": True})

    async def count_prompt(self, prompt: str) -> int:
        return await self._count({"prompt": prompt, "add_special_tokens": True})


class MarginCounter:
    """An estimate raised by a safety margin, for servers that cut a prompt over their window
    without a word: better to plan a little short than to have the document cut unseen."""

    exact = False

    def __init__(self, inner: TokenCounter, margin: float) -> None:
        self.inner = inner
        self.margin = margin
        self.kind = f"{inner.kind}x{margin:g}"

    def _raise(self, count: int) -> int:
        return math.ceil(count * self.margin)

    async def count_text(self, text: str) -> int:
        return self._raise(await self.inner.count_text(text))

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return self._raise(await self.inner.count_messages(messages))

    async def count_prompt(self, prompt: str) -> int:
        return self._raise(await self.inner.count_prompt(prompt))


class TokenCache:
    """Token counts of documents by (counter, key): a resent document is not counted again."""

    def __init__(self, size: int = 1024) -> None:
        self._counts: LRUCache[tuple[str, str], int] = LRUCache(maxsize=size)

    def get(self, key: tuple[str, str]) -> int | None:
        return self._counts.get(key)

    def put(self, key: tuple[str, str], count: int) -> None:
        self._counts[key] = count
