"""OpenAI-shaped errors raised by any stage and rendered by the app."""

from __future__ import annotations

from typing import Any


class ProxyError(Exception):
    """An error the client sees as `{"error": {"message", "type", "param", "code"}}`."""

    status = 400
    type = "invalid_request_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.param = param
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class BadRequest(ProxyError):
    """The client's request is malformed (400)."""


class DocumentError(ProxyError):
    """A document could not be read, parsed or accepted; the message names the file (400)."""

    def __init__(self, filename: str, reason: str, *, code: str = "invalid_document") -> None:
        super().__init__(f"{filename}: {reason}", code=code, param="messages")
        self.filename = filename
        self.reason = reason


class PayloadTooLarge(ProxyError):
    """The request or a document exceeds a configured size (413)."""

    status = 413


class UpstreamError(ProxyError):
    """An upstream (chat model, embedding server, vector store) failed (502)."""

    status = 502
    type = "upstream_error"


def bad_upstream(what: str) -> UpstreamError:
    """The upstream answered something an OpenAI-compatible server does not send."""
    return UpstreamError(
        f"the upstream's {what} is not a JSON object; check that upstream.base_url is the root of"
        " an OpenAI-compatible server",
        code="bad_upstream",
    )


class UpstreamTimeout(ProxyError):
    """An upstream did not answer in time (504)."""

    status = 504
    type = "upstream_timeout"


class StartupError(Exception):
    """The proxy cannot start; the message says why and what to do, in one line."""
