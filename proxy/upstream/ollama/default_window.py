"""Ollama's default window on this server, learnt: from 0.15.5 it depends on the GPUs' memory
(4,096, 32,768 or 262,144 tokens), which no endpoint states, so it is seen once on a model the
proxy loads with none set (`POST /api/generate` with the model alone, then `/api/ps`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from proxy.errors import ProxyError
from proxy.upstream.client import UpstreamClient
from proxy.upstream.ollama.api import loaded_context, version_tuple

log = structlog.get_logger(__name__)

# server/routes.go Serve: "vram-based default context" (first in 0.15.5); before it the default
# is fixed (api.DefaultOptions) and `default_num_ctx` says it.
BY_GPU_MEMORY_SINCE = (0, 15, 5)


def depends_on_gpu(version: str | None) -> bool:
    """Whether this Ollama's default window depends on its GPUs (an unknown version is assumed
    recent)."""
    parsed = version_tuple(version)
    return parsed is None or parsed >= BY_GPU_MEMORY_SINCE


@dataclass(frozen=True)
class SeenDefault:
    """The window Ollama gave `model` with none set: the server's default itself when below the
    model's trained window (`exact`), else only a floor of it (Ollama never runs a model past its
    trained window: server/sched.go effectiveContext)."""

    tokens: int
    model: str
    exact: bool

    def for_model(self, trained: int | None) -> int | None:
        """The default window of a model trained for `trained` tokens, if this tells it."""
        if self.exact:
            return min(self.tokens, trained) if trained else self.tokens
        if trained is not None and trained <= self.tokens:
            return trained
        return None


class DefaultWindow:
    """What the proxy learnt of its Ollama's default window, once per server (the GPUs do not
    change while it runs); one model loaded for it at a time."""

    def __init__(self) -> None:
        self.seen: SeenDefault | None = None
        self._lock = asyncio.Lock()

    def known(self, trained: int | None) -> tuple[int, str] | None:
        if self.seen is None:
            return None
        tokens = self.seen.for_model(trained)
        if tokens is None:
            return None
        return tokens, f"the default of this Ollama, learnt on {self.seen.model} (/api/ps)"

    async def learn(
        self, upstream: UpstreamClient, model: str, trained: int | None, running: int | None
    ) -> tuple[int, str] | None:
        """The default window of `model` on this server, and where it was learnt; None when it
        cannot be told without disturbing anyone: the model runs already, with a window that may
        be a caller's own. Loading a model that is not loaded is what the request that asks is
        about to do anyway."""
        found = self.known(trained)
        if found is not None or running is not None:
            return found
        async with self._lock:
            found = self.known(trained)
            if found is not None:
                return found
            try:
                status, _ = await upstream.post_json("/api/generate", {"model": model})
                if status != 200:
                    raise ProxyError(f"POST /api/generate answered {status}")
                status, processes = await upstream.get_json("/api/ps")
            except ProxyError as error:
                # A model that takes longer to load than a probe waits, or will not load: the
                # smallest default is planned with, as before 0.15.5.
                log.info("ollama's default window not learnt", model=model, error=error.message)
                return None
            tokens = loaded_context(processes, model) if status == 200 else None
            if tokens is None:
                return None
            seen = SeenDefault(tokens, model, exact=trained is not None and tokens < trained)
            # The default itself is kept; of two floors, the higher says more.
            if self.seen is None or (
                not self.seen.exact and (seen.exact or seen.tokens > self.seen.tokens)
            ):
                self.seen = seen
            log.info("ollama's default window learnt", model=model, tokens=tokens, exact=seen.exact)
            return tokens, (
                "the default of this Ollama, learnt: /api/ps context_length after loading "
                f"{model} with none set (POST /api/generate)"
            )
