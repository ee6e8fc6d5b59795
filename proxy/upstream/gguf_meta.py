"""Reads a few keys from a GGUF file's header (architecture, name, template, sampling).

Hand-written on purpose: the `gguf` package's GGUFReader materialises every key, including
a 262k-entry token list as numpy arrays (10 s for the bundled 250 MB Gemma model here); this
walks the key/value section once with `struct`, skipping arrays by their sizes, in well under
a second. Bounded: a header that claims absurd counts or sizes is refused, not followed.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Collection
from pathlib import Path

MAGIC = b"GGUF"
MAX_KEYS = 100_000
MAX_STRING = 64 * 1024 * 1024
"""A chat template is a few KB; a string claiming more than this means a corrupt header."""
MAX_ARRAY = 16 * 1024 * 1024

# GGUF value types (ggml/include/gguf.h, GGUF_TYPE_*) and their fixed sizes in bytes.
_STRING, _ARRAY = 8, 9
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# The scalar types as struct formats: uint8, int8, uint16, int16, uint32, int32, float32,
# bool, uint64, int64, float64.
_SCALAR = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
    12: "<d",
}  # fmt: skip

WANTED = frozenset(
    {"general.architecture", "general.name", "general.finetune", "tokenizer.chat_template"}
)
SAMPLING = "general.sampling."
"""The sampling a model's makers recommend (llama.cpp applies these keys itself since
PR #17120, below any sampling option given on its command line)."""

Value = str | int | float | bool


class GGUFError(ValueError):
    """The file is not a GGUF file this reader understands."""


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise GGUFError("truncated GGUF header")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self.take(8))[0]
        return value

    def string_bytes(self) -> bytes:
        size = self.u64()
        if size > MAX_STRING:
            raise GGUFError(f"GGUF string of {size} bytes")
        return self.take(size)

    def skip_value(self, kind: int) -> None:
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind == _STRING:
            self.string_bytes()
        elif kind == _ARRAY:
            item, count = self.u32(), self.u64()
            if count > MAX_ARRAY:
                raise GGUFError(f"GGUF array of {count} items")
            if item in _FIXED:
                self.take(_FIXED[item] * count)
            else:
                for _ in range(count):
                    self.skip_value(item)
        else:
            raise GGUFError(f"unknown GGUF value type {kind}")


def read_gguf_strings(path: Path, keys: Collection[str] = WANTED) -> dict[str, str]:
    """The string values of `keys` found in the file's metadata (absent keys are left out)."""
    return {
        key: value
        for key, value in read_gguf_metadata(path, keys).items()
        if isinstance(value, str)
    }


def read_gguf_metadata(
    path: Path, keys: Collection[str] = WANTED, prefixes: tuple[str, ...] = (SAMPLING,)
) -> dict[str, Value]:
    """The string and number values of `keys`, and of every key starting with one of
    `prefixes`, found in the file's metadata (absent keys are left out; arrays are skipped)."""
    try:
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _read(_Cursor(data), keys, prefixes)
    except ValueError as exc:  # mmap of an empty file, or our own GGUFError
        raise GGUFError(f"{path}: {exc}") from exc


def _read(cursor: _Cursor, keys: Collection[str], prefixes: tuple[str, ...]) -> dict[str, Value]:
    if cursor.take(4) != MAGIC:
        raise GGUFError("not a GGUF file (bad magic)")
    version = cursor.u32()
    if version not in (2, 3):
        # Version 1 used 32-bit counts; a byte-swapped number means a big-endian file.
        raise GGUFError(f"unsupported GGUF version {version}")
    cursor.u64()  # tensor count: the tensors follow the metadata and are not read
    count = cursor.u64()
    if count > MAX_KEYS:
        raise GGUFError(f"GGUF header claims {count} keys")
    found: dict[str, Value] = {}
    for _ in range(count):
        key = cursor.string_bytes().decode("utf-8", errors="replace")
        kind = cursor.u32()
        if not (key in keys or key.startswith(prefixes)):
            cursor.skip_value(kind)
        elif kind == _STRING:
            found[key] = cursor.string_bytes().decode("utf-8", errors="replace")
        elif kind in _SCALAR:
            value: Value = struct.unpack(_SCALAR[kind], cursor.take(_FIXED[kind]))[0]
            found[key] = value
        else:
            cursor.skip_value(kind)
    return found
