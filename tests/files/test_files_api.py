"""The Files API with the real openai SDK, and chat requests that use the returned ids."""

from __future__ import annotations

import errno
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.errors import PayloadTooLarge
from proxy.files.protocol import FileNotFound
from proxy.files.store import DiskFileStore
from tests.fakes.upstream import FakeUpstream


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)


def test_create_list_retrieve_content_delete(
    make_proxy: Callable[..., str], tmp_path: Path
) -> None:
    client = sdk(make_proxy())
    created = client.files.create(file=("notes.txt", b"Remember the milk."), purpose="user_data")
    assert created.id.startswith("file-")
    assert created.filename == "notes.txt"
    assert created.bytes == len(b"Remember the milk.")
    assert [f.id for f in client.files.list().data] == [created.id]
    assert client.files.retrieve(created.id).filename == "notes.txt"
    assert client.files.content(created.id).read() == b"Remember the milk."
    deleted = client.files.delete(created.id)
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)


def test_chat_with_a_file_id(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    client = sdk(make_proxy())
    created = client.files.create(
        file=("facts.txt", io.BytesIO(b"The sky is green.")), purpose="user_data"
    )
    client.chat.completions.create(
        model="m",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What colour is the sky?"},
                    {"type": "file", "file": {"file_id": created.id}},
                ],
            }
        ],
    )
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert "** facts.txt full content **\n\nThe sky is green." in sent


def test_same_bytes_stored_once_and_survive_restart(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, max_bytes=1000)
    first = store.begin_upload("team-a")
    first.write(b"same")
    a = first.commit("a.txt", "user_data")
    second = store.begin_upload("team-b")
    second.write(b"same")
    b = second.commit("b.txt", "user_data")
    assert a.id != b.id and a.sha256 == b.sha256
    assert len(list((tmp_path / "blobs").iterdir())) == 1
    reopened = DiskFileStore(tmp_path, max_bytes=1000)
    assert {f.id for f in reopened.list(None)} == {a.id, b.id}
    assert reopened.usage("team-a") == reopened.usage("team-b") == 4  # each pays in full
    reopened.delete(a.id, "team-a")
    assert reopened.read(b.id, "team-b")[1] == b"same"  # the blob stays while another uses it
    reopened.delete(b.id, None)
    assert not list((tmp_path / "blobs").iterdir())
    with pytest.raises(FileNotFound):
        reopened.get(b.id, None)


def test_oversized_upload_leaves_nothing(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, max_bytes=10)
    upload = store.begin_upload("anonymous")
    with pytest.raises(PayloadTooLarge):
        upload.write(b"x" * 11)
    upload.abort()
    assert not list((tmp_path / "blobs").iterdir())
    assert not list((tmp_path / "meta").iterdir())


def test_bad_uploads(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(documents={"max_file_mb": 0.001})
    too_big = httpx.post(
        base + "/v1/files", files={"file": ("a.txt", b"x" * 5000)}, data={"purpose": "user_data"}
    )
    assert too_big.status_code == 413
    no_purpose = httpx.post(base + "/v1/files", files={"file": ("a.txt", b"x")})
    assert no_purpose.status_code == 400
    assert no_purpose.json()["error"]["param"] == "purpose"
    not_multipart = httpx.post(base + "/v1/files", json={"file": "x"})
    assert not_multipart.status_code == 400
    assert httpx.get(base + "/v1/files").json()["data"] == []
    assert httpx.get(base + "/v1/files/file-nope").status_code == 404


def test_awkward_file_names_are_safe_in_headers(make_proxy: Callable[..., str]) -> None:
    client = sdk(make_proxy())
    name = 'we"ird\r\nX-Injected: 1 naïve.txt'
    created = client.files.create(file=(name, b"data"), purpose="user_data")
    content = client.files.with_raw_response.content(created.id)
    assert "X-Injected" not in content.headers
    assert content.headers["Content-Disposition"].startswith("attachment; filename*=UTF-8''")
    assert content.content == b"data"


# -- an upload's record is written to a temp file and renamed into place ----------------------


def test_an_uploads_record_is_renamed_into_place_whole(
    make_proxy: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = tmp_path / "data" / "files" / "meta"
    renames: list[tuple[Path, Path, bytes, bool]] = []
    replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        if Path(dst).parent == meta:
            # What the rename publishes, and whether a record was visible before it.
            renames.append((Path(src), Path(dst), Path(src).read_bytes(), Path(dst).exists()))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    created = sdk(make_proxy()).files.create(file=("n.txt", b"note"), purpose="user_data")
    [(temp, record, published, existed)] = renames
    assert record == meta / f"{created.id}.json"
    assert temp.parent == meta and temp.name.startswith(".tmp-")  # same directory: atomic
    assert not existed  # nothing was written in place first
    assert json.loads(published)["id"] == created.id  # complete when renamed
    assert record.read_bytes() == published and not temp.exists()


def test_an_upload_interrupted_before_its_rename_leaves_no_record(
    make_proxy: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = make_proxy()
    meta = tmp_path / "data" / "files" / "meta"
    replace = os.replace

    def crash_before_publishing(src: Any, dst: Any) -> None:
        if Path(dst).parent == meta:
            raise OSError(errno.EIO, "simulated crash before the rename")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_before_publishing)
    response = httpx.post(
        base + "/v1/files", files={"file": ("n.txt", b"note")}, data={"purpose": "user_data"}
    )
    assert response.status_code >= 500
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert list(meta.iterdir()) == []  # neither a partial record nor its temp file
    monkeypatch.undo()
    assert httpx.get(base + "/v1/files").json()["data"] == []
