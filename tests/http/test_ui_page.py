"""GET /ui in a real headless Chromium: recent decisions, the window bar, playground, keys.

Screenshots of each state go to test-artifacts/ui/ (ignored by git)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx

from proxy.http.ui import ASSETS, CONTENT_SECURITY_POLICY
from proxy.pipeline.flow import STAGES
from tests.conftest import ROOT
from tests.fakes.browser import Browser
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import LLAMACPP_CHATML_FALLBACK, FakeUpstream
from tests.fakes.vision import VisionUpstream, chart_report_pdf
from tests.http.test_decisions import KEYS, chat
from tests.pipeline.test_enrich import ask, text_part
from tests.pipeline.test_page_images import chat as chat_body
from tests.pipeline.test_page_images import pdf_part
from tests.retrieval.test_flow import SMALL_CHUNKS, retrieval_body

ARTIFACTS = ROOT / "test-artifacts" / "ui"
LONG_NAME = "quarterly-report-for-the-board-of-directors-2024-final-revised-v3.txt"
HANDBOOK = (
    "The lighthouse keeper fed the cats every morning with fresh sardines. "
    "The bakery on the corner sells sourdough bread and croissants at dawn. "
    "Quantum chromodynamics describes the strong interaction between quarks and gluons."
)


def cards_js(selector: str) -> str:
    """The texts of `selector` in each visible request card, newest first, as JSON."""
    return (
        "JSON.stringify([...document.querySelectorAll('#request-list .card')]"
        f".map(c => [...c.querySelectorAll({json.dumps(selector)})].map(e => e.textContent)))"
    )


def test_the_page_and_its_assets_carry_a_strict_policy(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(server={"api_keys": KEYS})
    page = httpx.get(base + "/ui")  # no key: the page holds no data and asks for one
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert (
        "script-src 'self';" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY
    )
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "Set-Cookie" not in page.headers
    html = page.text
    # No inline scripts, styles or event handlers: every <script> has a src.
    assert re.findall(r"<script(?![^>]*\ssrc=)", html) == []
    assert not re.search(r"\son[a-z]+\s*=", html) and "style=" not in html
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        asset = httpx.get(f"{base}/ui/{name}")
        assert asset.status_code == 200 and asset.headers["Content-Type"].startswith(kind)
        assert asset.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert httpx.get(base + "/ui/other.js").status_code == 401  # only the page's own files
    assert httpx.get(base + "/v1/enrich/decisions").status_code == 401
    assert "innerHTML" not in httpx.get(base + "/ui/app.js").text  # text goes in as text


async def test_recent_requests_show_documents_strategy_and_the_window(
    make_proxy: Callable[..., str], browser: Browser
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = ask([text_part(LONG_NAME, "Revenue grew twelve percent. " * 40)], max_tokens=256)
    assert chat(base, body, **{"X-Request-ID": "inject"}).status_code == 200
    question = "What did the lighthouse keeper feed the cats?"
    assert chat(base, retrieval_body(question), **{"X-Request-ID": "retrieval"}).status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for(
        "document.querySelectorAll('#request-list .card').length === 2", "two requests"
    )
    ids = await browser.eval(
        "[...document.querySelectorAll('#request-list .card')].map(c => c.dataset.id)"
    )
    assert ids == ["retrieval", "inject"]  # newest first
    assert json.loads(await browser.eval(cards_js(".badge.strategy"))) == [
        ["retrieval"],
        ["inject-full-content"],
    ]
    # The long name is cut to fit, and whole on hover.
    name = await browser.eval(
        "(() => { const e = document.querySelector('[data-id=inject] .doc-name');"
        " return [e.textContent, e.title, e.scrollWidth > e.clientWidth]; })()"
    )
    assert name == [LONG_NAME, LONG_NAME, True]
    # The window bar: the document takes a visible part, the rest is room for the answer.
    parts = await browser.eval(
        "Object.fromEntries([...document.querySelectorAll('[data-id=inject] .bar .seg')]"
        ".map(s => [s.dataset.part, [Number(s.dataset.tokens),"
        " s.getBoundingClientRect().width, s.title]]))"
    )
    assert parts["documents"][0] > 0 and parts["documents"][1] > 0
    assert parts["documents"][2].startswith("documents: ")
    assert parts["answer_room"][1] > parts["documents"][1]
    budget = await browser.eval("document.querySelector('[data-id=inject] .budget').textContent")
    assert "≤ available" in budget and "× 0.7 ×" in budget
    # Passages: each candidate with its score and what became of it.
    await browser.eval("document.querySelector('[data-id=retrieval] details.passages').open = true")
    rows = await browser.eval(
        "[...document.querySelectorAll('[data-id=retrieval] tr.candidate')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    assert rows and rows[0][1] == "book.pdf" and rows[0][4] == "kept"
    assert rows[0][2].startswith("page=")  # where the passage is, as its citation says
    assert float(rows[0][3]) >= float(rows[-1][3])
    await browser.screenshot(ARTIFACTS / "recent-requests.png")

    # Auto-refresh adds the new request on top; cards already shown are kept, not rebuilt.
    await browser.eval("document.querySelector('[data-id=inject]').dataset.seen = 'yes'")
    assert chat(base, ask([], "plain question"), **{"X-Request-ID": "plain"}).status_code == 200
    await browser.wait_for(
        "document.querySelectorAll('#request-list .card').length === 3", "the new request"
    )
    kept = await browser.eval(
        "[document.querySelector('[data-id=inject]').dataset.seen,"
        " document.querySelector('[data-id=retrieval] details.passages').open,"
        " document.querySelector('#request-list .card').dataset.id]"
    )
    assert kept == ["yes", True, "plain"]
    # Filtering by strategy.
    await browser.eval(
        "(() => { const s = document.getElementById('filter-strategy'); s.value = 'retrieval';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    shown = await browser.eval(
        "[...document.querySelectorAll('#request-list .card')].map(c => c.dataset.id)"
    )
    assert shown == ["retrieval"]
    await browser.eval(
        "(() => { const s = document.getElementById('filter-strategy'); s.value = '';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    await browser.color_scheme("dark")
    await browser.viewport(390, 844, mobile=True)
    await browser.screenshot(ARTIFACTS / "recent-requests-phone-dark.png")
    assert await browser.eval("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    assert browser.problems == []


async def test_playground_previews_then_sends_for_real(
    make_proxy: Callable[..., str], upstream: FakeUpstream, browser: Browser, tmp_path: Path
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    handbook = tmp_path / "handbook.txt"
    handbook.write_text(HANDBOOK)
    await browser.goto(base + "/ui")
    await browser.wait_for("document.getElementById('empty').hidden === false", "the empty list")
    await browser.set_files("#play-files", [handbook])
    await browser.wait_for("!!document.querySelector('#play-file-list .name')", "the chosen file")
    await browser.eval(
        "document.getElementById('play-question').value = 'What did the keeper feed the cats?'"
    )
    await browser.eval("document.getElementById('play-preview').click()")
    await browser.wait_for("!document.getElementById('play-result').hidden", "the preview")
    strategy = await browser.eval("document.querySelector('#play-decision .badge').textContent")
    assert strategy == "inject-full-content"
    await browser.eval("document.getElementById('play-body-box').open = true")
    sent = json.loads(await browser.eval("document.getElementById('play-body').textContent"))
    prompt = sent["messages"][-1]["content"][0]["text"]
    assert "** handbook.txt full content **" in prompt and "sardines" in prompt
    assert "enrich" not in sent
    assert all(r.path != "/v1/chat/completions" for r in upstream.requests)  # no generation
    await browser.screenshot(ARTIFACTS / "playground-preview.png")

    # For real, with retrieval: the answer streams in with its citations.
    await browser.eval("document.getElementById('play-strategy').value = 'retrieval'")
    await browser.eval("document.getElementById('play-threshold').value = '0.2'")
    await browser.eval("document.getElementById('play-send').click()")
    await browser.wait_for(
        "document.getElementById('play-progress').textContent === 'done'", "the answer"
    )
    answer = await browser.eval("document.getElementById('play-answer').textContent")
    assert answer == "Hello from the fake upstream."
    citations = await browser.eval(
        "[...document.querySelectorAll('#play-citations li')].map(l => l.textContent)"
    )
    # Plain text has no pages: its passages are cited by the line they start on.
    assert citations and citations[0].startswith("handbook.txt#line=")
    forwarded = upstream.last_to("/v1/chat/completions").json
    assert forwarded["stream"] is True
    assert "sardines" in forwarded["messages"][-1]["content"][0]["text"]
    # The request sent for real is in the recent requests now.
    await browser.wait_for(
        "document.querySelectorAll('#request-list .card').length === 1", "the sent request"
    )
    await browser.screenshot(ARTIFACTS / "playground-answer.png")
    assert browser.problems == []


async def test_a_key_is_asked_for_and_shows_only_its_requests(
    make_proxy: Callable[..., str], browser: Browser
) -> None:
    base = make_proxy(server={"api_keys": KEYS})
    assert chat(base, ask([text_part("alpha.txt", "a")]), "key-a-0123456789").status_code == 200
    assert chat(base, ask([text_part("beta.txt", "b")]), "key-b-0123456789").status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for("!document.getElementById('key-prompt').hidden", "the key prompt")
    assert await browser.eval("document.getElementById('requests').hidden") is True
    await browser.screenshot(ARTIFACTS / "key-prompt.png")
    await browser.eval(
        "document.getElementById('key-input').value = 'wrong';"
        "document.getElementById('key-form').requestSubmit()"
    )
    await browser.wait_for(
        "document.getElementById('key-error').textContent === 'That key was not accepted.'",
        "the refusal",
    )
    await browser.eval(
        "document.getElementById('key-input').value = 'key-b-0123456789';"
        "document.getElementById('key-form').requestSubmit()"
    )
    await browser.wait_for(
        "document.querySelectorAll('#request-list .card').length === 1", "team-b's request"
    )
    assert json.loads(await browser.eval(cards_js(".doc-name"))) == [["beta.txt"]]
    assert await browser.eval("document.getElementById('who').textContent") == "key: team-b"
    assert await browser.eval("sessionStorage.getItem('enrich-proxy-key')") == "key-b-0123456789"
    assert await browser.eval("document.cookie") == ""
    await browser.screenshot(ARTIFACTS / "key-b-requests.png")
    assert browser.problems == []


def test_the_pages_files_are_package_data() -> None:
    """A non-editable install ships every file of the page (pyproject's package-data)."""
    import fnmatch
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["proxy"]
    static = ROOT / "proxy" / "http" / "static"
    files = [p.relative_to(ROOT / "proxy").as_posix() for p in static.rglob("*") if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, p) for p in patterns) for f in files)
    served = {f"http/static/{name}" for name in ASSETS}
    assert served == set(files)


