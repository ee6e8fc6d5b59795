"""Whether the upstream answers (llama.cpp's `/health`, else `/v1/models`), and if not, why."""

from __future__ import annotations

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
    """Ask the upstream whether it can take requests; never raises."""
    base = upstream.base_url
    try:
        status, _ = await upstream.get_json("/health")
        if status == 404:
            status, _ = await upstream.get_json("/v1/models")
            if status == 404:
                # Something answers there, but not an OpenAI-compatible server's root.
                return UpstreamHealth(
                    status,
                    f"{base} answers 404 to /health and to /v1/models: upstream.base_url must "
                    "be the server's root, such as http://127.0.0.1:8080",
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
