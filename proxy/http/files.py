"""The OpenAI Files API on the proxy: upload, list, retrieve, content, delete."""

from __future__ import annotations

import asyncio
import contextlib
import os
from urllib.parse import quote

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from proxy.disk import DiskFull, disk_full
from proxy.documents.naming import basename
from proxy.errors import BadRequest, ProxyError
from proxy.files.protocol import FileStore, Owner, Upload
from proxy.http.body import BodyClock, body_too_large, check_received, max_body_bytes, within
from proxy.http.keys import CALLER, ROUTE, SERVICES

CHUNK_BYTES = 1 << 20
MAX_FIELD_BYTES = 1024  # form fields other than the file ('purpose')
PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})


def _store(request: web.Request) -> FileStore:
    request[ROUTE] = "files"
    return request.app[SERVICES].files


def owner_scope(request: web.Request) -> Owner:
    return request[CALLER].scope


def storage_error(exc: OSError) -> ProxyError:
    """A failed write to the store as the client should see it (no paths: they are ours)."""
    if disk_full(exc):
        return DiskFull("the upload")
    return ProxyError(
        f"the proxy could not store the upload ({exc.strerror or type(exc).__name__});"
        " it was not saved: upload it again, and if this repeats, check that server.data_dir"
        " is writable",
        status=500,
        type="server_error",
        code="storage_error",
    )


async def abort(upload: Upload) -> None:
    """Drop a failed upload's temp file, even when closing it fails (a full disk again)."""
    try:
        await asyncio.to_thread(upload.abort)
    except OSError:
        temp = getattr(upload, "temp", None)  # a disk upload's temp file
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


async def create_file(request: web.Request) -> web.Response:
    """One upload, streamed to the store: the whole body is bounded by server.max_body_mb and
    the file by documents.max_file_mb (and the key's quota), checked as the bytes arrive."""
    store = _store(request)
    if not request.content_type.startswith("multipart/"):
        raise BadRequest("upload files as multipart/form-data with fields 'file' and 'purpose'")
    server = request.app[SERVICES].settings.server
    limit = max_body_bytes(server)
    if request.content_length is not None and request.content_length > limit:
        raise body_too_large(limit)
    purpose: str | None = None
    pending: tuple[Upload, str] | None = None
    try:
        reader = await request.multipart()
        clock = BodyClock.start(server)
        while (part := await within(reader.next(), clock)) is not None:
            check_received(request, limit)
            if not isinstance(part, BodyPartReader):
                raise BadRequest("nested multipart bodies are not accepted", param="file")
            if part.name == "purpose":
                purpose = (await _small_field(part, request, limit, clock)).strip()
            elif part.name == "file":
                if pending is not None:
                    raise BadRequest("send one 'file' field per upload", param="file")
                try:
                    upload = await asyncio.to_thread(store.begin_upload, request[CALLER].name)
                except OSError as exc:
                    raise storage_error(exc) from exc
                # A client may send the whole local path; the name is its last part.
                filename = basename(part.filename or "") or "upload"
                pending = (upload, filename)
                while chunk := await within(part.read_chunk(CHUNK_BYTES), clock):
                    check_received(request, limit)
                    await asyncio.to_thread(upload.write, chunk)
            else:
                while await within(part.read_chunk(CHUNK_BYTES), clock):
                    check_received(request, limit)
        if pending is None:
            raise BadRequest("the multipart body has no 'file' field", param="file")
        if purpose is None or purpose not in PURPOSES:
            raise BadRequest(
                f"'purpose' must be one of {', '.join(sorted(PURPOSES))}", param="purpose"
            )
        upload, filename = pending
        saved = await asyncio.to_thread(upload.commit, filename, purpose)
    except BaseException as exc:
        if pending is not None:
            await abort(pending[0])
        if isinstance(exc, HttpProcessingError | ValueError):
            # A malformed multipart body (a header line over 8 KiB, a bad boundary...).
            raise BadRequest(
                f"the multipart body is malformed: {_first_line(exc)}",
                param="file",
                code="invalid_multipart",
            ) from None
        if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
            raise storage_error(exc) from exc  # the disk, not the client going away
        raise
    return web.json_response(saved.to_openai())


async def _small_field(
    part: BodyPartReader, request: web.Request, limit: int, clock: BodyClock
) -> str:
    data = b""
    while chunk := await within(part.read_chunk(1024), clock):
        check_received(request, limit)
        data += chunk
        if len(data) > MAX_FIELD_BYTES:
            raise BadRequest(f"the {part.name!r} field is too long", param=part.name)
    return data.decode("utf-8", errors="replace")


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return str(text).strip().splitlines()[0][:120]


async def list_files(request: web.Request) -> web.Response:
    store = _store(request)
    files = await asyncio.to_thread(store.list, owner_scope(request), request.query.get("purpose"))
    return web.json_response(
        {"object": "list", "data": [f.to_openai() for f in files], "has_more": False}
    )


async def retrieve_file(request: web.Request) -> web.Response:
    store = _store(request)
    stored = await asyncio.to_thread(store.get, request.match_info["file_id"], owner_scope(request))
    return web.json_response(stored.to_openai())


async def file_content(request: web.Request) -> web.StreamResponse:
    store = _store(request)
    stored, handle = await asyncio.to_thread(
        store.open, request.match_info["file_id"], owner_scope(request)
    )
    try:
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/octet-stream",
                # RFC 6266 form: a client-chosen name can hold quotes or line breaks.
                "Content-Disposition": f"attachment; filename*=UTF-8''{quote(stored.filename)}",
            },
        )
        response.content_length = stored.bytes
        await response.prepare(request)
        # Read from the handle opened above: a delete meanwhile cannot cut the answer short.
        while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        handle.close()


async def delete_file(request: web.Request) -> web.Response:
    store = _store(request)
    stored = await asyncio.to_thread(
        store.delete, request.match_info["file_id"], owner_scope(request)
    )
    stores = request.app[SERVICES].vector_stores
    if stores is not None:  # a deleted file's text is not found in any store any more
        await stores.files.forget(stored.id, stored.owner)
    return web.json_response({"id": stored.id, "object": "file", "deleted": True})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/files", create_file)
    app.router.add_get("/v1/files", list_files)
    app.router.add_get("/v1/files/{file_id}", retrieve_file)
    app.router.add_get("/v1/files/{file_id}/content", file_content)
    app.router.add_delete("/v1/files/{file_id}", delete_file)