async def test_a_card_says_which_pages_went_as_images(
    make_proxy: Callable[..., str], servers: ServerThread, browser: Browser
) -> None:
    fake = VisionUpstream(projector="gemma3", n_ctx=8192)
    base = make_proxy(upstream={"base_url": servers.serve(fake.app())})
    body = chat_body("Which quarter had the highest revenue?", pdf_part(chart_report_pdf()))
    assert chat(base, body, **{"X-Request-ID": "vision"}).status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for(
        "document.querySelectorAll('#request-list .card').length === 1", "a card"
    )
    line = await browser.eval("document.querySelector('[data-id=vision] .images').textContent")
    assert line.startswith("page images: report.pdf p.2 (figure, high 633×896, 274 tokens, ")
    assert "the model sees (llama.cpp /props modalities.vision)" in line
    assert "image cost: gemma3 (estimated), guessed from the chat template" in line
    await browser.screenshot(ARTIFACTS / "page-images.png")
    assert browser.problems == []


async def test_a_whole_document_questions_passages_say_why_they_were_kept(
    make_proxy: Callable[..., str], browser: Browser
) -> None:
    # The fake embedder's cosines route only with an affinity set (docs/retrieval.md).
    base = make_proxy(retrieval={**SMALL_CHUNKS, "overview_affinity": 0.9})
    body = retrieval_body("What is this document about?")
    assert chat(base, body, **{"X-Request-ID": "overview"}).status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for("!!document.querySelector('[data-id=overview]')", "the request")
    await browser.eval("document.querySelector('[data-id=overview] details.passages').open = true")
    outcomes = await browser.eval(
        "[...document.querySelectorAll('[data-id=overview] tr.candidate')]"
        ".map(r => r.cells[4].textContent)"
    )
    assert outcomes[0] == "kept · whole-document question"
    assert all(not o.endswith("question") for o in outcomes[1:])
    assert browser.problems == []


