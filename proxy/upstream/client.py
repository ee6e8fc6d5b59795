"""The one shared connection to the upstream model server, and small JSON calls to it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import aiohttp
import yarl

from proxy import jsonio
from proxy.config import UpstreamSettings
from proxy.errors import ProxyError
from proxy.upstream.relay import error_message, translate_client_error

# The client's Authorization, for the proxy's own calls made on its behalf (tokenize, props):
# an upstream that wants a key for chat wants it for those too. Set per request (each request
# runs in its own task), and only when the proxy has no keys of its own.
CLIENT_AUTHORIZATION: ContextVar[str | None] = ContextVar("client_authorization", default=None)

# Failures of a reused connection before the request reached the server.
STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


class UpstreamClient:
    """One `ClientSession` for all requests; knows the upstream's URL, key and timeouts."""

    def __init__(self, settings: UpstreamSettings, session: aiohttp.ClientSession) -> None:
        self.settings = settings
        self.session = session
        # No total cap: a long generation is not a hung one. sock_read catches a silent upstream.
        self.stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=settings.connect_timeout_s, sock_read=settings.read_timeout_s
        )
        self.probe_timeout = aiohttp.ClientTimeout(
            total=max(settings.connect_timeout_s, 30.0), sock_connect=settings.connect_timeout_s
        )

    @property
    def base_url(self) -> str:
        return self.settings.base_url

    def url(self, path_qs: str) -> str:
        return self.settings.base_url + path_qs

    def auth_headers(self) -> dict[str, str]:
        """The credential of the proxy's own calls: the upstream key, else the client's."""
        if self.settings.authorization:
            return {"Authorization": self.settings.authorization}
        authorization = CLIENT_AUTHORIZATION.get()
        if authorization:
            return {"Authorization": authorization}
        return {}

    async def send(self, method: str, url: str | yarl.URL, **kwargs: Any) -> aiohttp.ClientResponse:
        """A request to the upstream, sent again once if a pooled connection turns out dead; the
        caller releases the response.

        llama-server may close a keep-alive connection after a stream; the next request on it
        then fails before any byte of it was processed. One retry on a fresh connection is safe.
        """
        kwargs.setdefault("timeout", self.stream_timeout)
        try:
            return await self.session.request(method, url, **kwargs)
        except STALE_CONNECTION:
            return await self.session.request(method, url, **kwargs)

    @contextlib.asynccontextmanager
    async def open(
        self, method: str, url: str | yarl.URL, **kwargs: Any
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """`send`, released when the block ends."""
        response = await self.send(method, url, **kwargs)
        try:
            yield response
        finally:
            response.release()

    async def status_of(self, path: str, timeout_s: float) -> int:
        """The status of GET `path`, or TimeoutError past `timeout_s`; its body is not read (a
        connection with some left unread is closed rather than reused)."""
        headers = {**self.auth_headers(), "Accept-Encoding": "identity"}
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self.open("GET", self.url(path), headers=headers, timeout=timeout) as answer:
                return answer.status
        except TimeoutError:
            raise  # the caller names the setting that timed out
        except aiohttp.ClientError as exc:
            raise translate_client_error(exc, self.base_url) from exc

    async def get_json(self, path: str) -> tuple[int, Any]:
        """GET a small JSON document; (status, parsed body or None)."""
        return await self._json("GET", path, None)

    async def post_json(self, path: str, payload: Any) -> tuple[int, Any]:
        """POST JSON and read a small JSON answer; (status, parsed body or None)."""
        return await self._json("POST", path, payload)

    async def _json(self, method: str, path: str, payload: Any) -> tuple[int, Any]:
        url = self.url(path)
        data = None if payload is None else json.dumps(payload).encode()
        headers = self.auth_headers()
        if data is not None:
            headers["Content-Type"] = "application/json"
        headers["Accept-Encoding"] = "identity"
        try:
            async with self.open(
                method, url, data=data, headers=headers, timeout=self.probe_timeout
            ) as response:
                body = await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise translate_client_error(exc, self.base_url) from exc
        try:
            return response.status, await jsonio.loads_soon(body) if body else None
        except ValueError:  # not JSON, or JSON no one should read (nested past 1,024 levels)
            return response.status, None


def upstream_failure(status: int, body: Any, what: str) -> ProxyError:
    """An upstream's error answer to one of our own calls, relayed with its status."""
    message = error_message(body)
    relayed = status if 400 <= status < 600 else 502
    text = f"upstream {what} failed with status {status}: {message or 'no message'}"
    if relayed >= 500:
        text += "; the upstream's log says why: ask again once it answers"
    return ProxyError(text, status=relayed, type="upstream_error", code="upstream_failed")
