"""ZIP containers (DOCX, XLSX, PPTX, ODF, EPUB) opened under bounds: entries, sizes, ratios.

Checked from the central directory alone, before anything is decompressed. Python's zipfile
never inflates a member past its declared size, so declared sizes within bounds bound the
real expansion too.
"""

from __future__ import annotations

import io
import struct
import zipfile

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


def open_zip(data: bytes, label: str = "ZIP archive") -> zipfile.ZipFile:
    """The archive, once its directory is known to be small and its members within bounds."""
    _check_directory(data, label)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error) as exc:
        raise ExtractError(f"is a corrupt {label} ({exc})", "corrupt_document") from exc
    try:
        check_members(archive.infolist())
    except ExtractError:
        archive.close()
        raise
    return archive


def check_members(infos: list[zipfile.ZipInfo]) -> None:
    total = 0
    for info in infos:
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
