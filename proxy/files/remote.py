"""Documents named by URL: fetched only under prefixes the operator allowed, bounded."""

from __future__ import annotations

from collections.abc import Sequence
from posixpath import basename
from urllib.parse import unquote

import aiohttp
import yarl

from proxy.errors import BadRequest, DocumentError, PayloadTooLarge

NOT_ALLOWED = (
    "file_url {url!r} is not fetched: only URLs under documents.allowed_url_prefixes are"
    " ({prefixes}); upload the file (POST /v1/files) or send it as file_data"
)


def _parsed(url: str) -> yarl.URL | None:
    try:
        parsed = yarl.URL(url)
    except (ValueError, TypeError):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host or parsed.user is not None:
        return None
    return parsed


def url_allowed(url: str, prefixes: Sequence[str]) -> bool:
    """True when `url` lies under one of `prefixes`: same scheme, host and port, and a path at or
    below the prefix's path at a segment boundary (`/docs` allows `/docs/a.pdf`, not
    `/docs-private`). Dot segments and encoded slashes or dots are refused outright: a server
    could resolve them to somewhere outside the prefix."""
    target = _parsed(url)
    if target is None:
        return False
    raw = target.raw_path.lower()
    if "%2f" in raw or "%2e" in raw or "%5c" in raw or "\\" in unquote(raw):
        return False
    if any(segment in (".", "..") for segment in target.raw_path.split("/")):
        return False
    for prefix in prefixes:
        allowed = _parsed(prefix)
        if allowed is None:
            continue
        if (target.scheme, str(target.host).lower(), target.port) != (
            allowed.scheme,
            str(allowed.host).lower(),
            allowed.port,
        ):
            continue
        base = allowed.path
        if base.endswith("/"):
            if target.path.startswith(base):
                return True
        elif target.path == base or target.path.startswith(base + "/"):
            return True
    return False


def url_name(url: str) -> str:
    """The file name a URL points at (`report.pdf` for `https://host/docs/report.pdf?x=1`)."""
    parsed = _parsed(url)
    return basename(unquote(parsed.path)) if parsed is not None else ""


async def fetch_document(
    session: aiohttp.ClientSession,
    url: str,
    *,
    name: str,
    prefixes: Sequence[str],
    max_bytes: int,
    timeout_s: float,
) -> bytes:
    """The bytes at `url`, if it is allowed; redirects are not followed (they could lead out)."""
    if not url_allowed(url, prefixes):
        listed = ", ".join(prefixes) if prefixes else "none are configured"
        raise BadRequest(
            NOT_ALLOWED.format(url=url[:200], prefixes=listed),
            param="input_file.file_url",
            code="file_url_not_allowed",
        )
    too_large = PayloadTooLarge(
        f"{name}: the file is larger than documents.max_file_mb ({max_bytes // 1048576} MiB)",
        code="file_too_large",
    )
    try:
        async with session.get(
            yarl.URL(url),
            allow_redirects=False,
            headers={"Accept-Encoding": "identity"},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            if response.status >= 300:
                raise DocumentError(
                    name,
                    f"fetching {url[:200]} answered HTTP {response.status}"
                    + (" (a redirect, which is not followed)" if response.status < 400 else ""),
                    code="file_url_failed",
                )
            if response.headers.get("Content-Encoding", "identity") != "identity":
                raise DocumentError(
                    name, "the server sent the file content-encoded", code="file_url_failed"
                )
            if (response.content_length or 0) > max_bytes:
                raise too_large
            data = bytearray()
            async for chunk in response.content.iter_chunked(1 << 16):
                data += chunk
                if len(data) > max_bytes:
                    raise too_large
    except TimeoutError:
        raise DocumentError(
            name,
            f"fetching {url[:200]} took longer than documents.url_timeout_s ({timeout_s:g} s)",
            code="file_url_timeout",
        ) from None
    except aiohttp.ClientError as exc:
        raise DocumentError(
            name, f"fetching {url[:200]} failed: {exc.__class__.__name__}", code="file_url_failed"
        ) from None
    if not data:
        raise DocumentError(name, "the file is empty (0 bytes)", code="empty_file")
    return bytes(data)
