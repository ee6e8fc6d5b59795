"""Counting tokens as the upstream model does, and learning its real context window."""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
import tiktoken

from .config import Settings
from .errors import ProxyError
from .formats.render import message_text
from .upstream.client import UpstreamClient, upstream_failure

log = structlog.get_logger(__name__)

# Special tokens as chat templates spell them: <|im_start|>, <start_of_turn>, [INST], <s>.
TEMPLATE_TOKEN = re.compile(r"<\|?[A-Za-z0-9_\-/▁｜]{1,40}\|?>|\[/?[A-Z][A-Z_]{1,30}\]")

# Texts longer than this are tokenized in a thread, not on the event loop.
OFF_LOOP_CHARS = 20_000


def load_encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding, or a clear 503 when its file can be neither found nor downloaded."""
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises whatever its HTTP client raises
        raise ProxyError(
            f"the tiktoken encoding {name} is not available ({exc.__class__.__name__}); "
            "on a machine without internet access put its file in TIKTOKEN_CACHE_DIR",
            status=503,
            type="server_error",
            code="tokenizer_unavailable",
        ) from exc


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


@dataclass
class ContextWindow:
    """A model's context length and where it was learnt, or None when nobody says."""

    tokens: int | None
    source: str
    keep: bool = True  # False when the upstream refused for want of a key: ask again next time


class ModelIntrospection:
    """Probes each upstream once for its tokenizer, and each model's window with a TTL."""

    def __init__(self, settings: Settings, upstream: UpstreamClient) -> None:
        self.settings = settings
        self.upstream = upstream
        self._flavour: str | None = None
        self._probe_lock = asyncio.Lock()
        self._windows: OrderedDict[str, tuple[float, ContextWindow]] = OrderedDict()
        self._tiktoken: dict[str, TiktokenCounter] = {}
        self._learning: dict[str, asyncio.Future[ContextWindow]] = {}
        self._declared: tuple[str, ...] | None = None

    async def flavour(self) -> str:
        """`llamacpp`, `vllm` or `other`: asked of the upstream once, then remembered."""
        if self._flavour is not None:
            return self._flavour
        async with self._probe_lock:
            if self._flavour is not None:
                return self._flavour
            flavour, certain = await self._probe()
            log.info("upstream probed", flavour=flavour, url=self.upstream.base_url)
            if not certain:
                return flavour  # refused for want of a key: ask again with the next request
            self._flavour = flavour
        return flavour

    async def _probe(self) -> tuple[str, bool]:
        """The upstream's kind, and whether the answer can be kept (no 401/403 seen)."""
        try:
            status, body = await self.upstream.get_json("/props")
            if status == 200 and isinstance(body, dict) and "default_generation_settings" in body:
                return "llamacpp", True
            refused = status in (401, 403)
            status, body = await self.upstream.post_json(
                "/tokenize", {"prompt": "probe", "add_special_tokens": False}
            )
            if status == 200 and isinstance(body, dict) and "count" in body:
                return "vllm", True
        except ProxyError as error:
            log.warning("upstream probe failed", error=error.message)
            raise
        return "other", not (refused or status in (401, 403))

    async def declared_tokens(self) -> tuple[str, ...]:
        """Control tokens the upstream model declares (llama.cpp `/props`), for the guard.

        BOS/EOS and the special tokens spelled out in its chat template; asked once.
        """
        if self._declared is not None:
            return self._declared
        found: set[str] = set()
        try:
            if await self.flavour() == "llamacpp":
                status, props = await self.upstream.get_json("/props")
                if status == 200 and isinstance(props, dict):
                    for key in ("bos_token", "eos_token"):
                        if isinstance(props.get(key), str):
                            found.add(props[key])
                    template = props.get("chat_template")
                    if isinstance(template, str):
                        found.update(TEMPLATE_TOKEN.findall(template))
        except ProxyError as error:
            log.warning("could not learn the upstream's control tokens", error=error.message)
            return ()
        self._declared = tuple(sorted(token for token in found if token.strip()))
        return self._declared

    def _tiktoken_for(self, model: str | None) -> TiktokenCounter:
        name = (
            "o200k_base"
            if model and model.startswith(("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4"))
            else "cl100k_base"
        )
        if name not in self._tiktoken:
            self._tiktoken[name] = TiktokenCounter(name)
        return self._tiktoken[name]

    async def counter(self, model: str | None) -> TokenCounter:
        choice: str = (
            self.settings.model_settings(model).tokenizer or self.settings.upstream.tokenizer
        )
        if choice == "auto":
            flavour = await self.flavour()
            choice = {"llamacpp": "llamacpp", "vllm": "vllm"}.get(flavour, "tiktoken")
        if choice == "llamacpp":
            return LlamaCppCounter(self.upstream)
        if choice == "vllm":
            return VllmCounter(self.upstream, model)
        return self._tiktoken_for(model)

    async def context_window(self, model: str | None) -> ContextWindow:
        configured = self.settings.model_settings(model).context_length
        if configured:
            return ContextWindow(configured, "config")
        key = model or ""
        cached = self._windows.get(key)
        if cached and time.monotonic() - cached[0] < self.settings.upstream.context_ttl_s:
            return cached[1]
        # One lookup per model at a time: when the entry expires under load, the requests in
        # flight wait for a single /props call instead of each sending their own.
        pending = self._learning.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._learn_window(model))
            self._learning[key] = pending
            try:
                window = await asyncio.shield(pending)
            finally:
                self._learning.pop(key, None)
            if window.keep:
                self._windows[key] = (time.monotonic(), window)
            while len(self._windows) > 256:
                self._windows.popitem(last=False)
            return window
        return await asyncio.shield(pending)

    async def _learn_window(self, model: str | None) -> ContextWindow:
        if await self.flavour() == "llamacpp":
            status, props = await self.upstream.get_json("/props")
            settings = props.get("default_generation_settings") if isinstance(props, dict) else None
            n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
            if status == 200 and isinstance(n_ctx, int) and n_ctx > 0:
                return ContextWindow(n_ctx, "llamacpp /props n_ctx")
        status, models = await self.upstream.get_json("/v1/models")
        cards = models.get("data") if isinstance(models, dict) else None
        if status == 200 and isinstance(cards, list):
            chosen = [c for c in cards if isinstance(c, dict) and c.get("id") == model] or [
                c for c in cards if isinstance(c, dict)
            ][:1]
            for card in chosen:
                meta = card.get("meta")
                if isinstance(meta, dict) and isinstance(meta.get("n_ctx"), int):
                    return ContextWindow(meta["n_ctx"], "llamacpp /v1/models meta.n_ctx")
                if isinstance(card.get("max_model_len"), int):
                    return ContextWindow(card["max_model_len"], "vllm /v1/models max_model_len")
        if status in (401, 403):
            return ContextWindow(None, f"unknown (the upstream answered {status})", keep=False)
        return ContextWindow(None, "unknown")
