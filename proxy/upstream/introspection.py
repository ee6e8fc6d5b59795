"""Learning about the upstream: which tokenizer it offers, each model's window, its tokens."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass

import structlog
from cachetools import TTLCache

from proxy.config import Settings
from proxy.errors import ProxyError
from proxy.upstream.client import UpstreamClient
from proxy.upstream.tokens import LlamaCppCounter, TiktokenCounter, TokenCounter, VllmCounter

log = structlog.get_logger(__name__)

# Special tokens as chat templates spell them: <|im_start|>, <start_of_turn>, [INST], <s>.
TEMPLATE_TOKEN = re.compile(r"<\|?[A-Za-z0-9_\-/▁｜]{1,40}\|?>|\[/?[A-Z][A-Z_]{1,30}\]")


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
        # A model's window is asked again after `context_ttl_s` (a server may be restarted with
        # another -c); at most 256 models are remembered.
        self._windows: TTLCache[str, ContextWindow] = TTLCache(
            maxsize=256, ttl=settings.upstream.context_ttl_s, timer=time.monotonic
        )
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
        if cached is not None:
            return cached
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
                self._windows[key] = window
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
