"""Does the upstream model see images, and what does an image cost it: learnt by its kind's
`sight` (proxy.upstream.kinds), kept per model.

A kind without a `sight` is unknown, so no images, unless `models.<name>.vision: true` says
otherwise. `models.<name>.vision` and `models.<name>.image_tokens` override what is learnt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import structlog
from cachetools import LRUCache

from proxy.config import Settings, UpstreamKind
from proxy.errors import ProxyError
from proxy.logs import probe_failed
from proxy.upstream.asking import RENDER_PATH, blank_png, data_url, image_message, token_ids
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import ESTIMATE, Sight
from proxy.upstream.image_cost import configured
from proxy.upstream.kinds import profile
from proxy.upstream.learnt import Learnt

log = structlog.get_logger(__name__)

__all__ = ["ESTIMATE", "RENDER_PATH", "Sight", "VisionIntrospection", "blank_png", "data_url"]


async def other(upstream: UpstreamClient, model: str | None) -> Sight:
    return Sight(False, "unknown: the upstream does not say whether the model sees", ESTIMATE)


class VisionIntrospection:
    """Learns each model's sight once per `upstream.context_ttl_s`; the upstream's own image
    counts (vLLM render) are remembered per model and image size."""

    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        kind: Callable[[], Awaitable[UpstreamKind]],
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self._kind = kind
        self._sights: Learnt[Sight] = Learnt(
            settings.upstream.context_ttl_s, lambda sight: sight.keep
        )
        self._counts: LRUCache[tuple[str, int, int], int] = LRUCache(maxsize=4096)

    async def sight(self, model: str | None) -> Sight:
        sight, now = await self._sights.get(model or "", lambda: self._learn(model))
        if now:
            (log.info if sight.keep else log.debug)(
                "model sight learnt", model=model, sees=sight.sees, source=sight.source
            )
        return sight

    async def _learn(self, model: str | None) -> Sight:
        configured_settings = self.settings.model_settings(model)
        if configured_settings.vision is False:
            return Sight(False, f"models.{model or '*'}.vision: false", ESTIMATE)
        try:
            kind = await self._kind()
            learner = profile(kind).sight or other
            learnt = await learner(self.upstream, model)
        except ProxyError as error:
            probe_failed(log, "could not learn whether the model sees", error.code, error.message)
            learnt = Sight(False, f"unknown: {error.message}", ESTIMATE, keep=False)
        if configured_settings.vision is True:
            learnt = replace(learnt, sees=True, source=f"models.{model or '*'}.vision: true")
        if configured_settings.image_tokens is not None:
            cost = configured(configured_settings.image_tokens, model)
            learnt = replace(learnt, cost=cost, server_counts=False)
        return learnt

    async def counts(
        self, model: str | None, sight: Sight, sizes: set[tuple[int, int]]
    ) -> dict[tuple[int, int], int]:
        """Tokens of an image of each size: the upstream's own count where it gives one,
        else the cost model's."""
        found = {size: sight.cost.tokens(*size) for size in sizes}
        if not sight.server_counts:
            return found
        for width, height in sorted(sizes):
            key = (model or "", width, height)
            if key not in self._counts:
                counted = await self._server_count(model, width, height)
                if counted is None:
                    return found  # the render endpoint failed: the estimate for all
                self._counts[key] = counted
            found[(width, height)] = self._counts[key]
        return found

    async def _server_count(self, model: str | None, width: int, height: int) -> int | None:
        png = await asyncio.to_thread(blank_png, width, height)
        base: dict[str, Any] = {"model": model} if model else {}
        with_image = {**base, "messages": image_message(data_url(png))}
        without = {
            **base,
            "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        }
        status, rendered = await self.upstream.post_json(RENDER_PATH, with_image)
        status_empty, empty = await self.upstream.post_json(RENDER_PATH, without)
        ids, none = token_ids(rendered), token_ids(empty)
        if status != 200 or status_empty != 200 or ids is None or none is None:
            log.warning("the upstream did not count an image", status=status, size=(width, height))
            return None
        return max(1, len(ids) - len(none))
