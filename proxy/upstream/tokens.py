"""Counting tokens as the upstream model does: its own tokenizer, or tiktoken as an estimate."""

from __future__ import annotations

import asyncio
import math
from typing import Any, Protocol

import tiktoken
from cachetools import LRUCache

from proxy.formats.render import message_text
from proxy.upstream.encodings import load_encoding

# Texts longer than this are tokenized in a thread, not on the event loop.
OFF_LOOP_CHARS = 20_000


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
    """An estimate with OpenAI's BPE: right for OpenAI models, close enough for others.

    Made with `TiktokenCounter.load` in a thread: building the encoding reads and parses its
    file (0.1-0.4 s), which on the event loop would hold every other request."""

    exact = False

    def __init__(self, name: str, encoding: tiktoken.Encoding) -> None:
        self.kind = f"tiktoken:{name}"
        self.encoding = encoding

    @classmethod
    def load(cls, name: str = "cl100k_base") -> TiktokenCounter:
        """Blocking: the encoding from the file shipped with the proxy (never downloaded)."""
        return cls(name, load_encoding(name))

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
