"""Files belong to the key that uploaded them: two keys through the real openai SDK."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.callers import KEY_A, KEY_ADMIN, KEY_B, KEYS, sdk
from tests.fakes.upstream import FakeUpstream


def file_message(file_id: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What does it say?"},
                {"type": "file", "file": {"file_id": file_id}},
            ],
        }
    ]


@pytest.fixture
def base(make_proxy: Callable[..., str]) -> str:
    return make_proxy(server={"api_keys": KEYS})


def test_another_keys_files_are_invisible(base: str, upstream: FakeUpstream) -> None:
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    mine = a.files.create(file=("a-notes.txt", b"Team A's secret plan."), purpose="user_data")

    assert [f.id for f in b.files.list().data] == []
    with pytest.raises(openai.NotFoundError):
        b.files.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        b.files.content(mine.id)
    with pytest.raises(openai.NotFoundError):
        b.files.delete(mine.id)
    with pytest.raises(openai.NotFoundError) as chat:
        b.chat.completions.create(model="m", messages=file_message(mine.id))  # type: ignore[arg-type]
    assert chat.value.body["code"] == "file_not_found"  # type: ignore[index]
    preview = httpx.post(
        base + "/v1/enrich/preview",
        json={"model": "m", "messages": file_message(mine.id)},
        headers={"Authorization": f"Bearer {KEY_B}"},
    )
    assert preview.status_code == 404
    assert "secret plan" not in str(upstream.requests)

    # The owner still has it, untouched by B's attempts.
    assert a.files.content(mine.id).read() == b"Team A's secret plan."
    a.chat.completions.create(model="m", messages=file_message(mine.id))  # type: ignore[arg-type]
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert "Team A's secret plan." in sent


def test_an_admin_key_sees_every_file(base: str) -> None:
    a, b, ops = sdk(base, KEY_A), sdk(base, KEY_B), sdk(base, KEY_ADMIN)
    first = a.files.create(file=("a.txt", b"from a"), purpose="user_data")
    second = b.files.create(file=("b.txt", b"from b"), purpose="user_data")
    assert {f.id for f in ops.files.list().data} == {first.id, second.id}
    assert ops.files.content(second.id).read() == b"from b"
    assert ops.files.delete(first.id).deleted
    with pytest.raises(openai.NotFoundError):
        a.files.retrieve(first.id)


def test_same_bytes_tell_nothing_about_other_keys(base: str) -> None:
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    data = b"The same bytes, uploaded by two teams."
    held = a.files.create(file=("x.txt", data), purpose="user_data")
    fresh = b.files.create(file=("y.txt", b"bytes nobody else holds"), purpose="user_data")
    dup = b.files.create(file=("x.txt", data), purpose="user_data")
    # A fresh random id either way, and the same answer shape for held and new bytes.
    assert dup.id != held.id
    assert set(dup.model_dump()) == set(fresh.model_dump())
    assert dup.bytes == len(data)
    # B deleting its copy leaves A's intact; A deleting leaves B's intact.
    b.files.delete(dup.id)
    assert a.files.content(held.id).read() == data
    again = b.files.create(file=("x.txt", data), purpose="user_data")
    a.files.delete(held.id)
    assert b.files.content(again.id).read() == data


def test_per_key_storage_quota(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(server={"api_keys": KEYS, "max_storage_mb_per_key": 0.001})  # ~1 KiB
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    first = a.files.create(file=("one.txt", b"x" * 700), purpose="user_data")
    with pytest.raises(openai.APIStatusError) as full:
        a.files.create(file=("two.txt", b"y" * 700), purpose="user_data")
    assert full.value.status_code == 507
    assert full.value.body["code"] == "storage_quota_exceeded"  # type: ignore[index]
    assert "max_storage_mb_per_key" in full.value.body["message"]  # type: ignore[index]
    # Another key has its own quota, even for the same bytes.
    b.files.create(file=("one.txt", b"x" * 700), purpose="user_data")
    # Deleting frees the room.
    a.files.delete(first.id)
    a.files.create(file=("two.txt", b"y" * 700), purpose="user_data")
