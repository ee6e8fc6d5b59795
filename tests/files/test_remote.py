"""Which file URLs may be fetched, with plain values."""

from __future__ import annotations

import pytest

from proxy.files.remote import url_allowed, url_name

PREFIXES = ["https://intranet.example/docs/", "http://files.example:8080/shared"]


@pytest.mark.parametrize(
    "url",
    [
        "https://intranet.example/docs/report.pdf",
        "https://INTRANET.example/docs/sub/report.pdf?version=2",
        "https://intranet.example:443/docs/a.pdf",
        "http://files.example:8080/shared",
        "http://files.example:8080/shared/a.txt",
    ],
)
def test_allowed(url: str) -> None:
    assert url_allowed(url, PREFIXES)


@pytest.mark.parametrize(
    "url",
    [
        "https://intranet.example/docsx/report.pdf",
        "https://intranet.example/private/report.pdf",
        "http://intranet.example/docs/report.pdf",  # another scheme
        "https://intranet.example:8443/docs/report.pdf",  # another port
        "https://intranet.example.evil/docs/report.pdf",
        "https://user:pw@intranet.example/docs/report.pdf",
        "https://intranet.example/docs/../private/a.pdf",
        "https://intranet.example/docs/%2e%2e/private/a.pdf",
        "https://intranet.example/docs/..%2fprivate/a.pdf",
        "https://intranet.example/docs/a%5c..%5cb.pdf",
        "http://files.example:8080/shared-secrets/a.txt",
        "file:///etc/passwd",
        "not a url",
        "",
    ],
)
def test_refused(url: str) -> None:
    assert not url_allowed(url, PREFIXES)


def test_nothing_allowed_without_prefixes_and_names() -> None:
    assert not url_allowed("https://intranet.example/docs/report.pdf", [])
    assert url_name("https://h/docs/My%20Report.pdf?x=1#y") == "My Report.pdf"
    assert url_name("https://h/") == ""
