"""`upstream.responses: native`: every response and conversation id belongs to the key that
created it; another key's id is a 404 exactly like an unknown one, and never reaches the
upstream (which holds them all under the proxy's credential)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.responses.owners import MAX_ID_CHARS, Owners, not_found, record_key
from proxy.stores.backend import DiskRecords
from tests.callers import KEY_A, KEY_ADMIN, KEY_B, KEYS, sdk
from tests.fakes.upstream import FakeUpstream


def forwarded(upstream: FakeUpstream, prefix: str) -> list[str]:
    return [f"{r.method} {r.path}" for r in upstream.requests if r.path.startswith(prefix)]


@pytest.fixture
def native(make_proxy: Callable[..., str]) -> Callable[[], str]:
    """A proxy (started again on the same data_dir at each call: a restart)."""
    return lambda: make_proxy(server={"api_keys": KEYS}, upstream={"responses": "native"})


def test_another_keys_response_is_an_unknown_one(
    native: Callable[[], str], upstream: FakeUpstream
) -> None:
    base = native()
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    created = a.responses.create(model="m", input="Say hi")
    assert created.id == "resp_up"
    before = len(upstream.requests)

    unknown = httpx.get(
        base + "/v1/responses/resp_never", headers={"Authorization": f"Bearer {KEY_B}"}
    )
    for method, path in (
        ("GET", "/v1/responses/resp_up"),
        ("DELETE", "/v1/responses/resp_up"),
        ("GET", "/v1/responses/resp_up/input_items"),
        ("POST", "/v1/responses/resp_up/cancel"),
    ):
        answer = httpx.request(method, base + path, headers={"Authorization": f"Bearer {KEY_B}"})
        assert answer.status_code == 404, (method, path)
        # Word for word what an unknown id gets, but for the id itself.
        assert answer.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
            "resp_never", "resp_up"
        )
        assert answer.json()["error"]["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve("resp_up")
    with pytest.raises(openai.NotFoundError) as chained:
        b.responses.create(model="m", input="And then?", previous_response_id="resp_up")
    assert chained.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve("resp_never")  # unknown to the proxy: not even asked upstream
    assert len(upstream.requests) == before

    # The owner, and an admin, reach it.
    assert (
        httpx.get(
            base + "/v1/responses/resp_up", headers={"Authorization": f"Bearer {KEY_A}"}
        ).status_code
        == 200
    )
    assert forwarded(upstream, "/v1/responses/") == ["GET /v1/responses/resp_up"]
    items = httpx.get(
        base + "/v1/responses/resp_up/input_items",
        headers={"Authorization": f"Bearer {KEY_ADMIN}"},
    )
    assert items.status_code == 200
    a.responses.create(model="m", input="And then?", previous_response_id="resp_up")
    assert upstream.last_to("/v1/responses").json["previous_response_id"] == "resp_up"
    # Deleted by its owner: gone for everyone, the owner included.
    assert (
        httpx.delete(
            base + "/v1/responses/resp_up", headers={"Authorization": f"Bearer {KEY_A}"}
        ).status_code
        == 200
    )
    assert (
        httpx.get(
            base + "/v1/responses/resp_up", headers={"Authorization": f"Bearer {KEY_A}"}
        ).status_code
        == 404
    )


def test_a_streamed_responses_id_is_owned_before_the_client_reads_it(
    native: Callable[[], str], upstream: FakeUpstream
) -> None:
    base = native()
    upstream.response_id = "resp_streamed"
    with sdk(base, KEY_A).responses.stream(model="m", input="Say hi") as stream:
        first = next(iter(stream))
        assert first.type == "response.created" and first.response.id == "resp_streamed"
        # Not yet finished, already the caller's.
        mine = httpx.get(
            base + "/v1/responses/resp_streamed", headers={"Authorization": f"Bearer {KEY_A}"}
        )
        theirs = httpx.get(
            base + "/v1/responses/resp_streamed", headers={"Authorization": f"Bearer {KEY_B}"}
        )
        stream.get_final_response()
    assert (mine.status_code, theirs.status_code) == (200, 404)


def test_ownership_survives_a_restart(native: Callable[[], str], upstream: FakeUpstream) -> None:
    sdk(native(), KEY_A).responses.create(model="m", input="Say hi")
    again = native()  # a new process on the same data_dir
    assert (
        httpx.get(
            again + "/v1/responses/resp_up", headers={"Authorization": f"Bearer {KEY_B}"}
        ).status_code
        == 404
    )
    assert (
        httpx.get(
            again + "/v1/responses/resp_up", headers={"Authorization": f"Bearer {KEY_A}"}
        ).status_code
        == 200
    )


def test_conversations_belong_to_their_creator(
    native: Callable[[], str], upstream: FakeUpstream
) -> None:
    base = native()
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    conversation = a.conversations.create()
    before = len(upstream.requests)
    for method, tail in (
        ("GET", ""),
        ("POST", ""),
        ("DELETE", ""),
        ("GET", "/items"),
        ("POST", "/items"),
    ):
        answer = httpx.request(
            method,
            f"{base}/v1/conversations/{conversation.id}{tail}",
            json={} if method == "POST" else None,
            headers={"Authorization": f"Bearer {KEY_B}"},
        )
        assert (
            answer.status_code == 404 and answer.json()["error"]["code"] == "conversation_not_found"
        )
    with pytest.raises(openai.NotFoundError) as used:
        b.responses.create(model="m", input="hi", conversation=conversation.id)
    assert used.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        b.responses.create(model="m", input="hi", conversation={"id": conversation.id})
    assert len(upstream.requests) == before
    a.responses.create(model="m", input="hi", conversation=conversation.id)
    assert upstream.last_to("/v1/responses").json["conversation"] == conversation.id
    mine = httpx.get(
        f"{base}/v1/conversations/{conversation.id}/items",
        headers={"Authorization": f"Bearer {KEY_A}"},
    )
    assert mine.status_code == 200


def test_token_counting_checks_the_ids_its_body_names(
    native: Callable[[], str], upstream: FakeUpstream
) -> None:
    base = native()
    sdk(base, KEY_A).responses.create(model="m", input="Say hi")
    body = {"model": "m", "input": "hi", "previous_response_id": "resp_up"}
    theirs = httpx.post(
        base + "/v1/responses/input_tokens", json=body, headers={"Authorization": f"Bearer {KEY_B}"}
    )
    assert theirs.status_code == 404
    assert not forwarded(upstream, "/v1/responses/input_tokens")
    mine = httpx.post(
        base + "/v1/responses/input_tokens", json=body, headers={"Authorization": f"Bearer {KEY_A}"}
    )
    assert mine.status_code == 200
    assert forwarded(upstream, "/v1/responses/input_tokens") == ["POST /v1/responses/input_tokens"]


def test_records_are_keyed_by_a_digest_and_keep_their_first_owner(tmp_path: Path) -> None:
    owners = Owners(DiskRecords(tmp_path))
    hostile = "../../etc/passwd\x00" + "x" * 200
    owners.record("response", hostile, "team-a")
    owners.record("response", hostile, "team-b")  # the same id again: not taken over
    assert owners.owner("response", hostile) == "team-a"
    assert owners.may_use("response", hostile, "team-b", admin=True)
    assert not owners.may_use("response", hostile, "team-b", admin=False)
    assert not owners.may_use("conversation", hostile, "team-a", admin=False)
    [written] = [p for p in tmp_path.rglob("*.json")]
    assert written.relative_to(tmp_path).as_posix() == record_key("response", hostile)
    found: dict[str, Any] = json.loads(written.read_bytes())
    assert found["id"] == hostile
    owners.record("response", "x" * 300, "team-a")  # no upstream gives such ids
    assert owners.owner("response", "x" * 300) is None


def test_record_bounds_keys_and_the_not_found_answer(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"resp_1").hexdigest()
    assert record_key("response", "resp_1") == f"responses/{digest[:2]}/{digest}.json"
    assert record_key("conversation", "c").startswith("conversations/")
    owners = Owners(DiskRecords(tmp_path), clock=lambda: 7.0)
    longest, longer = "r" * MAX_ID_CHARS, "r" * (MAX_ID_CHARS + 1)
    for ident in (longest, longer, ""):
        owners.record("response", ident, "team-a")
    assert owners.owner("response", longest) == "team-a"
    assert owners.owner("response", longer) is None and owners.owner("response", "") is None
    assert [json.loads(p.read_bytes())["created"] for p in tmp_path.rglob("*.json")] == [7.0]
    owners.forget("response", longer)  # no record of it: nothing happens
    owners.forget("response", "")
    assert owners.owner("response", longest) == "team-a"
    owners.forget("response", longest)
    assert owners.owner("response", longest) is None
    # A record under another id's key (a tampered file), or with no owner string, owns nothing.
    path = tmp_path / record_key("response", "resp_2")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": "resp_other", "owner": "team-a"}))
    assert owners.owner("response", "resp_2") is None
    path.write_text(json.dumps({"id": "resp_2", "owner": 7}))
    assert owners.owner("response", "resp_2") is None
    path.write_text("[1, 2]")
    assert owners.owner("response", "resp_2") is None
    error = not_found("conversation", "conv_" + "9" * 80, "conversation")
    assert (error.status, error.param, error.code) == (
        404,
        "conversation",
        "conversation_not_found",
    )
    assert error.type == "invalid_request_error"
    assert error.message == f"No conversation found with id {'conv_' + '9' * 56 + '...'!r}."
    assert (
        not_found("response", "r" * 64, "x").message == f"No response found with id {'r' * 64!r}."
    )


def test_a_native_stream_cut_short_ends_failed_not_done(
    native: Callable[[], str], upstream: FakeUpstream
) -> None:
    base = native()
    upstream.responses_die = True
    events = list(sdk(base, KEY_A).responses.create(model="m", input="Say hi", stream=True))
    assert [event.type for event in events[-2:]] == ["error", "response.failed"]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.id == events[0].response.id == "resp_up"  # type: ignore[union-attr]
    assert failed.status == "failed" and "broke off" in failed.error.message  # type: ignore[union-attr]
    assert [event.sequence_number for event in events] == list(range(len(events)))
