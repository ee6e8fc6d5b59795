"""Whether the upstream answers (llama.cpp's `/health`, else `/v1/models`), and if not, why."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from proxy.errors import ProxyError
from proxy.upstream.client import UpstreamClient


@dataclass(frozen=True)
class UpstreamHealth:
    """What the upstream answered (its status, or None when nothing did) and the problem, if any."""

    status: int | None
    problem: str | None = None

    @property
    def healthy(self) -> bool:
        return self.problem is None


async def check_upstream(upstream: UpstreamClient) -> UpstreamHealth:
    """Ask the upstream whether it can take requests, within upstream.health_timeout_s; never
    raises. Only the status is read: what the answer's body holds (megabytes of it, nesting
    no parser survives) is never read, so /healthz costs the same whatever the upstream sends."""
    base = upstream.base_url
    limit = upstream.settings.health_timeout_s
    try:
        async with asyncio.timeout(limit):
            status = await upstream.status_of("/health", limit)
            if status == 404:
                status = await upstream.status_of("/v1/models", limit)
                if status == 404:
                    # Something answers there, but not an OpenAI-compatible server's root.
                    return UpstreamHealth(
                        status,
                        f"{base} answers 404 to /health and to /v1/models: upstream.base_url must "
                        "be the server's root, such as http://127.0.0.1:8080",
                    )
    except TimeoutError:
        return UpstreamHealth(
            None, f"{base} did not answer within {limit:g} s (upstream.health_timeout_s)"
        )
    except ProxyError as error:
        return UpstreamHealth(None, error.message)
    if status >= 500:
        # llama.cpp answers 503 while its model loads.
        return UpstreamHealth(
            status,
            f"upstream {base} answered {status}: ask again once it is ready (llama.cpp answers "
            "503 while it loads its model), or see its log",
        )
    return UpstreamHealth(status)
