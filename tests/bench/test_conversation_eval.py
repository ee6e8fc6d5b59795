"""bench/conversation_eval.py: the requests a chat client sends, what the held-out half may show,
and a conversation through the proxy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import conversation_eval as ce  # noqa: E402
from documents import Document, load_documents  # noqa: E402

SELF_STANDING = {"topic-shift", "self-contained"}  # follow-ups that must not lose to history
SECRET_Q = "And which ingredient does the other chapter name?"
SECRET_A = "The secret ingredient is saffron from the high valley."
PARTS = {"doc": {"type": "file", "file": {"filename": "d.md", "file_data": "data:,x"}}}


def conversation(half: str = "tuning", doc: str = "doc", cid: str = "c-1") -> ce.Conversation:
    return ce.Conversation(
        cid,
        (doc,),
        "en",
        (
            ce.Turn("Which spices does chapter one name?", ("Pepper and salt.",), "Pepper."),
            ce.Turn(
                SECRET_Q, (SECRET_A,), "Saffron.", "Which spice does chapter two name?", "other-one"
            ),
        ),
        half,
    )


def test_a_follow_up_resends_the_conversation_with_the_documents_on_the_first_message() -> None:
    sent = ce.messages(conversation(), 1, PARTS)
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == [
        {"type": "text", "text": "Which spices does chapter one name?"},
        PARTS["doc"],
    ]
    assert sent[1] == {"role": "assistant", "content": "Pepper."}
    assert sent[2] == {"role": "user", "content": SECRET_Q}
    ceiling = ce.messages(conversation(), 1, PARTS, "Which spice does chapter two name?")
    assert ceiling[:2] == sent[:2] and ceiling[2]["content"] == "Which spice does chapter two name?"
    first = ce.messages(conversation(), 0, PARTS)
    assert len(first) == 1 and first[0]["content"][1] == PARTS["doc"]
    [alone] = ce.alone(conversation(), 1, PARTS)
    assert alone["content"] == [{"type": "text", "text": SECRET_Q}, PARTS["doc"]]


def test_every_follow_up_is_asked_as_written_as_its_rewrite_and_alone() -> None:
    plan = ce.asked(conversation())
    assert plan == [
        (0, "first", None),
        (1, "follow-up", None),
        (1, "ceiling", ["Which spice does chapter two name?"]),
        (1, "alone", []),
    ]


def run_with(rows: list[tuple[str, str, str, bool]]) -> tuple[ce.Run, dict[str, Document]]:
    documents = {
        doc: Document(doc, half, f"{doc}.{fmt}", "corpus:x", "0" * 64, lang="en")
        for doc, half, fmt in (
            ("t-doc", "tuning", "pdf"),
            ("h-md", "heldout", "md"),
            ("h-pdf", "heldout", "pdf"),
            ("h-pdf2", "heldout", "pdf"),
        )
    }
    run = ce.Run("default")
    for number, (doc, half, condition, hit) in enumerate(rows):
        found = conversation(half, doc, f"{doc}-{number}")
        turn = 0 if condition == "first" else 1
        run.rows.append(ce.Row(found, turn, condition, hit, 1.0 if hit else 0.0))
    return run, documents


def test_the_heldout_report_is_aggregates_without_a_group_of_one_document() -> None:
    rows = [
        ("h-md", "heldout", "first", True),
        ("h-md", "heldout", "follow-up", False),
        ("h-pdf", "heldout", "follow-up", True),
        ("h-pdf2", "heldout", "follow-up", True),
        ("h-pdf2", "heldout", "ceiling", True),
        ("t-doc", "tuning", "follow-up", False),
    ]
    run, documents = run_with(rows)
    text = "\n".join(ce.report("heldout", [run], documents, show_misses=True))
    assert "| heldout | default | all | 1/1 (100%), MRR 1.00 | 2/3 (67%), MRR 0.67 |" in text
    # Markdown is one document: merged into the PDFs' group, never shown alone
    assert "format: PDF + groups of one document, merged | 1/1 (100%)" in text
    assert "format: MD" not in text
    for secret in (SECRET_Q, SECRET_A, "h-md-0", "h-pdf-2", "missed"):
        assert secret not in text
    tuning = "\n".join(ce.report("tuning", [run], documents, show_misses=True))
    assert f"t-doc-5#1 follow-up (other-one): {SECRET_Q}" in tuning
    assert "| tuning | default | leans: other-one | – | 0/1 (0%), MRR 0.00 |" in tuning


def test_a_ceiling_borrowing_its_answers_words_is_told_apart() -> None:
    """The ceiling "Which spice does chapter two name?" says nothing the answer does that the
    conversation did not ("chapter" was asked before); one naming "saffron" borrows it."""
    fair = conversation()
    assert ce.borrowed_words(fair, 1) == set()
    assert ce.Row(fair, 1, "follow-up", True, 1.0).ceiling_words == "the conversation's words"
    turns = list(fair.turns)
    turns[1] = ce.Turn(
        SECRET_Q, (SECRET_A,), "Saffron.", "Where does the saffron grow?", "other-one"
    )
    borrowing = ce.Conversation(fair.id, fair.docs, fair.lang, tuple(turns), fair.half)
    assert ce.borrowed_words(borrowing, 1) == {"saffr"}
    row = ce.Row(borrowing, 1, "follow-up", False, 0.0)
    assert row.ceiling_words == "borrows the answer's words"
    # said in an earlier reply: no longer borrowed, matched by its first letters
    turns[0] = ce.Turn("Which spices does chapter one name?", ("Pepper and salt.",), "Saffrons.")
    said = ce.Conversation(fair.id, fair.docs, fair.lang, tuple(turns), fair.half)
    assert ce.borrowed_words(said, 1) == set()
    assert ce.Row(fair, 0, "first", True, 1.0).ceiling_words == "(first turn)"
    run, documents = run_with([("t-doc", "tuning", "follow-up", False)])
    text = "\n".join(ce.report("tuning", [run], documents, show_misses=False))
    assert "| tuning | default | ceiling words: the conversation's words | – | 0/1 (0%)" in text


def test_the_heldout_json_and_log_line_have_counts_only(tmp_path: Path) -> None:
    run, _ = run_with([("h-md", "heldout", "follow-up", True), ("t-doc", "tuning", "first", True)])
    heldout = json.dumps(ce.result_json("heldout", [run]))
    assert '"follow-up": [1, 1]' in heldout and '"first": [0, 0]' in heldout
    for secret in (SECRET_Q, SECRET_A, "h-md", '"rows"'):
        assert secret not in heldout
    tuning = ce.result_json("tuning", [run])
    assert tuning["runs"][0]["rows"][0]["id"] == "t-doc-1"
    rows = [row for row in run.rows if row.conversation.half == "heldout"]
    assert ce.figures(rows) == ("first –; follow-up 1/1 (100%), MRR 1.00; ceiling –; alone –")


def test_the_tuning_conversations_are_what_the_evaluation_promises() -> None:
    conversations, documents = ce.load_conversations(["tuning"])
    assert len(conversations) >= 22
    used = {doc for c in conversations for doc in c.docs}
    assert len(used) >= 5
    assert len({documents[doc].format for doc in used}) >= 3
    assert {c.lang for c in conversations} - {"en"}  # another language than English
    for c in conversations:
        assert 2 <= len(c.turns) <= 4, c.id
        assert all(turn.q and turn.answers and turn.reply for turn in c.turns), c.id
        for turn in c.turns[1:]:
            assert turn.standalone and turn.leans, c.id
    leans = {turn.leans for c in conversations for turn in c.turns[1:]}
    assert {"pronoun", "ellipsis", "other-one", "place", "previous-answer"} <= leans
    assert {"topic-shift", "self-contained"} <= leans  # questions that must not lose
    # none of them is a document of the held-out halves (compared by checksum, never shown)
    heldout = {d.sha256 for d in load_documents(ROOT / "bench" / "eval", ["heldout"])}
    assert not {documents[doc].sha256 for doc in used} & heldout


def test_one_round_of_the_tuning_conversations_runs_alone() -> None:
    everything, _ = ce.load_conversations(["tuning"])
    assert {c.round for c in everything} == {1, 2, 3, 4}  # every conversation says its round
    third, _ = ce.load_conversations(["tuning"], [3])
    assert third and {c.round for c in third} == {3}
    assert [c.id for c in third] == [c.id for c in everything if c.round == 3]
    with pytest.raises(SystemExit, match="no conversation of round"):
        ce.load_conversations(["tuning"], [99])


def test_the_third_round_is_the_harder_slice_it_promises() -> None:
    """Written to be hard for a search by words: at least 20 conversations and 40 follow-ups,
    three formats, five in German or Russian, follow-ups sharing few words with their answers."""
    sys.path.insert(0, str(ROOT / "bench" / "eval"))
    from reporting import word_overlap

    third, documents = ce.load_conversations(["tuning"], [3])
    follow_ups = [turn for c in third for turn in c.turns[1:]]
    assert len(third) >= 20 and len(follow_ups) >= 40
    used = {doc for c in third for doc in c.docs}
    assert len({documents[doc].format for doc in used}) >= 3
    assert sum(c.lang in {"de", "ru"} for c in third) >= 5
    overlap = [word_overlap(turn.q, turn.answers) for turn in follow_ups]
    assert sum(overlap) / len(overlap) <= 0.12
    leans = {turn.leans for turn in follow_ups}
    assert {"pronoun", "ellipsis", "previous-answer", "topic-shift", "self-contained"} <= leans


def test_the_fourth_round_measures_french_and_spanish_on_documents_of_its_own() -> None:
    """At least 14 conversations and 20 follow-ups, in French and Spanish, over documents no
    earlier round or the single-question evaluation uses, in two formats or more; each language
    has follow-ups that must not lose to their history."""
    everything, documents = ce.load_conversations(["tuning"])
    fourth = [c for c in everything if c.round == 4]
    follow_ups = [(c.lang, turn) for c in fourth for turn in c.turns[1:]]
    assert len(fourth) >= 14 and len(follow_ups) >= 20
    for lang in ("fr", "es"):
        assert sum(c.lang == lang for c in fourth) >= 6, lang
        steady = [t for lang_, t in follow_ups if lang_ == lang and t.leans in SELF_STANDING]
        assert len(steady) >= 2, lang
    used = {doc for c in fourth for doc in c.docs}
    assert all(documents[doc].lang in {"fr", "es", "it", "pt"} for doc in used)
    assert len({documents[doc].format for doc in used}) >= 2
    earlier = {doc for c in everything if c.round < 4 for doc in c.docs}
    # Every tuning document registered (the single-question evaluation's too), less round 4's.
    others = [d for d in load_documents(ROOT / "bench" / "eval", ["tuning"]) if d.id not in used]
    seen = {documents[doc].sha256 for doc in earlier} | {d.sha256 for d in others}
    assert not {documents[doc].sha256 for doc in used} & seen
    assert not used & (earlier | {d.id for d in others})


def handbook(path: Path) -> ce.Conversation:
    """A handbook too long for a 4,096-token window, and a conversation about it."""
    sections = [
        f"## Pump {n}\n\nRoutine note {n} for the pumping station. Valves of group {n} are "
        f"inspected every {n + 3} weeks by the duty engineer, who records the pressure and the "
        "state of the seals in the log book. Nothing else of note happens here."
        for n in range(60)
    ]
    sections[17] += (
        "\n\nThe emergency generator runs on diesel. It holds fuel for 72 hours of running."
    )
    path.write_text("# Pumping station handbook\n\n" + "\n\n".join(sections), encoding="utf-8")
    return ce.Conversation(
        "gen-1",
        ("handbook",),
        "en",
        (
            ce.Turn(
                "What does the emergency generator run on?",
                ("The emergency generator runs on diesel.",),
                "Diesel.",
            ),
            ce.Turn(
                "How long does its fuel last?",
                ("It holds fuel for 72 hours of running.",),
                "72 hours.",
                "How long does the emergency generator's fuel last?",
                "pronoun",
            ),
        ),
        "tuning",
    )


@pytest.mark.slow
def test_a_conversation_goes_through_the_proxy_turn_by_turn(tmp_path: Path, cl100k: Any) -> None:
    path = tmp_path / "handbook.md"
    found = handbook(path)
    run = ce.run_method("default", [found], {"handbook": path}, "fake", None)
    assert [(row.turn, row.condition) for row in run.rows] == [
        (0, "first"),
        (1, "follow-up"),
        (1, "ceiling"),
        (1, "alone"),
    ]
    assert all(row.error is None for row in run.rows)
    hits = {row.condition: row.hit for row in run.rows}
    assert hits["first"] and hits["follow-up"] and hits["ceiling"]
    # the follow-up was searched with its conversation; alone, with itself only
    follow_up, alone = run.rows[1], run.rows[3]
    assert [text["from"] for text in follow_up.searched][:2] == ["question", "conversation"]
    assert "What does the emergency generator run on?" in follow_up.searched[1]["text"]
    assert [text["from"] for text in alone.searched] == ["question"]  # no history to search


def test_the_heldout_report_counts_rewrites_without_their_text() -> None:
    run, documents = run_with(
        [("h-pdf", "heldout", "follow-up", True), ("h-pdf2", "heldout", "follow-up", False)]
    )
    run.rows[0].rewrite = {"outcome": "rewritten", "why": "points back ('it')", "text": SECRET_A}
    run.rows[0].rewrite["seconds"] = 2.5
    run.rows[1].rewrite = {"outcome": "timed out", "why": "no answer within 10 s", "seconds": 10.0}
    text = "\n".join(ce.report("heldout", [run], documents, show_misses=True))
    assert "| rewrites (follow-up) | | rewritten 1, timed out 1 |" in text
    assert "a rewrite call (median / mean / max, 2 calls) | | 6.25 s / 6.25 s / 10.00 s" in text
    for secret in (SECRET_A, "points back", "h-pdf-0"):
        assert secret not in text


def test_the_rewrite_relay_asks_the_model_once_per_prompt() -> None:
    import httpx

    from tests.fakes.servers import ServerThread
    from tests.fakes.upstream import FakeUpstream

    servers = ServerThread()
    try:
        model = FakeUpstream()
        relay = ce.RewriteRelay(servers.serve(model.app()))
        url = servers.serve(relay.app())
        body = {"model": "m", "messages": [{"role": "user", "content": "And Rhino?"}]}
        answers = [httpx.post(url + "/v1/chat/completions", json=body).json() for _ in range(2)]
        other = {**body, "max_tokens": 8}
        httpx.post(url + "/v1/chat/completions", json=other)
        assert httpx.get(url + "/props").status_code == 200  # the rest passes through
    finally:
        servers.close()
    assert answers[0] == answers[1]
    assert len(model.to("/v1/chat/completions")) == 2  # the same prompt once, another anew
    assert len(relay.seconds) == 2 and len(relay.answers) == 2


def test_the_rewrite_relay_keeps_its_answers_between_runs(tmp_path: Path) -> None:
    import httpx

    from tests.fakes.servers import ServerThread
    from tests.fakes.upstream import FakeUpstream

    kept = tmp_path / "rewrites.jsonl"
    body = {"model": "m", "messages": [{"role": "user", "content": "Und für Rhino?"}]}
    answers = []
    servers = ServerThread()
    try:
        model = FakeUpstream()
        target = servers.serve(model.app())
        for _ in range(2):  # two runs, each with its own relay
            url = servers.serve(ce.RewriteRelay(target, kept).app())
            answers.append(httpx.post(url + "/v1/chat/completions", json=body).json())
    finally:
        servers.close()
    assert answers[0] == answers[1]
    assert len(model.to("/v1/chat/completions")) == 1  # the second run read the first's answer
    assert len(kept.read_text(encoding="utf-8").splitlines()) == 1


@pytest.mark.slow
def test_follow_ups_only_asks_each_follow_up_as_written_alone(tmp_path: Path, cl100k: Any) -> None:
    path = tmp_path / "handbook.md"
    found = handbook(path)
    run = ce.run_method("default", [found], {"handbook": path}, "fake", None, None, ("follow-up",))
    assert [(row.turn, row.condition) for row in run.rows] == [(1, "follow-up")]
    assert run.rows[0].hit and run.rows[0].error is None


def test_the_replies_can_be_replaced_by_another_documents_or_a_refusal() -> None:
    first = conversation()
    other = conversation(doc="other", cid="c-2")
    other = ce.dataclasses.replace(
        other, turns=tuple(ce.dataclasses.replace(t, reply=f"Other {t.reply}") for t in other.turns)
    )
    french = ce.dataclasses.replace(conversation(doc="third", cid="c-3"), lang="fr")
    assert ce.with_replies([first, other], "true") == [first, other]
    wrong = ce.with_replies([first, other, french], "wrong")
    # Another document's answers, in the same language when there is one; the rest unchanged.
    assert {t.reply for t in wrong[0].turns} <= {"Other Pepper.", "Other Saffron."}
    assert {t.reply for t in wrong[1].turns} <= {"Pepper.", "Saffron."}
    assert [t.q for t in wrong[0].turns] == [t.q for t in first.turns]
    assert wrong[0].turns[1].standalone == first.turns[1].standalone
    assert all(t.reply for c in wrong for t in c.turns)
    assert ce.with_replies([first, other, french], "wrong") == wrong  # a fixed draw
    refused = ce.with_replies([first, french], "refusal")
    assert {t.reply for t in refused[0].turns} == {ce.REFUSALS["en"]}
    assert {t.reply for t in refused[1].turns} == {ce.REFUSALS["fr"]}
