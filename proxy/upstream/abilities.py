"""Is the upstream model instruction-tuned, and does its server parse its tool calls: learnt by
its kind's `abilities` (proxy.upstream.kinds), kept per model.

`instruct`: the model was tuned to follow a chat (it has a chat template of its own); a base
(pre-trained) model only continues text. `tools`: the server turns the model's own tool-call
format into OpenAI `tool_calls` (a generic fallback the model was not trained for does not
count). Each is True, False or None (unknown), exact or inferred, with where it was learnt.
How each kind tells is in its module. A kind without `abilities` is unknown, unless
configured: `models.<name>.instruct` and `models.<name>.tools` override what is learnt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import structlog
from cachetools import LRUCache

from proxy.config import Settings, UpstreamKind
from proxy.errors import ProxyError
from proxy.logs import probe_failed
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import Abilities, Fact, both_unknown
from proxy.upstream.kinds import profile
from proxy.upstream.learnt import Learnt

log = structlog.get_logger(__name__)

__all__ = ["Abilities", "AbilityIntrospection"]


async def other(upstream: UpstreamClient, model: str | None) -> Abilities:
    return both_unknown("unknown: this kind of server does not say", keep=True)


class AbilityIntrospection:
    """Learns each model's abilities once per `upstream.context_ttl_s`; never fails a request
    (a probe that failed gives None with its reason, and is asked again next time)."""

    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        kind: Callable[[], Awaitable[UpstreamKind]],
        spawned: Fact[bool | None] | None = None,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self._kind = kind
        # What the proxy's own llama.cpp server's GGUF says (upstream.spawn): more exact than
        # /props, where the template chosen for it may stand in for a missing one.
        self.spawned = spawned
        self._abilities: Learnt[Abilities] = Learnt(
            settings.upstream.context_ttl_s, lambda found: found.keep
        )
        # The last abilities of each model, for /healthz (names are the callers' own).
        self.seen: LRUCache[str, Abilities] = LRUCache(maxsize=256)

    async def of(self, model: str | None) -> Abilities:
        """`model`'s abilities: configured, remembered, or learnt from the upstream now."""
        key = model or ""
        found, now = await self._abilities.get(key, lambda: self._learn(model))
        if now:
            self.seen[key] = found
            # Unknown for want of an answer is not learnt: asked again next time.
            (log.info if found.keep else log.debug)(
                "model abilities learnt",
                model=model,
                instruct=found.instruct.value,
                instruct_source=found.instruct.source,
                tools=found.tools.value,
                tools_source=found.tools.source,
            )
        return found

    async def _learn(self, model: str | None) -> Abilities:
        configured = self.settings.model_settings(model)
        name = f"models.{model or '*'}"
        if configured.instruct is not None and configured.tools is not None:
            learnt = both_unknown("configured", keep=True)  # nothing to ask
        else:
            try:
                kind = await self._kind()
                learner = profile(kind).abilities or other
                learnt = await learner(self.upstream, model)
            except ProxyError as error:
                probe_failed(
                    log, "could not learn the model's abilities", error.code, error.message
                )
                learnt = both_unknown(f"unknown: {error.message}")
            if self.spawned is not None and self.spawned.value is not None:
                learnt = replace(learnt, instruct=self.spawned)
        if configured.instruct is not None:
            said = f"{name}.instruct: {str(configured.instruct).lower()}"
            learnt = replace(learnt, instruct=Fact(configured.instruct, True, said))
        if configured.tools is not None:
            said = f"{name}.tools: {str(configured.tools).lower()}"
            learnt = replace(learnt, tools=Fact(configured.tools, True, said))
        return learnt

    def known(self, detailed: bool = True) -> dict[str, Any]:
        """What was learnt so far, asked of nobody (/healthz): per model name only `detailed`
        (the names are what callers sent)."""
        if not detailed:
            return {}
        return {name or "(no model named)": found.to_json() for name, found in self.seen.items()}
