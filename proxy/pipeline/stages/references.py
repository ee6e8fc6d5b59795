"""Stage: take the file references out of the messages and read each document's bytes."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses

from proxy.errors import BadRequest, DocumentError, PayloadTooLarge
from proxy.files.paths import read_document_path, resolve_document_path
from proxy.files.remote import fetch_document
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import FileRef, find_references
from proxy.pipeline.inflight import MIB, request_too_large
from proxy.pipeline.parsing import learn_control_tokens
from proxy.pipeline.services import Services

OFF_LOOP_CHARS = 1 << 20
DECODE_STEP = 1 << 20  # base64 characters decoded at a time (see _b64decode)


def decode_file_data(name: str, value: str, max_bytes: int) -> bytes:
    """`data:<mime>;base64,...` or bare base64 → bytes, with a clear error naming the file."""
    start = 0
    if value.startswith("data:"):
        # The header runs to the first comma: `<mime>` then `;param`s, one of them `;base64`.
        comma = value.find(",")
        header = value[5:comma] if comma >= 0 else ""
        params = header[len(header.split(";", 1)[0]) :]
        if comma < 0 or ";base64" not in params:
            raise DocumentError(
                name, "file_data must be a base64 data URL (data:<mime>;base64,...)"
            )
        start = comma + 1  # the payload is read in place, never copied whole
    # base64 is 4/3 of the bytes: refuse oversized files before decoding them.
    if (len(value) - start) * 3 // 4 > max_bytes + 3:
        raise PayloadTooLarge(
            f"{name}: the file is larger than documents.max_file_mb ({max_bytes // 1048576} MiB)",
            code="file_too_large",
        )
    try:
        data = _b64decode(value, start)
    except (binascii.Error, ValueError):
        raise DocumentError(name, "file_data is not valid base64", code="invalid_base64") from None
    if not data:
        raise DocumentError(name, "the file is empty (0 bytes)", code="empty_file")
    return data


def _b64decode(text: str, begin: int = 0) -> bytes:
    """Strict base64 (whitespace allowed) from `text[begin:]`, decoded a megabyte at a time:
    binascii holds the GIL for a whole call, and 60 MB in one would stall the event loop's
    thread too."""
    decoded = bytearray()
    carry = ""
    for start in range(begin, len(text), DECODE_STEP):
        piece = carry + "".join(text[start : start + DECODE_STEP].split())
        whole = len(piece) - len(piece) % 4
        decoded += base64.b64decode(piece[:whole], validate=True)
        carry = piece[whole:]
    if carry.strip("="):  # excess padding is ignored, as in one call; anything else is wrong
        decoded += base64.b64decode(carry, validate=True)
    return bytes(decoded)


async def read_reference(
    ref: FileRef, services: Services, scope: str | None, max_bytes: int | None = None
) -> FileRef:
    """The reference with its bytes (and, for uploads, the stored name and id); a file id is
    looked up among the files `scope` may see (None: an admin's, all of them). `max_bytes`:
    what a URL's download may hold (default documents.max_file_mb)."""
    documents = services.settings.documents
    max_file = int(documents.max_file_mb * MIB)
    if ref.origin == "file_data":
        if len(ref.locator) > OFF_LOOP_CHARS:  # matching and decoding 60 MB of base64
            data = await asyncio.to_thread(decode_file_data, ref.name, ref.locator, max_file)
        else:
            data = decode_file_data(ref.name, ref.locator, max_file)
        # The base64 text is not needed again: let it go with the body.
        return dataclasses.replace(ref, data=data, locator="")
    if ref.origin == "url":
        data = await fetch_document(
            services.upstream.session,
            ref.locator,
            name=ref.name,
            prefixes=documents.allowed_url_prefixes,
            max_bytes=max_file if max_bytes is None else max_bytes,
            timeout_s=documents.url_timeout_s,
        )
        return dataclasses.replace(ref, data=data)
    if ref.origin == "file_id":
        stored, data = await asyncio.to_thread(services.files.read, ref.locator, scope)
        name = ref.name if ref.name != ref.locator else stored.filename
        return dataclasses.replace(ref, name=name, data=data, file_id=stored.id)
    data = await asyncio.to_thread(
        read_document_path, documents.roots, ref.locator, ref.name, max_file
    )
    if not data:
        raise DocumentError(ref.name, "the file is empty (0 bytes)", code="empty_file")
    return dataclasses.replace(ref, data=data)


def source_of(ref: FileRef) -> tuple[str, str] | None:
    """What names the same bytes twice in one request (None: inline data, read as it is)."""
    return None if ref.origin == "file_data" else (ref.origin, ref.locator)


async def size_of(ref: FileRef, services: Services, scope: str | None) -> int | None:
    """The bytes `ref` will read, known before reading it (None: a URL, unknown until fetched)."""
    if ref.origin == "file_data":
        return len(ref.locator) * 3 // 4  # base64: 4 characters for 3 bytes
    if ref.origin == "file_id":
        stored = await asyncio.to_thread(services.files.get, ref.locator, scope)
        return stored.bytes
    if ref.origin == "path":
        roots = services.settings.documents.roots
        path = await asyncio.to_thread(resolve_document_path, roots, ref.locator)
        return (await asyncio.to_thread(path.stat)).st_size
    return None


async def read_references(
    refs: list[FileRef], exchange: Exchange, services: Services
) -> list[FileRef]:
    """Every reference with its bytes. Each file is read once however often it is named, and
    only once the sizes of all of them, summed, fit the request's and the key's budgets."""
    documents = services.settings.documents
    scope = exchange.caller.scope
    request_limit = int(documents.max_request_mb * MIB)
    key_limit = int(documents.max_inflight_mb_per_key * MIB)
    unique: dict[tuple[str, str], FileRef] = {}
    for ref in refs:
        source = source_of(ref)
        if source is not None:
            unique.setdefault(source, ref)
    sized = [ref for ref in refs if source_of(ref) is None] + list(unique.values())
    total = 0
    for ref in sized:
        total += await size_of(ref, services, scope) or 0
        if total > request_limit:
            raise request_too_large(total, request_limit)
    exchange.held = services.in_flight.reserve(exchange.caller.name, total, key_limit)
    read: dict[tuple[str, str], FileRef] = {}
    out = []
    for ref in refs:
        source = source_of(ref)
        if source is not None and source in read:
            first = read[source]
            out.append(dataclasses.replace(ref, data=first.data, file_id=first.file_id))
            continue
        if ref.origin == "url":
            room = request_limit - total
            if room <= 0:
                raise request_too_large(total + 1, request_limit)
            max_file = int(documents.max_file_mb * MIB)
            done = await read_reference(ref, services, scope, min(max_file, room))
            total += len(done.data)
            exchange.held.add(len(done.data), key_limit)
        else:
            done = await read_reference(ref, services, scope)
        if source is not None:
            read[source] = done
        out.append(done)
    return out


async def extract_references(exchange: Exchange, services: Services) -> None:
    documents = services.settings.documents
    prefix = documents.reference_prefix if documents.roots else None
    found = find_references(exchange.messages, path_prefix=prefix)
    if found.markers:
        # Earlier messages' files became `[attached: name]` markers: their names are guarded
        # like document text, so the model's control tokens are needed now.
        await learn_control_tokens(exchange, services)
        if exchange.control_tokens:
            found = find_references(
                exchange.messages, path_prefix=prefix, tokens=exchange.control_tokens
            )
    if len(found.refs) > documents.max_files_per_request:
        # Before any document is read or parsed: each costs a parse, and a body can hold
        # a thousand tiny file parts.
        raise BadRequest(
            f"the request references {len(found.refs)} documents; at most "
            f"{documents.max_files_per_request} are accepted (documents.max_files_per_request)",
            param="messages",
            code="too_many_files",
        )
    exchange.body["messages"] = found.messages
    exchange.query = found.query
    for read in await read_references(found.refs, exchange, services):
        (exchange.new_refs if read.new else exchange.old_refs).append(read)
