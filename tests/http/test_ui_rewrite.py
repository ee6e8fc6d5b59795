"""/ui in a real headless Chromium: a follow-up's card says what became of its standalone
question (rewritten, with the text searched; or why not)."""

from __future__ import annotations

from collections.abc import Callable

from tests.fakes.browser import Browser
from tests.fakes.upstream import FakeUpstream
from tests.http.test_decisions import chat
from tests.http.test_ui_page import ARTIFACTS, HANDBOOK
from tests.pipeline.test_enrich import text_part
from tests.retrieval.test_flow import SMALL_CHUNKS
from tests.retrieval.test_standalone import CHAT_TEMPLATE


def follow_up(question: str) -> dict[str, object]:
    first = [{"type": "text", "text": "Who feeds the cats?"}, text_part("town.txt", HANDBOOK)]
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "The lighthouse keeper."},
            {"role": "user", "content": question},
        ],
    }


async def test_a_follow_ups_card_shows_its_standalone_question(
    make_proxy: Callable[..., str], upstream: FakeUpstream, browser: Browser
) -> None:
    upstream.chat_template = CHAT_TEMPLATE
    upstream.rewrites = {"With what?": "What does the lighthouse keeper feed the cats with?"}
    base = make_proxy(retrieval={**SMALL_CHUNKS, "rewrite": {"ask": "question"}})
    assert chat(base, follow_up("With what?"), **{"X-Request-ID": "rewritten"}).status_code == 200
    question = "Which bread does the bakery on the corner sell at dawn?"
    assert chat(base, follow_up(question), **{"X-Request-ID": "self"}).status_code == 200
    await browser.goto(base + "/ui")
    await browser.wait_for("!!document.querySelector('[data-id=self]')", "both requests")
    for card in ("rewritten", "self"):
        await browser.eval(
            f"document.querySelector('[data-id={card}] details.passages').open = true"
        )
    shown = await browser.eval(
        "[...document.querySelectorAll('[data-id=rewritten] ul.searched li')]"
        ".map(li => li.textContent)"
    )
    # The rewrite leads (retrieval.rewrite.lead): second, at its weight, before its conversation.
    assert shown[1] == "rewrite ×2 What does the lighthouse keeper feed the cats with?"
    said = await browser.eval(
        "['rewritten', 'self'].map(id => {"
        " const p = document.querySelector(`[data-id=${id}] p.rewrite`);"
        " return [p.dataset.outcome, p.textContent]; })"
    )
    assert said[0][0] == "rewritten"
    assert said[0][1].startswith(
        "standalone question (rewritten by m): What does the lighthouse keeper feed the cats with?"
    )
    assert said[1] == ["not needed", "standalone question: not needed (self-contained)"]
    await browser.screenshot(ARTIFACTS / "follow-up-rewritten.png")
    assert browser.problems == []
