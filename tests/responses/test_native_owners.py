"""`upstream.responses: native`: every response and conversation id belongs to the key that
created it; another key's id is a 404 exactly like an unknown one, and never reaches the
upstream (which holds them all under the proxy's credential)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from structlog.testing import capture_logs

from proxy.http.chained_turns import SWEEPS, _swept
from proxy.responses.chain import extended, this_turn
from proxy.responses.owners import (
    MAX_ID_CHARS,
    SWEEP_READS,
    Owners,
    expired,
    not_found,
    record_key,
)
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
    assert not_found("response", "r" * 65, "x").message.endswith(f"{'r' * 61 + '...'!r}.")
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


def test_a_response_record_lasts_its_keep_and_a_conversation_until_deleted(
    tmp_path: Path,
) -> None:
    now = [0.0]
    owners = Owners(DiskRecords(tmp_path), clock=lambda: now[0], keep_s=10.0)
    owners.record("response", "resp_1", "team-a")
    owners.record("conversation", "conv_1", "team-a")
    now[0] = 10.0  # exactly its keep: still there
    assert owners.owner("response", "resp_1") == "team-a"
    now[0] = 10.5
    assert owners.owner("response", "resp_1") is None
    assert not owners.may_use("response", "resp_1", "team-a", admin=True)
    assert owners.may_use("conversation", "conv_1", "team-a", admin=False)
    # An expired record takes no chain, and its id given out again is a new record.
    turn = this_turn([{"role": "user", "content": "Hi?"}])
    owners.keep_chain("response", "resp_1", lambda chain: extended(chain, turn, "Hello."))
    assert "chain" not in json.loads((tmp_path / record_key("response", "resp_1")).read_bytes())
    owners.record("response", "resp_1", "team-b")
    assert owners.owner("response", "resp_1") == "team-b"
    # Kept until deleted: no keep, or 0.
    for keep in (None, 0.0):
        forever = Owners(DiskRecords(tmp_path / str(keep)), clock=lambda: now[0], keep_s=keep)
        forever.record("response", "resp_2", "team-a")
        now[0] += 1e9
        assert forever.owner("response", "resp_2") == "team-a"


def test_expired() -> None:
    assert not expired({"created": 0}, "response", 5.0, 5.0)
    assert expired({"created": 0}, "response", 5.5, 5.0)
    assert not expired({"created": 0}, "conversation", 1e9, 5.0)
    assert not expired({"created": 0}, "response", 1e9, None)
    assert not expired({"created": 0}, "response", 1e9, 0.0)
    assert not expired({"created": "0"}, "response", 1e9, 5.0)
    assert not expired({}, "response", 1e9, 5.0)


def same_folder(count: int) -> list[str]:
    """`count` response ids whose records share a folder (the digest's first two hex digits)."""
    by_folder: dict[str, list[str]] = {}
    for n in range(100_000):
        ident = f"resp_{n}"
        found = by_folder.setdefault(record_key("response", ident).rsplit("/", 1)[0], [])
        found.append(ident)
        if len(found) == count:
            break
    return found


def test_a_new_response_sweeps_its_folder_of_expired_records(tmp_path: Path) -> None:
    now = [0.0]
    owners = Owners(
        DiskRecords(tmp_path), clock=lambda: now[0], keep_s=10.0, pick=lambda names, k: names[:k]
    )
    *old, fresh, new = same_folder(SWEEP_READS + 3)
    folder = record_key("response", new).rsplit("/", 1)[0] + "/"
    elsewhere = next(
        i for i in (f"x{n}" for n in range(999)) if folder not in record_key("response", i)
    )

    def name(ident: str) -> str:
        return record_key("response", ident).rsplit("/", 1)[1]

    def left() -> set[str]:
        return {p.name for p in (tmp_path / folder).iterdir()}

    for ident in [*old, elsewhere]:
        owners.record("response", ident, "team-a")
    owners.record("conversation", "conv_1", "team-a")
    now[0] = 8.0
    owners.record("response", fresh, "team-a")
    now[0] = 12.0
    owners.record("response", new, "team-b")
    assert left() == set(map(name, [*old, fresh, new]))  # recording sweeps nothing itself
    assert Owners(DiskRecords(tmp_path), clock=lambda: now[0]).sweep_beside(new) == 0  # no keep
    assert len(left()) == SWEEP_READS + 3
    owners.sweep_beside(new)
    # The folder's first SWEEP_READS names were read: the expired among them went.
    names = sorted(map(name, [*old, fresh, new]))
    alive = {name(fresh), name(new)}
    assert left() == set(names[SWEEP_READS:]) | alive
    # Other folders, and conversations, were not read.
    assert owners.owner("conversation", "conv_1") == "team-a"
    assert owners.owner("response", elsewhere) is None  # expired, but its record not swept
    assert (tmp_path / record_key("response", elsewhere)).exists()
    # The next sweep of the folder takes the rest.
    waiting = left() - alive
    assert waiting and owners.sweep("response", folder) == len(waiting)
    assert left() == alive
    # A record that is not JSON is left to whoever reads it, and the sweep goes on past it.
    (tmp_path / folder / "00.json").write_bytes(b"{not json")
    now[0] = 30.0  # `fresh` expired too
    assert owners.sweep("response", folder) == 2
    assert left() == {"00.json"}


class Vanishing(DiskRecords):
    """Records listed, then gone before they are read (another replica's sweep came first)."""

    def get(self, key: str) -> bytes | None:
        return None


def test_a_record_gone_between_listing_and_reading_is_passed_over(tmp_path: Path) -> None:
    owners = Owners(DiskRecords(tmp_path), clock=lambda: 0.0, keep_s=10.0)
    owners.record("response", "resp_1", "team-a")
    folder = record_key("response", "resp_1").rsplit("/", 1)[0] + "/"
    late = Owners(Vanishing(tmp_path), clock=lambda: 99.0, keep_s=10.0)
    assert late.sweep("response", folder) == 0
    assert (tmp_path / record_key("response", "resp_1")).exists()
    # A lone surrogate (JSON allows one) still names a record.
    owners.record("response", "resp_\ud800", "team-a")
    assert owners.owner("response", "resp_\ud800") == "team-a"


def test_an_expired_response_is_an_unknown_one(
    make_proxy: Callable[..., str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    base = make_proxy(
        server={"api_keys": KEYS},
        upstream={"responses": "native", "responses_keep_days": 1e-6},  # 0.0864 s
    )
    a = sdk(base, KEY_A)
    a.responses.create(model="m", input="Say hi")
    conversation = a.conversations.create()
    time.sleep(0.2)
    before = len(upstream.requests)
    with pytest.raises(openai.NotFoundError) as chained:
        a.responses.create(model="m", input="And then?", previous_response_id="resp_up")
    assert chained.value.body["code"] == "response_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve("resp_up")
    assert len(upstream.requests) == before
    # Conversations are kept until deleted.
    upstream.response_id = "resp_in_conversation"
    a.responses.create(model="m", input="hi", conversation=conversation.id)
    assert upstream.last_to("/v1/responses").json["conversation"] == conversation.id
    # A new response sweeps expired records beside its own, after it is answered.
    *old, new = same_folder(4)
    for ident in old:
        upstream.response_id = ident
        a.responses.create(model="m", input="hi")
    folder = tmp_path / "data" / "responses" / record_key("response", new).rsplit("/", 1)[0]
    assert len(list(folder.iterdir())) == 3
    time.sleep(0.2)
    upstream.response_id = new
    a.responses.create(model="m", input="hi")
    expired_names = {record_key("response", ident).rsplit("/", 1)[1] for ident in old}
    deadline = time.monotonic() + 10
    while expired_names & {p.name for p in folder.iterdir()} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not expired_names & {p.name for p in folder.iterdir()}


def test_a_sweep_that_fails_is_logged_and_let_go() -> None:
    async def run() -> tuple[list[MutableMapping[str, Any]], bool]:
        async def sweep() -> int:
            raise OSError("the bucket is away")

        task = asyncio.create_task(sweep())
        SWEEPS.add(task)
        task.add_done_callback(_swept)
        with capture_logs() as logs:
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.sleep(0)
        return logs, task in SWEEPS

    logs, held = asyncio.run(run())
    assert not held
    assert [(e["event"], e["log_level"], e["error"]) for e in logs] == [
        ("expired response records not swept", "warning", "the bucket is away")
    ]


def test_an_id_with_a_lone_surrogate_is_refused_before_any_record(
    native: Callable[[], str], upstream: FakeUpstream
) -> None:
    base = native()
    before = len(upstream.requests)
    body = b'{"model": "m", "input": "hi", "previous_response_id": "resp_\\ud800"}'
    answer = httpx.post(
        base + "/v1/responses",
        content=body,
        headers={"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_json"
    assert len(upstream.requests) == before


class Counted(DiskRecords):
    """Counts the writes (`update`)."""

    updates = 0

    def update(self, key: str, change: Any) -> bytes | None:
        self.updates += 1
        return super().update(key, change)


def test_an_owner_and_its_chain_are_one_write_and_a_lone_surrogate_is_kept(
    tmp_path: Path,
) -> None:
    backend = Counted(tmp_path)
    owners = Owners(backend, clock=lambda: 0.0)
    turn = this_turn([{"role": "user", "content": "Hi?"}])
    owners.record("response", "resp_1", "team-a", extended(this_turn([]), turn, ""))
    assert backend.updates == 1
    assert owners.chain("response", "resp_1").messages == turn.messages
    # Recorded again (another owner, another chain): the first owner and chain stay.
    owners.record("response", "resp_1", "team-b", extended(this_turn([]), turn, "Hello."))
    assert owners.owner("response", "resp_1") == "team-a"
    assert len(owners.chain("response", "resp_1").messages) == 1
    # An upstream's answer may hold half a surrogate pair: kept (escaped), read back whole.
    owners.keep_chain("response", "resp_1", lambda chain: extended(chain, turn, "x\ud800y"))
    assert owners.chain("response", "resp_1").messages[-1]["content"] == "x\ud800y"
    written = (tmp_path / record_key("response", "resp_1")).read_bytes()
    assert b"\\ud800" in written
    # Otherwise UTF-8 as it is.
    owners.record("response", "resp_2", "team-a", extended(this_turn([]), turn, "naïve"))
    assert "naïve".encode() in (tmp_path / record_key("response", "resp_2")).read_bytes()
