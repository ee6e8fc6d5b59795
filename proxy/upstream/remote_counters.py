"""Counting tokens with a server's own tokenize endpoint: the base each kind's counter
extends (the counters themselves are in the kinds' modules, proxy.upstream.kinds)."""

from __future__ import annotations

from typing import Any

from proxy.upstream.client import UpstreamClient, upstream_failure
from proxy.upstream.tokens import chatml


class RemoteCounter:
    """A server's own tokenizer behind one endpoint; without a template endpoint, messages are
    counted as the proxy's ChatML rendering (exact tokens, estimated framing)."""

    kind = "remote"
    exact = False  # whether messages are counted with the server's own chat template

    def __init__(self, upstream: UpstreamClient, model: str | None = None) -> None:
        self.upstream = upstream
        self.model = model
        self.calls = 0

    def _for_model(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload, naming the model where one is set (servers that host several)."""
        return {**payload, "model": self.model} if self.model else payload

    async def _post(self, path: str, payload: dict[str, Any]) -> Any:
        self.calls += 1
        status, body = await self.upstream.post_json(path, payload)
        if status != 200 or body is None:
            raise upstream_failure(status, body, path)
        return body

    async def tokens(self, text: str, special: bool) -> int:
        raise NotImplementedError

    async def count_text(self, text: str) -> int:
        return await self.tokens(text, False)

    async def count_prompt(self, prompt: str) -> int:
        return await self.tokens(prompt, True)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return await self.tokens(chatml(messages), True)


def int_field(body: Any, key: str, what: str) -> int:
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise upstream_failure(200, body, what)
    return value
