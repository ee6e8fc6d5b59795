"""tiktoken's encodings from the files shipped in the package: tiktoken's own, never downloaded,
looked for where the README says when the shipped copy is gone, built off the event loop."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
import tiktoken_ext.openai_public

from proxy.errors import ProxyError
from proxy.upstream import encodings
from tests.fakes.upstream import FakeUpstream

NAMES = ("cl100k_base", "o200k_base")


def no_network(blobpath: str) -> bytes:
    raise AssertionError(f"tiktoken tried to download {blobpath}")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Nothing loaded yet, no download possible, and caches that hold nothing: an empty home,
    TIKTOKEN_CACHE_DIR unset, the temporary folder empty. Returns the home."""
    monkeypatch.setattr(encodings, "_loaded", {})
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(encodings.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    return home


@pytest.mark.parametrize("name", NAMES)
def test_the_shipped_file_is_tiktokens_own_and_builds_tiktokens_encoding(
    name: str, fresh: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shipped = encodings.SHIPPED / f"{name}.tiktoken"
    data = shipped.read_bytes()
    # The sha256 tiktoken itself checks the download against (tiktoken_ext/openai_public.py).
    source = Path(tiktoken_ext.openai_public.__file__).read_text()
    assert hashlib.sha256(data).hexdigest() == encodings.ENCODINGS[name].sha256
    assert f'expected_hash="{encodings.ENCODINGS[name].sha256}"' in source
    # tiktoken's own constructor, fed the same bytes through its cache: the same encoding.
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    shutil.copy(shipped, cache / encodings.ENCODINGS[name].cache_name)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    theirs = tiktoken.Encoding(**tiktoken_ext.openai_public.ENCODING_CONSTRUCTORS[name]())
    ours = encodings.load_encoding(name)
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours._mergeable_ranks == theirs._mergeable_ranks
    text = "Rückgabewert: 3.14159 <|endoftext|> — 東京 don't"
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_an_encoding_loads_with_no_cache_and_no_network(fresh: Path) -> None:
    assert encodings.load_encoding("cl100k_base").encode("hello") == [15339]
    assert encodings.load_encoding("o200k_base").encode("hello") == [24912]
    assert encodings.present("cl100k_base") == encodings.SHIPPED / "cl100k_base.tiktoken"


def test_without_the_shipped_file_it_is_looked_for_where_the_readme_says(
    fresh: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shipped = encodings.SHIPPED / "cl100k_base.tiktoken"
    monkeypatch.setattr(encodings, "SHIPPED", tmp_path / "stripped")
    key = encodings.ENCODINGS["cl100k_base"].cache_name
    readme = fresh / ".cache" / "tiktoken" / key
    default = tmp_path / "tmp" / "data-gym-cache" / key
    with pytest.raises(ProxyError) as raised:
        encodings.load_encoding("cl100k_base")
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    assert (raised.value.status, raised.value.code) == (503, "tokenizer_unavailable")
    assert raised.value.message == (
        "tiktoken's cl100k_base file is missing: it ships with enrich-proxy at "
        f"{tmp_path / 'stripped' / 'cl100k_base.tiktoken'}, and {readme}, {default} hold no copy "
        "either; reinstall enrich-proxy (pip install --force-reinstall enrich-proxy), or copy "
        f"{url} to {readme}"
    )
    # A damaged copy (wrong sha256) is passed over; the README's place is read.
    default.parent.mkdir(parents=True)
    default.write_bytes(b"aGVsbG8= 0\n")
    readme.parent.mkdir(parents=True)
    shutil.copy(shipped, readme)
    assert encodings.load_encoding("cl100k_base").encode("hello") == [15339]


def test_tiktoken_cache_dir_when_set_is_looked_in_first(
    fresh: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "set"))
    assert encodings.tiktoken_cache_dirs() == [tmp_path / "set", fresh / ".cache" / "tiktoken"]
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    assert encodings.tiktoken_cache_dirs() == [
        fresh / ".cache" / "tiktoken",
        tmp_path / "tmp" / "data-gym-cache",
    ]


# -- built off the event loop ------------------------------------------------------------------


def test_no_tiktoken_encoding_is_built_on_the_event_loop(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    fresh: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building an encoding reads and parses megabytes (and tiktoken's own loader would
    download): every build happens in a thread where no event loop runs."""
    built: list[tuple[str, bool]] = []
    original = tiktoken.Encoding.__init__

    def watched(self: tiktoken.Encoding, name: str, **kwargs: Any) -> None:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        built.append((name, on_loop))
        original(self, name, **kwargs)

    monkeypatch.setattr(tiktoken.Encoding, "__init__", watched)
    upstream.kind = "plain"  # no tokenizer endpoint: the proxy counts with tiktoken
    base = make_proxy()
    document = base64.b64encode(b"Some words in a note. " * 40).decode()
    part = {"filename": "note.txt", "file_data": f"data:text/plain;base64,{document}"}
    for model in ("m", "gpt-4o-mini", "m"):
        content = [{"type": "text", "text": "What is in it?"}, {"type": "file", "file": part}]
        body = {"model": model, "messages": [{"role": "user", "content": content}]}
        answer = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["decision"]["counter"].startswith("tiktoken:")
    assert sorted(name for name, _ in built) == ["cl100k_base", "o200k_base"]  # once each
    assert not any(on_loop for _, on_loop in built), built
    assert threading.current_thread() is threading.main_thread()
