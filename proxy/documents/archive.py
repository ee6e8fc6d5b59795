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
    # zipfile builds an object per entry and reads the directory by its declared size:
    # a 50 MB file can list a million entries. Read the end record first.
    at = data.rfind(_EOCD, max(0, len(data) - 65536 - _EOCD_SIZE))
    if at < 0 or len(data) < at + _EOCD_SIZE:
        raise ExtractError(
            f"is a corrupt {label} (no end of central directory)", "corrupt_document"
        )
    entries, directory_bytes = struct.unpack_from("<HI", data, at + 10)
    # 0xFFFF entries means a ZIP64 directory: no document needs that many.
    if entries > MAX_ENTRIES or directory_bytes > MAX_DIRECTORY_BYTES:
        raise ExtractError(
            f"lists too many entries ({entries}, {directory_bytes} bytes of directory)",
            "document_too_large",
        )
