"""Another OpenAI-compatible server the proxy asks a small task of (retrieval.rewrite.base_url):
its kind and its models' abilities, learnt the way the upstream's are."""

from __future__ import annotations

import asyncio

import aiohttp

from proxy.config import Settings, UpstreamKind, UpstreamSettings
from proxy.upstream.abilities import AbilityIntrospection
from proxy.upstream.client import UpstreamClient
from proxy.upstream.detect import detect_kind


class SideServer:
    """A server beside the upstream, over the proxy's one session: found once, asked again only
    while its kind is uncertain (unreachable, refused)."""

    def __init__(
        self, settings: Settings, base_url: str, api_key: str | None, session: aiohttp.ClientSession
    ) -> None:
        server = UpstreamSettings(
            base_url=base_url,
            api_key=api_key,
            connect_timeout_s=settings.upstream.connect_timeout_s,
            context_ttl_s=settings.upstream.context_ttl_s,
        )
        self.client = UpstreamClient(server, session)
        self._kind: UpstreamKind | None = None
        self._lock = asyncio.Lock()
        self.abilities = AbilityIntrospection(settings, self.client, self.kind)

    async def kind(self) -> UpstreamKind:
        if self._kind is not None:
            return self._kind
        async with self._lock:
            if self._kind is None:
                found, _ = await detect_kind(self.client)
                if not found.certain:
                    return found.kind
                self._kind = found.kind
            return self._kind
