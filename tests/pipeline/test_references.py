"""Finding file references in messages, and resolving paths only inside document roots."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from proxy.errors import BadRequest, DocumentError, PayloadTooLarge
from proxy.files.paths import resolve_document_path
from proxy.pipeline.file_refs import find_references
from proxy.pipeline.stages.references import decode_file_data
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, sent_text


def file_part(name: str, data: bytes = b"hello") -> dict[str, object]:
    encoded = base64.b64encode(data).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:text/plain;base64,{encoded}"},
    }


def test_new_and_old_files_in_order() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "first"}, file_part("old.txt")]},
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                file_part("a.txt"),
                {"type": "text", "text": "compare"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "input_file", "filename": "b.pdf", "file_id": "file-" + "0" * 24},
                {"type": "file", "file": {"file_name": "c.txt", "file_data": "aGk="}},
            ],
        },
    ]
    found = find_references(messages, path_prefix=None)
    assert [(r.name, r.origin, r.new) for r in found.refs] == [
        ("old.txt", "file_data", False),
        ("a.txt", "file_data", True),
        ("b.pdf", "file_id", True),
        ("c.txt", "file_data", True),
    ]
    assert found.query == "compare"
    # Earlier file parts become markers; the last message keeps text and images only.
    assert found.messages[1]["content"] == [
        {"type": "text", "text": "first"},
        {"type": "text", "text": "[attached: old.txt]"},
    ]
    assert [p["type"] for p in found.messages[3]["content"]] == ["text", "image_url"]
    assert found.messages[0] == messages[0]


def test_path_references_in_text() -> None:
    messages = [{"role": "user", "content": "summarise #file:docs/report.pdf please"}]
    found = find_references(messages, path_prefix="#file:")
    assert [(r.name, r.origin, r.locator) for r in found.refs] == [
        ("report.pdf", "path", "docs/report.pdf")
    ]
    assert found.query == "summarise docs/report.pdf please"
    off = find_references(messages, path_prefix=None)
    assert off.refs == []


def test_file_url_is_a_reference_and_empty_part_refused() -> None:
    # Whether the URL may be fetched is decided when it is read (documents.allowed_url_prefixes).
    found = find_references(
        [{"role": "user", "content": [{"type": "input_file", "file_url": "http://x/d/a.pdf?v=1"}]}],
        path_prefix=None,
    )
    assert [(r.name, r.origin, r.locator) for r in found.refs] == [
        ("a.pdf", "url", "http://x/d/a.pdf?v=1")
    ]
    with pytest.raises(BadRequest, match="file_data, file_id or file_url"):
        find_references(
            [{"role": "user", "content": [{"type": "file", "file": {}}]}], path_prefix=None
        )


def test_decode_file_data() -> None:
    assert decode_file_data("a", "data:application/pdf;base64,aGVsbG8=", 100) == b"hello"
    assert decode_file_data("a", "aGVs\nbG8=", 100) == b"hello"
    with pytest.raises(DocumentError, match="a: file_data is not valid base64"):
        decode_file_data("a", "data:application/pdf;base64,@@@", 100)
    with pytest.raises(DocumentError, match="base64 data URL"):
        decode_file_data("a", "data:text/plain,hello", 100)
    with pytest.raises(DocumentError, match="empty"):
        decode_file_data("a", "data:text/plain;base64,", 100)
    with pytest.raises(PayloadTooLarge):
        decode_file_data("a", base64.b64encode(b"x" * 1000).decode(), 100)


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", root / "escape.txt")
    os.symlink(root / "sub" / "a.txt", root / "inner-link.txt")
    return {"docs": root}


def test_path_inside_root(roots: dict[str, Path]) -> None:
    assert resolve_document_path(roots, "docs/sub/a.txt").read_text() == "inside"
    assert resolve_document_path(roots, "docs/inner-link.txt").read_text() == "inside"


@pytest.mark.parametrize(
    ("reference", "reason"),
    [
        ("docs/../secret.txt", "without '..'"),
        ("docs/sub/../../secret.txt", "without '..'"),
        ("docs//etc/passwd", "relative to the root"),
        ("docs/escape.txt", "outside its document root"),
        ("other/a.txt", "unknown document root"),
        ("docs/%2e%2e/secret.txt", "no such file"),
        ("docs/sub/a.txt\x00.pdf", "forbidden characters"),
        ("docs/sub", "not a regular file"),
        ("docs/missing.txt", "no such file"),
        ("docs\\..\\secret.txt", "forbidden characters"),
    ],
)
def test_path_refused(roots: dict[str, Path], reference: str, reason: str) -> None:
    with pytest.raises(DocumentError, match=reason):
        resolve_document_path(roots, reference)


def test_no_roots_means_off() -> None:
    with pytest.raises(DocumentError, match="off"):
        resolve_document_path({}, "docs/a.txt")


def test_file_parts_outside_user_messages_become_markers() -> None:
    messages = [
        {"role": "assistant", "content": [{"type": "text", "text": "here"}, file_part("gen.txt")]},
        {"role": "user", "content": "thanks"},
    ]
    found = find_references(messages, path_prefix=None)
    assert found.refs == []
    assert found.messages[0]["content"] == [
        {"type": "text", "text": "here"},
        {"type": "text", "text": "[attached: gen.txt]"},
    ]


# --- edges that mutation testing found untested -----------------------------------------------


def refused(part: object) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        find_references(
            [{"role": "user", "content": [{"type": "text", "text": "q"}, part]}], path_prefix=None
        )
    return caught.value


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"type": "file", "file": "x"}, "messages[0].content[1].file must be an object"),
        (
            {"type": "file", "file": {"filename": 5, "file_data": "aGk="}},
            "messages[0].content[1]: filename must be a string",
        ),
        # Present but not text: no file part at all.
        (
            {"type": "file", "file": {"file_data": 123, "file_id": ["f"], "file_url": {"u": 1}}},
            "messages[0].content[1]: a file part needs file_data, file_id or file_url",
        ),
    ],
)
def test_bad_file_parts_are_named(part: object, message: str) -> None:
    error = refused(part)
    assert error.message == message
    assert error.param == "messages[0].content[1]"


def test_file_parts_of_other_roles_become_markers() -> None:
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "here"},
            {"type": "file", "file": {"file_name": "old.pdf"}},
            {"type": "input_file", "file_id": "file-x"},
        ],
    }
    plain = {"role": "assistant", "content": [{"type": "text", "text": "no files"}]}
    tool = {"role": "tool", "content": "a string"}
    messages = [assistant, plain, tool, {"role": "user", "content": "q"}]
    found = find_references(messages, path_prefix=None)
    assert found.messages[0]["content"] == [
        {"type": "text", "text": "here"},
        {"type": "text", "text": "[attached: old.pdf]"},
        {"type": "text", "text": "[attached: file]"},
    ]
    assert found.messages[1] is plain and found.messages[2] is tool
    assert found.refs == []


def test_unnamed_attachments_are_numbered_in_order() -> None:
    parts = [{"type": "file", "file": {"file_data": "aGk="}} for _ in range(2)]
    found = find_references([{"role": "user", "content": parts}], path_prefix=None)
    assert [r.name for r in found.refs] == ["attachment-1", "attachment-2"]
    assert [r.message_index for r in found.refs] == [0, 0]


def test_decode_file_data_names_the_file_and_the_reason() -> None:
    with pytest.raises(DocumentError) as caught:
        decode_file_data("x.pdf", "data:text/plain,hello", 100)
    assert caught.value.message == (
        "x.pdf: file_data must be a base64 data URL (data:<mime>;base64,...)"
    )
    cases = [
        ("@@@@", "x.pdf: file_data is not valid base64", "invalid_base64"),
        ("", "x.pdf: the file is empty (0 bytes)", "empty_file"),
    ]
    for payload, message, code in cases:
        with pytest.raises(DocumentError) as caught:
            decode_file_data("x.pdf", payload, 100)
        assert (caught.value.message, caught.value.code) == (message, code)
    with pytest.raises(PayloadTooLarge) as too_large:
        decode_file_data("x.pdf", "A" * 4 * 1048576, 2 * 1048576)
    assert too_large.value.code == "file_too_large"
    assert too_large.value.message == (
        "x.pdf: the file is larger than documents.max_file_mb (2 MiB)"
    )


def test_the_size_check_before_decoding_allows_padding_and_counts_every_character() -> None:
    # 12 base64 characters are 9 bytes: refused only past max_bytes + 3 (padding slack).
    payload = "aGVsbG8gd29y"
    assert decode_file_data("a", payload, 6) == b"hello wor"
    with pytest.raises(PayloadTooLarge):
        decode_file_data("a", payload, 5)
    # Line breaks count as characters here: 13 characters are 9.75 bytes at 3/4 each, and the
    # check uses whole bytes (9), so 6 + 3 still holds them.
    assert decode_file_data("a", "aGVs\nbG8gd29y", 6) == b"hello wor"


def test_every_reference_knows_its_message_and_the_cleaned_text_keeps_the_paths() -> None:
    file_id = "file-" + "1" * 24
    messages = [
        {"role": "user", "content": "before #file:old/notes/a.txt"},
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see #file:docs/2024/report.pdf"},
                {"type": "refusal", "text": "not a text part"},
                {"type": "text", "text": "and this"},
                {"type": "input_file", "file_id": file_id},
                {"type": "input_file", "file_url": "https://example.org/x/paper.pdf"},
            ],
        },
        {"role": "assistant", "content": "answering"},
    ]
    found = find_references(messages, path_prefix="#file:")
    assert [(r.name, r.origin, r.locator, r.message_index, r.new) for r in found.refs] == [
        ("a.txt", "path", "old/notes/a.txt", 0, False),
        ("report.pdf", "path", "docs/2024/report.pdf", 2, True),
        (file_id, "file_id", file_id, 2, True),
        ("paper.pdf", "url", "https://example.org/x/paper.pdf", 2, True),
    ]
    assert found.last_user_index == 2
    # Only text parts make the query, joined by line breaks; references become plain paths.
    assert found.query == "see docs/2024/report.pdf\nand this"
    assert found.messages[0] == {"role": "user", "content": "before old/notes/a.txt"}
    assert found.messages[2]["content"][:3] == [
        {"type": "text", "text": "see docs/2024/report.pdf"},
        {"type": "refusal", "text": "not a text part"},
        {"type": "text", "text": "and this"},
    ]


def test_the_last_user_message_may_be_followed_by_others() -> None:
    messages = [{"role": "user", "content": "the question"}, {"role": "assistant", "content": "…"}]
    found = find_references(messages, path_prefix=None)
    assert (found.last_user_index, found.query) == (0, "the question")
    nobody = find_references([{"role": "system", "content": "s"}], path_prefix=None)
    assert (nobody.last_user_index, nobody.query) == (None, "")


def test_file_data_is_decoded_in_steps_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from proxy.pipeline.stages import references as stage

    monkeypatch.setattr(stage, "DECODE_STEP", 8)  # many steps, split anywhere in a group
    data = bytes(range(256)) * 3
    text = base64.b64encode(data).decode()
    spaced = "\n".join(text[i : i + 7] for i in range(0, len(text), 7))
    for value in (text, spaced, "data:text/plain;charset=utf-8;base64," + spaced):
        assert stage.decode_file_data("a.bin", value, 10_000) == data
    for broken in (text[:-1], text[:40] + "!" + text[41:], "data:text/plain," + text):
        with pytest.raises(DocumentError):
            stage.decode_file_data("a.bin", broken, 10_000)


# -- reading what a request references, through whole requests: ids, paths, URLs ------------------


CHAT = "/v1/chat/completions"
FULL = {"strategy": "inject-full-content"}


def upload(base: str, name: str, data: bytes) -> str:
    files = {"file": (name, data), "purpose": (None, "user_data")}
    response = httpx.post(base + "/v1/files", files=files, timeout=30)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def test_a_file_id_is_shown_by_its_stored_name_unless_the_part_names_it(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    file_id = upload(base, "minutes.txt", b"The board met on Tuesday.")
    unnamed = {"type": "input_file", "file_id": file_id}
    response = httpx.post(base + CHAT, json=ask([unnamed], enrich=FULL), timeout=30)
    assert response.status_code == 200, response.text
    assert "** minutes.txt full content **" in sent_text(upstream)
    named = {"type": "input_file", "file_id": file_id, "filename": "board.txt"}
    response = httpx.post(base + CHAT, json=ask([named], enrich=FULL), timeout=30)
    assert response.status_code == 200, response.text
    assert "** board.txt full content **" in sent_text(upstream)


def test_passages_of_an_uploaded_file_carry_its_id(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 20, "chunk_overlap": 0})
    file_id = upload(base, "keeper.txt", b"The lighthouse keeper fed the cats with sardines.")
    body = ask(
        [{"type": "input_file", "file_id": file_id}],
        "Who fed the cats?",
        enrich={"strategy": "retrieval"},
    )
    response = httpx.post(base + CHAT, json=body, timeout=60)
    assert response.status_code == 200, response.text
    results = response.json()["search_results"]
    assert results and {r["file_id"] for r in results} == {file_id}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "empty.txt").write_bytes(b"")
    # documents.max_file_mb 0.001 below: int(0.001 * 1024 * 1024) = 1048 bytes at most.
    (docs / "fits.txt").write_bytes(b"a" * 1048)
    (docs / "over.txt").write_bytes(b"a" * 1049)
    return docs


def test_path_references_are_held_to_the_size_limit_and_named_when_refused(
    make_proxy: Callable[..., str], upstream: FakeUpstream, root: Path
) -> None:
    base = make_proxy(documents={"roots": {"docs": str(root)}, "max_file_mb": 0.001})

    def read(name: str) -> httpx.Response:
        body = {"messages": [{"role": "user", "content": f"Read #file:docs/{name}"}]}
        return httpx.post(base + CHAT, json=body, timeout=30)

    assert read("fits.txt").status_code == 200
    over = read("over.txt")
    assert over.status_code == 413, over.text
    assert over.json()["error"]["message"].startswith("over.txt: ")
    empty = read("empty.txt")
    assert empty.status_code == 400, empty.text
    error = empty.json()["error"]
    assert (error["message"], error["code"]) == (
        "empty.txt: the file is empty (0 bytes)",
        "empty_file",
    )


@pytest.fixture
def slow_site(servers: ServerThread) -> str:
    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404)

    async def stalled(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.Response()

    app = web.Application()
    app.router.add_get("/docs/missing.pdf", missing)
    app.router.add_get("/docs/stalled.pdf", stalled)
    return servers.serve(app)


def test_url_references_are_named_in_errors_and_time_out(
    make_proxy: Callable[..., str], upstream: FakeUpstream, slow_site: str
) -> None:
    base = make_proxy(
        documents={"allowed_url_prefixes": [slow_site + "/docs/"], "url_timeout_s": 0.5}
    )

    def read(name: str) -> dict[str, str]:
        part = {"type": "input_file", "file_url": f"{slow_site}/docs/{name}"}
        response = httpx.post(base + CHAT, json=ask([part]), timeout=30)
        assert 400 <= response.status_code < 500, response.text
        return dict(response.json()["error"])

    assert read("missing.pdf")["message"].startswith("missing.pdf: ")
    stalled = read("stalled.pdf")
    assert stalled["message"].startswith("stalled.pdf: ")
    assert stalled["code"] == "file_url_timeout"
