"""bench/retrieval_eval.py: what counts as a hit, the relay, the modes, and what the held-out
half may show."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import retrieval_eval as ev  # noqa: E402
from documents import Document  # noqa: E402

from tests.fakes.servers import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

ANSWER = "The whale was seen off the coast of Japan in the spring."


def citations(*passages: str) -> str:
    body = "\n\n".join(f'Citation {i}: "{p}"' for i, p in enumerate(passages, 1))
    return (
        "The following citations were found in the files provided by the user:\n\n"
        f"{body}\n\nUse the citations above to respond to the user query, only if they are "
        "relevant. Otherwise, respond to the best of your ability without them.\n\n"
        "User Query:\n\nWhere was the whale seen?"
    )


# ---------------------------------------------------------------------------------------------
# Hits


def test_the_answer_in_a_citation_is_a_hit_ranked_by_its_citation() -> None:
    prompt = citations("nothing here", f"before. {ANSWER} After.")
    assert ev.judge(prompt, [ANSWER]) == (True, 0.5)


def test_a_sentence_cut_by_a_passage_edge_is_a_miss() -> None:
    cut = ANSWER[:30]
    prompt = citations(f"... {cut}", ANSWER[30:] + " more")
    assert ev.judge(prompt, [ANSWER]) == (False, 0.0)


def test_the_question_itself_does_not_count() -> None:
    prompt = citations("unrelated")
    assert ev.judge(prompt, ["Where was the whale seen?"]) == (False, 0.0)
    no_citations = (
        "Important: No citations were found in the user files for the user query. In less "
        f"than one sentence, inform the user of this.\n\nUser Query:\n\n{ANSWER}"
    )
    assert ev.judge(no_citations, [ANSWER]) == (False, 0.0)


def test_text_is_compared_after_normalising_both_sides() -> None:
    # line breaks, soft hyphens, a ligature (NFKC) and a stray control character
    passage = "The whale was seen off the coast\nof Ja\u00adpan in the spring.\x08"
    assert ev.judge(citations(passage), [ANSWER]) == (True, 1.0)
    assert ev.judge(citations("the ﬁrst  one"), ["the first one"]) == (True, 1.0)


def test_any_of_the_answers_is_a_hit() -> None:
    prompt = citations("x", "y", "The second place says it too.")
    assert ev.judge(prompt, [ANSWER, "The second place says it too."]) == (True, 1 / 3)


def test_a_table_row_is_found_whole_or_by_its_cells_never_in_part() -> None:
    row = "| RUB | Russian Ruble | 643 |"
    table = "| code | name | numeric |\n|---|---|---|\n|RUB|Russian Ruble|643|"  # another rendering
    assert ev.judge(citations(table), [row]) == (True, 1.0)
    split = "| RUB | Russian Ruble |"  # a row cut in two is a miss
    assert ev.judge(citations(split, "| 643 |"), [row]) == (False, 0.0)


def test_a_whole_document_injected_is_one_place() -> None:
    prompt = (
        "This is a Enriched Context Generation scenario.\n\nThe following content was found in "
        "the files provided by the user.\n\n** a.pdf full content **\n\n"
        f"Intro.\n{ANSWER}\n\n** end of a.pdf **\n\nBased on the content above, please provide "
        "a response to the user query.\n\nUser Query: Where?"
    )
    assert ev.judge(prompt, [ANSWER]) == (True, 1.0)


def test_the_forwarded_text_is_the_last_user_message() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "sys"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": "x"},
        ]
    }
    assert ev.last_user_text(body) == "ab"
    assert ev.last_user_text({"prompt": "rendered"}) == "rendered"


# ---------------------------------------------------------------------------------------------
# The relay in front of the upstream


def test_the_relay_forwards_everything_and_keeps_generation_bodies() -> None:
    servers = ServerThread()
    try:
        fake = FakeUpstream(n_ctx=4096)
        relay = ev.Relay(servers.serve(fake.app()))
        url = servers.serve(relay.app())
        props = httpx.get(url + "/props", timeout=30)
        assert props.json()["default_generation_settings"]["n_ctx"] == 4096
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(url + "/v1/chat/completions", json=chat, timeout=30)
        assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
        assert relay.generations == [chat]  # /props was forwarded, not kept
        assert [r.path for r in fake.requests] == ["/props", "/v1/chat/completions"]
    finally:
        servers.close()


# ---------------------------------------------------------------------------------------------
# The held-out half shows aggregates only

SECRET_Q = "Which secret ingredient does chapter nine name?"
SECRET_A = "The secret ingredient is saffron from the high valley."


def run_with(rows: list[tuple[str, str, bool]]) -> tuple[ev.Run, dict[str, Document]]:
    documents = {
        "t-doc": Document("t-doc", "tuning", "t.pdf", "corpus:t.pdf", "0" * 64, lang="en"),
        "h-doc": Document("h-doc", "heldout", "h.docx", "apt:p=1:h.html", "0" * 64, lang="ru"),
        "h-pdf": Document("h-pdf", "heldout", "h.pdf", "corpus:h.pdf", "0" * 64, lang="ru"),
        "h-pdf2": Document("h-pdf2", "heldout", "h2.pdf", "corpus:h2.pdf", "0" * 64, lang="ru"),
    }
    run = ev.Run("cold", "default", "fake", index_seconds={"h-doc": 12.0, "t-doc": 3.0})
    for i, (doc, half, hit) in enumerate(rows):
        text = SECRET_Q if half == "heldout" else "Which tuning question is this?"
        question = ev.Question(f"{doc}-{i:02d}", doc, text, "en", (SECRET_A,), "fact", half)
        run.rows.append(ev.Row(question, hit, 1.0 if hit else 0.0, 900, 0.5, 0.25))
    return run, documents


def test_the_heldout_report_has_no_question_answer_or_id() -> None:
    run, documents = run_with(
        [("t-doc", "tuning", True), ("h-doc", "heldout", True), ("h-doc", "heldout", False)]
    )
    text = "\n".join(
        ev.summary("heldout", [run], documents)
        + ev.details("heldout", [run], documents, show_misses=True)
    )
    assert "| heldout | cold | default | 1/2 (50%) | 0.50 |" in text
    assert "DOCX" not in text and "format:" not in text  # one document: no format of its own
    for secret in (SECRET_Q, SECRET_A, "h-doc-01", "h-doc-02", "h-doc 12"):
        assert secret not in text
    assert "12 s for 1 documents" in text

    tuning = "\n".join(ev.details("tuning", [run], documents, show_misses=True))
    assert "missed (cold, default): 0" in tuning and "t-doc 3 s" in tuning


def test_no_heldout_group_is_one_documents_figure() -> None:
    run, documents = run_with(
        [("h-doc", "heldout", True), ("h-pdf", "heldout", False), ("h-pdf2", "heldout", True)]
    )
    text = "\n".join(ev.details("heldout", [run], documents, show_misses=False))
    # PDF holds two documents: its own line; DOCX is one document: merged into the smallest other
    assert "format: PDF + groups of one document, merged | 2/3 (67%)" in text
    assert "format: DOCX" not in text
    tuning = "\n".join(ev.details("tuning", [run], documents, show_misses=False))
    assert "heldout" not in tuning


def test_the_word_overlap_of_questions_and_answers_is_reported_per_half_and_slice() -> None:
    asked = "Which valley grows saffron?"
    question = ev.Question("h-1", "h-pdf", asked, "en", (SECRET_A,), "", "heldout", "", "matched")
    answer = ("Nobody did.",)
    asked = "Who wrote it?"
    other = ev.Question("h-2", "h-pdf2", asked, "en", answer, "", "heldout", "", "matched")
    _, documents = run_with([])
    lines = ev.overlap("heldout", [question, other], documents)
    # "which valley grows saffron": valley and saffron are in the answer (2 of 4); 0 of 2
    assert "| heldout | all | 2 | 0.25 |" in lines
    assert "| heldout | slice matched | 2 | 0.25 |" in lines
    lone = ev.overlap("heldout", [question], documents)  # a slice of one document: not apart
    assert not any("slice matched" in line for line in lone)


def test_a_heldout_run_logs_its_aggregates(tmp_path: Path) -> None:
    run, documents = run_with([("h-doc", "heldout", True), ("h-pdf", "heldout", False)])
    figures = ev.heldout_figures(run, documents)
    assert figures == "hits 1/2; MRR 0.50; English 0/0; other 1/2"
    log = tmp_path / "results" / "heldout-runs.tsv"
    ev.log_heldout_run("retrieval_eval", "heldout", "default", "cold", "fake", figures, ROOT, log)
    ev.log_heldout_run("retrieval_eval", "heldout", "today", "warm", "spawn", figures, ROOT, log)
    header, first, second = log.read_text().splitlines()
    assert header.split("\t") == [
        "date", "commit", "runner", "set", "method", "mode", "upstream", "figures"
    ]  # fmt: skip
    assert first.split("\t")[2:] == [
        "retrieval_eval", "heldout", "default", "cold", "fake", figures
    ]  # fmt: skip
    assert second.split("\t")[4:6] == ["today", "warm"]
    assert len(first.split("\t")[1]) >= 12  # the commit measured
    assert SECRET_Q not in log.read_text() and "h-doc" not in log.read_text()


def test_the_tuning_misses_are_listed_with_their_questions() -> None:
    run, documents = run_with([("t-doc", "tuning", False), ("h-doc", "heldout", False)])
    text = "\n".join(ev.details("tuning", [run], documents, show_misses=True))
    assert "t-doc-00 (en): Which tuning question is this?" in text
    assert SECRET_Q not in text


def test_the_heldout_json_has_counts_only() -> None:
    run, documents = run_with([("h-doc", "heldout", True), ("t-doc", "tuning", False)])
    heldout = json.dumps(ev.result_json("heldout", [run], documents))
    assert '"hits": 1' in heldout and '"questions": 1' in heldout
    for secret in (SECRET_Q, SECRET_A, "h-doc-00", '"rows"'):
        assert secret not in heldout
    tuning = ev.result_json("tuning", [run], documents)
    assert tuning["runs"][0]["rows"][0]["id"] == "t-doc-01"


def test_english_and_other_languages_are_split_by_question_and_document() -> None:
    run, documents = run_with([("t-doc", "tuning", True), ("h-doc", "heldout", False)])
    english, other = run.rows
    assert ev.is_english(english.question, documents)
    assert not ev.is_english(other.question, documents)  # English question, Russian document
    assert ev.language_pair(other.question, documents).startswith("question in another")


def test_check_counts_the_heldout_answers_it_cannot_find(tmp_path: Path) -> None:
    text = tmp_path / "t.md"
    text.write_text(f"# Title\n\n{ANSWER}\n", encoding="utf-8")
    questions = [
        ev.Question("t-01", "t", "q", "en", (ANSWER,), "fact", "tuning"),
        ev.Question("t-02", "t", "q", "en", ("Not in the text at all.",), "fact", "tuning"),
        ev.Question("h-01", "h", SECRET_Q, "en", (SECRET_A,), "fact", "heldout"),
    ]
    lines = ev.check(questions, {"t": text, "h": text})
    assert lines[0] == "tuning: 2 questions, 1 answers not in their document's text"
    assert lines[1] == "  t-02: Not in the text at all."
    assert lines[2] == "heldout: 1 questions, 1 answers not in their document's text"
    assert SECRET_A not in "\n".join(lines) and "h-01" not in "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Both modes, end to end through the checkout's proxy (fake upstream, real embedder)


def handbook(path: Path) -> list[ev.Question]:
    """A Markdown handbook too long for a 4,096-token window, and two questions about it."""
    sections = []
    for n in range(60):
        sections.append(
            f"## Section {n}\n\nRoutine maintenance note number {n} for the pumping station. "
            f"Valves of group {n} are inspected every {n + 3} weeks by the duty engineer, who "
            "records the pressure, the temperature and the state of the seals in the log book. "
            "Nothing else of note happens in this section of the handbook."
        )
    sections[17] += "\n\nThe emergency generator runs on diesel and holds fuel for 72 hours."
    sections[31] += "\n\nLoose bolts on the north pump are tightened with a 24 mm spanner."
    path.write_text("# Pumping station handbook\n\n" + "\n\n".join(sections), encoding="utf-8")
    return [
        ev.Question(
            "h-01",
            "handbook",
            "How long can the emergency generator run on its fuel?",
            "en",
            ("The emergency generator runs on diesel and holds fuel for 72 hours.",),
            "fact",
            "tuning",
        ),
        ev.Question(
            "h-02",
            "handbook",
            "Which spanner size is needed for the north pump's bolts?",
            "en",
            ("Loose bolts on the north pump are tightened with a 24 mm spanner.",),
            "fact",
            "tuning",
        ),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["warm", "cold"])
def test_a_mode_asks_every_question_through_the_proxy(
    tmp_path: Path, mode: str, cl100k: Any
) -> None:
    path = tmp_path / "handbook.md"
    questions = handbook(path)
    run = ev.run_mode(mode, "default", questions, {"handbook": path}, "fake", 0.0, None)
    assert [row.question.id for row in run.rows] == ["h-01", "h-02"]
    assert all(row.error is None for row in run.rows)
    assert all(row.hit for row in run.rows), [(r.question.id, r.rr) for r in run.rows]
    # retrieval, not the whole document: the prompt fits the budget of a 4,096-token window
    assert all(150 < row.tokens <= 2600 for row in run.rows), [r.tokens for r in run.rows]
    if mode == "warm":
        assert list(run.index_seconds) == ["handbook"]
        assert all(row.indexed == 1.0 for row in run.rows)
    else:
        assert run.index_seconds == {}  # nobody waited for the index
        assert all(row.indexed is not None for row in run.rows)  # read from the decision log


def test_a_heldout_document_is_not_named_while_it_is_indexed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cl100k: Any
) -> None:
    path = tmp_path / "note.md"
    path.write_text(f"# Note\n\n{SECRET_A}\n", encoding="utf-8")
    question = ev.Question("vault-01", "vault-doc", SECRET_Q, "en", (SECRET_A,), "fact", "heldout")
    run = ev.run_mode("warm", "default", [question], {"vault-doc": path}, "fake", 0.0, None)
    assert run.rows[0].hit  # a small document goes whole
    err = capsys.readouterr().err
    assert "a held-out document: indexed in" in err
    assert "vault" not in err and SECRET_Q not in err


def test_the_proxys_warnings_are_not_shown_while_the_heldout_half_runs() -> None:
    # They name files ("document text neutralised ... per_file={'<name>': ...}").
    assert ev.proxy_log_level(("heldout",), verbose=False) == "error"
    assert ev.proxy_log_level(("tuning", "heldout"), verbose=False) == "error"
    assert ev.proxy_log_level(("tuning",), verbose=False) == "warning"
    assert ev.proxy_log_level(("tuning",), verbose=True) is None
    with pytest.raises(SystemExit, match="held-out"):
        ev.proxy_log_level(("heldout",), verbose=True)


@pytest.mark.parametrize("mode", ["warm", "cold"])
def test_a_refused_document_is_a_miss_with_its_error_and_the_run_goes_on(
    tmp_path: Path, mode: str, cl100k: Any
) -> None:
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    note = tmp_path / "note.md"
    note.write_text(f"# Note\n\n{ANSWER}\n", encoding="utf-8")
    questions = [
        ev.Question("e-01", "empty", "What does it say?", "en", (ANSWER,), "fact", "tuning"),
        ev.Question("n-01", "note", "Where was the whale seen?", "en", (ANSWER,), "fact", "tuning"),
    ]
    run = ev.run_mode(mode, "default", questions, {"empty": empty, "note": note}, "fake", 0, None)
    refused, answered = run.rows
    assert not refused.hit and refused.error is not None and "400" in refused.error
    assert answered.hit and answered.error is None


# ---------------------------------------------------------------------------------------------
# A slice of the evaluation itself, as CI runs it: the runner cannot rot unseen

SLICE = ("tracemonkey", "remotestorage", "title-block-ru")


@pytest.mark.slow
def test_a_slice_of_the_tuning_half_runs_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from documents import find_corpus

    if not find_corpus().is_dir():
        pytest.skip("../shared/corpus is not here")
    out = tmp_path / "slice.json"
    methods = "default;new-document K=16"
    argv = ["retrieval_eval.py", "--docs", ",".join(SLICE), "--per-doc", "2"]
    argv += ["--methods", methods, "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    # The runner quiets the proxy's logs for its tables: in this process that set-up (its
    # loggers cached on first use) would outlive the test and change every later test's lines.
    monkeypatch.setattr(ev, "quiet_logs", lambda level="warning": None)
    ev.main()
    printed = capsys.readouterr().out
    runs = json.loads(out.read_text())["tuning"]["runs"]
    spec = json.loads((ROOT / "bench" / "eval" / "tuning.json").read_text(encoding="utf-8"))
    asked = [[q["id"] for q in spec["questions"] if q["doc"] == doc][:2] for doc in SLICE]
    # every method in both modes, each asking the first two questions of each document
    assert [(run["mode"], run["method"]) for run in runs] == [
        ("warm", "default"),
        ("cold", "default"),
        ("warm", "new-document K=16"),
        ("cold", "new-document K=16"),
    ]
    for run in runs:
        ids = [row["id"] for row in run["rows"]]
        assert sorted(ids) == sorted(i for pair in asked for i in pair), ids
        assert not [row["error"] for row in run["rows"] if row["error"]]
        assert 0 < run["tokens_mean"] <= 2600  # retrieval within a 4,096-token window's budget
    warm = runs[0]
    assert all(row["indexed"] == 1.0 for row in warm["rows"])
    assert warm["hits"] >= 4, warm  # a sanity floor, far below what it finds
    # a question answered as the first on a new document: never from a complete index (the
    # title block's one page goes whole: nothing to retrieve)
    first = runs[2]["rows"]
    assert all(row["indexed"] is None or row["indexed"] < 1 for row in first), first
    # the readiness beside each hit, per question, for the runs that did not wait
    assert "tuning cold default: hits by dense index ready" in printed
    assert "  1 tracemonkey-01: " in printed and "index" in printed