async def test_a_follow_ups_card_shows_what_its_conversation_searched_for(
    make_proxy: Callable[..., str], browser: Browser
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    town = " ".join([HANDBOOK, *(f"The town hall opens on day {n} of the fair." for n in range(6))])
    first = [{"type": "text", "text": "Who feeds the cats?"}, text_part("town.txt", town)]
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "The lighthouse keeper."},
            {"role": "user", "content": "With what?"},
        ],
    }
    assert chat(base, body, **{"X-Request-ID": "follow-up"}).status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for("!!document.querySelector('[data-id=follow-up]')", "the request")
    await browser.eval("document.querySelector('[data-id=follow-up] details.passages').open = true")
    searched = await browser.eval(
        "[...document.querySelectorAll('[data-id=follow-up] ul.searched li')]"
        ".map(li => li.textContent)"
    )
    assert searched == [
        "question ×1 With what?",
        "conversation ×1 Who feeds the cats?\nWith what?",
        # The answer's and the earlier question's words the file was searched with.
        "terms ×1 With what? + lighthouse keeper cats (town.txt)",
    ]
    await browser.screenshot(ARTIFACTS / "follow-up.png")


async def test_a_card_shows_its_question_and_explains_its_numbers(
    make_proxy: Callable[..., str], upstream: FakeUpstream, browser: Browser
) -> None:
    # A base model (llama.cpp's ChatML fallback in /props): its card names the prompt's shape.
    upstream.chat_template = LLAMACPP_CHATML_FALLBACK
    base = make_proxy(retrieval=SMALL_CHUNKS)
    asked = {
        "sardines": "What did the <b>keeper</b> feed the cats?",
        "bread": "What does the bakery sell at dawn? " + "Please be precise. " * 20,
    }
    for request_id, question in asked.items():
        assert (
            chat(base, retrieval_body(question), **{"X-Request-ID": request_id}).status_code == 200
        )
    await browser.goto(base + "/ui")
    await browser.wait_for("document.querySelectorAll('#request-list .card').length === 2", "cards")
    shown = json.loads(await browser.eval(cards_js(".asked")))
    # Newest first; as text (the markup shows as typed), long ones cut to one line.
    assert shown[1] == [asked["sardines"]]
    assert shown[0][0] == " ".join(asked["bread"].split())[:200]
    cut = await browser.eval(
        "(() => { const e = document.querySelector('[data-id=bread] .asked');"
        " return [e.scrollWidth > e.clientWidth, e.title === e.textContent,"
        " e.querySelector('b') === null]; })()"
    )
    assert cut == [True, True, True]
    card = "document.querySelector('[data-id=sardines] "
    # The 70 % rule's line, on a request that let the proxy decide.
    whole = ask([text_part("notes.txt", HANDBOOK)], "What does the bakery sell?")
    assert chat(base, whole, **{"X-Request-ID": "whole"}).status_code == 200
    await browser.wait_for("!!document.querySelector('[data-id=whole]')", "the third card")
    rule = "document.querySelector('[data-id=whole] .budget:not(.prompt)')"
    budget, explained = json.loads(
        await browser.eval(f"JSON.stringify([{rule}.textContent, {rule}.title])")
    )
    assert "% occupied)⌋" in budget
    assert explained.startswith("The documents go in whole when") and "70 %" in explained
    # The star of an estimated part says what it means on the card, not only on hover.
    legend = await browser.eval(card + ".legend').textContent")
    note = await browser.eval(card + ".estimate-note').textContent")
    assert "*" in legend and note.startswith("* estimated, not counted by the model's tokenizer")
    # Every stage's time says what the stage does.
    titles = await browser.eval(
        "Object.fromEntries([...document.querySelectorAll('[data-id=sardines] .timings .stage')]"
        ".map(s => [s.textContent.split(' ')[0], s.title]))"
    )
    # (Stages quicker than 0.05 ms are left off the line, so which show depends on the
    # machine: every stage has its words, and each shown time carries its stage's.)
    described = json.loads(await browser.eval("JSON.stringify(STAGE_TITLES)"))
    assert {name for name, _ in STAGES} <= set(described)
    assert described["adapt"].startswith("the oldest turns dropped")
    assert described["fit"].startswith("the prompt checked against the window")
    assert titles and all(
        title == f"{stage}: {described[stage]}" for stage, title in titles.items()
    )
    prompt = await browser.eval(card + ".prompt').textContent")
    assert prompt.startswith("prompt: completion-shaped (passages, Question:, Answer:) — the model")
    assert "sampling: greedy" in prompt
    await browser.screenshot(ARTIFACTS / "questions.png")


