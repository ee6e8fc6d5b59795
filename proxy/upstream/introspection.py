"""Learning about the upstream: its kind (once), each model's window (with a TTL), its tokens."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import Any

import structlog
from cachetools import LRUCache, TTLCache

from proxy.config import Settings, UpstreamKind
from proxy.errors import ProxyError
from proxy.logs import probe_failed
from proxy.upstream.backoff import Backoff
from proxy.upstream.client import UpstreamClient
from proxy.upstream.detect import detect_kind
from proxy.upstream.facts import ContextWindow, Detection, Fact, ModelFacts
from proxy.upstream.kinds import named, profile
from proxy.upstream.ollama.api import full_name
from proxy.upstream.tokens import MarginCounter, TiktokenCounter, TokenCounter
from proxy.upstream.windows import KindMemory, WindowAsk, refused

log = structlog.get_logger(__name__)


class ModelIntrospection:
    """Finds the upstream's kind once, then each model's window (for `context_ttl_s`) and the
    counter of its tokens; never makes a request fail for a probe that failed."""

    def __init__(self, settings: Settings, upstream: UpstreamClient) -> None:
        self.settings = settings
        self.upstream = upstream
        self._detection: Detection | None = None
        # One detection at a time, which every request arriving meanwhile waits for (a task:
        # it finishes for the others when the request that started it goes away).
        self._probing: asyncio.Task[Detection] | None = None
        upstream_settings = settings.upstream
        self.probe_timeout_s = upstream_settings.probe_timeout_s
        # Kinds and windows the upstream did not answer in time: kept for a pause that doubles
        # while they stay unanswered, instead of a wait on every request.
        self._unanswered: Backoff[Detection] = Backoff(
            upstream_settings.probe_retry_s, upstream_settings.probe_retry_s * 32
        )
        self._unanswered_windows: Backoff[ContextWindow] = Backoff(
            upstream_settings.probe_retry_s, upstream_settings.probe_retry_s * 32
        )
        self.probe_requests = 0  # requests the kind's detection took (bench, /healthz)
        # A model's window is asked again after `context_ttl_s` (a server may be restarted with
        # another -c); at most 256 models are remembered.
        self._windows: TTLCache[str, ContextWindow] = TTLCache(
            maxsize=256, ttl=settings.upstream.context_ttl_s, timer=time.monotonic
        )
        # Each tiktoken encoding is built once, in a thread; requests that need it meanwhile
        # wait for that one build.
        self._tiktoken: dict[str, asyncio.Future[TiktokenCounter]] = {}
        self._learning: dict[str, asyncio.Future[ContextWindow]] = {}
        self._declared: tuple[str, ...] | None = None
        # The last window of each model, for /healthz: the names are the callers' own, so as
        # many as the windows kept, the least recently learnt going first.
        self.seen: LRUCache[str, ContextWindow] = LRUCache(maxsize=256)
        # Ollama: the window the proxy asked for per model (its full name). Later requests ask
        # for no less, so that Ollama does not reload the model back and forth.
        self.raised_num_ctx: dict[str, int] = {}
        # What a kind learns once per upstream (Ollama from 0.15.5: its default window).
        self.memory = KindMemory()

    async def kind(self) -> UpstreamKind:
        """The upstream's kind alone (what the vision learners are chosen by)."""
        return (await self.detection()).kind

    async def settled_kind(self) -> UpstreamKind:
        """The kind, for what is learnt by kind and kept (sight, abilities): the probe's failure
        when no kind could be learnt, so that "unknown" is not kept past the upstream's return."""
        found = await self.detection()
        if found.failure is not None:
            raise found.failure
        return found.kind

    async def detection(self) -> Detection:
        """The upstream's kind: configured, or asked of the upstream once and remembered.

        The probes take `upstream.probe_timeout_s` at most, all together; requests arriving
        while they run wait for the same ones. Probes not answered in time leave the kind
        unknown (`other`: an OpenAI-compatible server's defaults), and that answer stands for
        `upstream.probe_retry_s`, twice as long after each new try left unanswered."""
        configured = self.settings.upstream.kind
        if configured != "auto":
            return Detection(configured, "upstream.kind in the config")
        if self._detection is not None:
            return self._detection
        standing = self._unanswered.standing("")
        if standing is not None:
            return standing
        if self._probing is None:
            self._probing = asyncio.ensure_future(self._probe())
            self._probing.add_done_callback(self._probed)
        return await asyncio.shield(self._probing)

    async def _probe(self) -> Detection:
        found, asked = await detect_kind(self.upstream, timeout_s=self.probe_timeout_s)
        self.probe_requests += asked
        if found.certain:
            self._detection = found
            self._unanswered.forget("")
        elif found.timed_out:
            pause = self._unanswered.pause("")
            found = replace(
                found,
                source=f"{found.source}; taken as an OpenAI-compatible server, asked again"
                f" after {pause:g} s",
            )
            self._unanswered.remember("", found, pause)
        # A probe that failed said why already; what it found is worth a line once known.
        (log.info if found.certain else log.debug)(
            "upstream probed",
            kind=found.kind,
            found_by=found.source,
            version=found.version,
            requests=asked,
            url=self.upstream.base_url,
        )
        return found

    def _probed(self, task: asyncio.Task[Detection]) -> None:
        self._probing = None
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone

    async def aclose(self) -> None:
        """Stop a detection still waiting for the upstream (shutdown)."""
        if self._probing is not None:
            self._probing.cancel()
            with contextlib.suppress(BaseException):
                await self._probing

    def known_detection(self) -> Detection | None:
        """The kind if it was found already (no request made): for /healthz; the unknown one
        while it stands."""
        configured = self.settings.upstream.kind
        if configured != "auto":
            return Detection(configured, "upstream.kind in the config")
        return self._detection or self._unanswered.standing("")

    async def declared_tokens(self) -> tuple[str, ...]:
        """Control tokens the upstream model declares, for the guard: its kind's
        `control_tokens` (llama.cpp: BOS/EOS and those its chat template spells out); asked once.
        """
        if self._declared is not None:
            return self._declared
        found: set[str] = set()
        try:
            declares = profile((await self.detection()).kind).control_tokens
            if declares is not None:
                found = await declares(self.upstream)
        except ProxyError as error:
            probe_failed(
                log, "could not learn the upstream's control tokens", error.code, error.message
            )
            return ()
        self._declared = tuple(sorted(token for token in found if token.strip()))
        return self._declared

    async def _tiktoken_for(self, model: str | None, found: Detection) -> TiktokenCounter:
        name = (
            "o200k_base"
            if model and model.startswith(("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4"))
            else "cl100k_base"
        )
        pending = self._tiktoken.get(name)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(TiktokenCounter.load, name))
            self._tiktoken[name] = pending
        try:
            return await asyncio.shield(pending)
        except ProxyError:
            # Looked for again by the next request (a file put back in place is found).
            if self._tiktoken.get(name) is pending:
                del self._tiktoken[name]
            # An upstream that cannot be reached stops the request anyway, and is what the
            # caller can do something about: said first.
            failure = found.failure or await self._unreachable()
            if failure is not None:
                raise failure from None
            raise

    async def _unreachable(self) -> ProxyError | None:
        """The error of an upstream that cannot be reached (one request), or None."""
        try:
            await self.upstream.get_json("/v1/models")
        except ProxyError as error:
            if error.code in ("upstream_unreachable", "upstream_timeout"):
                return error
        return None

    async def counter(self, model: str | None) -> TokenCounter:
        choice: str = (
            self.settings.model_settings(model).tokenizer or self.settings.upstream.tokenizer
        )
        found = await self.detection()
        kind = found.kind
        if choice == "auto":
            choice = kind if profile(kind).counter is not None else "tiktoken"
        own = named(choice)
        if own is not None and own.counter is not None:
            return own.counter(self.upstream, model)
        estimate = await self._tiktoken_for(model, found)
        if profile(kind).truncates:
            return MarginCounter(estimate, self.settings.upstream.estimate_margin)
        return estimate

    async def tokenizer_fact(self, model: str | None) -> Fact[str]:
        counter = await self.counter(model)
        inner = counter.inner if isinstance(counter, MarginCounter) else counter
        name = inner.kind.removeprefix("tiktoken:")
        own = named(counter.kind)
        if own is not None and own.counter_source:
            source = own.counter_source
        elif isinstance(counter, MarginCounter):
            margin = self.settings.upstream.estimate_margin
            source = f"tiktoken {name} over a ChatML rendering, raised by {margin:g}"
        else:
            source = f"tiktoken {name} over a ChatML rendering"
        return Fact(counter.kind, counter.exact, source)

    async def context_window(self, model: str | None) -> ContextWindow:
        configured = self.settings.model_settings(model).context_length
        if configured:
            return ContextWindow(configured, "config")
        key = model or ""
        cached = self._windows.get(key) or self._unanswered_windows.standing(key)
        if cached is not None:
            return cached
        # One lookup per model at a time: when the entry expires under load, the requests in
        # flight wait for a single call instead of each sending their own.
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
            self.seen[key] = window
            return window
        return await asyncio.shield(pending)

    async def _learn_window(self, model: str | None) -> ContextWindow:
        found = await self.detection()
        key = model or ""
        # Asked even when the probes went unanswered, a fifth as long: a gateway may hold the
        # paths it does not route and still answer /v1/models at once, and the request has
        # waited for the probes already. Bounded and remembered like them either way.
        bound = self.probe_timeout_s / 5 if found.timed_out else self.probe_timeout_s
        try:
            async with asyncio.timeout(bound):
                learner = profile(found.kind).window
                asked = WindowAsk(self.upstream, model, self.settings, found, self.memory)
                window = await learner(asked)
        except TimeoutError:
            pause = self._unanswered_windows.pause(key)
            window = ContextWindow(
                None,
                f"unknown (not answered in {bound:g} s, upstream.probe_timeout_s;"
                f" asked again after {pause:g} s)",
                keep=False,
            )
            log.warning("the context window was not answered in time", model=model)
            self._unanswered_windows.remember(key, window, pause)
            return window
        except ProxyError as error:
            # The chat request itself will say what is wrong with the upstream.
            probe_failed(
                log, "could not learn the context window", error.code, error.message, model=model
            )
            return ContextWindow(None, f"unknown ({error.message})", keep=False)
        self._unanswered_windows.forget(key)
        return window

    async def running_window(self, model: str | None) -> int | None:
        """The window the server runs `model` with, as far as the proxy knows: the one it asked
        for last (Ollama's num_ctx), else the one the server says (None: its default)."""
        raised = self.raised_num_ctx.get(full_name(model or ""))
        if raised is not None:
            return raised
        return (await self.context_window(model)).running

    async def facts(self, model: str | None) -> ModelFacts:
        """The kind, window and tokenizer the proxy uses for `model`."""
        return ModelFacts(
            await self.detection(),
            await self.context_window(model),
            await self.tokenizer_fact(model),
        )

    def known(self, detailed: bool = True) -> dict[str, Any]:
        """What is known already, without asking the upstream anything (/healthz). Not
        `detailed`: the kind only, not the windows per model name (names callers sent) nor the
        windows asked of Ollama (which tell how long someone's prompt was)."""
        found = self.known_detection()
        record: dict[str, Any] = {
            "kind": found.to_json() if found else {"value": None, "source": "not probed yet"},
            "probe_requests": self.probe_requests,
        }
        if not detailed:
            return record
        models = {}
        for name, window in self.seen.items():
            entry: dict[str, Any] = window.fact().to_json()
            if window.loaded is not None:
                entry["loaded"] = window.loaded
            if window.trained is not None:
                entry["trained"] = window.trained
            if window.running is not None:
                entry["running"] = window.running
            models[name or "(no model named)"] = entry
        if models:
            record["windows"] = models
        if self.raised_num_ctx:
            record["ollama_num_ctx"] = dict(self.raised_num_ctx)
        return record


__all__ = ["ContextWindow", "ModelIntrospection", "refused"]
