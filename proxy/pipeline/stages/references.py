"""Stage: take the file references out of the messages and read each document's bytes."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import re

from proxy.errors import BadRequest, DocumentError, PayloadTooLarge
from proxy.files.paths import read_document_path
from proxy.files.remote import fetch_document
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.references import FileRef, find_references
from proxy.pipeline.services import Services
from proxy.pipeline.stages.documents import learn_control_tokens

DATA_URL = re.compile(r"^data:(?P<mime>[^;,]*)(?P<params>(;[^;,]*)*),(?P<data>.*)$", re.DOTALL)


def decode_file_data(name: str, value: str, max_bytes: int) -> bytes:
    """`data:<mime>;base64,...` or bare base64 → bytes, with a clear error naming the file."""
    if value.startswith("data:"):
        match = DATA_URL.match(value)
        if match is None or ";base64" not in match.group("params"):
            raise DocumentError(
                name, "file_data must be a base64 data URL (data:<mime>;base64,...)"
            )
        payload = match.group("data")
    else:
        payload = value
    # base64 is 4/3 of the bytes: refuse oversized files before decoding them.
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise PayloadTooLarge(
            f"{name}: the file is larger than documents.max_file_mb ({max_bytes // 1048576} MiB)",
            code="file_too_large",
        )
    try:
        data = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        raise DocumentError(name, "file_data is not valid base64", code="invalid_base64") from None
    if not data:
        raise DocumentError(name, "the file is empty (0 bytes)", code="empty_file")
    return data


async def read_reference(ref: FileRef, services: Services, scope: str | None) -> FileRef:
    """The reference with its bytes (and, for uploads, the stored name and id); a file id is
    looked up among the files `scope` may see (None: an admin's, all of them)."""
    documents = services.settings.documents
    max_bytes = int(documents.max_file_mb * 1024 * 1024)
    if ref.origin == "file_data":
        data = decode_file_data(ref.name, ref.locator, max_bytes)
        # The base64 text is not needed again: let it go with the body.
        return dataclasses.replace(ref, data=data, locator="")
    if ref.origin == "url":
        data = await fetch_document(
            services.upstream.session,
            ref.locator,
            name=ref.name,
            prefixes=documents.allowed_url_prefixes,
            max_bytes=max_bytes,
            timeout_s=documents.url_timeout_s,
        )
        return dataclasses.replace(ref, data=data)
    if ref.origin == "file_id":
        stored, data = await asyncio.to_thread(services.files.read, ref.locator, scope)
        name = ref.name if ref.name != ref.locator else stored.filename
        return dataclasses.replace(ref, name=name, data=data, file_id=stored.id)
    data = await asyncio.to_thread(
        read_document_path, documents.roots, ref.locator, ref.name, max_bytes
    )
    if not data:
        raise DocumentError(ref.name, "the file is empty (0 bytes)", code="empty_file")
    return dataclasses.replace(ref, data=data)


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
    for ref in found.refs:
        read = await read_reference(ref, services, exchange.caller.scope)
        (exchange.new_refs if read.new else exchange.old_refs).append(read)
