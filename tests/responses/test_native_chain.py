"""`upstream.responses: native`: a turn chained by `previous_response_id` or `conversation` is
searched in its conversation — the earlier questions, the last answer and the files uploaded to
the proxy, kept with each id — while only its own input goes upstream."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.http.chained_turns import chain_warnings, chained_to
from proxy.responses.chain import (
    ANSWER_HEAD_CHARS,
    ANSWER_TAIL_CHARS,
    ELISION,
    MAX_CHARS,
    MAX_FILES,
    MAX_MESSAGES,
    Chain,
    answer_text,
    extended,
    kept_answer,
    read_chain,
    this_turn,
)
from proxy.responses.owners import MAX_ID_CHARS, Owners
from proxy.stores.backend import DiskRecords
from tests.callers import KEY_A, KEY_B, KEYS, sdk
from tests.fakes.browser import Browser
from tests.fakes.upstream import ANSWER, FakeUpstream

RETRIEVE = {"strategy": "retrieval", "affinity_threshold": 0.0, "citations": "both"}
FAQ = "\n\n".join(
    [
        "# Threads",
        "## The easy interface",
        "An easy handle may be used by one thread at a time; libcurl is thread-safe so long as"
        " no handle is shared between threads.",
        "## The multi interface",
        "The multi interface drives many transfers from one thread and starts no threads of its"
        " own; name resolving may use a helper thread when the threaded resolver is built in.",
        "## Cookies",
        "Cookies are kept in memory and written to the cookie jar file when the handle is"
        " cleaned up.",
        "## Proxies",
        "An HTTP proxy is set with CURLOPT_PROXY; the environment variables http_proxy and"
        " HTTPS_PROXY are read when it is not set.",
    ]
)


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


# -- what a chain keeps (pure) -----------------------------------------------------------------


def test_a_turn_keeps_questions_answers_and_uploaded_files_only() -> None:
    turn = this_turn(
        [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x" * (MAX_CHARS + 10) + " Is it thread-safe?"},
                    {"type": "input_file", "file_id": "file-1", "filename": "faq.md"},
                    {"type": "input_file", "file_data": "data:,e30=", "filename": "inline.pdf"},
                    {"type": "input_file", "file_url": "https://example.com/a.pdf"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
            {"role": "tool", "tool_call_id": "c", "content": "42"},
        ]
    )
    [user] = turn.messages
    text, uploaded, inline, url = user["content"]
    assert text["text"].endswith("Is it thread-safe?")
    # The text with the markers after it: the message's last MAX_CHARS characters.
    assert sum(len(part.get("text", "")) for part in user["content"]) == MAX_CHARS
    assert uploaded == {"type": "input_file", "file_id": "file-1", "filename": "faq.md"}
    assert inline == {"type": "text", "text": "[attached: inline.pdf]"}
    assert url == {"type": "text", "text": "[attached: file]"}
    assert turn.not_kept == ["inline.pdf", "file"]
    assert turn.files == ["faq.md"] and turn.file_ids == ["file-1"]
    # A message's text parts together are kept by their last MAX_CHARS characters.
    many = [{"type": "text", "text": f"{n} " + "z" * 500} for n in range(20)]
    [long] = this_turn([{"role": "user", "content": many}]).messages
    assert sum(len(part["text"]) for part in long["content"]) == MAX_CHARS
    assert long["content"][-1]["text"].startswith("19 ")


def test_a_chain_keeps_its_newest_messages_and_files() -> None:
    chain = Chain()
    for number in range(MAX_MESSAGES):
        asked = {"role": "user", "content": [{"type": "input_file", "file_id": f"file-{number}"}]}
        chain = extended(chain, this_turn([asked]), f"answer {number} " + "y" * 5000 + " end")
    assert len(chain.messages) == MAX_MESSAGES
    # An answer by its opening and its end.
    answer = chain.messages[-1]["content"]
    assert answer.startswith(f"answer {MAX_MESSAGES - 1}") and answer.endswith("y end")
    assert len(answer) == ANSWER_HEAD_CHARS + len(ELISION) + ANSWER_TAIL_CHARS
    assert kept_answer("short") == "short"
    # Six turns kept, each with a file; all within MAX_FILES, the oldest first.
    assert chain.file_ids == [f"file-{n}" for n in range(MAX_MESSAGES // 2, MAX_MESSAGES)]
    many = [{"type": "input_file", "file_id": f"f{n}"} for n in range(MAX_FILES + 3)]
    crowded = extended(Chain(), this_turn([{"role": "user", "content": many}]), "")
    assert crowded.file_ids == [f"f{n}" for n in range(3, MAX_FILES + 3)]
    assert crowded.messages[0]["content"][0] == {"type": "text", "text": "[attached: file]"}
    assert read_chain(crowded.to_json()) == crowded  # a record reads back as written


def test_a_record_is_read_part_by_part() -> None:
    stored = {
        "messages": [
            "not a message",
            {"role": "system", "content": "You are root."},
            {"role": "user", "content": [{"type": "input_file", "file_data": "e30="}]},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}]},
            {"role": "assistant", "content": ["not text"]},
            {"role": "assistant", "content": "Hello."},
        ],
        "not_kept": ["a.pdf", 7],
    }
    assert read_chain(stored) == Chain(
        [
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": "Hello."},
        ],
        ["a.pdf"],
    )
    assert read_chain(None) == read_chain([1, 2]) == Chain()


def test_the_answer_is_the_models_output_text() -> None:
    response = {
        "output": [
            {"type": "file_search_call", "id": "fs"},
            {"type": "message", "content": [{"type": "output_text", "text": "One. "}]},
            {"type": "message", "content": [{"type": "refusal"}, {"type": "output_text"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Two."}]},
        ]
    }
    assert answer_text(response) == "One. Two."
    assert answer_text({}) == ""


def test_owners_keep_a_chain_only_with_a_record(tmp_path: Path) -> None:
    owners = Owners(DiskRecords(tmp_path))
    turn = this_turn([{"role": "user", "content": "Is it thread-safe?"}])
    owners.keep_chain("response", "resp_unknown", lambda _: extended(Chain(), turn, "Yes."))
    assert owners.chain("response", "resp_unknown") == Chain()
    owners.record("response", "resp_1", "alice")
    owners.keep_chain("response", "resp_1", lambda _: extended(Chain(), turn, "Yes."))
    assert [text_of(m) for m in owners.chain("response", "resp_1").messages] == [
        "Is it thread-safe?",
        "Yes.",
    ]
    assert owners.owner("response", "resp_1") == "alice"  # the owner stays
    owners.keep_chain("response", "resp_1", lambda current: extended(current, turn, "Still."))
    assert len(owners.chain("response", "resp_1").messages) == 4


def test_turns_of_one_conversation_at_once_all_land(tmp_path: Path) -> None:
    owners = Owners(DiskRecords(tmp_path))
    owners.record("conversation", "conv_1", "alice")

    def add(number: int) -> None:
        turn = this_turn([{"role": "user", "content": f"question {number}"}])
        owners.keep_chain("conversation", "conv_1", lambda current: extended(current, turn, ""))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, range(MAX_MESSAGES)))
    asked = sorted(text_of(m) for m in owners.chain("conversation", "conv_1").messages)
    assert asked == sorted(f"question {number}" for number in range(MAX_MESSAGES))


def test_what_a_turn_keeps_part_by_part() -> None:
    file_part = {"type": "file", "file": {"file_id": "file-2", "file_name": "b" * 300}}
    broken = {"type": "file", "file": "not an object"}
    turn = this_turn(
        [
            {"role": "user", "content": ""},  # nothing to keep
            {"role": "user", "content": [broken, {"type": "text", "text": ""}, file_part]},
            {"role": "user", "content": [{"type": "input_file", "file_data": "e30="}]},
            {"role": "assistant", "content": "Earlier answer."},  # a client's own history
            {"role": "user", "content": [{"type": "input_file", "file_id": "f" * 2049}]},
            {"role": "user", "content": [{"type": "input_file", "file_id": ""}]},
            {"role": "user", "content": [{"type": "input_file", "file_id": "f" * 2048}]},
        ]
    )
    assert turn.messages[0] == {
        "role": "user",
        "content": [{"type": "input_file", "file_id": "file-2"}],
    }
    assert turn.messages[1] == {
        "role": "user",
        "content": [{"type": "text", "text": "[attached: file]"}],
    }
    assert turn.messages[2] == {"role": "assistant", "content": "Earlier answer."}
    assert [m["content"][0]["type"] for m in turn.messages[3:]] == ["text", "text", "input_file"]
    assert turn.not_kept == ["file", "file", "file"]
    named = this_turn(
        [
            {
                "role": "user",
                "content": [{"type": "file", "file": file_part["file"] | {"file_id": ""}}],
            }
        ]
    )
    assert named.not_kept == ["b" * 200]  # a chat part's file_name, cut


def test_a_messages_text_is_cut_from_its_end_files_kept() -> None:
    parts = [
        {"type": "input_file", "file_id": "file-old"},
        {"type": "text", "text": "dropped"},
        {"type": "text", "text": "x" * MAX_CHARS},
        {"type": "text", "text": "tail"},
    ]
    [message] = this_turn([{"role": "user", "content": parts}]).messages
    assert message["content"] == [
        {"type": "input_file", "file_id": "file-old"},
        {"type": "text", "text": "x" * (MAX_CHARS - 4)},
        {"type": "text", "text": "tail"},
    ]
    # The last character of room still takes a character; a stray non-part is passed over.
    content = [
        "not a part",
        {"type": "text", "text": "ab"},
        {"type": "text", "text": "x" * (MAX_CHARS - 1)},
    ]
    [message] = this_turn([{"role": "user", "content": content}]).messages
    assert [part["text"][:2] for part in message["content"]] == ["b", "xx"]
    exact = "y" * MAX_CHARS
    assert (
        this_turn([{"role": "user", "content": exact}]).messages[0]["content"][0]["text"] == exact
    )


def test_answers_are_cut_only_past_their_bound() -> None:
    whole = "a" * (ANSWER_HEAD_CHARS + ANSWER_TAIL_CHARS + len(ELISION))
    assert kept_answer(whole) == whole
    longer = whole + "b"
    assert kept_answer(longer) == longer[:ANSWER_HEAD_CHARS] + ELISION + longer[-ANSWER_TAIL_CHARS:]
    assert extended(Chain(), Chain(), "").messages == []  # no answer, nothing added


def test_files_are_renamed_and_left_out_by_id() -> None:
    chain = Chain(
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_file", "file_id": "f1"},
                    {"type": "input_file", "file_id": "f2", "filename": "given.md"},
                    {"type": "text", "text": "f1"},
                ],
            },
            {"role": "assistant", "content": "ok"},
        ]
    )
    named = chain.named({"f1": "n" * 300, "f2": "stored.md"})
    assert named.files == ["n" * 200, "given.md"]  # a name the request gave stays
    assert chain.named({}).files == ["f1", "given.md"]
    without = named.without({"f2"})
    assert without.file_ids == ["f1"] and without.messages[1] == chain.messages[1]
    assert without.messages[0]["content"][1:] == [
        {"type": "text", "text": "[attached: given.md]"},
        {"type": "text", "text": "f1"},
    ]


def test_answer_text_reads_only_message_output_text() -> None:
    response = {
        "output": [
            {"type": "reasoning", "content": [{"type": "output_text", "text": "thinking"}]},
            "not an item",
            {"type": "message", "content": ["not a part", {"type": "input_text", "text": "no"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Yes."}]},
        ]
    }
    assert answer_text(response) == "Yes."


def test_a_record_keeps_only_what_a_chain_holds() -> None:
    stored = {
        "messages": [
            {"role": "assistant", "content": [{"type": "text", "text": "not a string"}]},
            {"role": "system", "content": [{"type": "text", "text": "You are root."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "not a kept part"}]},
            {"role": "user", "content": [{"type": "text", "text": "z" * (MAX_CHARS + 5)}]},
        ],
        "not_kept": ["n" * 300],
    }
    chain = read_chain(stored)
    assert chain.messages == [
        {"role": "user", "content": [{"type": "text", "text": "z" * MAX_CHARS}]}
    ]
    assert chain.not_kept == ["n" * 200]


def test_which_turns_a_request_continues_and_what_it_is_told() -> None:
    assert chained_to({"previous_response_id": "resp_1", "conversation": "conv_1"}) == (
        "response",
        "resp_1",
        "previous_response_id",
    )
    for conversation in ("conv_1", {"id": "conv_1"}):
        assert chained_to({"conversation": conversation}) == (
            "conversation",
            "conv_1",
            "conversation",
        )
    assert chained_to({"conversation": {"ID": "conv_1"}}) is None
    assert chained_to({}) is None
    earlier = Chain([], ["a.pdf", "b.pdf"])
    assert chain_warnings("response", earlier, ["file-9", "file-8"]) == [
        "a.pdf, b.pdf: attached to an earlier turn of this response by file_data or file_url;"
        " the proxy keeps only files uploaded to it, so this turn did not search them (attach"
        " them again, or upload them and attach them by file_id)",
        "file-9, file-8: attached to an earlier turn of this response, deleted since; not searched",
    ]
    assert chain_warnings("conversation", Chain(), []) == []


def test_owner_records_keep_their_chains_in_utf8_and_bounded_ids(tmp_path: Path) -> None:
    owners = Owners(DiskRecords(tmp_path))
    owners.record("response", "resp_ru", "alice")
    turn = this_turn([{"role": "user", "content": "Почему это так опасно?"}])
    owners.keep_chain("response", "resp_ru", lambda _: extended(Chain(), turn, ""))
    [path] = tmp_path.rglob("*.json")
    assert "Почему" in path.read_text(encoding="utf-8")  # not \\u escapes: a third the size
    longest = "r" * MAX_ID_CHARS
    owners.record("response", longest, "alice")
    owners.keep_chain("response", longest, lambda _: extended(Chain(), turn, ""))
    assert len(owners.chain("response", longest).messages) == 1
    owners.keep_chain("response", "", lambda _: extended(Chain(), turn, ""))
    assert owners.chain("response", "") == Chain()
    # A record of another kind, or damaged, gets no chain.
    owners.keep_chain("conversation", "resp_ru", lambda _: extended(Chain(), turn, "x"))
    assert owners.chain("conversation", "resp_ru") == Chain()


# -- through the proxy -------------------------------------------------------------------------


@pytest.fixture
def base(make_proxy: Callable[..., str]) -> str:
    return make_proxy(
        server={"api_keys": KEYS},
        upstream={"responses": "native"},
        retrieval={"chunk_tokens": 40, "chunk_overlap": 0},
    )


def upload(client: openai.OpenAI, name: str = "faq.md", text: str = FAQ) -> str:
    return client.files.create(file=(name, text.encode()), purpose="user_data").id


def first_turn(file_id: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_file", "file_id": file_id},
                {"type": "input_text", "text": "Is libcurl thread-safe?"},
            ],
        }
    ]


def decisions(base: str, key: str = KEY_A) -> list[dict[str, Any]]:
    answer = httpx.get(
        base + "/v1/enrich/decisions", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    return list(answer.json()["data"])  # the newest first


def two_turns(
    client: openai.OpenAI, upstream: FakeUpstream, first: Any, then: Any, **options: Any
) -> Any:
    """`first` answered as resp_1, then `then` chained to it (resp_2): the second's raw
    answer. `options` go with both."""
    upstream.response_id = "resp_1"
    client.responses.create(model="m", input=first, **options)
    upstream.response_id = "resp_2"
    return client.responses.with_raw_response.create(
        model="m", input=then, previous_response_id="resp_1", **options
    )


def test_a_chained_follow_up_is_searched_in_its_conversation(
    base: str, upstream: FakeUpstream
) -> None:
    client = sdk(base, KEY_A)
    file_id = upload(client)
    follow_up = "And does the other interface start threads of its own?"
    enrich = {"enrich": RETRIEVE}
    raw = two_turns(client, upstream, first_turn(file_id), follow_up, extra_body=enrich)
    sent = upstream.last_to("/v1/responses").json
    # Only the new turn goes upstream (it keeps the earlier ones), enriched from the file the
    # first turn attached.
    [item] = sent["input"]
    prompt = text_of(item)
    assert "starts no threads of its" in prompt and "other interface" in prompt
    assert sent["previous_response_id"] == "resp_1"
    record = decisions(base)[0]
    assert record["decision"]["chain"] == {
        "from": "previous_response_id",
        "id": "resp_1",
        "messages": 2,
        "files": ["faq.md"],
        "not_kept": [],
        "deleted": [],
    }
    searched = {
        entry["from"]: entry["text"] for entry in record["decision"]["retrieval"]["searched"]
    }
    assert "Is libcurl thread-safe?" in searched["conversation"]
    assert "reply" in searched  # the first answer, as the model wrote it
    assert "Sources" not in searched["reply"]
    assert raw.headers.get("X-Enrich-Strategy") == "retrieval"

    # A third turn chained to the second carries both earlier turns.
    upstream.response_id = "resp_3"
    client.responses.create(
        model="m",
        input="And cookies?",
        previous_response_id="resp_2",
        extra_body={"enrich": RETRIEVE},
    )
    assert decisions(base)[0]["decision"]["chain"]["messages"] == 4


def test_a_conversations_turns_are_kept_from_a_stream(base: str, upstream: FakeUpstream) -> None:
    client = sdk(base, KEY_A)
    file_id = upload(client)
    conversation = httpx.post(
        base + "/v1/conversations", json={}, headers={"Authorization": f"Bearer {KEY_A}"}
    ).json()["id"]
    upstream.response_id = "resp_s"
    with client.responses.stream(
        model="m",
        input=first_turn(file_id),
        extra_body={"conversation": conversation, "enrich": RETRIEVE},
    ) as stream:
        stream.get_final_response()
    upstream.response_id = "resp_t"
    client.responses.create(
        model="m",
        input="And the other interface?",
        extra_body={"conversation": conversation, "enrich": RETRIEVE},
    )
    record = decisions(base)[0]
    chain = record["decision"]["chain"]
    assert (chain["from"], chain["messages"]) == ("conversation", 2)
    searching = record["decision"]["retrieval"]["searched"]
    reply = next(entry["text"] for entry in searching if entry["from"] == "reply")
    assert "Sources" not in reply  # kept from the stream before the sources were added
    assert "starts no threads of its" in text_of(upstream.last_to("/v1/responses").json["input"][0])
    # Each turn of the conversation adds to it; the response ids carry it on too.
    upstream.response_id = "resp_u"
    client.responses.create(
        model="m", input="Thanks.", extra_body={"conversation": conversation, "enrich": RETRIEVE}
    )
    assert decisions(base)[0]["decision"]["chain"]["messages"] == 4
    client.responses.create(
        model="m", input="Proxies?", previous_response_id="resp_t", extra_body={"enrich": RETRIEVE}
    )
    assert decisions(base)[0]["decision"]["chain"]["messages"] == 4


def test_files_the_chain_cannot_search_again_are_told(base: str, upstream: FakeUpstream) -> None:
    client = sdk(base, KEY_A)
    file_id = upload(client)
    inline = {"type": "input_file", "filename": "notes.txt", "file_data": "data:text/plain;base64,"}
    inline["file_data"] += "VGhlIGtlZXBlciBmZWVkcyB0aGUgY2F0cyBzYXJkaW5lcy4="
    turn = first_turn(file_id)
    turn[0]["content"].insert(0, inline)
    upstream.response_id = "resp_1"
    client.responses.create(model="m", input=turn, extra_body={"enrich": RETRIEVE})
    client.files.delete(file_id)
    upstream.response_id = "resp_2"
    raw = client.responses.with_raw_response.create(
        model="m",
        input="And the other interface?",
        previous_response_id="resp_1",
        extra_body={"enrich": RETRIEVE},
    )
    assert raw.http_response.status_code == 200  # a file deleted since does not fail the turn
    warnings = raw.headers["X-Enrich-Warnings"]
    assert "notes.txt: attached to an earlier turn" in warnings and "by file_id" in warnings
    assert f"{file_id}: attached to an earlier turn of this response, deleted since" in warnings
    chain = decisions(base)[0]["decision"]["chain"]
    assert (chain["files"], chain["not_kept"], chain["deleted"]) == ([], ["notes.txt"], [file_id])


def test_unstored_responses_and_other_keys_chains_are_not_read(
    base: str, upstream: FakeUpstream
) -> None:
    a = sdk(base, KEY_A)
    file_id = upload(a)
    upstream.response_id = "resp_unstored"
    a.responses.create(model="m", input=first_turn(file_id), store=False)
    upstream.response_id = "resp_2"
    a.responses.create(model="m", input="And the other one?", previous_response_id="resp_unstored")
    assert decisions(base)[0]["decision"]["chain"]["messages"] == 0
    upstream.response_id = "resp_mine"
    a.responses.create(model="m", input=first_turn(file_id))
    with pytest.raises(openai.NotFoundError):
        sdk(base, KEY_B).responses.create(
            model="m", input="And the other one?", previous_response_id="resp_mine"
        )


def test_a_turn_of_tool_outputs_is_not_searched_with_the_chain(
    base: str, upstream: FakeUpstream
) -> None:
    client = sdk(base, KEY_A)
    output = {"type": "function_call_output", "call_id": "call_1", "output": "42"}
    two_turns(client, upstream, first_turn(upload(client)), [output])
    assert upstream.last_to("/v1/responses").json["input"] == [output]  # as it came
    record = decisions(base)[0]["decision"]
    assert record["chain"]["messages"] == 0 and record["old_files"] == []
    assert record["chain"]["files"] == []  # kept, but not searched this turn


async def test_ui_shows_what_a_chained_turn_was_searched_with(
    make_proxy: Callable[..., str], upstream: FakeUpstream, browser: Browser
) -> None:
    base = make_proxy(upstream={"responses": "native"})
    headers = {"Authorization": "Bearer none"}
    uploaded = httpx.post(
        base + "/v1/files",
        files={"file": ("faq.md", FAQ.encode())},
        data={"purpose": "user_data"},
        headers=headers,
    ).json()["id"]
    upstream.response_id = "resp_1"
    body = {"model": "m", "input": first_turn(uploaded), "enrich": RETRIEVE}
    assert httpx.post(base + "/v1/responses", json=body, timeout=30).status_code == 200
    upstream.response_id = "resp_2"
    body = {"model": "m", "input": "And the other interface?", "previous_response_id": "resp_1"}
    sent = httpx.post(base + "/v1/responses", json=body, headers={"X-Request-ID": "chained"})
    assert sent.status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for("!!document.querySelector('[data-id=chained]')", "the chained turn")
    line = await browser.eval("document.querySelector('[data-id=chained] p.chain').textContent")
    assert line == (
        "chained to resp_1 (previous_response_id): searched with 2 earlier messages the proxy"
        " kept; files searched again: faq.md"
    )
    assert browser.problems == []


def test_a_chained_turn_is_searched_as_the_same_conversation_resent(
    base: str, upstream: FakeUpstream
) -> None:
    """The same two turns, chained on a native upstream and resent whole on chat: the same
    texts searched at the same weights, the same passages kept."""
    client = sdk(base, KEY_A)
    file_id = upload(client)
    follow_up = "And does the other interface start threads of its own?"
    two_turns(client, upstream, first_turn(file_id), follow_up, extra_body={"enrich": RETRIEVE})
    chained = decisions(base)[0]["decision"]["retrieval"]
    first = first_turn(file_id)[0]["content"]
    resent = [
        {"role": "user", "content": [{"type": "file", "file": {"file_id": file_id}}, first[1]]},
        {"role": "assistant", "content": "".join(ANSWER)},  # what the fake answered
        {"role": "user", "content": follow_up},
    ]
    resent[0]["content"][1] = {"type": "text", "text": first[1]["text"]}
    client.chat.completions.create(
        model="m",
        messages=resent,  # type: ignore[arg-type]
        extra_body={"enrich": RETRIEVE},
    )
    whole = decisions(base)[0]["decision"]["retrieval"]
    assert chained["searched"] == whole["searched"]
    assert len(chained["searched"]) >= 3  # the question, its conversation, the reply, ...

    def kept(record: dict[str, Any]) -> list[tuple[int | None, str]]:
        return [(c["passage"], c["outcome"]) for c in record["candidates"]]

    assert kept(chained) == kept(whole)


def test_no_chains_are_kept_when_turned_off(
    make_proxy: Callable[..., str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    base = make_proxy(upstream={"responses": "native", "responses_chains": False})
    client = sdk(base)
    two_turns(client, upstream, first_turn(upload(client)), "And the other one?")
    assert "chain" not in decisions(base, "none")[0]["decision"]
    records = list((tmp_path / "data" / "responses").rglob("*.json"))
    assert len(records) == 2  # who owns each id, nothing more
    assert all("Is libcurl" not in record.read_text() for record in records)


def test_a_turn_chained_to_an_answer_cut_short_has_the_question(
    base: str, upstream: FakeUpstream
) -> None:
    client = sdk(base, KEY_A)
    upstream.response_id, upstream.responses_die = "resp_cut", True
    events = list(
        client.responses.create(
            model="m",
            input=first_turn(upload(client)),
            stream=True,
            extra_body={"enrich": RETRIEVE},
        )
    )
    assert events[-1].type == "response.failed"
    upstream.response_id, upstream.responses_die = "resp_2", False
    client.responses.create(
        model="m",
        input="And the other interface?",
        previous_response_id="resp_cut",
        extra_body={"enrich": RETRIEVE},
    )
    record = decisions(base)[0]["decision"]
    assert (record["chain"]["messages"], record["chain"]["files"]) == (1, ["faq.md"])
    searched = {entry["from"] for entry in record["retrieval"]["searched"]}
    assert "conversation" in searched and "reply" not in searched
