"""ZIP bombs built in memory: a deflate stream of zeros, stored under any declared size."""

from __future__ import annotations

import io
import struct
import zlib


def deflated_zeros(mib: int) -> bytes:
    """A raw deflate stream of `mib` MiB of zeros, about 1 KiB per MiB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    # After a full flush a block refers to nothing before it, so copies of it chain.
    block = compressor.compress(b"\0" * (1 << 20)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return block * mib + b"\x03\x00"  # an empty final block ends the stream


Member = tuple[str, bytes, int, int]
"""Name, raw deflate stream, declared size, CRC-32 (0 for a bomb: never checked that far)."""


def raw_zip(members: list[Member]) -> bytes:
    """A ZIP of deflated members whose declared sizes may lie."""
    out = io.BytesIO()
    central = b""
    for name, stream, size, crc in members:
        encoded = name.encode()
        offset = out.tell()
        out.write(
            struct.pack(
                "<4s5H3I2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(stream), size, len(encoded), 0
            )
            + encoded
            + stream
        )
        central += (
            struct.pack(
                "<4s6H3I5H2I",
                b"PK\x01\x02",
                20,
                20,
                0,
                8,
                0,
                0,
                crc,
                len(stream),
                size,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + encoded
        )
    start = out.tell()
    out.write(central)
    out.write(
        struct.pack(
            "<4s4H2IH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), start, 0
        )
    )
    return out.getvalue()


def small(name: str, data: bytes) -> Member:
    """An honest member."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return name, compressor.compress(data) + compressor.flush(), len(data), zlib.crc32(data)


def _central_entry(name: bytes, offset: int) -> bytes:
    fields = (20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0, offset)
    return struct.pack("<4s6H3I5H2I", b"PK\x01\x02", *fields) + name


def crowded_docx(entries: int, *, zip64: bool, declared: int | None = None) -> bytes:
    """A DOCX whose central directory lists `entries` entries (all but the first naming one
    stored empty file), the count its end record declares being `declared` (default: the
    true one). With `zip64`, the count and size are in a ZIP64 end record, which zipfile takes
    over the plain one, and the plain record claims one small entry."""
    local = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, 17, 0)
    out = io.BytesIO()
    out.write(local + b"word/document.xml")
    first = _central_entry(b"word/document.xml", 0)
    rest = b"".join(_central_entry(b"f%07d" % n, 0) for n in range(1, entries))
    central = first + rest
    start = out.tell()
    out.write(central)
    count = entries if declared is None else declared
    if zip64:
        record = out.tell()
        out.write(
            struct.pack(
                "<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(central), start
            )
        )
        out.write(struct.pack("<4sIQI", b"PK\x06\x07", 0, record, 1))
        out.write(struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 1, 1, len(first), start, 0))
    else:
        short = min(count, 0xFFFF)
        out.write(
            struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, short, short, len(central), start, 0)
        )
    return out.getvalue()
