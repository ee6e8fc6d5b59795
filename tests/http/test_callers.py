"""Who is asking: the identity of the proxy key a request presents."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from proxy.config import ApiKey
from proxy.http.middleware import caller_of
from proxy.pipeline.exchange import Caller

KEYS = [
    ApiKey(name="team-a", key="secret-a-0123456789"),
    ApiKey(name="ops", key="secret-o-0123456789", admin=True),
]


def test_the_key_presented_names_the_caller() -> None:
    bearer = make_mocked_request(
        "GET", "/", headers={"Authorization": "Bearer secret-a-0123456789"}
    )
    assert caller_of(bearer, KEYS) == Caller("team-a", admin=False)
    header = make_mocked_request("GET", "/", headers={"X-Api-Key": "secret-o-0123456789"})
    assert caller_of(header, KEYS) == Caller("ops", admin=True)


def test_an_unknown_or_missing_key_is_nobody() -> None:
    assert caller_of(make_mocked_request("GET", "/"), KEYS) is None
    wrong = make_mocked_request(
        "GET", "/", headers={"Authorization": "Bearer secret-a-0123456789x"}
    )
    assert caller_of(wrong, KEYS) is None
    basic = make_mocked_request("GET", "/", headers={"Authorization": "Basic secret-a-0123456789"})
    assert caller_of(basic, KEYS) is None
