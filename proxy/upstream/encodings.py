"""tiktoken's encodings built from the files shipped in this package, never downloaded."""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import tiktoken

from proxy.offline import tiktoken_missing

SHIPPED = Path(__file__).with_name("bpe")
"""Where the wheel carries the encodings' files, byte for byte as tiktoken downloads them."""

ENDOFTEXT = "<|endoftext|>"
ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True)
class EncodingFile:
    """One of tiktoken's BPE files and what tiktoken builds from it (tiktoken_ext/openai_public.py:
    the address, its sha256, the split pattern and the special tokens, copied from there and
    checked against tiktoken's own constructors by tests/upstream/test_encodings.py)."""

    name: str
    sha256: str
    pattern: str
    special_tokens: dict[str, int] = field(hash=False)

    @property
    def url(self) -> str:
        return f"https://openaipublic.blob.core.windows.net/encodings/{self.name}.tiktoken"

    @property
    def cache_name(self) -> str:
        """The name tiktoken gives the file in its cache: the SHA-1 of its address."""
        return hashlib.sha1(self.url.encode()).hexdigest()


ENCODINGS = {
    "cl100k_base": EncodingFile(
        "cl100k_base",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "|".join(
            [
                r"""'(?i:[sdmt]|ll|ve|re)""",
                r"""[^\r\n\p{L}\p{N}]?+\p{L}++""",
                r"""\p{N}{1,3}+""",
                r""" ?[^\s\p{L}\p{N}]++[\r\n]*+""",
                r"""\s++$""",
                r"""\s*[\r\n]""",
                r"""\s+(?!\S)""",
                r"""\s""",
            ]
        ),
        {
            ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": EncodingFile(
        "o200k_base",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        {ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}


def tiktoken_cache_dirs() -> list[Path]:
    """Where a copy is looked for when the shipped one is gone: tiktoken's cache as tiktoken
    finds it (TIKTOKEN_CACHE_DIR, DATA_GYM_CACHE_DIR, else the temporary folder's
    data-gym-cache), and ~/.cache/tiktoken, where the README has offline machines put it."""
    dirs = [Path.home() / ".cache" / "tiktoken"]
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(variable):
            dirs.insert(0, Path(os.environ[variable]))
            break
    else:
        dirs.append(Path(tempfile.gettempdir()) / "data-gym-cache")
    return dirs


def places(name: str) -> list[Path]:
    """Every path the file of encoding `name` is looked for at, in order."""
    encoding = ENCODINGS[name]
    shipped = SHIPPED / f"{name}.tiktoken"
    return [shipped, *(folder / encoding.cache_name for folder in tiktoken_cache_dirs())]


def present(name: str) -> Path | None:
    """The first place that holds a file for `name` (not read: for /healthz), or None."""
    return next((path for path in places(name) if path.is_file()), None)


def mergeable_ranks(data: bytes) -> dict[bytes, int]:
    """A .tiktoken file's merge ranks: one `base64(token) rank` line each (tiktoken/load.py)."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


_loaded: dict[str, tiktoken.Encoding] = {}
_loading = threading.Lock()


def load_encoding(name: str) -> tiktoken.Encoding:
    """Encoding `name`, built once per process from the first of its places whose bytes have
    the right sha256; a clear 503 naming the places when none has. Blocking (reads and builds
    a few MB, ~0.1-0.4 s): call it from a thread, never on the event loop."""
    with _loading:
        if name in _loaded:
            return _loaded[name]
        encoding = ENCODINGS[name]
        looked = places(name)
        for path in looked:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() == encoding.sha256:
                built = tiktoken.Encoding(
                    name=name,
                    pat_str=encoding.pattern,
                    mergeable_ranks=mergeable_ranks(data),
                    special_tokens=encoding.special_tokens,
                )
                _loaded[name] = built
                return built
        raise tiktoken_missing(name, encoding.url, looked)