async def test_a_request_answered_before_its_document_was_indexed_says_how_much_was_ready(
    make_proxy: Callable[..., str], browser: Browser
) -> None:
    from tests.retrieval.test_flow import notes_request

    base = make_proxy(
        retrieval={**SMALL_CHUNKS, "new_document_candidates": 2, "whole_document_s": 0}
    )
    assert chat(base, notes_request(), **{"X-Request-ID": "early"}).status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for("!!document.querySelector('[data-id=early]')", "the request")
    await browser.eval("document.querySelector('[data-id=early] details.passages').open = true")
    lines = json.loads(
        await browser.eval(
            "JSON.stringify([...document.querySelectorAll('[data-id=early] .index-ready')]"
            ".map(e => [e.textContent, e.classList.contains('partial')]))"
        )
    )
    assert len(lines) == 1
    text, partial = lines[0]
    assert re.fullmatch(
        r"notes\.txt: dense index \d{1,2}% ready when asked"
        r" \(in part, the rest in the background\)",
        text,
    ), text
    assert partial
    await browser.screenshot(ARTIFACTS / "index-ready.png")
    assert browser.problems == []


async def test_the_place_a_question_names_is_shown_with_its_passages(
    make_proxy: Callable[..., str], browser: Browser
) -> None:
    from tests.retrieval.test_places import chaptered

    base = make_proxy(retrieval={"chunk_tokens": 40, "chunk_overlap": 0})
    body = ask(
        [text_part("harbour.md", chaptered())],
        "What does chapter 5 say about the harbour?",
        enrich={"strategy": "retrieval"},
    )
    assert chat(base, body, **{"X-Request-ID": "place"}).status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for("!!document.querySelector('[data-id=place]')", "the request")
    await browser.eval("document.querySelector('[data-id=place] details.passages').open = true")
    line = await browser.eval("document.querySelector('[data-id=place] .place-asked').textContent")
    assert line.startswith('harbour.md: the question names chapter 5: "Chapter 5", passage')
    outcomes = await browser.eval(
        "[...document.querySelectorAll('[data-id=place] tr.candidate')]"
        ".map(r => r.cells[4].textContent)"
    )
    assert outcomes[0] == "kept · the place asked for"
    assert any(not o.endswith("asked for") for o in outcomes)
    await browser.screenshot(ARTIFACTS / "place.png")
    assert browser.problems == []
