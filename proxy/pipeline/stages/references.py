"""Stage: take the file references out of the messages and read each document's bytes."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import re
from pathlib import Path, PurePosixPath

from proxy.errors import DocumentError, PayloadTooLarge
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.references import FileRef, find_references
from proxy.pipeline.services import Services

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


def resolve_document_path(roots: dict[str, Path], reference: str) -> Path:
    """`root/relative/path` inside a configured root, or a DocumentError; never outside a root."""
    refuse = "path_not_allowed"
    if not roots:
        raise DocumentError(reference, "path references are off (no documents.roots)", code=refuse)
    if "\x00" in reference or "\\" in reference:
        raise DocumentError(reference, "the path contains forbidden characters", code=refuse)
    root_name, _, relative = reference.partition("/")
    if root_name not in roots:
        known = ", ".join(sorted(roots))
        raise DocumentError(
            reference, f"unknown document root {root_name!r} (known: {known})", code=refuse
        )
    rel = PurePosixPath(relative)
    if not relative or rel.is_absolute() or any(part in {"..", "."} for part in rel.parts):
        raise DocumentError(
            reference, "the path must be relative to the root, without '..'", code=refuse
        )
    root = roots[root_name].resolve()
    try:
        target = (root / rel).resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise DocumentError(
            reference, "no such file in the document root", code="file_not_found"
        ) from None
    except (OSError, RuntimeError):
        raise DocumentError(reference, "the path cannot be resolved", code=refuse) from None
    if not target.is_relative_to(root):
        raise DocumentError(reference, "the path leads outside its document root", code=refuse)
    if not target.is_file():
        raise DocumentError(reference, "not a regular file", code=refuse)
    return target


def _read_path(path: Path, name: str, max_bytes: int) -> bytes:
    size = path.stat().st_size
    if size > max_bytes:
        raise PayloadTooLarge(
            f"{name}: the file is larger than documents.max_file_mb ({max_bytes // 1048576} MiB)",
            code="file_too_large",
        )
    return path.read_bytes()


async def read_reference(ref: FileRef, services: Services, scope: str | None) -> FileRef:
    """The reference with its bytes (and, for uploads, the stored name and id); a file id is
    looked up among the files `scope` may see (None: an admin's, all of them)."""
    documents = services.settings.documents
    max_bytes = int(documents.max_file_mb * 1024 * 1024)
    if ref.origin == "file_data":
        data = decode_file_data(ref.name, ref.locator, max_bytes)
        # The base64 text is not needed again: let it go with the body.
        return dataclasses.replace(ref, data=data, locator="")
    if ref.origin == "file_id":
        stored, data = await asyncio.to_thread(services.files.read, ref.locator, scope)
        name = ref.name if ref.name != ref.locator else stored.filename
        return dataclasses.replace(ref, name=name, data=data, file_id=stored.id)
    path = resolve_document_path(documents.roots, ref.locator)
    data = await asyncio.to_thread(_read_path, path, ref.name, max_bytes)
    if not data:
        raise DocumentError(ref.name, "the file is empty (0 bytes)", code="empty_file")
    return dataclasses.replace(ref, data=data)


async def extract_references(exchange: Exchange, services: Services) -> None:
    documents = services.settings.documents
    found = find_references(
        exchange.messages, path_prefix=documents.reference_prefix if documents.roots else None
    )
    exchange.body["messages"] = found.messages
    exchange.query = found.query
    for ref in found.refs:
        read = await read_reference(ref, services, exchange.caller.scope)
        (exchange.new_refs if read.new else exchange.old_refs).append(read)
