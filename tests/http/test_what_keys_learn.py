"""What one key can learn of another through what the proxy reports: the metrics anyone may
scrape do not tell whether a document's exact bytes were sent before."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import httpx

from tests.callers import KEY_A, KEY_ADMIN, KEY_B, KEYS
from tests.fakes.upstream import FakeUpstream

DOCUMENT = base64.b64encode(b"The keeper fed the cats sardines every morning.\n" * 5).decode()


def ask(base: str, key: str) -> None:
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Who fed the cats?"},
                    {"type": "file", "file": {"filename": "n.txt", "file_data": DOCUMENT}},
                ],
            }
        ],
    }
    answer = httpx.post(
        base + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200


def documents(base: str, key: str | None = None) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    text = httpx.get(base + "/metrics", headers=headers, timeout=30).text
    found = re.findall(r'^proxy_documents_total\{source="(\w+)"\} ([0-9.]+)$', text, re.M)
    return {source: float(value) for source, value in found}


def test_the_open_metrics_do_not_tell_whether_bytes_were_sent_before(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"api_keys": KEYS})
    ask(base, KEY_A)
    seen_once = documents(base)
    ask(base, KEY_B)  # the same bytes: read from the cache this time
    # B's scrape (or anyone's without a key) reads the same whether A sent them or not.
    assert seen_once == {"all": 1.0}
    assert documents(base) == documents(base, KEY_B) == {"all": 2.0}
    # The operator's scrape keeps the split it needs (parse cache hit rate).
    assert documents(base, KEY_ADMIN) == {"parsed": 1.0, "cache": 1.0}


def test_without_keys_the_metrics_keep_their_sources(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # One anonymous identity: nothing to keep apart.
    base = make_proxy()
    ask(base, "anything")
    ask(base, "anything")
    assert documents(base) == {"parsed": 1.0, "cache": 1.0}
