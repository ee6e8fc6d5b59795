"""`#file:` path references resolve only inside their configured root; nothing else is read."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.errors import ProxyError
from proxy.files.paths import read_document_path
from tests.fakes.upstream import FakeUpstream

SECRET = "SECRET-5f0c1e-do-not-leak"
INSIDE = "Inside the root: harmless text."
CHAT = "/v1/chat/completions"


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """tmp/docs (the root) beside tmp/secret; symlinks inside the root pointing out of it."""
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text(INSIDE)
    (docs / "sub" / "b.txt").write_text(INSIDE)
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(SECRET)
    os.symlink(tmp_path / "secret", docs / "link-to-secret")
    os.symlink(tmp_path / "outside", docs / "linked-dir")
    os.symlink("../secret", docs / "relative-link")
    os.symlink(docs / "a.txt", docs / "inner-link.txt")  # stays inside: allowed
    return tmp_path


@pytest.fixture
def proxy(make_proxy: Callable[..., str], layout: Path) -> str:
    return make_proxy(
        documents={"roots": {"docs": str(layout / "docs")}},
        models={"*": {"context_length": 100_000}},
    )


def bodies(reference: str) -> list[dict[str, Any]]:
    """The reference as string content and as a text part."""
    text = f"Read {reference} please"
    return [
        {"model": "m", "messages": [{"role": "user", "content": text}]},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]},
    ]


def leaked(upstream: FakeUpstream, response: httpx.Response) -> bool:
    return SECRET in response.text or any(SECRET.encode() in r.body for r in upstream.requests)


ESCAPES = [
    "docs/../secret",
    "docs/sub/../../secret",
    "docs/./../secret",
    "docs/%2e%2e/secret",
    "docs/%2E%2E%2Fsecret",
    "docs/..%2fsecret",
    "docs//etc/passwd",
    "docs/sub/../../outside/secret.txt",
    "/etc/passwd",
    "docs/link-to-secret",
    "docs/relative-link",
    "docs/linked-dir/secret.txt",
    "docs/a.txt\x00../../secret",
    "docs/\x00secret",
    "docs\\..\\secret",
    "docs/..\\secret",
    "secret",
    "other/secret",
    "../secret",
    "..",
    "docs",
    "docs/",
    "docs/sub",
    "docs/missing.txt",
    "DOCS/a.txt",
    "docs/a.txt/../../secret",
    "~/secret",
]


@pytest.mark.parametrize("reference", ESCAPES)
def test_escapes_are_refused(proxy: str, upstream: FakeUpstream, reference: str) -> None:
    for body in bodies("#file:" + reference):
        response = httpx.post(proxy + CHAT, json=body, timeout=30)
        assert 400 <= response.status_code < 500, (reference, response.status_code, response.text)
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] in {"path_not_allowed", "file_not_found"}, error
        assert not leaked(upstream, response), reference
    assert not [r for r in upstream.requests if r.path == CHAT]


def test_the_secret_is_never_read_even_as_a_file_id(proxy: str, upstream: FakeUpstream) -> None:
    for file_id in ("../../secret", "file-../../secret", "file-" + "0" * 24):
        body = {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "file", "file": {"file_id": file_id}}]}
            ],
        }
        response = httpx.post(proxy + CHAT, json=body, timeout=30)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "file_not_found"
        assert not leaked(upstream, response)


@pytest.mark.parametrize("reference", ["docs/a.txt", "docs/sub/b.txt", "docs/inner-link.txt"])
def test_paths_inside_the_root_are_read(proxy: str, upstream: FakeUpstream, reference: str) -> None:
    for body in bodies("#file:" + reference):
        response = httpx.post(proxy + CHAT, json=body, timeout=30)
        assert response.status_code == 200, response.text
        sent = upstream.last_to(CHAT).body.decode()
        assert INSIDE in sent
        assert "#file:" not in sent
        assert not leaked(upstream, response)


def test_without_roots_paths_are_plain_text(
    make_proxy: Callable[..., str], upstream: FakeUpstream, layout: Path
) -> None:
    base = make_proxy()
    for body in bodies("#file:docs/../secret"):
        response = httpx.post(base + CHAT, json=body, timeout=30)
        assert response.status_code == 200, response.text
        assert not leaked(upstream, response)


def _swap_until(stop: Any, swaps: Any, sub: Path, parked: Path, outside: Path) -> None:
    while not stop.is_set():
        os.rename(sub, parked)
        os.symlink(outside, sub)
        time.sleep(0.0005)  # a moment as a link leading out of the root
        os.unlink(sub)
        os.rename(parked, sub)
        swaps.value += 1
        time.sleep(0.0005)  # a moment as a real directory, so that some reads succeed


def test_a_directory_swapped_for_a_link_during_reads_never_leaks(tmp_path: Path) -> None:
    """Another process swaps docs/sub between a real directory and a link to a directory
    outside the root, as fast as it can; every read returns the inside file or is refused."""
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "sub").mkdir(parents=True)
    outside.mkdir()
    (docs / "sub" / "a.txt").write_text("inside")
    (outside / "a.txt").write_text("TOP SECRET")
    context = multiprocessing.get_context("fork")
    stop, swaps = context.Event(), context.Value("i", 0)
    swapper = context.Process(
        target=_swap_until, args=(stop, swaps, docs / "sub", docs / "parked", outside)
    )
    swapper.start()
    results: Counter[str] = Counter()
    try:
        attempts = 0
        while (results["inside"] < 100 or swaps.value < 200) and attempts < 100_000:
            attempts += 1
            try:
                data = read_document_path({"docs": docs}, "docs/sub/a.txt", "a.txt", 1 << 20)
            except ProxyError:
                results["refused"] += 1
                continue
            results[data.decode()] += 1
    finally:
        stop.set()
        swapper.join(10)
    assert results["TOP SECRET"] == 0, results
    assert results["inside"] >= 100 and swaps.value >= 200, (results, swaps.value)
