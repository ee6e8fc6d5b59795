"""ZIP containers (DOCX, XLSX, PPTX, ODF, EPUB) opened under bounds: entries, sizes, ratios.

The central directory is checked first (entry count, declared sizes, ratios, methods), before
anything is inflated. Declared sizes can lie, and zipfile's `read()` inflates a member's whole
stream before cutting it to the declared size, so in the parse worker every member is also
inflated once in small steps, and one that grows past its declared size is refused before a
library reads it (`verify=True`).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from typing import NamedTuple

from proxy.documents.failure import ExtractError

MIB = 1024 * 1024
MAX_ENTRIES = 10_000
MAX_DIRECTORY_BYTES = 8 * MIB
MAX_UNPACKED_BYTES = 512 * MIB
MAX_MEMBER_BYTES = 256 * MIB
MAX_RATIO = 100
"""Compressed XML reaches 10-30:1; a member over 1 MiB that claims more than 100:1 is a bomb."""
_EOCD = b"PK\x05\x06"
_EOCD_SIZE = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_SIZE = 20
_ZIP64_END = b"PK\x06\x06"
_ZIP64_END_SIZE = 56
_CENTRAL = b"PK\x01\x02"
_CENTRAL_SIZE = 46
_LOCAL_HEADER = 30
_STEP = 1024 * 1024
# Only stored and deflated members: bzip2 and LZMA inflate without an output bound in
# zipfile, even for a read of a few bytes, and no office format uses them.
_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})


def open_zip(data: bytes, label: str = "ZIP archive", *, verify: bool = False) -> zipfile.ZipFile:
    """The archive, once its directory is known to be small and its members within bounds."""
    _check_directory(data, label)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error) as exc:
        raise ExtractError(f"is a corrupt {label} ({exc})", "corrupt_document") from exc
    try:
        check_members(archive.infolist())
        if verify:
            for info in archive.infolist():
                _verify(data, info, label)
    except ExtractError:
        archive.close()
        raise
    return archive


def _verify(data: bytes, info: zipfile.ZipInfo, label: str) -> None:
    """Inflate one member in 1 MiB steps; refuse it if it grows past its declared size."""
    at = info.header_offset
    header = data[at : at + _LOCAL_HEADER]
    if len(header) < _LOCAL_HEADER or not header.startswith(b"PK\x03\x04"):
        raise ExtractError(f"is a corrupt {label} (bad local header)", "corrupt_document")
    name_length, extra_length = struct.unpack_from("<HH", header, 26)
    start = at + _LOCAL_HEADER + name_length + extra_length
    stream = data[start : start + info.compress_size]
    if info.compress_type == zipfile.ZIP_STORED:
        produced = len(stream)
    else:
        inflater = zlib.decompressobj(-15)
        produced, pending = 0, stream
        try:
            while pending and produced <= info.file_size:
                produced += len(inflater.decompress(pending, _STEP))
                pending = inflater.unconsumed_tail
        except zlib.error as exc:
            raise ExtractError(f"is a corrupt {label} ({exc})", "corrupt_document") from exc
    if produced > info.file_size:
        raise ExtractError(
            f"has a member ({info.filename[:100]}) that inflates past its declared size"
            f" of {info.file_size} bytes (a zip bomb?)",
            "document_too_large",
        )


def check_members(infos: list[zipfile.ZipInfo]) -> None:
    total = 0
    for info in infos:
        if info.compress_type not in _METHODS:
            raise ExtractError(
                f"uses a compression method ({info.compress_type}) no document format uses",
                "unsupported_format",
            )
        total += info.file_size
        if info.file_size > MAX_MEMBER_BYTES or (
            info.file_size > MIB and info.file_size > MAX_RATIO * max(1, info.compress_size)
        ):
            raise ExtractError(
                f"has a member that unpacks to {info.file_size} bytes from"
                f" {info.compress_size} (a zip bomb?)",
                "document_too_large",
            )
    if total > MAX_UNPACKED_BYTES:
        raise ExtractError(
            f"unpacks to more than {MAX_UNPACKED_BYTES // MIB} MiB (a zip bomb?)",
            "document_too_large",
        )


def read_head(archive: zipfile.ZipFile, member: str, size: int = 64) -> bytes:
    """The first `size` bytes of a member, inflating no more than that."""
    with archive.open(member) as handle:
        return handle.read(size)


def _check_directory(data: bytes, label: str) -> None:
    """Refuse a directory too big to list, before zipfile builds an object per entry.

    The end record is found where zipfile finds it, and a ZIP64 end record (which zipfile
    prefers whenever its locator is there) is read too. The entries are then counted by walking
    the directory itself, at most MAX_ENTRIES + 1 of them: zipfile reads the directory by its
    declared size and ignores the declared count, so a small count can hide a million entries.
    """
    end = _end_record(data, label)
    entries, directory_bytes = end.entries, end.directory_bytes
    if entries > MAX_ENTRIES or directory_bytes > MAX_DIRECTORY_BYTES:
        raise _too_many(entries, directory_bytes)
    start = end.location - directory_bytes
    if start < 0:
        raise ExtractError(
            f"is a corrupt {label} (bad offset for central directory)", "corrupt_document"
        )
    stop = min(len(data), start + directory_bytes)
    at, counted = start, 0
    while at < stop:
        if data[at : at + 4] != _CENTRAL or at + _CENTRAL_SIZE > stop:
            raise ExtractError(
                f"is a corrupt {label} (bad central directory entry)", "corrupt_document"
            )
        name, extra, comment = struct.unpack_from("<HHH", data, at + 28)
        at += _CENTRAL_SIZE + name + extra + comment
        counted += 1
        if counted > MAX_ENTRIES:
            raise _too_many(counted, directory_bytes, more=True)


class _End(NamedTuple):
    entries: int
    directory_bytes: int
    location: int
    """Where the directory ends: the end record, or the ZIP64 end record before it."""


def _end_record(data: bytes, label: str) -> _End:
    """The end of central directory, found as zipfile's `_EndRecData` finds it."""
    at = len(data) - _EOCD_SIZE
    if not (at >= 0 and data[at : at + 4] == _EOCD and data[-2:] == b"\0\0"):
        tail = max(0, len(data) - 65536 - _EOCD_SIZE)
        at = data.rfind(_EOCD, tail)
        if at < 0 or len(data) < at + _EOCD_SIZE:
            raise ExtractError(
                f"is a corrupt {label} (no end of central directory)", "corrupt_document"
            )
    entries, directory_bytes = struct.unpack_from("<HI", data, at + 10)
    locator = at - _ZIP64_LOCATOR_SIZE
    record = locator - _ZIP64_END_SIZE
    if (
        record >= 0
        and data[locator : locator + 4] == _ZIP64_LOCATOR
        and data[record : record + 4] == _ZIP64_END
    ):
        # zipfile takes the ZIP64 record's count and size over the plain record's.
        entries, directory_bytes = struct.unpack_from("<QQ", data, record + 32)
        return _End(entries, directory_bytes, record)
    return _End(entries, directory_bytes, at)


def _too_many(entries: int, directory_bytes: int, *, more: bool = False) -> ExtractError:
    counted = f"more than {MAX_ENTRIES}" if more else str(entries)
    return ExtractError(
        f"lists too many entries ({counted}, {directory_bytes} bytes of directory;"
        f" at most {MAX_ENTRIES} entries and {MAX_DIRECTORY_BYTES // MIB} MiB)",
        "document_too_large",
    )
